/* The attention sublayer (attention.c explains its steps). */
#ifndef DS4_ATTENTION_H
#define DS4_ATTENTION_H

#include <stdint.h>

#include "base/err.h"
#include "ref/forward/engine.h"

/* The whole attention sublayer of layer il for the batch's T tokens:
 * scratch a[] -> out[]; writes the tokens' KV rows and compressor state. */
int ds4_attention(ds4_engine *e, const ds4_layer *L, uint32_t il, const ds4_rope *rope,
                  uint32_t T, ds4err *err);

/* The attention of DSpark stage il (official DSparkAttention) for the
 * batch's T tokens, whole draft blocks of consecutive tokens at the
 * positions after their state's context rows (forward.h): the block's KV
 * rows are made here and attended in both directions, with the context
 * rows before them; nothing is written to the state. */
/* The context KV rows of DSpark stage il for the batch's T tokens, from
 * their main_x in scratch a[]: the stage's wkv, kv_norm, RoPE at the
 * token's position, FP8 with QAT, into the state's ring (official
 * DSparkAttention.forward, its main_kv). */
void ds4_attention_dspark_ctx(ds4_engine *e, const ds4_layer *L, uint32_t il, uint32_t T);

int ds4_attention_dspark(ds4_engine *e, const ds4_layer *L, uint32_t il, uint32_t T,
                         ds4err *err);

#endif
