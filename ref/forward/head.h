/* The output head (head.c). */
#ifndef DS4_HEAD_H
#define DS4_HEAD_H

#include <stdint.h>

#include "ref/model/model.h"

/* Logits [T][n_vocab] of the HC states x[T][n_hc*n_embd], through the HC
 * collapse of hc_fn/hc_scale/hc_base, RMSNorm with norm and the model's LM
 * head.  head_y: scratch [T][n_embd]. */
void ds4_head_output(const ds4_model *m, const ds4_mat *hc_fn, const ds4_vec *hc_scale,
                     const ds4_vec *hc_base, const ds4_vec *norm, const float *x, uint32_t T,
                     float *head_y, float *logits);

#endif
