#include "conform/calibrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/numerics.h"

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
    for (uint32_t i = 0; i < DS4_CF_CANDIDATES; i++) {
        ds4_cf_candidate *k = &c->cand[i];
        char name[32];
        ds4_numerics_name(list[i].numerics, name, sizeof(name));
        snprintf(k->name, sizeof(k->name), "%s%s", name, list[i].qat ? "" : ", qat off");
        k->qat = list[i].qat;
        k->numerics = list[i].numerics;
        k->floor = k->gap = NAN;
    }
}

static void use(ds4_cf_ref *ref, ds4_model *m, const ds4_cf_candidate *k) {
    ref->e->opts.qat = k->qat;
    ref->e->opts.numerics = k->numerics;
    ds4_numerics_apply(m, k->numerics, k->qat);
}

/* Candidate k's floor over the rows: each teacher-forced from the prompt
 * on, since the prompts' goldens were made under another candidate. */
static int measure(ds4_cf_ref *ref, const ds4_cf_base_row *rows, uint32_t n, bool greedy,
                   ds4_cf_candidate *k, ds4err *err) {
    ds4_golden none;
    ds4_golden_init(&none, DS4_TRACE_GOLDEN);
    k->floor = k->gap = 0;
    for (uint32_t r = 0; r < n; r++) {
        const ds4_golden *out = rows[r].out;
        int32_t *ids = malloc(sizeof(int32_t) * (out->n_steps ? out->n_steps : 1));
        if (!ids) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        for (uint32_t i = 0; i < out->n_steps; i++) ids[i] = out->steps[i].tok.id;
        ds4_cf_tf tf;
        int rc = ds4chk_reference_force(ref, rows[r].prompt, rows[r].n_prompt, &none, ids,
                                        out->n_steps, &tf, err);
        free(ids);
        if (rc) return -1;
        double dlp, gap;
        ds4chk_verdict_noise(out, &tf, &dlp, &gap);
        if (!(dlp <= k->floor)) k->floor = dlp;
        if (greedy && gap > k->gap) k->gap = gap;
        ds4chk_reference_tf_free(&tf);
    }
    return 0;
}

int ds4chk_calibrate(ds4_cf_ref *ref, ds4_model *m, const ds4_cf_base_row *rows, uint32_t n,
                     bool greedy, ds4_cf_calib *c, ds4err *err) {
    ds4_fwd_opts was = ref->e->opts;
    candidates(c);
    if (!n) return 0;
    ds4err no_qat = {0};
    bool qat_ok = ds4_model_config_check_qat(&m->cfg, m->file.path, &no_qat) == 0 &&
                  ds4_numerics_check_official(m, m->file.path, &no_qat) == 0;
    for (uint32_t i = 0; i < DS4_CF_CANDIDATES; i++) {
        /* A model whose KV rows the FP8 simulation cannot block (heads of 64
         * with RoPE on 16) runs without it only: those candidates stay NAN. */
        if (c->cand[i].qat && !qat_ok) continue;
        use(ref, m, &c->cand[i]);
        if (measure(ref, rows, n, greedy, &c->cand[i], err)) {
            ref->e->opts = was;
            ds4_numerics_apply(m, was.numerics, was.qat);
            return -1;
        }
        /* Strictly smaller: a tie keeps the earlier, plainer candidate.  A
         * NAN floor (no token common to both sides) never wins. */
        if (c->cand[i].floor < c->cand[c->best].floor || isnan(c->cand[c->best].floor))
            c->best = i;
    }
    if (isnan(c->cand[c->best].floor)) {
        ref->e->opts = was;
        ds4_numerics_apply(m, was.numerics, was.qat);
        return 0;
    }
    use(ref, m, &c->cand[c->best]);
    c->done = true;
    c->rows = n;
    return 0;
}

static double at_least(double v, double lo) {
    return v > lo ? v : lo;
}

void ds4chk_calibrate_limits(const ds4_cf_calib *c, ds4_cf_limits *l) {
    const ds4_cf_candidate *k = c->done ? &c->cand[c->best] : NULL;
    double floor = k && !isnan(k->floor) ? k->floor : NAN;
    double gap = k && !isnan(k->gap) && k->gap > floor ? k->gap : floor;
    if (l->max_dlogprob < 0) l->max_dlogprob = isnan(floor) ? 0.5 : at_least(5 * floor, 0.01);
    if (l->max_gap < 0) l->max_gap = isnan(gap) ? 0.5 : at_least(5 * gap, 0.01);
    if (l->tie_eps < 0) l->tie_eps = isnan(floor) ? 0.05 : at_least(2 * floor, 0.05);
}
