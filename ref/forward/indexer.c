/* The lightning indexer of ratio-4 layers (official Indexer): scores every
 * compressed entry a token may see and keeps the top_k for attention.
 *
 *   score(t) = sum_h relu(q_h . k_t) * w_h,   h ascending, in double
 *
 * q_h are the token's indexer query heads (RoPE'd, Hadamard-rotated, FP4 with
 * QAT), k_t the indexer compressor's rows, w_h the token's head weights
 * already scaled by idx_dim^-1/2 * idx_head^-1/2.  The selection orders by
 * score descending, then by entry index ascending, so ties and the batch shape
 * never change which entries are kept.  The result is returned in ascending
 * entry order, the order attention visits them. */
#include "ref/forward/indexer.h"

#include <math.h>
#include <stdlib.h>

#include "base/rank.h"

/* Min-heap on rank: the root is the worst kept entry. */
static void heap_sift_down(uint32_t *h, uint32_t n, uint32_t i, const double *s) {
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ds4_ranks_before(s[h[w]], h[w], s[h[l]], h[l])) w = l;
        if (r < n && ds4_ranks_before(s[h[w]], h[w], s[h[r]], h[r])) w = r;
        if (w == i) return;
        uint32_t tmp = h[i];
        h[i] = h[w];
        h[w] = tmp;
        i = w;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

uint32_t ds4_indexer_visible(const ds4_config *c, const ds4_comp_state *idx, uint32_t pos,
                             uint32_t *n_scored) {
    uint32_t n_vis = (pos + 1) / idx->ratio;
    *n_scored = n_vis > c->idx_topk ? n_vis : 0;
    return n_vis;
}

void ds4_indexer_score(const ds4_config *c, const ds4_comp_state *idx, const float *q,
                       const float *w, uint32_t r0, uint32_t r1, double *score) {
    double wscale = 1.0 / sqrt((double)c->idx_dim) * (1.0 / sqrt((double)c->idx_head));
    for (uint32_t t = r0; t < r1; t++) {
        const float *kt = ds4_comp_row(idx, t);
        double s = 0;
        for (uint32_t h = 0; h < c->idx_head; h++) {
            double d = ds4_dot_f32(q + (uint64_t)h * c->idx_dim, kt, c->idx_dim);
            if (d > 0) s += d * ((double)w[h] * wscale);
        }
        score[t] = s;
    }
}

uint32_t ds4_indexer_pick(const ds4_config *c, uint32_t n_vis, const double *score,
                          uint32_t *sel) {
    uint32_t k = n_vis < c->idx_topk ? n_vis : c->idx_topk;
    if (k == n_vis) {
        /* Everything visible is kept: no need to score. */
        for (uint32_t t = 0; t < n_vis; t++) sel[t] = t;
        return n_vis;
    }
    for (uint32_t t = 0; t < k; t++) sel[t] = t;
    for (uint32_t i = k / 2; i-- > 0;) heap_sift_down(sel, k, i, score);
    for (uint32_t t = k; t < n_vis; t++) {
        if (ds4_ranks_before(score[t], t, score[sel[0]], sel[0])) {
            sel[0] = t;
            heap_sift_down(sel, k, 0, score);
        }
    }
    qsort(sel, k, sizeof(uint32_t), cmp_u32);
    return k;
}

uint32_t ds4_indexer_select(const ds4_config *c, const ds4_comp_state *idx, const float *q,
                            const float *w, uint32_t pos, uint32_t *sel, double *score,
                            uint32_t *n_scored) {
    uint32_t n_vis = ds4_indexer_visible(c, idx, pos, n_scored);
    if (*n_scored) ds4_indexer_score(c, idx, q, w, 0, n_vis, score);
    return ds4_indexer_pick(c, n_vis, score, sel);
}
