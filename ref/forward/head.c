/* The output head (official ParallelHead): collapse the HC streams with
 * sigmoid weights, RMSNorm, LM head.  No soft-capping, no scaling. */
#include "ref/forward/head.h"

#include <string.h>

#include "ref/forward/hyperconn.h"
#include "ref/forward/norm.h"
#include "quant/types.h"

void ds4_head_output(const ds4_model *m, const ds4_mat *hc_fn, const ds4_vec *hc_scale,
                     const ds4_vec *hc_base, const ds4_vec *norm, const float *x, uint32_t T,
                     float *head_y, float *pre, float *logits) {
    const ds4_config *c = &m->cfg;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
    /* One token outside any parallel construct: ds4_hc_head spreads its
     * mixes over the threads (see sublayer_in in forward.c). */
    if (T == 1) {
        ds4_hc_head(c, hc_fn, hc_scale, hc_base, x, head_y);
        if (pre) memcpy(pre, head_y, sizeof(float) * c->n_embd);
        ds4_norm_rms(head_y, norm->v, c->n_embd, c->rms_eps, head_y);
    } else {
#pragma omp parallel for schedule(static) \
    if (ds4_worth_threads((double)T * hc_fn->rows * hc_fn->cols))
        for (uint32_t t = 0; t < T; t++) {
            float *y = head_y + (uint64_t)t * c->n_embd;
            ds4_hc_head(c, hc_fn, hc_scale, hc_base, x + t * hc_dim, y);
            if (pre) memcpy(pre + (uint64_t)t * c->n_embd, y, sizeof(float) * c->n_embd);
            ds4_norm_rms(y, norm->v, c->n_embd, c->rms_eps, y);
        }
    }
    ds4_dot_matmul(&m->output, head_y, c->n_embd, (int)T, logits, c->n_vocab);
}

void ds4_head_markov(const ds4_model *m, int32_t prev, float *emb, float *bias) {
    const ds4_dspark *d = m->dspark;
    const ds4_mat *W1 = &d->markov_w1;
    uint32_t rank = m->cfg.dspark_rank;
    ds4_types_dequant_row(W1->type, W1->data + (uint64_t)prev * W1->row_bytes, emb, rank);
    ds4_dot_matmul(&d->markov_w2, emb, rank, 1, bias, m->cfg.n_vocab);
}

float ds4_head_confidence(const ds4_model *m, const float *pre, const float *emb, float *tmp) {
    uint32_t n = m->cfg.n_embd, rank = m->cfg.dspark_rank;
    float logit;
    memcpy(tmp, pre, sizeof(float) * n);
    memcpy(tmp + n, emb, sizeof(float) * rank);
    ds4_dot_matmul(&m->dspark->conf_proj, tmp, (uint64_t)n + rank, 1, &logit, 1);
    return logit;
}
