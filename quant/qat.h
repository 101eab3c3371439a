/* QAT simulation: the official DeepSeek V4 quantize-dequantize round trips
 * (kernel.py in "qat" mode) and the Hadamard rotation that precedes FP4
 * (docs/NUMERICS.md §5).
 *
 * The round trips are exact functions of their f32 input: the scale is a
 * power of two derived from f32 bits, x/s and q*s are exact, and the grid
 * rounding is exact, so they are bit-identical to the official outputs
 * whether those were computed in f32 or f64.  Outputs equal to zero are +0,
 * as the official straight-through x + (q - x) produces them. */
#ifndef DS4_QAT_H
#define DS4_QAT_H

#include <stddef.h>

#include "base/err.h"

/* Official _fast_round_scale: 2^ceil(log2(v)) for v = fl32(amax * inv_max),
 * read from v's f32 bits as (exponent field + (mantissa != 0)); a zero or
 * subnormal v gives 0 or 2^-126, an Inf v gives +Inf. */
float ds4_qat_ue8m0_scale(float amax, float inv_max);

/* Nearest FP8 E4M3FN value to y (|y| <= 448), ties to the even code.  The
 * grid is m*2^-9 (subnormals, m < 8) and (1 + m/8)*2^(e-7) up to 448. */
double ds4_qat_e4m3_round(double y);

/* Nearest FP4 E2M1 value to y (|y| <= 6), ties to the even code: magnitudes
 * {0, .5, 1, 1.5, 2, 3, 4, 6}; .25->0 .75->1 1.25->1 1.75->2 2.5->2 3.5->4
 * 5->4. */
double ds4_qat_e2m1_round(double y);

/* act_quant(x, 64, "ue8m0", inplace) in qat mode, on x[0..n-1] in blocks of
 * 64: amax = max(max|x|, 1e-4f), s = ue8m0_scale(amax, fl32(1/448)),
 * x <- e4m3(clamp(x/s, ±448)) * s.  n must be a multiple of 64. */
int ds4_qat_fp8_e4m3(float *x, size_t n, ds4err *err);

/* The official linear()'s activation quantization before an FP8 or FP4
 * product, act_quant(x, 128, "ue8m0", e8m0): the same block round trip in
 * blocks of 128, x <- e4m3(clamp(x/s, ±448)) * s, the values fp8_gemm and
 * fp4_gemm multiply (each an f32 exactly).  n must be a multiple of 128
 * (the official kernel asserts it too). */
void ds4_qat_fp8_linear_input(float *x, size_t n);

/* fp4_act_quant(x, 32, inplace) in qat mode, in blocks of 32:
 * amax = max(max|x|, 6*2^-126), s = ue8m0_scale(amax, fl32(1/6)),
 * x <- e2m1(clamp(x/s, ±6)) * s.  n must be a multiple of 32. */
int ds4_qat_fp4_e2m1(float *x, size_t n, ds4err *err);

/* x <- x H_n / sqrt(n), H_n the Sylvester Hadamard matrix in natural order
 * (H_ij = (-1)^popcount(i & j)), n a power of two.  The f32 version works in
 * double and rounds each output once; it takes n <= DS4_HADAMARD_MAX.  The
 * model uses the f32 one only; the f64 one is the same butterflies without
 * the final rounding, kept so that test_qat can hold the library's own
 * transform to the official float64 outputs at 1e-12, which the f32
 * result, rounded to 2^-24, cannot show. */
enum { DS4_HADAMARD_MAX = 1024 };
int ds4_qat_hadamard_f32(float *x, size_t n, ds4err *err);
int ds4_qat_hadamard_f64(double *x, size_t n, ds4err *err);

#endif
