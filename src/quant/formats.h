/* Tensor block formats: the table of GGUF/ggml types ds4ref understands and
 * exact dequantization of rows to f32.
 *
 * "Exact" means bit-identical to the format definitions: the same f32
 * operations, in the same order, as ggml's dequantize_row_* (ggml-quants.c,
 * which ds4 uses too).  Every quantized weight therefore has exactly one
 * f32 value, and everything above this layer works on those values. */
#ifndef DS4_FORMATS_H
#define DS4_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* ggml type ids (the numbers stored in GGUF tensor infos). */
enum ds4_type {
    DS4_TYPE_F32 = 0,
    DS4_TYPE_F16 = 1,
    DS4_TYPE_Q8_0 = 8,
    DS4_TYPE_Q2_K = 10,
    DS4_TYPE_Q4_K = 12,
    DS4_TYPE_IQ2_XXS = 16,
    DS4_TYPE_I32 = 26,
    DS4_TYPE_BF16 = 30,
    /* ds4ref's own ids, never in a GGUF file (its reader refuses them): the
     * official checkpoint's block-scaled weights (blockfp.h), whose E8M0
     * scales live in a tensor of their own, beside the matrix (ds4_mat's
     * scale).  FP8: one byte an element, a scale per 128x128 block; FP4:
     * two elements a byte, a scale per 32 elements of a row. */
    DS4_TYPE_FP8_B128 = 1000,
    DS4_TYPE_FP4_B32 = 1001
};

typedef struct ds4_type_info {
    uint32_t id;
    const char *name;   /* ggml's name: "f32", "q8_0", "iq2_xxs", ... */
    uint32_t blck;      /* elements per block */
    uint32_t bytes;     /* bytes per block */
    int is_float;       /* dequantizes to f32 values (all but I32) */
    /* A block-scaled type's scales: one per scale_cols elements of a row,
     * shared by scale_rows consecutive rows; 0 for the GGUF types, whose
     * scales are inside their blocks. */
    uint32_t scale_rows;
    uint32_t scale_cols;
} ds4_type_info;

/* NULL for ids ds4ref does not support (the GGUF reader turns that into an
 * error naming the tensor). */
const ds4_type_info *ds4_types_info(uint32_t type);
const char *ds4_types_name(uint32_t type);   /* "type#N" style for unknown ids */

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size,
 * the type is unknown or the size overflows 64 bits. */
uint64_t ds4_types_row_bytes(uint32_t type, uint64_t n);

/* IEEE binary16 / bfloat16 <-> binary32.  to_f32 is exact (subnormals, Inf,
 * NaN preserved).  from_f32 rounds to nearest even; NaN stays NaN. */
float ds4_formats_f16_to_f32(uint16_t h);
uint16_t ds4_formats_f32_to_f16(float f);
float ds4_formats_bf16_to_f32(uint16_t h);
uint16_t ds4_formats_f32_to_bf16(float f);

/* Dequantize n elements (a multiple of the block size) of `type` starting at
 * src into dst.  I32 values are converted to float (exact below 2^24).
 * Returns -1 for an unknown type, a block-scaled one (its scales are
 * elsewhere: blockfp.h) or bad n. */
int ds4_formats_dequant_row(uint32_t type, const void *src, float *dst, uint64_t n);

/* IQ2_XXS tables (ggml's iq2xxs_grid and ksigns_iq2xs), exposed for tests and
 * the synthetic-model generator. */
extern const uint64_t ds4_formats_iq2xxs_grid[256];
extern const uint8_t ds4_formats_ksigns_iq2xs[128];

#endif
