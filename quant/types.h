/* The block types ds4ref understands, one row of traits each, in the shape
 * of ggml's type_traits: what a type is (its GGUF id, name and block
 * geometry), how its stored bytes become f32 weights (the exact
 * dequantizer of formats.h or blockfp.h), how each numerics profile
 * rounds the inputs of a product with it (actround.h), and whether the
 * vector kernels have a fused path for it.
 *
 * Adding a type is one row in types.c, its dequantizer and its tests; the
 * kernels' per-type switches are over enum ds4_type without a default, so
 * the compiler (-Werror=switch) names every one that lacks the new type,
 * and test_formats fails for a row with a field missing. */
#ifndef DS4_TYPES_H
#define DS4_TYPES_H

#include <stdbool.h>
#include <stdint.h>

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

/* n elements (whole blocks) of a row at src, as f32, into dst. */
typedef void ds4_types_dequant_fn(const uint8_t *src, float *dst, uint64_t n);
/* Elements [off, off+m) of a block-scaled row w whose scales are srow. */
typedef void ds4_types_span_fn(const uint8_t *w, const uint8_t *srow, uint64_t off,
                               float *out, uint64_t m);

typedef struct ds4_type_info {
    enum ds4_type id;
    const char *name;   /* ggml's name: "f32", "q8_0", "iq2_xxs", ... */
    uint32_t blck;      /* elements per block */
    uint32_t bytes;     /* bytes per block */
    bool is_float;      /* dequantizes to f32 weights (all but I32) */
    /* A block-scaled type's scales: one per scale_cols elements of a row,
     * shared by scale_rows consecutive rows; 0 for the GGUF types, whose
     * scales are inside their blocks. */
    uint32_t scale_rows;
    uint32_t scale_cols;
    /* The exact dequantizer: `dequant` for a type whose blocks hold their
     * scales, `span` for a block-scaled one; the other is NULL. */
    ds4_types_dequant_fn *dequant;
    ds4_types_span_fn *span;
    /* How a product rounds its input first (enum ds4_act) under the
     * ggml-act and the ds4-act numerics: what llama.cpp's CPU backend
     * (its vec_dot_type) and ds4.c do before multiplying by this type. */
    uint8_t act_ggml;
    uint8_t act_ds4;
    /* The vector kernels have fused paths for it: its blocks go straight
     * into the multiply-adds for up to two tokens, and into doubles for
     * more, without an f32 row between (dot_job.h, dot_avx512.c). */
    bool fused;
} ds4_type_info;

/* NULL for ids ds4ref does not support (the GGUF reader turns that into an
 * error naming the tensor). */
const ds4_type_info *ds4_types_info(uint32_t type);
/* The row's name; ggml's name for an id ds4ref does not support, so that an
 * error can say what a file holds; "unknown" for any other id. */
const char *ds4_types_name(uint32_t type);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size,
 * the type is unknown or the size overflows 64 bits. */
uint64_t ds4_types_row_bytes(uint32_t type, uint64_t n);

/* Dequantize n elements (a multiple of the block size) of `type` starting at
 * src into dst.  I32 values are converted to float (exact below 2^24).
 * Returns -1 for an unknown type, a block-scaled one (its scales are
 * elsewhere: blockfp.h) or bad n. */
int ds4_types_dequant_row(uint32_t type, const void *src, float *dst, uint64_t n);

#endif
