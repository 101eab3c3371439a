/* The official checkpoint's block-scaled weights (blockfp.h). */
#include "quant/blockfp.h"

#include <math.h>

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
