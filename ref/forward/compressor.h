/* The KV compressor (compressor.c): gated pooling of `ratio` consecutive
 * positions into one compressed row. */
#ifndef DS4_COMPRESSOR_H
#define DS4_COMPRESSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "ref/forward/kvstate.h"
#include "ref/forward/rope.h"
#include "ref/model/model.h"

/* Store position pos's projected kv and gate score (+ the APE row of its
 * offset in the window) in the compressor's input ring. */
void ds4_compressor_store(ds4_comp_state *cs, const ds4_mat *ape, uint32_t pos,
                    const float *kv, const float *sc);

/* Pool the window that position pos completes ((pos + 1) % ratio == 0)
 * into compressed row pos / ratio: RMSNorm, RoPE at the window's first
 * position, and with qat the official rounding (FP8 for attention rows,
 * Hadamard + FP4 for indexer rows), then with f16_rows the row stored as
 * binary16 (the f16-kv profile). */
void ds4_compressor_emit(ds4_comp_state *cs, const ds4_vec *norm, float eps, const ds4_rope *rope,
                   uint32_t n_rot, uint32_t pos, bool indexer, bool qat, bool f16_rows);

#endif
