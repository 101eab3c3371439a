#include "check/conform/calibrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/model/numerics.h"

static void candidates(ds4_cf_calib *c) {
    static const struct {
        bool qat;
        uint32_t numerics;
    } list[DS4_CF_CANDIDATES] = {
        {true, 0},
        {false, 0},
        {false, DS4_NUMERICS_GGML_ACT},
        {true, DS4_NUMERICS_DS4_ACT | DS4_NUMERICS_F16_KV},
    };
    memset(c, 0, sizeof(*c));
    c->part.row = -1;
    for (uint32_t i = 0; i < DS4_CF_CANDIDATES; i++) {
        ds4_cf_candidate *k = &c->cand[i];
        char name[32];
        ds4_numerics_name(list[i].numerics, name, sizeof(name));
        snprintf(k->name, sizeof(k->name), "%s%s", name, list[i].qat ? "" : ", qat off");
        k->qat = list[i].qat;
        k->numerics = list[i].numerics;
        k->floor = k->typical = k->gap = k->expected = NAN;
    }
}

static void use(ds4_cf_ref *ref, ds4_model *m, bool qat, uint32_t numerics) {
    ref->e->opts.qat = qat;
    ref->e->opts.numerics = numerics;
    ds4_numerics_apply(m, numerics, qat);
}

/* ---- departures ---- */

/* The |dlogprob| of every step of every row, NAN ones left out: a
 * distribution to take the largest and the 90% figure of. */
typedef struct departures {
    double *v;
    uint32_t n;
} departures;

static int departures_init(departures *d, const ds4_cf_base_row *rows, uint32_t n, ds4err *err) {
    uint64_t total = 1;
    for (uint32_t r = 0; r < n; r++) total += rows[r].out->n_steps;
    d->n = 0;
    d->v = malloc(sizeof(double) * total);
    return d->v ? 0 : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
}

static void departures_add(departures *d, double v) {
    if (!isnan(v)) d->v[d->n++] = v;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ds4chk_calibrate_sort(double *v, uint32_t n) {
    qsort(v, n, sizeof(double), by_value);
}

/* The largest, and the smallest value that at least 90% of them are at or
 * below (NAN both when there is none). */
static void departures_summary(departures *d, double *largest, double *typical) {
    *largest = *typical = NAN;
    if (!d->n) return;
    ds4chk_calibrate_sort(d->v, d->n);
    *largest = d->v[d->n - 1];
    *typical = d->v[(d->n * 9 + 9) / 10 - 1];
}

/* The largest |logprob| difference at step i of two records of the same
 * stream: over the ids both top lists hold, and the stream's own token. */
static double tf_step_dlogprob(const ds4_cf_tf *a, const ds4_cf_tf *b, uint32_t i) {
    double worst = fabs(a->lp[i] - b->lp[i]);
    for (uint32_t x = 0; x < a->n_top[i]; x++)
        for (uint32_t y = 0; y < b->n_top[i]; y++)
            if (a->top_ids[(size_t)i * a->k + x] == b->top_ids[(size_t)i * b->k + y]) {
                double d = fabs(a->top_lp[(size_t)i * a->k + x] - b->top_lp[(size_t)i * b->k + y]);
                if (!(d <= worst)) worst = d;
            }
    return worst;
}

/* ---- measuring ---- */

/* Every row teacher-forced under the engine's numerics, from the prompt
 * on (the prompts' goldens were made under another candidate): tf[r]. */
static int force_rows(ds4_cf_ref *ref, const ds4_cf_base_row *rows, uint32_t n, ds4_cf_tf *tf,
                      ds4err *err) {
    ds4_golden none;
    ds4_golden_init(&none, DS4_TRACE_GOLDEN);
    for (uint32_t r = 0; r < n; r++) {
        const ds4_golden *out = rows[r].out;
        int32_t *ids = malloc(sizeof(int32_t) * (out->n_steps ? out->n_steps : 1));
        if (!ids) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        for (uint32_t i = 0; i < out->n_steps; i++) ids[i] = out->steps[i].tok.id;
        int rc = ds4chk_reference_force(ref, rows[r].prompt, rows[r].n_prompt, &none, ids,
                                        out->n_steps, &tf[r], err);
        free(ids);
        if (rc) return -1;
    }
    return 0;
}

static void free_rows(ds4_cf_tf *tf, uint32_t n) {
    for (uint32_t r = 0; tf && r < n; r++) ds4chk_reference_tf_free(&tf[r]);
}

/* Candidate k's floor, typical departure and gap: the backend's rows
 * against the reference's records of them, tf. */
static int measure(const ds4_cf_base_row *rows, uint32_t n, const ds4_cf_tf *tf, bool greedy,
                   ds4_cf_candidate *k, ds4err *err) {
    departures d;
    if (departures_init(&d, rows, n, err)) return -1;
    k->gap = 0;
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t i = 0; i < rows[r].out->n_steps && i < tf[r].n; i++) {
            departures_add(&d, ds4chk_verdict_step_dlogprob(rows[r].out, &tf[r], i));
            if (greedy && tf[r].gap[i] > k->gap) k->gap = tf[r].gap[i];
        }
    departures_summary(&d, &k->floor, &k->typical);
    free(d.v);
    return 0;
}

/* Candidate k's expected departure: its records tf against the same
 * streams forced under k with every product jittered. */
static int expect(ds4_cf_ref *ref, ds4_model *m, const ds4_cf_base_row *rows, uint32_t n,
                  const ds4_cf_tf *tf, ds4_cf_candidate *k, ds4err *err) {
    ds4_cf_tf *jit = calloc(n ? n : 1, sizeof(ds4_cf_tf));
    departures d = {0};
    int rc = jit ? departures_init(&d, rows, n, err)
                 : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (rc == 0) {
        use(ref, m, k->qat, k->numerics | DS4_NUMERICS_JITTER);
        rc = force_rows(ref, rows, n, jit, err);
    }
    for (uint32_t r = 0; rc == 0 && r < n; r++)
        for (uint32_t i = 0; i < tf[r].n; i++)
            departures_add(&d, tf_step_dlogprob(&tf[r], &jit[r], i));
    double largest;
    if (rc == 0) departures_summary(&d, &largest, &k->expected);
    free(d.v);
    free_rows(jit, n);
    free(jit);
    return rc;
}

double ds4chk_calibrate_explainable(const ds4_cf_candidate *k) {
    const double e = DS4_CF_EXPLAIN_FACTOR * k->expected;
    return e > DS4_CF_EXPLAIN_MIN ? e : DS4_CF_EXPLAIN_MIN;
}

/* How many times the noise it could explain k's typical departure is:
 * at most 1 when k explains the backend. */
static double excess(const ds4_cf_candidate *k) {
    return k->typical / ds4chk_calibrate_explainable(k);
}

/* The earliest step of any base row (the first row on a tie) whose
 * |dlogprob| or (greedy) gap against tf exceeds the most noise candidate k
 * could explain. */
static void find_part(const ds4_tokenizer *tok, const ds4_cf_base_row *rows, uint32_t n,
                      const ds4_cf_tf *tf, const ds4_cf_candidate *k, bool greedy,
                      ds4_cf_part *p) {
    const double e = ds4chk_calibrate_explainable(k);
    p->row = -1;
    int32_t found = -1;
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t i = 0; i < rows[r].out->n_steps && i < tf[r].n; i++) {
            if (found >= 0 && i >= p->step) break;
            double dlp = ds4chk_verdict_step_dlogprob(rows[r].out, &tf[r], i);
            /* A sampled token may lie below the argmax by any gap. */
            if (!(dlp > e) && !(greedy && tf[r].gap[i] > e)) continue;
            *p = (ds4_cf_part){.row = (int32_t)rows[r].tag, .step = i, .token = tf[r].ids[i],
                               .argmax = tf[r].n_top[i] ? tf[r].top_ids[(size_t)i * tf[r].k] : -1,
                               .dlogprob = dlp, .gap = tf[r].gap[i]};
            found = (int32_t)r;
            break;
        }
    if (found < 0) return;
    ds4chk_verdict_token_name(tok, p->token, p->token_name, sizeof(p->token_name));
    ds4chk_verdict_token_name(tok, p->argmax, p->argmax_name, sizeof(p->argmax_name));
}

/* The candidates by floor, lowest first, a tie keeping the list's order;
 * those not measured (NAN) last. */
static void by_floor(const ds4_cf_calib *c, uint32_t *order) {
    for (uint32_t i = 0; i < DS4_CF_CANDIDATES; i++) order[i] = i;
    for (uint32_t i = 1; i < DS4_CF_CANDIDATES; i++)
        for (uint32_t j = i; j > 0; j--) {
            double a = c->cand[order[j - 1]].floor, b = c->cand[order[j]].floor;
            if (!(b < a) && !(isnan(a) && !isnan(b))) break;
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

int ds4chk_calibrate(ds4_cf_ref *ref, ds4_model *m, const ds4_cf_base_row *rows, uint32_t n,
                     bool greedy, ds4_cf_calib *c, ds4err *err) {
    const ds4_fwd_opts was = ref->e->opts;
    candidates(c);
    if (!n) return 0;
    ds4_cf_tf *tf = calloc((size_t)n * DS4_CF_CANDIDATES, sizeof(ds4_cf_tf));
    int rc = tf ? 0 : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    ds4err no_qat = {0};
    bool qat_ok = ds4_model_config_check_qat(&m->cfg, m->file.path, &no_qat) == 0 &&
                  ds4_numerics_check_official(m, m->file.path, &no_qat) == 0;
    for (uint32_t i = 0; rc == 0 && i < DS4_CF_CANDIDATES; i++) {
        ds4_cf_candidate *k = &c->cand[i];
        /* A model whose KV rows the FP8 simulation cannot block (heads of 64
         * with RoPE on 16) runs without it only: those candidates stay NAN. */
        if (k->qat && !qat_ok) continue;
        use(ref, m, k->qat, k->numerics);
        rc = force_rows(ref, rows, n, tf + (size_t)i * n, err);
        if (rc == 0) rc = measure(rows, n, tf + (size_t)i * n, greedy, k, err);
    }
    uint32_t order[DS4_CF_CANDIDATES];
    by_floor(c, order);
    c->best = order[0];
    for (uint32_t j = 0; rc == 0 && j < DS4_CF_CANDIDATES && !c->explained; j++) {
        ds4_cf_candidate *k = &c->cand[order[j]];
        if (isnan(k->floor)) break;
        /* A backend within f32 noise needs no jittered pass to be explained. */
        if (!(k->typical <= DS4_CF_EXPLAIN_MIN))
            rc = expect(ref, m, rows, n, tf + (size_t)order[j] * n, k, err);
        k->explained = rc == 0 && excess(k) <= 1;
        /* Explained, the first; otherwise the one that comes nearest. */
        if (k->explained || excess(k) < excess(&c->cand[c->best])) c->best = order[j];
        c->explained = k->explained;
    }
    const ds4_cf_candidate *best = &c->cand[c->best];
    if (rc == 0 && !isnan(best->floor)) {
        if (!c->explained)
            find_part(ref->tok, rows, n, tf + (size_t)c->best * n, best, greedy, &c->part);
        use(ref, m, best->qat, best->numerics);
        c->done = true;
        c->rows = n;
    } else {
        ref->e->opts = was;
        ds4_numerics_apply(m, was.numerics, was.qat);
    }
    free_rows(tf, n * DS4_CF_CANDIDATES);
    free(tf);
    return rc;
}

static double at_least(double v, double lo) {
    return v > lo ? v : lo;
}

void ds4chk_calibrate_limits(const ds4_cf_calib *c, ds4_cf_limits *l) {
    const ds4_cf_candidate *k = c->done && c->explained ? &c->cand[c->best] : NULL;
    double floor = k && !isnan(k->floor) ? k->floor : NAN;
    double gap = k && !isnan(k->gap) && k->gap > floor ? k->gap : floor;
    if (l->max_dlogprob < 0) l->max_dlogprob = isnan(floor) ? 0.5 : at_least(5 * floor, 0.01);
    if (l->max_gap < 0) l->max_gap = isnan(gap) ? 0.5 : at_least(5 * gap, 0.01);
    if (l->tie_eps < 0) l->tie_eps = isnan(floor) ? 0.05 : at_least(2 * floor, 0.05);
}
