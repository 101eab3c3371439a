/* The output head (head.c). */
#ifndef DS4_HEAD_H
#define DS4_HEAD_H

#include <stdint.h>

#include "ref/model/model.h"

/* Logits [T][n_vocab] of the HC states x[T][n_hc*n_embd], through the HC
 * collapse of hc_fn/hc_scale/hc_base, RMSNorm with norm and the model's LM
 * head.  head_y: scratch [T][n_embd]; pre: NULL, or [T][n_embd] for the
 * collapsed states before the norm (DSpark's confidence head reads them). */
void ds4_head_output(const ds4_model *m, const ds4_mat *hc_fn, const ds4_vec *hc_scale,
                     const ds4_vec *hc_base, const ds4_vec *norm, const float *x, uint32_t T,
                     float *head_y, float *pre, float *logits);

/* DSpark's Markov head (official DSparkMarkovHead): emb[rank] = markov_w1
 * row `prev`, and bias[n_vocab] = markov_w2 . emb, the term the drafter adds
 * to the base logits of the slot after token prev. */
void ds4_head_markov(const ds4_model *m, int32_t prev, float *emb, float *bias);

/* DSpark's confidence head (official DSparkConfidenceHead): the logit
 * proj . [pre; emb] of one slot, pre its HC head output before the norm,
 * emb the Markov embedding of the token before it.  tmp: [n_embd + rank]. */
float ds4_head_confidence(const ds4_model *m, const float *pre, const float *emb, float *tmp);

#endif
