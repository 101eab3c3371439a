/* The FFN sublayer: routed mixture of experts plus one shared expert (official
 * Gate, Expert and MoE).
 *
 * Router: s_e = sqrt(softplus(x . W_e)).  Score layers select the top
 * n_expert_used experts by s_e + bias_e (bias only steers the choice); hash
 * layers take tid2eid[token].  Weights are the unbiased s of the selected
 * experts, normalized to sum 1 and multiplied by route_scale.
 *
 * Expert: gate and up projections, clamped SwiGLU (gate <= limit,
 * |up| <= limit), scaled by the routing weight, down projection.  The output
 * is sum over the selected experts in ascending expert id (the official
 * loop order) plus the shared expert, in double, rounded once.
 *
 * Each expert is evaluated over all tokens of the batch that chose it, so a
 * prefill reads each expert's weights once, and the experts' products run
 * together in a few parallel regions (run_batch); every (token, row) value
 * is still the canonical dot, identical to one-token decode. */
#include "ref/forward/moe.h"

#include <math.h>
#include <string.h>

#include "base/detmath.h"
#include "base/rank.h"

static double router_score(float logit) {
    return sqrt(ds4_det_softplus((double)logit));
}

/* Selection and weights of token t. */
static void route(const ds4_engine *e, const ds4_layer *L, const float *logits, uint32_t t,
                  int32_t token, int32_t *sel, double *w) {
    const ds4_config *c = &e->m->cfg;
    uint32_t k = c->n_expert_used;
    double score[DS4_MAX_EXPERT], biased[DS4_MAX_EXPERT];
    for (uint32_t x = 0; x < c->n_expert; x++) score[x] = router_score(logits[x]);
    if (L->hash) {
        memcpy(sel, L->tid2eid + (uint64_t)token * k, sizeof(int32_t) * k);
    } else {
        for (uint32_t x = 0; x < c->n_expert; x++) biased[x] = score[x] + (double)L->exp_bias.v[x];
        ds4_engine_tap_emit(e, "expert_scores", t, DS4_TAP_F64, biased, c->n_expert);
        /* Insertion into a sorted list of k: n_expert is small. */
        double best[DS4_MAX_EXPERT_USED];
        uint32_t n = 0;
        for (uint32_t x = 0; x < c->n_expert; x++) {
            double b = biased[x];
            if (n == k && !ds4_ranks_before(b, x, best[k - 1], (uint32_t)sel[k - 1])) continue;
            uint32_t i = n < k ? n++ : k - 1;
            while (i > 0 && ds4_ranks_before(b, x, best[i - 1], (uint32_t)sel[i - 1])) {
                best[i] = best[i - 1];
                sel[i] = sel[i - 1];
                i--;
            }
            best[i] = b;
            sel[i] = (int32_t)x;
        }
    }
    double sum = 0;
    for (uint32_t i = 0; i < k; i++) sum += score[sel[i]];
    for (uint32_t i = 0; i < k; i++) w[i] = score[sel[i]] / sum * (double)c->expert_scale;
    ds4_engine_tap_emit(e, "experts", t, DS4_TAP_I32, sel, k);
    ds4_engine_tap_emit(e, "expert_weights", t, DS4_TAP_F64, w, k);
}

/* silu(min(g, L)) * clamp(u, -L, L), optionally times the routing weight;
 * limit <= 0 disables the clamp (official swiglu_limit semantics). */
static float swiglu(float g, float u, float limit, double weight) {
    double gd = g, ud = u;
    if (limit > 0) {
        if (gd > limit) gd = limit;
        if (ud > limit) ud = limit;
        if (ud < -limit) ud = -limit;
    }
    double v = ds4_det_silu(gd) * ud;
    return (float)(weight * v);
}

/* Gather the batch by expert: rows [first[x], first[x+1]) of ex are the
 * inputs of the (token, slot) pairs that chose expert x, in token order, and
 * elist[row] = token * k + slot. */
static void gather(const ds4_config *c, ds4_fwd_scratch *s, uint32_t T, uint32_t *first) {
    uint32_t k = c->n_expert_used, m = 0;
    for (uint32_t x = 0; x < c->n_expert; x++) {
        first[x] = m;
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t i = 0; i < k; i++)
                if ((uint32_t)s->sel[t * k + i] == x) {
                    s->elist[m] = t * k + i;
                    memcpy(s->ex + (uint64_t)m * c->n_embd, s->a + (uint64_t)t * c->n_embd,
                           sizeof(float) * c->n_embd);
                    m++;
                }
    }
    first[c->n_expert] = m;
}

/* Experts are evaluated in batches of at most BATCH selected experts: one
 * parallel region for all their gate and up projections, one for all their
 * down projections, so a decode step of 6 experts and the shared expert
 * costs two fork/joins instead of 21.  Every (row, token) value is the
 * canonical dot of ds4_dot_matmul whatever the batching. */
enum { BATCH = 32 };

/* What one SwiGLU costs in ds4_worth_threads's unit (a multiply-add of the
 * vector kernels, about 0.1 ns): its correctly rounded exp (base/detmath.h)
 * took 25 ns on the lent 64-core machine and 30-40 ns on the 2-core one.
 * Counted as one multiply-add, the SwiGLU of a decode step's layer (0.36
 * ms on the 64-core machine) stayed on one thread while the others waited. */
enum { SILU_WORK = 256 };

typedef struct expert_batch {
    ds4_mat gate[BATCH], up[BATCH], down[BATCH];
    ds4_matmul_op ops[2 * BATCH + 2];
} expert_batch;

/* The routed experts [x0, x1) (those with rows) and, if shared, the shared
 * expert, whose rows follow the T*k routed ones in eg/eu. */
static void run_batch(const ds4_engine *e, const ds4_layer *L, uint32_t T, const uint32_t *first,
                      uint32_t x0, uint32_t x1, bool shared, expert_batch *b) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint64_t n = c->n_embd, ff = c->n_ff, sh_row = (uint64_t)T * c->n_expert_used;
    int no = 0, nb = 0;
    for (uint32_t x = x0; x < x1; x++) {
        uint32_t m = first[x + 1] - first[x];
        if (!m) continue;
        b->gate[nb] = ds4_dot_expert(&L->gate_exps, x);
        b->up[nb] = ds4_dot_expert(&L->up_exps, x);
        b->ops[no++] = (ds4_matmul_op){&b->gate[nb], s->ex + first[x] * n, n, (int)m,
                                       s->eg + first[x] * ff, ff};
        b->ops[no++] = (ds4_matmul_op){&b->up[nb], s->ex + first[x] * n, n, (int)m,
                                       s->eu + first[x] * ff, ff};
        nb++;
    }
    if (shared) {
        b->ops[no++] = (ds4_matmul_op){&L->sh_gate, s->a, n, (int)T, s->eg + sh_row * ff, ff};
        b->ops[no++] = (ds4_matmul_op){&L->sh_up, s->a, n, (int)T, s->eu + sh_row * ff, ff};
    }
    ds4_dot_matmul_many(b->ops, no);
    /* SwiGLU, scaled by the routing weight (1 for the shared expert): row q
     * is routed row r0 + q, then the shared expert's rows follow.  Rows and
     * elements are one loop (collapse), so the threads share elements: a
     * decode step has only seven rows. */
    const uint64_t r0 = first[x0], r1 = first[x1], routed = r1 - r0;
    const uint64_t rows = routed + (shared ? T : 0);
#pragma omp parallel for collapse(2) schedule(static) \
    if (ds4_worth_threads((double)rows * ff * SILU_WORK))
    for (uint64_t q = 0; q < rows; q++)
        for (uint64_t f = 0; f < ff; f++) {
            const bool is_routed = q < routed;
            const uint64_t j = (is_routed ? r0 + q : sh_row + (q - routed)) * ff + f;
            s->eg[j] = swiglu(s->eg[j], s->eu[j], is_routed ? L->clamp_exp : L->clamp_shexp,
                              is_routed ? s->selw[s->elist[r0 + q]] : 1.0);
        }
    no = nb = 0;
    for (uint32_t x = x0; x < x1; x++) {
        uint32_t m = first[x + 1] - first[x];
        if (!m) continue;
        b->down[nb] = ds4_dot_expert(&L->down_exps, x);
        b->ops[no++] = (ds4_matmul_op){&b->down[nb], s->eg + first[x] * ff, ff, (int)m,
                                       s->eo + first[x] * n, n};
        nb++;
    }
    if (shared)
        b->ops[no++] = (ds4_matmul_op){&L->sh_down, s->eg + sh_row * ff, ff, (int)T, s->sh, n};
    ds4_dot_matmul_many(b->ops, no);
    for (uint64_t r = r0; r < r1; r++) s->epos[s->elist[r]] = (uint32_t)r;
}

/* All selected experts, BATCH at a time, and the shared expert with the
 * first batch. */
static void run_experts(const ds4_engine *e, const ds4_layer *L, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    uint32_t first[DS4_MAX_EXPERT + 1];
    expert_batch b;
    gather(c, e->scr, T, first);
    uint32_t x0 = 0;
    bool shared = true;
    while (x0 < c->n_expert || shared) {
        uint32_t x1 = x0, used = 0;
        for (; x1 < c->n_expert && used < BATCH; x1++) used += first[x1 + 1] > first[x1];
        run_batch(e, L, T, first, x0, x1, shared, &b);
        shared = false;
        x0 = x1;
    }
}

/* out = sum of expert outputs in ascending expert id (slot order for equal
 * ids) + shared, in double. */
static void combine(const ds4_config *c, ds4_fwd_scratch *s, uint32_t T) {
    uint32_t k = c->n_expert_used, n = c->n_embd;
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * n * (k + 1)))
    for (uint32_t t = 0; t < T; t++) {
        uint32_t order[DS4_MAX_EXPERT_USED];
        for (uint32_t i = 0; i < k; i++) {
            uint32_t j = i;
            while (j > 0 && s->sel[t * k + order[j - 1]] > s->sel[t * k + i]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
        for (uint32_t d = 0; d < n; d++) {
            double acc = 0;
            for (uint32_t i = 0; i < k; i++)
                acc += (double)s->eo[(uint64_t)s->epos[t * k + order[i]] * n + d];
            acc += (double)s->sh[(uint64_t)t * n + d];
            s->out[(uint64_t)t * n + d] = (float)acc;
        }
    }
}

void ds4_moe(ds4_engine *e, const ds4_layer *L, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t k = c->n_expert_used;
    ds4_dot_matmul(&L->gate_inp, s->a, c->n_embd, (int)T, s->rlog, c->n_expert);
#pragma omp parallel for schedule(static) \
    if (!e->tap && ds4_worth_threads((double)T * c->n_expert * 16))
    for (uint32_t t = 0; t < T; t++)
        route(e, L, s->rlog + (uint64_t)t * c->n_expert, t, s->tok[t].id, s->sel + t * k,
              s->selw + t * k);
    run_experts(e, L, T);
    combine(c, s, T);
}
