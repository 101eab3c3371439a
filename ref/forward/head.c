/* The output head (official ParallelHead): collapse the HC streams with
 * sigmoid weights, RMSNorm, LM head.  No soft-capping, no scaling. */
#include "ref/forward/head.h"

#include "ref/forward/hyperconn.h"
#include "ref/forward/norm.h"

void ds4_head_output(const ds4_model *m, const ds4_mat *hc_fn, const ds4_vec *hc_scale,
                     const ds4_vec *hc_base, const ds4_vec *norm, const float *x, uint32_t T,
                     float *head_y, float *logits) {
    const ds4_config *c = &m->cfg;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
    /* One token outside any parallel construct: ds4_hc_head spreads its
     * mixes over the threads (see sublayer_in in forward.c). */
    if (T == 1) {
        ds4_hc_head(c, hc_fn, hc_scale, hc_base, x, head_y);
        ds4_norm_rms(head_y, norm->v, c->n_embd, c->rms_eps, head_y);
    } else {
#pragma omp parallel for schedule(static) \
    if (ds4_worth_threads((double)T * hc_fn->rows * hc_fn->cols))
        for (uint32_t t = 0; t < T; t++) {
            float *y = head_y + (uint64_t)t * c->n_embd;
            ds4_hc_head(c, hc_fn, hc_scale, hc_base, x + t * hc_dim, y);
            ds4_norm_rms(y, norm->v, c->n_embd, c->rms_eps, y);
        }
    }
    ds4_dot_matmul(&m->output, head_y, c->n_embd, (int)T, logits, c->n_vocab);
}
