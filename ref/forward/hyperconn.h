/* Hyper-connections: the n_hc residual streams, mixed into a sublayer's
 * input (hc_pre, with the Sinkhorn-projected combine matrix), written back
 * after it (hc_post), and collapsed for the output head (hc_head).
 * hyperconn.c explains the official semantics. */
#ifndef DS4_HYPERCONN_H
#define DS4_HYPERCONN_H

#include "ref/model/model.h"

/* x: the HC state [n_hc*n_embd].  y: the collapsed sublayer input
 * [n_embd]; post: [n_hc]; comb: [n_hc*n_hc], row i = input stream,
 * column j = output stream. */
void ds4_hc_pre(const ds4_config *c, const ds4_mat *fn, const ds4_vec *scale,
                const ds4_vec *base, const float *x, float *y, float *post, float *comb);

/* out[j] = post[j] * f + sum_i comb[i][j] * x[i], per element in double. */
void ds4_hc_post(const ds4_config *c, const float *f, const float *x, const float *post,
                 const float *comb, float *out);

/* The output head's collapse of x into y [n_embd]. */
void ds4_hc_head(const ds4_config *c, const ds4_mat *fn, const ds4_vec *scale,
                 const ds4_vec *base, const float *x, float *y);

/* The official hc_split_sinkhorn on an hc x hc matrix of logits, in place:
 * row softmax (+eps), then `iters` alternations of row (from the second
 * on) and column normalization, ending with a column pass. */
void ds4_hc_sinkhorn(double *cm, uint32_t hc, uint32_t iters, double eps);

#endif
