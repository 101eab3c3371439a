/* Activation rounding: what an engine does to the input of a matrix
 * product before it multiplies, reproduced exactly so that ds4ref can
 * compute under another engine's intended approximation (a numerics
 * profile, docs/NUMERICS.md) and what is left between the two is the order
 * of their sums.
 *
 * Each row of n inputs (n: the product's inner dimension) is rounded on its
 * own, block by block along it, to the values the engine multiplies:
 *   F16, BF16   each value to binary16 / bfloat16, nearest even (ggml's
 *               conversion for F16 and BF16 weights);
 *   Q8_0_GGML   blocks of 32, the quantize_row_q8_0 that ggml's x86-64 CPU
 *               backends run (AVX, AVX2 and AVX-512 alike): d = amax/127
 *               stored as binary16, q = x * (127/amax) rounded halves to
 *               even (_mm256_round_ps): values f16(d) * q.  ggml's
 *               reference C quantizer (builds without AVX) takes q =
 *               roundf(x * (1/d)) instead, halves away from zero and the
 *               reciprocal of the rounded d, and its NEON one lrint(x *
 *               (1/d)): each differs from this one in a few blocks in ten
 *               thousand, so the profile follows the CPUs llama.cpp is
 *               mostly run on;
 *   Q8_0_DS4    blocks of 32, ds4.c's quantize_q8_0_activation: d =
 *               amax/127 kept in f32, q = lrintf(x * (1/d)) (halves to
 *               even) clamped to [-128, 127]: values d * q;
 *   Q8_K        blocks of 256, ggml's quantize_row_q8_K_ref (which ds4.c's
 *               ds4_quantize_row_q8_K follows): max = the first value of
 *               largest magnitude, iscale = -127/max, q = nearest-even of
 *               iscale * x capped at 127, d = 1/iscale: values d * q;
 *   FP8_B128    blocks of 128, the official checkpoint's linear() input
 *               (kernel.py act_quant with UE8M0 scales; qat.h,
 *               ds4_qat_fp8_linear_input): values e4m3(x/s) * s.
 * Every step is the f32 operation the source does, in its order, with no
 * contraction; a value d * q is rounded to f32 once (exact for the binary16
 * scales, one rounding at 2^-24 for Q8_K's f32 scale, far below an f32
 * accumulation). */
#ifndef DS4_ACTROUND_H
#define DS4_ACTROUND_H

#include <stdint.h>

enum ds4_act {
    DS4_ACT_NONE = 0,
    DS4_ACT_F16,
    DS4_ACT_BF16,
    DS4_ACT_Q8_0_GGML,
    DS4_ACT_Q8_0_DS4,
    DS4_ACT_Q8_K,
    DS4_ACT_FP8_B128,
};

/* The elements per block of a rounding (1 for the float formats). */
uint32_t ds4_actround_block(uint8_t act);

/* y[0..n) = x[0..n) rounded as act says; n must be a multiple of the
 * block (a matrix's inner dimension always is, for the weight types that
 * get a quantized input).  y may be x. */
void ds4_actround_row(uint8_t act, const float *x, float *y, uint64_t n);

#endif
