/* The official checkpoint's block-scaled weights (blockfp.h). */
#include "quant/blockfp.h"

#include <math.h>
#include <string.h>
#include <threads.h>

#include "base/bits.h"

float ds4_blockfp_e4m3(uint8_t b) {
    int e = b >> 3 & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    /* ldexp of a small integer is exact; so is the cast: 4 significant bits. */
    double v = e ? ldexp(8 + m, e - 10) : ldexp(m, -9);
    return (float)(b & 0x80 ? -v : v);
}

float ds4_blockfp_e2m1(uint8_t code) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[code & 7];
    return code & 8 ? -v : v;
}

/* value * 2^(scale - 127) into *out when that is an f32 exactly (false for
 * a NaN value or scale byte, and for a product past f32's range; products
 * below it stay exact, the formats' few mantissa bits fitting subnormals). */
static int scaled(float value, uint8_t scale, float *out) {
    if (scale == 255 || value != value) return 0;
    double v = ldexp(value, (int)scale - 127);
    float f = (float)v;
    if ((double)f != v) return 0;
    *out = f;
    return 1;
}

void ds4_blockfp_scale_shape(int fp4, uint64_t out, uint64_t in, uint64_t shape[2]) {
    const uint64_t b = DS4_BLOCKFP_FP8_BLOCK;
    shape[0] = fp4 ? out : (out + b - 1) / b;
    shape[1] = fp4 ? in / DS4_BLOCKFP_FP4_BLOCK : (in + b - 1) / b;
}

int ds4_blockfp_fp8_row(const uint8_t *w, const uint8_t *scale, uint64_t in, uint64_t row,
                        float *out, uint64_t *bad) {
    const uint64_t blocks = (in + DS4_BLOCKFP_FP8_BLOCK - 1) / DS4_BLOCKFP_FP8_BLOCK;
    const uint8_t *wr = w + row * in, *sr = scale + row / DS4_BLOCKFP_FP8_BLOCK * blocks;
    for (uint64_t k = 0; k < in; k++) {
        if (!scaled(ds4_blockfp_e4m3(wr[k]), sr[k / DS4_BLOCKFP_FP8_BLOCK], &out[k])) {
            *bad = k;
            return -1;
        }
    }
    return 0;
}

int ds4_blockfp_fp4_row(const uint8_t *w, const uint8_t *scale, uint64_t in, uint64_t row,
                        float *out, uint64_t *bad) {
    const uint8_t *wr = w + row * (in / 2), *sr = scale + row * (in / DS4_BLOCKFP_FP4_BLOCK);
    for (uint64_t k = 0; k < in; k++) {
        uint8_t code = k & 1 ? wr[k / 2] >> 4 : wr[k / 2] & 15;
        if (!scaled(ds4_blockfp_e2m1(code), sr[k / DS4_BLOCKFP_FP4_BLOCK], &out[k])) {
            *bad = k;
            return -1;
        }
    }
    return 0;
}

/* ---- The kernels' spans ---- */


/* An E4M3FN byte from its fields: a normal value's exponent rebiased from 7
 * to 127 and its 3 mantissa bits moved to the top of f32's 23; a
 * subnormal's m * 2^-9 (exact: m < 8). */
static float e4m3_fields(uint8_t b) {
    const uint32_t e = b >> 3 & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const float v = e ? ds4_bits_to_f32((e + 120) << 23 | m << 20) : (float)m * 0x1p-9f;
    return b & 0x80 ? -v : v;
}

/* Every E4M3FN byte's value, filled once (e4m3_fields of each): the spans
 * look each weight up instead of taking its fields apart. */
static float e4m3_table[256];
static once_flag e4m3_once = ONCE_FLAG_INIT;

static void fill_e4m3_table(void) {
    for (int b = 0; b < 256; b++) e4m3_table[b] = e4m3_fields((uint8_t)b);
}

/* Elements [off, off+m) of a row, block by block: each block's scale once,
 * then value times scale, a power of two times a value of 4 significant
 * bits (exact, or an infinity past f32's range). */
void ds4_blockfp_fp8_span(const uint8_t *w, const uint8_t *srow, uint64_t off, float *out,
                          uint64_t m) {
    call_once(&e4m3_once, fill_e4m3_table);
    for (uint64_t i = 0; i < m;) {
        const uint64_t k = off + i, b = k / DS4_BLOCKFP_FP8_BLOCK;
        const uint64_t left = (b + 1) * DS4_BLOCKFP_FP8_BLOCK - k;
        const uint64_t n = left < m - i ? left : m - i;
        const float s = ds4_blockfp_e8m0(srow[b]);
        for (uint64_t j = 0; j < n; j++) out[i + j] = e4m3_table[w[k + j]] * s;
        i += n;
    }
}

void ds4_blockfp_fp4_span(const uint8_t *w, const uint8_t *srow, uint64_t off, float *out,
                          uint64_t m) {
    static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    for (uint64_t i = 0; i < m;) {
        const uint64_t k = off + i, b = k / DS4_BLOCKFP_FP4_BLOCK;
        const uint64_t left = (b + 1) * DS4_BLOCKFP_FP4_BLOCK - k;
        const uint64_t n = left < m - i ? left : m - i;
        const float s = ds4_blockfp_e8m0(srow[b]);
        for (uint64_t j = 0; j < n; j++) {
            const uint64_t kj = k + j;
            out[i + j] = e2m1[kj & 1 ? w[kj / 2] >> 4 : w[kj / 2] & 15] * s;
        }
        i += n;
    }
}
