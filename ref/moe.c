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
 * Experts are evaluated expert by expert over all tokens of the batch that
 * chose them, so a prefill reads each expert's weights once; every (token,
 * row) value is still the canonical dot, identical to one-token decode. */
#include <math.h>
#include <string.h>

#include "detmath.h"
#include "forward.h"

static double router_score(float logit) {
    return sqrt(ds4_softplus((double)logit));
}

/* a ranks before b: higher score, then lower expert id; NaN last. */
static int ranks_before(double sa, int32_t ia, double sb, int32_t ib) {
    if (sa != sa) return 0;
    if (sb != sb) return 1;
    if (sa != sb) return sa > sb;
    return ia < ib;
}

/* Selection and weights of token t. */
static void route(const ds4_engine *e, const ds4_layer *L, const float *logits, uint32_t t,
                  int32_t token, int32_t *sel, double *w) {
    const ds4_config *c = &e->m->cfg;
    uint32_t k = c->n_expert_used;
    double score[4096], biased[4096];
    for (uint32_t x = 0; x < c->n_expert; x++) score[x] = router_score(logits[x]);
    if (L->hash) {
        memcpy(sel, L->tid2eid + (uint64_t)token * k, sizeof(int32_t) * k);
    } else {
        for (uint32_t x = 0; x < c->n_expert; x++) biased[x] = score[x] + (double)L->exp_bias.v[x];
        ds4_tap_emit(e, "expert_scores", t, DS4_TAP_F64, biased, c->n_expert);
        /* Insertion into a sorted list of k: n_expert is small. */
        double best[64];
        uint32_t n = 0;
        for (uint32_t x = 0; x < c->n_expert; x++) {
            double b = biased[x];
            if (n == k && !ranks_before(b, (int32_t)x, best[k - 1], sel[k - 1])) continue;
            uint32_t i = n < k ? n++ : k - 1;
            while (i > 0 && ranks_before(b, (int32_t)x, best[i - 1], sel[i - 1])) {
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
    ds4_tap_emit(e, "experts", t, DS4_TAP_I32, sel, k);
    ds4_tap_emit(e, "expert_weights", t, DS4_TAP_F64, w, k);
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
    double v = ds4_silu(gd) * ud;
    return (float)(weight * v);
}

/* Run expert x for every (token, slot) that selected it. */
static void run_expert(const ds4_engine *e, const ds4_layer *L, uint32_t x, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t k = c->n_expert_used, m = 0;
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t i = 0; i < k; i++)
            if ((uint32_t)s->sel[t * k + i] == x) {
                s->elist[m] = t * k + i;
                memcpy(s->ex + (uint64_t)m * c->n_embd, s->a + (uint64_t)t * c->n_embd,
                       sizeof(float) * c->n_embd);
                m++;
            }
    if (!m) return;
    ds4_mat gate = ds4_mat_expert(&L->gate_exps, x), up = ds4_mat_expert(&L->up_exps, x);
    ds4_mat down = ds4_mat_expert(&L->down_exps, x);
    ds4_matmul(&gate, s->ex, c->n_embd, (int)m, s->eg, c->n_ff);
    ds4_matmul(&up, s->ex, c->n_embd, (int)m, s->eu, c->n_ff);
    for (uint32_t r = 0; r < m; r++) {
        double w = s->selw[s->elist[r]];
        float *g = s->eg + (uint64_t)r * c->n_ff, *u = s->eu + (uint64_t)r * c->n_ff;
        for (uint32_t f = 0; f < c->n_ff; f++) g[f] = swiglu(g[f], u[f], L->clamp_exp, w);
    }
    ds4_matmul(&down, s->eg, c->n_ff, (int)m, s->eo, c->n_embd);
    for (uint32_t r = 0; r < m; r++)
        memcpy(s->eout + (uint64_t)s->elist[r] * c->n_embd, s->eo + (uint64_t)r * c->n_embd,
               sizeof(float) * c->n_embd);
}

static void shared_expert(const ds4_engine *e, const ds4_layer *L, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    ds4_matmul(&L->sh_gate, s->a, c->n_embd, (int)T, s->eg, c->n_ff);
    ds4_matmul(&L->sh_up, s->a, c->n_embd, (int)T, s->eu, c->n_ff);
    for (uint64_t i = 0; i < (uint64_t)T * c->n_ff; i++)
        s->eg[i] = swiglu(s->eg[i], s->eu[i], L->clamp_shexp, 1.0);
    ds4_matmul(&L->sh_down, s->eg, c->n_ff, (int)T, s->sh, c->n_embd);
}

/* out = sum of expert outputs in ascending expert id (slot order for equal
 * ids) + shared, in double. */
static void combine(const ds4_config *c, ds4_fwd_scratch *s, uint32_t T) {
    uint32_t k = c->n_expert_used, n = c->n_embd;
#pragma omp parallel for schedule(static)
    for (uint32_t t = 0; t < T; t++) {
        uint32_t order[64];
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
                acc += (double)s->eout[((uint64_t)t * k + order[i]) * n + d];
            acc += (double)s->sh[(uint64_t)t * n + d];
            s->out[(uint64_t)t * n + d] = (float)acc;
        }
    }
}

void ds4_moe(ds4_engine *e, const ds4_layer *L, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t k = c->n_expert_used;
    ds4_matmul(&L->gate_inp, s->a, c->n_embd, (int)T, s->rlog, c->n_expert);
#pragma omp parallel for schedule(static) if (!e->tap)
    for (uint32_t t = 0; t < T; t++)
        route(e, L, s->rlog + (uint64_t)t * c->n_expert, t, s->tok[t].id, s->sel + t * k,
              s->selw + t * k);
    for (uint32_t x = 0; x < c->n_expert; x++) run_expert(e, L, x, T);
    shared_expert(e, L, T);
    combine(c, s, T);
}
