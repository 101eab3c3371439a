/* The official checkpoint's block-scaled weights, dequantized exactly.
 *
 * DeepSeek V4's published weights (inference/model.py, convert.py, stored
 * in safetensors) come in two formats, both scaled by powers of two held
 * in E8M0 bytes (2^(byte - 127); 255 is NaN):
 *   - FP8: E4M3FN bytes, one scale per 128x128 block: a matrix [out][in]
 *     has scales [ceil(out/128)][ceil(in/128)];
 *   - FP4: E2M1 codes, two per byte, the low nibble the even element, one
 *     scale per 32 consecutive elements of a row: a matrix [out][in] is
 *     stored [out][in/2] with scales [out][in/32].
 * An E4M3 or E2M1 value (3 or 1 mantissa bits) times a power of two is an
 * f32 exactly, unless the product leaves f32's range; the row functions
 * refuse that, and the NaN codes, rather than produce an inexact weight. */
#ifndef DS4_BLOCKFP_H
#define DS4_BLOCKFP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define DS4_BLOCKFP_FP8_BLOCK 128
#define DS4_BLOCKFP_FP4_BLOCK 32

/* One E4M3FN byte: sign, 4 exponent bits (bias 7), 3 mantissa bits;
 * exponent 0 is subnormal (m * 2^-9); 0x7f and 0xff are NaN; no infinity. */
float ds4_blockfp_e4m3(uint8_t b);

/* The low 4 bits as an E2M1 code: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives (bit 3 the sign). */
float ds4_blockfp_e2m1(uint8_t code);

/* The scales a weight of `out` rows and `in` columns needs, [rows, cols]:
 * FP8 [ceil(out/128), ceil(in/128)]; FP4 [out, in/32] (in a multiple of 32,
 * which the caller checks). */
void ds4_blockfp_scale_shape(int fp4, uint64_t out, uint64_t in, uint64_t shape[2]);

/* Row `row` of an FP8 matrix with `in` columns into out[0..in).  Returns 0,
 * or -1 with *bad the column of the first weight that is a NaN code or whose
 * scale is NaN or takes it out of f32's range. */
int ds4_blockfp_fp8_row(const uint8_t *w, const uint8_t *scale, uint64_t in, uint64_t row,
                        float *out, uint64_t *bad);

/* Row `row` of an FP4 matrix with `in` columns (a multiple of 32) into
 * out[0..in).  Returns 0, or -1 with *bad the first column whose scale is
 * NaN or takes it out of f32's range. */
int ds4_blockfp_fp4_row(const uint8_t *w, const uint8_t *scale, uint64_t in, uint64_t row,
                        float *out, uint64_t *bad);

/* An E8M0 scale byte's 2^(s - 127) as an f32, exactly: the exponent field
 * for s >= 1, the subnormal 2^-127 for 0, NaN for 255.  The spans below
 * and the kernel variants' vector paths multiply each value by it (inline:
 * they take one for every 16 values). */
static inline float ds4_blockfp_e8m0(uint8_t s) {
    if (s == 255) return NAN;
    const uint32_t u = s ? (uint32_t)s << 23 : 1u << 22;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* The matrix kernels' dequantization (dot.h, DS4_TYPE_FP8_B128 and
 * DS4_TYPE_FP4_B32): elements [off, off+m) of one row into out, `w` the
 * row's bytes (FP8 one an element, FP4 two elements a byte, low nibble
 * first; off even) and `srow` the E8M0 scales of its row (FP8: of its
 * block row, one per 128 columns; FP4: one per 32).  The values are the
 * row functions' above, computed with integer and f32 operations; nothing
 * is refused here: a NaN code or scale gives NaN and a product past f32's
 * range an infinity, never a rounded weight (the loader refuses such
 * scales before a product sees them). */
void ds4_blockfp_fp8_span(const uint8_t *w, const uint8_t *srow, uint64_t off, float *out,
                          uint64_t m);
void ds4_blockfp_fp4_span(const uint8_t *w, const uint8_t *srow, uint64_t off, float *out,
                          uint64_t m);

#endif
