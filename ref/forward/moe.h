/* The FFN sublayer: routed experts plus the shared expert (moe.c). */
#ifndef DS4_MOE_H
#define DS4_MOE_H

#include <stdint.h>

#include "ref/forward/engine.h"

/* MoE + shared expert of layer L for the batch's T tokens: scratch a[] ->
 * out[]. */
void ds4_moe(ds4_engine *e, const ds4_layer *L, uint32_t T);

#endif
