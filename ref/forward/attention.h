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

#endif
