/* QAT round trips (docs/NUMERICS.md §5).
 *
 * Mirrors the official DeepSeek V4 kernel.py in "qat" mode, as vendored in
 * AI-Hypercomputer/maxtext@8ddb0a60 tests/utils/deepseek4_reference/:
 *   _fast_round_scale  -> ds4_qat_ue8m0_scale
 *   act_quant(x, 64, "ue8m0", inplace=True)  -> ds4_qat_fp8_e4m3
 *   fp4_act_quant(x, 32, inplace=True)       -> ds4_qat_fp4_e2m1
 * and fast_hadamard_transform.hadamard_transform(x, n^-1/2), which model.py's
 * rotate_activation applies before fp4_act_quant -> ds4_hadamard_*.
 *
 * Why the results are portable:
 *   - the scale is read from the f32 bit pattern of one correctly rounded f32
 *     product, never through log2f/ldexpf;
 *   - s is a power of two, so x/s and q*s are exact in double (and so the
 *     official f32 and f64 runs agree with each other and with us);
 *   - grid rounding uses the "add 2^52" trick, which rounds to the nearest
 *     integer, ties to even, with IEEE addition alone (no rint, no libm);
 *   - the official straight-through x + (q - x) equals q exactly here (q and x
 *     are within a factor of two, Sterbenz) except that zeros come out +0,
 *     which we reproduce;
 *   - the Hadamard butterflies run in double in one fixed order (below) and
 *     each output is rounded to f32 once. */
#include "quant/qat.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "ds4ref needs each float/double operation rounded to its own type (SSE2, aarch64; no x87)"
#endif

float ds4_qat_ue8m0_scale(float amax, float inv_max) {
    /* fl32(amax * inv_max): the double product of two floats is exact, so
     * one rounding to float is exactly the official f32 multiply. */
    float v = (float)((double)amax * inv_max);
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    uint32_t ex = (b >> 23) & 0xff, man = b & 0x7fffff;
    /* The official int32 arithmetic wraps the same way for NaN (-> -0). */
    uint32_t r = (ex + (man != 0)) << 23;
    float s;
    memcpy(&s, &r, sizeof s);
    return s;
}

/* Nearest value, ties to even, of a binary minifloat with `mbits` stored
 * mantissa bits and smallest normal exponent `emin` (subnormals below).  The
 * caller clamps |y| to the format's maximum first. */
static double minifloat_round(double y, int mbits, int emin) {
    uint64_t b;
    memcpy(&b, &y, sizeof b);
    int e = (int)((b >> 52) & 0x7ff) - 1023; /* floor(log2|y|) for normal y */
    if (e < emin)
        e = emin;
    /* n = |y| / quantum, exact; quantum = 2^(e - mbits). */
    uint64_t up = (uint64_t)(1023 + mbits - e) << 52, down = (uint64_t)(1023 - mbits + e) << 52;
    double to_units, from_units;
    memcpy(&to_units, &up, sizeof up);
    memcpy(&from_units, &down, sizeof down);
    double n = (y < 0 ? -y : y) * to_units;
    n = (n + 0x1p52) - 0x1p52; /* nearest integer, ties to even (n < 2^5) */
    double q = n * from_units;
    return y < 0 ? -q : q;
}

double ds4_qat_e4m3_round(double y) {
    return minifloat_round(y, 3, -6);
}

double ds4_qat_e2m1_round(double y) {
    return minifloat_round(y, 1, 0);
}

static float absf(float v) {
    return v < 0 ? -v : v;
}

/* One official block round trip on x[0..bs-1]. */
static void quant_block(float *x, size_t bs, float amax_floor, float inv_max, double max,
                        double (*round_grid)(double)) {
    float amax = 0.0f;
    for (size_t i = 0; i < bs; i++)
        if (absf(x[i]) > amax)
            amax = absf(x[i]);
    if (amax < amax_floor)
        amax = amax_floor;
    double s = ds4_qat_ue8m0_scale(amax, inv_max);
    for (size_t i = 0; i < bs; i++) {
        double y = x[i] / s;
        if (y > max)
            y = max;
        else if (y < -max)
            y = -max;
        /* q*s is exact; + 0.0f turns -0 into +0 and changes nothing else. */
        x[i] = (float)(round_grid(y) * s) + 0.0f;
    }
}

int ds4_qat_fp8_e4m3(float *x, size_t n, ds4err *err) {
    if (n % 64)
        return ds4_err_set(err, DS4_E_ARG, "qat fp8: row length %zu is not a multiple of 64", n);
    for (size_t b = 0; b < n; b += 64)
        quant_block(x + b, 64, 1e-4f, (float)(1.0 / 448), 448.0, ds4_qat_e4m3_round);
    return 0;
}

void ds4_qat_fp8_linear_input(float *x, size_t n) {
    for (size_t b = 0; b + 128 <= n; b += 128)
        quant_block(x + b, 128, 1e-4f, (float)(1.0 / 448), 448.0, ds4_qat_e4m3_round);
}

int ds4_qat_fp4_e2m1(float *x, size_t n, ds4err *err) {
    if (n % 32)
        return ds4_err_set(err, DS4_E_ARG, "qat fp4: row length %zu is not a multiple of 32", n);
    for (size_t b = 0; b < n; b += 32)
        quant_block(x + b, 32, 0x1.8p-124f /* 6*2^-126 */, (float)(1.0 / 6), 6.0, ds4_qat_e2m1_round);
    return 0;
}

static int check_pow2(size_t n, size_t max, ds4err *err) {
    if (n == 0 || (n & (n - 1)) || n > max)
        return ds4_err_set(err, DS4_E_ARG, "hadamard: length %zu is not a power of two <= %zu",
                          n, max);
    return 0;
}

/* Unnormalised Walsh-Hadamard transform in place, in this fixed order:
 *   for h = 1, 2, 4, ..., n/2
 *     for each block start i = 0, 2h, 4h, ...
 *       for k = i .. i+h-1:  (v[k], v[k+h]) <- (v[k] + v[k+h], v[k] - v[k+h])
 * which computes v H_n with H_n in Sylvester's natural order. */
static void fwht(double *v, size_t n) {
    for (size_t h = 1; h < n; h *= 2)
        for (size_t i = 0; i < n; i += 2 * h)
            for (size_t k = i; k < i + h; k++) {
                double a = v[k], b = v[k + h];
                v[k] = a + b;
                v[k + h] = a - b;
            }
}

int ds4_qat_hadamard_f64(double *x, size_t n, ds4err *err) {
    if (check_pow2(n, SIZE_MAX / 2 + 1, err))
        return -1;
    fwht(x, n);
    double scale = sqrt(1.0 / n); /* 1/n is exact, so this is n^-1/2 correctly rounded */
    for (size_t i = 0; i < n; i++)
        x[i] *= scale;
    return 0;
}

int ds4_qat_hadamard_f32(float *x, size_t n, ds4err *err) {
    if (check_pow2(n, DS4_HADAMARD_MAX, err))
        return -1;
    double v[DS4_HADAMARD_MAX];
    for (size_t i = 0; i < n; i++)
        v[i] = x[i];
    fwht(v, n);
    double scale = sqrt(1.0 / n);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(v[i] * scale);
    return 0;
}
