/* Speculative decoding: the rejection rule, prompt prefill through a
 * drafter and the decode loop.  speculative.h explains why the
 * result is plain decoding bit for bit; docs/SPECULATIVE.md gives the exact order in
 * which random numbers are drawn. */
#include "ref/decode/speculative.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/decode/sample.h"

void ds4_spec_drafter_free(ds4_drafter *d) {
    if (d) d->destroy(d);
}

uint64_t ds4_spec_drafter_width(const ds4_drafter *d, const ds4_config *c) {
    switch (d ? d->input : DS4_DRAFT_IN_NONE) {
    case DS4_DRAFT_IN_NONE: return 0;
    case DS4_DRAFT_IN_HC: return (uint64_t)c->n_hc * c->n_embd;
    case DS4_DRAFT_IN_TAPS: return (uint64_t)c->n_dspark_target * c->n_embd;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * The rejection rule
 * ------------------------------------------------------------------------- */

int32_t ds4_spec_accept(ds4_rng *r, const double *p, const double *q, int32_t d, uint32_t n,
                        double *resid, bool *accepted) {
    double qd = q ? q[d] : 1.0;
    *accepted = ds4_rng_uniform(r) * qd < p[d];
    if (*accepted) return d;
    double R = 0;
    for (uint32_t i = 0; i < n; i++) {
        double qi = q ? q[i] : (i == (uint32_t)d ? 1.0 : 0.0);
        double v = p[i] - qi;
        resid[i] = v > 0 ? v : 0.0;
        R += resid[i];
    }
    if (R > 0) return ds4_rng_pick(r, resid, n, R);
    /* p and q equal to rounding: nothing is left over, and p itself is the
     * distribution to draw from. */
    double S = 0;
    for (uint32_t i = 0; i < n; i++) S += p[i];
    return ds4_rng_pick(r, p, n, S);
}

/* Normalised probabilities of logits at temperature temp (rng.h steps 1-3,
 * then each weight divided by the sum). */
static void probs(const float *logits, uint32_t n, double temp, double *p) {
    double S = ds4_rng_temp_weights(logits, n, temp, p);
    for (uint32_t i = 0; i < n; i++) p[i] = S > 0 ? p[i] / S : 0.0;
}

/* ---------------------------------------------------------------------------
 * Prefill
 * ------------------------------------------------------------------------- */

/* Prompt tokens per row and pass when the drafter reads the trunk: bounds
 * the buffers of what it reads (64 KiB a token of HC states on the real
 * model); the bits do not depend on it. */
#define PREFILL_HC_WINDOW 256

int ds4_spec_prefill(ds4_drafter *d, ds4_session *const *rows, const int32_t *const *prompts,
                     const uint32_t *n_prompt, uint32_t n_rows, ds4err *err) {
    if (!n_rows) return 0;
    const ds4_config *c = &rows[0]->e->m->cfg;
    uint64_t w = ds4_spec_drafter_width(d, c);
    bool want_hc = w > 0, taps = d && d->input == DS4_DRAFT_IN_TAPS;
    ds4_session_req *reqs = calloc(n_rows, sizeof(*reqs));
    uint32_t *done = calloc(n_rows, sizeof(uint32_t));
    uint32_t *row = calloc(n_rows, sizeof(uint32_t));   /* row of request k */
    uint32_t *at = calloc(n_rows, sizeof(uint32_t));    /* its first position */
    float *hc = want_hc ? malloc(sizeof(float) * w * PREFILL_HC_WINDOW * n_rows) : NULL;
    int rc = 0;
    if (!reqs || !done || !row || !at || (want_hc && !hc)) {
        rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory prefilling %u rows", n_rows);
        goto out;
    }
    for (;;) {
        uint32_t n_req = 0;
        for (uint32_t i = 0; i < n_rows; i++) {
            uint32_t left = n_prompt[i] - done[i];
            if (!left) continue;
            if (want_hc && left > PREFILL_HC_WINDOW) left = PREFILL_HC_WINDOW;
            row[n_req] = i;
            at[n_req] = rows[i]->kv.pos;
            float *feat = want_hc ? hc + w * PREFILL_HC_WINDOW * n_req : NULL;
            reqs[n_req] = (ds4_session_req){rows[i], prompts[i] + done[i], left, NULL,
                                            taps ? NULL : feat, taps ? feat : NULL};
            n_req++;
        }
        if (!n_req) break;
        if (ds4_session_eval_many(reqs, n_req, err)) {
            rc = -1;
            goto out;
        }
        for (uint32_t k = 0; k < n_req; k++) {
            const float *feat = taps ? reqs[k].taps_all : reqs[k].hc_all;
            if (d && d->commit(d, row[k], at[k], reqs[k].tokens, feat, reqs[k].n, err)) {
                rc = -1;
                goto out;
            }
            done[row[k]] += reqs[k].n;
        }
    }
out:
    free(reqs);
    free(done);
    free(row);
    free(at);
    free(hc);
    return rc;
}

/* ---------------------------------------------------------------------------
 * The decode loop
 * ------------------------------------------------------------------------- */

/* One row's progress through the loop. */
typedef struct row_run {
    ds4_spec_row *r;
    uint32_t n_steps;
    bool active;
    int32_t x;                              /* sampling: the next committed token */
    uint32_t pos;                           /* position of toks[0] this cycle */
    uint32_t n;                             /* drafts this cycle */
    int32_t toks[1 + DS4_SPEC_MAX_DRAFT];   /* [x, d1..dn] */
    bool q_onehot;
    ds4_rng rng;                            /* stream 0: every token choice */
} row_run;

typedef struct loop {
    const ds4_spec_cfg *sc;
    const ds4_gen_opts *go;
    uint32_t V, depth, n_rows;
    uint64_t hc_dim;
    bool sampled;
    row_run *rr;
    ds4_rng *draft_rng;                     /* [n_rows] stream 1, the drafter's */
    float *logits;                          /* [n_rows][depth+1][V] verify rows */
    float *hc;                              /* [n_rows][depth+1][hc_dim] */
    uint64_t taps_w;                        /* the DSpark input's width, or 0 */
    float *taps;                            /* [n_rows][depth+1][taps_w] */
    float *q;                               /* sampling: [n_rows][depth][V] draft rows */
    double *p, *pq, *resid;                 /* [V] scratch */
    ds4_draft_req *reqs;
    ds4_session_req *sreqs;
    uint32_t *who;                          /* row of request k */
} loop;

static float *row_logits(const loop *L, uint32_t i, uint32_t k) {
    return L->logits + ((uint64_t)i * (L->depth + 1) + k) * L->V;
}

static float *row_hc(const loop *L, uint32_t i, uint32_t k) {
    return L->hc + ((uint64_t)i * (L->depth + 1) + k) * L->hc_dim;
}

static float *row_taps(const loop *L, uint32_t i, uint32_t k) {
    return L->taps ? L->taps + ((uint64_t)i * (L->depth + 1) + k) * L->taps_w : NULL;
}

static float *row_q(const loop *L, uint32_t i, uint32_t k) {
    return L->q + ((uint64_t)i * L->depth + k) * L->V;
}

/* Record the next step of a row: token t (-1: the greedy choice) chosen
 * from logits.  Returns the token, or -1 on error. */
static int32_t record(const loop *L, row_run *w, const float *logits, int32_t t, ds4err *err) {
    ds4_gen_step *st = &w->r->steps[w->r->n_done];
    if (ds4_step_from_logits(logits, L->V, L->go->top_k, st, err)) {
        ds4_step_list_free(st, 1);
        return -1;
    }
    if (t >= 0 && t != st->token) {
        st->token = t;
        st->logit = logits[t];
        st->logprob = (double)st->logit - ds4_sample_logsumexp(logits, L->V);
    }
    w->r->n_done++;
    return st->token;
}

/* After recording token t: does the row end here?  The same tests, in the
 * same order, as plain decoding (speculative.h). */
static bool ends_after(const loop *L, row_run *w, int32_t t) {
    ds4_spec_row *r = w->r;
    uint32_t i = r->n_done - 1;
    if (r->cb && r->cb(r->ud, i, &r->steps[i])) return true;
    return (L->go->stop_at_eos && t == L->go->eos) || r->n_done == w->n_steps;
}

/* Drafts worth verifying this cycle: no more than the steps left after x can
 * use (the last step is never evaluated, as in plain decoding), than the
 * context has room for after x, and than the rings can take back (a rejected
 * draft at position p is undone by moving back at most depth positions,
 * which ds4_kv_can_truncate allows up to chunk + rollback). */
static uint32_t depth_for(const loop *L, const row_run *w) {
    const ds4_kv *kv = &w->r->s->kv;
    uint32_t n = L->depth;
    uint32_t left = w->n_steps - w->r->n_done;
    uint32_t room = kv->ctx > kv->pos ? kv->ctx - kv->pos - 1 : 0;
    uint64_t back = (uint64_t)kv->chunk + kv->rollback;
    if (n > left - 1) n = left - 1;
    if (n > room) n = room;
    if (n > back) n = (uint32_t)back;
    return n;
}

/* Phase 1: every active row records x, the token after its session's
 * logits; rows that end there drop out. */
static int choose_x(loop *L, ds4err *err) {
    for (uint32_t i = 0; i < L->n_rows; i++) {
        row_run *w = &L->rr[i];
        if (!w->active) continue;
        ds4_session *s = w->r->s;
        int32_t x = record(L, w, s->logits, L->sampled ? w->x : -1, err);
        if (x < 0) return -1;
        if (ends_after(L, w, x)) {
            w->active = false;
            continue;
        }
        w->pos = s->kv.pos;
        w->toks[0] = x;
        w->n = depth_for(L, w);
    }
    return 0;
}

/* Phase 2: drafts for the rows that will verify some. */
static int draft(loop *L, ds4err *err) {
    ds4_drafter *d = L->sc->drafter;
    uint32_t n_req = 0;
    for (uint32_t i = 0; i < L->n_rows; i++) {
        row_run *w = &L->rr[i];
        if (!w->active || !w->n) continue;
        L->reqs[n_req] = (ds4_draft_req){.row = i, .pos = w->pos, .next = w->toks[0], .n = w->n,
                                         .drafts = w->toks + 1,
                                         .q_logits = L->sampled ? row_q(L, i, 0) : NULL};
        L->who[n_req++] = i;
    }
    if (!n_req) return 0;
    ds4_draft_mode mode = {L->sc->temp, L->draft_rng, L->go->stop_at_eos ? L->go->eos : -1};
    if (d->propose(d, L->reqs, n_req, &mode, err)) return -1;
    for (uint32_t k = 0; k < n_req; k++) {
        row_run *w = &L->rr[L->who[k]];
        if (L->reqs[k].n_out > w->n)
            return ds4_err_set(err, DS4_E_INTERNAL, "row %u: the drafter made %u drafts, %u were asked",
                              L->who[k], L->reqs[k].n_out, w->n);
        w->n = L->reqs[k].n_out;
        w->q_onehot = L->reqs[k].q_onehot;
    }
    return 0;
}

/* Phase 3: one joint forward pass over [x, drafts] of every active row. */
static int verify(loop *L, ds4_spec_stats *stats, ds4err *err) {
    uint32_t n_req = 0;
    for (uint32_t i = 0; i < L->n_rows; i++) {
        row_run *w = &L->rr[i];
        if (!w->active) continue;
        L->sreqs[n_req++] = (ds4_session_req){w->r->s, w->toks, 1 + w->n, row_logits(L, i, 0),
                                              row_hc(L, i, 0), row_taps(L, i, 0)};
        stats->passes++;
        stats->iters += w->n > 0;
        stats->proposed += w->n;
        for (uint32_t k = 0; k < w->n; k++) stats->proposed_at[k]++;
    }
    return ds4_session_eval_many(L->sreqs, n_req, err);
}

/* Is draft k (1-based) of row i the token the verifier commits?  Greedy:
 * the argmax of L_{k-1}.  Sampling: the rejection rule, which on a rejection
 * also draws the token that replaces it (*next). */
static bool accept(loop *L, uint32_t i, uint32_t k, int32_t *next) {
    row_run *w = &L->rr[i];
    const float *lk = row_logits(L, i, k - 1);
    int32_t d = w->toks[k];
    if (!L->sampled) return ds4_sample_argmax(lk, L->V) == d;
    probs(lk, L->V, L->sc->temp, L->p);
    if (!w->q_onehot) probs(row_q(L, i, k - 1), L->V, L->sc->temp, L->pq);
    bool ok;
    *next = ds4_spec_accept(&w->rng, L->p, w->q_onehot ? NULL : L->pq, d, L->V, L->resid, &ok);
    return ok;
}

/* Phase 4 for one row: record the accepted drafts, move the session back to
 * just after the committed tokens, tell the drafter, and (sampling) draw the
 * next token. */
static int commit_row(loop *L, uint32_t i, ds4_spec_stats *stats, ds4err *err) {
    row_run *w = &L->rr[i];
    uint32_t kept = 1, k;
    bool ends = false;
    int32_t next = -1;
    for (k = 1; k <= w->n; k++) {
        if (!accept(L, i, k, &next)) break;
        stats->accepted++;
        stats->accepted_at[k - 1]++;
        if (k > stats->deepest) stats->deepest = k;
        if (record(L, w, row_logits(L, i, k - 1), w->toks[k], err) < 0) return -1;
        if ((ends = ends_after(L, w, w->toks[k]))) break;
        kept = k + 1;
    }
    if (L->sampled && !ends && k > w->n)
        next = ds4_rng_sample(&w->rng, row_logits(L, i, w->n), L->V, L->sc->temp, L->p);
    ds4_session *s = w->r->s;
    if (ds4_session_rewind(s, w->pos + kept, row_logits(L, i, kept - 1), row_hc(L, i, kept - 1), err))
        return -1;
    ds4_drafter *d = L->sc->drafter;
    const float *feat = !d ? NULL : d->input == DS4_DRAFT_IN_HC ? row_hc(L, i, 0) : row_taps(L, i, 0);
    if (d && d->commit(d, i, w->pos, w->toks, feat, kept, err))
        return -1;
    if (L->sampled && !ends && next < 0)
        return ds4_err_set(err, DS4_E_INTERNAL, "row %u: no token to sample (every logit is NaN)", i);
    w->x = next;
    w->active = !ends;
    return 0;
}

static void loop_free(loop *L) {
    free(L->rr);
    free(L->draft_rng);
    free(L->logits);
    free(L->hc);
    free(L->taps);
    free(L->q);
    free(L->p);
    free(L->pq);
    free(L->resid);
    free(L->reqs);
    free(L->sreqs);
    free(L->who);
}

static int loop_init(loop *L, const ds4_spec_cfg *sc, const ds4_gen_opts *go, ds4_spec_row *rows,
                     uint32_t n_rows, ds4err *err) {
    memset(L, 0, sizeof(*L));
    if (!(sc->temp >= 0) || sc->temp > 1e6)
        return ds4_err_set(err, DS4_E_ARG, "temperature %g is not in [0, 1e6]", sc->temp);
    if (sc->drafter && (sc->n_draft < 1 || sc->n_draft > DS4_SPEC_MAX_DRAFT))
        return ds4_err_set(err, DS4_E_ARG, "draft depth %u is not in [1, %d]", sc->n_draft,
                          DS4_SPEC_MAX_DRAFT);
    if (sc->drafter && sc->drafter->n_rows < n_rows)
        return ds4_err_set(err, DS4_E_ARG, "the drafter has %u rows, %u are decoded",
                          sc->drafter->n_rows, n_rows);
    const ds4_config *c = &rows[0].s->e->m->cfg;
    L->sc = sc;
    L->go = go;
    L->V = c->n_vocab;
    L->hc_dim = (uint64_t)c->n_hc * c->n_embd;
    L->depth = sc->drafter ? sc->n_draft : 0;
    L->n_rows = n_rows;
    L->sampled = sc->temp > 0;
    uint64_t R = n_rows, D = L->depth;
    L->rr = calloc(R, sizeof(row_run));
    L->draft_rng = calloc(R, sizeof(ds4_rng));
    L->logits = malloc(sizeof(float) * R * (D + 1) * L->V);
    L->hc = malloc(sizeof(float) * R * (D + 1) * L->hc_dim);
    L->q = L->sampled && D ? malloc(sizeof(float) * R * D * L->V) : NULL;
    if (sc->drafter && sc->drafter->input == DS4_DRAFT_IN_TAPS) {
        L->taps_w = ds4_spec_drafter_width(sc->drafter, c);
        L->taps = malloc(sizeof(float) * R * (D + 1) * L->taps_w);
    }
    L->p = malloc(sizeof(double) * L->V);
    L->pq = malloc(sizeof(double) * L->V);
    L->resid = malloc(sizeof(double) * L->V);
    L->reqs = calloc(R, sizeof(ds4_draft_req));
    L->sreqs = calloc(R, sizeof(ds4_session_req));
    L->who = calloc(R, sizeof(uint32_t));
    if (!L->rr || !L->draft_rng || !L->logits || !L->hc || (L->sampled && D && !L->q) || !L->p ||
        (L->taps_w && !L->taps) ||
        !L->pq || !L->resid || !L->reqs || !L->sreqs || !L->who) {
        loop_free(L);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory decoding %u rows at depth %u", n_rows,
                          L->depth);
    }
    return 0;
}

/* Rows start from their sessions' logits; sampling draws the first token
 * now (the first uniform of the row's stream 0). */
static int rows_start(loop *L, ds4_spec_row *rows, ds4err *err) {
    for (uint32_t i = 0; i < L->n_rows; i++) {
        row_run *w = &L->rr[i];
        ds4_spec_row *r = &rows[i];
        w->r = r;
        w->n_steps = r->n_steps ? r->n_steps : L->go->n_steps;
        r->n_done = 0;
        memset(r->steps, 0, sizeof(ds4_gen_step) * w->n_steps);
        w->active = w->n_steps > 0;
        if (!w->active) continue;
        if (!r->s->has_logits)
            return ds4_err_set(err, DS4_E_ARG,
                              "row %u: nothing evaluated yet: no logits to continue from", i);
        ds4_rng_init(&w->rng, r->seed, 0);
        ds4_rng_init(&L->draft_rng[i], r->seed, 1);
        if (L->sampled && (w->x = ds4_rng_sample(&w->rng, r->s->logits, L->V, L->sc->temp, L->p)) < 0)
            return ds4_err_set(err, DS4_E_INTERNAL, "row %u: every logit is NaN", i);
    }
    return 0;
}

static bool any_active(const loop *L) {
    for (uint32_t i = 0; i < L->n_rows; i++)
        if (L->rr[i].active) return true;
    return false;
}

int ds4_spec_generate(const ds4_spec_cfg *sc, const ds4_gen_opts *go, ds4_spec_row *rows,
                      uint32_t n_rows, ds4_spec_stats *stats, ds4err *err) {
    if (!n_rows) return 0;
    ds4_spec_stats local = {0};
    if (!stats) stats = &local;
    loop L;
    if (loop_init(&L, sc, go, rows, n_rows, err)) return -1;
    int rc = rows_start(&L, rows, err);
    while (!rc && (rc = choose_x(&L, err)) == 0 && any_active(&L)) {
        if (L.depth && (rc = draft(&L, err))) break;
        if ((rc = verify(&L, stats, err))) break;
        for (uint32_t i = 0; !rc && i < n_rows; i++)
            if (L.rr[i].active) rc = commit_row(&L, i, stats, err);
    }
    loop_free(&L);
    return rc;
}

void ds4_spec_report(const ds4_spec_stats *st, char *buf, size_t size) {
    double rate = st->proposed ? 100.0 * (double)st->accepted / (double)st->proposed : 0.0;
    double per = st->iters ? (double)st->accepted / (double)st->iters : 0.0;
    snprintf(buf, size, "mtp accept: iters=%llu proposed=%llu accepted=%llu rate=%.1f%% per_iter=%.2f "
             "deepest=%llu", (unsigned long long)st->iters, (unsigned long long)st->proposed,
             (unsigned long long)st->accepted, rate, per, (unsigned long long)st->deepest);
}

void ds4_spec_report_positions(const ds4_spec_stats *st, char *buf, size_t size) {
    uint32_t last = DS4_SPEC_MAX_DRAFT;
    while (last && !st->proposed_at[last - 1]) last--;
    size_t n = 0;
    buf[0] = '\0';
    for (uint32_t k = 0; k < last && n < size; k++) {
        int w = snprintf(buf + n, size - n, "%s%u=%llu/%llu", k ? " " : "accept by position: ", k + 1,
                         (unsigned long long)st->accepted_at[k], (unsigned long long)st->proposed_at[k]);
        if (w < 0) break;
        n += (size_t)w;
    }
}
