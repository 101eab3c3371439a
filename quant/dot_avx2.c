/* The AVX2 kernels (AVX2 + FMA + F16C): the canonical order of dot_lanes.h
 * with 4-double registers.  This file is compiled with -mavx2 -mfma -mf16c
 * and used only on CPUs that have them (dot.c). */
#include "quant/dot_kern.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include "quant/dot_lanes.h"

/* Fused multiply-add.  These kernels accumulate with fma(w, x, acc) where
 * the portable code writes acc + (double)w * (double)x.  The two are the
 * same number: w and x are f32 values (24 significant bits each), so w*x
 * has at most 48 significant bits and an exponent far inside double's range
 * (|w*x| < 2^256, and nonzero products are >= 2^-298, far above double's
 * smallest subnormal 2^-1074): the product is exact in double, and fma's
 * single rounding of w*x + acc is the rounding of the addition.  That holds
 * for signed zeros and infinities too; only which NaN payload comes out of
 * a NaN input may differ, and NaN payloads are not part of the contract
 * (x86-64 and aarch64 already propagate them differently).  The build keeps
 * -ffp-contract=off, so the compiler never fuses anything else. */

static inline void lanes_add(double *restrict l, const float *restrict a, const float *restrict b,
                      uint64_t n) {
    __m256d v[4];
    for (int q = 0; q < 4; q++) v[q] = _mm256_loadu_pd(l + 4 * q);
    uint64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int q = 0; q < 4; q++)
            v[q] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i + 4 * q)),
                                   _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4 * q)), v[q]);
    for (int q = 0; q < 4; q++) _mm256_storeu_pd(l + 4 * q, v[q]);
    lanes_add_portable(l, a + i, b + i, n - i);
}

/* 16 lanes are four 4-double registers; two rows at a time keep 8
 * accumulators and the 4 activation registers within the 16 ymm. */
static inline __attribute__((always_inline)) void
rows_fma_n(double (*restrict acc)[LANES], const int nr, const float *restrict w,
           const float *restrict x, uint64_t m) {
    __m256d a[2][4];
    for (int j = 0; j < nr; j++)
        for (int q = 0; q < 4; q++) a[j][q] = _mm256_loadu_pd(acc[j] + 4 * q);
    uint64_t i = 0;
    for (; i + LANES <= m; i += LANES) {
        __m256d xv[4];
        for (int q = 0; q < 4; q++) xv[q] = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * q));
        for (int j = 0; j < nr; j++) {
            const float *wj = w + (uint64_t)j * CHUNK + i;
            for (int q = 0; q < 4; q++)
                a[j][q] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(wj + 4 * q)), xv[q], a[j][q]);
        }
    }
    for (int j = 0; j < nr; j++)
        for (int q = 0; q < 4; q++) _mm256_storeu_pd(acc[j] + 4 * q, a[j][q]);
    if (i < m) rows_fma_portable(acc, nr, w + i, x + i, m - i);
}

static inline void rows_fma(double (*restrict acc)[LANES], int nr, const float *restrict w,
                     const float *restrict x, uint64_t m) {
    for (int j = 0; j < nr; j += 2) {
        if (nr - j >= 2) rows_fma_n(acc + j, 2, w + (uint64_t)j * CHUNK, x, m);
        else rows_fma_n(acc + j, 1, w + (uint64_t)j * CHUNK, x, m);
    }
}

/* ---- The official checkpoint's weights, 8 at a time --------------------
 *
 * The values of blockfp.c's spans, as dot_avx512.c's dq_fp8 and dq_fp4
 * compute them 16 at a time; FP4's sign bit is set apart because a
 * register holds 8 of its 16 values.  Each stops before a group with a
 * NaN code or scale and returns the elements done. */
static uint64_t dq_fp8(const uint8_t *row, const uint8_t *srow, uint64_t off, float *w, uint64_t m) {
    const __m256i low7 = _mm256_set1_epi32(0x7f), rebias = _mm256_set1_epi32(120 << 23);
    const __m256i sign = _mm256_set1_epi32(0x80);
    uint64_t i = 0;
    for (; i + 8 <= m; i += 8) {
        const uint64_t k = off + i;
        const uint8_t sb = srow[k / DS4_BLOCKFP_FP8_BLOCK];
        const __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + k)));
        const __m256i mag = _mm256_and_si256(u, low7);
        if (sb == 255 || _mm256_movemask_epi8(_mm256_cmpeq_epi32(mag, low7))) break;
        const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(mag, 20), rebias));
        const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
        __m256 v = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
        v = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v),
                                                _mm256_slli_epi32(_mm256_and_si256(u, sign), 24)));
        _mm256_storeu_ps(w + i, _mm256_mul_ps(v, _mm256_set1_ps(ds4_blockfp_e8m0(sb))));
    }
    return i;
}

static uint64_t dq_fp4(const uint8_t *row, const uint8_t *srow, uint64_t off, float *w, uint64_t m) {
    const __m256 mags = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i shift = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
    const __m256i nibble = _mm256_set1_epi32(15), seven = _mm256_set1_epi32(7);
    const __m256i eight = _mm256_set1_epi32(8);
    uint64_t i = 0;
    for (; i + 8 <= m; i += 8) {
        const uint64_t k = off + i;
        const uint8_t sb = srow[k / DS4_BLOCKFP_FP4_BLOCK];
        if (sb == 255) break;
        uint32_t four;
        memcpy(&four, row + k / 2, 4);
        const __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)four), twice);
        const __m256i code = _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu8_epi32(b), shift), nibble);
        const __m256 mag = _mm256_permutevar8x32_ps(mags, _mm256_and_si256(code, seven));
        const __m256 v = _mm256_castsi256_ps(_mm256_or_si256(
            _mm256_castps_si256(mag), _mm256_slli_epi32(_mm256_and_si256(code, eight), 28)));
        _mm256_storeu_ps(w + i, _mm256_mul_ps(v, _mm256_set1_ps(ds4_blockfp_e8m0(sb))));
    }
    return i;
}

/* The block-scaled types 8 at a time, the rest (the GGUF types, a tail, a
 * NaN) the portable way. */
static inline void dequant_chunk(const ds4_type_info *t, const uint8_t *row, const uint8_t *srow,
                                 uint64_t off, float *w, uint64_t m) {
    uint64_t done = 0;
    switch (t->id) {
    case DS4_TYPE_FP8_B128: done = dq_fp8(row, srow, off, w, m); break;
    case DS4_TYPE_FP4_B32: done = dq_fp4(row, srow, off, w, m); break;
    case DS4_TYPE_F32:
    case DS4_TYPE_F16:
    case DS4_TYPE_BF16:
    case DS4_TYPE_Q8_0:
    case DS4_TYPE_Q2_K:
    case DS4_TYPE_Q4_K:
    case DS4_TYPE_IQ2_XXS:
    case DS4_TYPE_I32: break;
    }
    if (done < m) dequant_portable(t, row, srow, off + done, w + done, m - done);
}

/* ---- Several tokens: the blocked multiply (dot_job.h) -------------------
 *
 * R rows x K tokens of a chunk, weights and activations already in double,
 * one quarter of the lanes (4 of the 16) at a time: R*K accumulators, R
 * weight registers and one activation register, at most 4 x 2 + 4 + 1 = 13
 * of the 16.  The quarters are independent chains, so doing one after the
 * other moves no addition.
 *
 * mma_block is the same loop in dot_avx2.c, dot_avx512.c and dot_neon.c,
 * written out in each: what differs is the instruction set's (vector type,
 * width, aligned or unaligned loads, the operand order of its fused
 * multiply-add) and the block that fits its registers, and one shared body
 * would take a macro for each of those inside the innermost loop. */
static inline __attribute__((always_inline)) void
mma_block(double (*restrict acc)[TILE_T][LANES], const int R, const int K, int k0,
          const double *restrict wd, const double *restrict xd, uint64_t groups) {
    for (int q = 0; q < 4; q++) {
        __m256d a[4][2];
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) a[r][k] = _mm256_loadu_pd(acc[r][k0 + k] + 4 * q);
        const double *wp = wd + 4 * q, *xp = xd + (uint64_t)k0 * BCHUNK + 4 * q;
        for (uint64_t g = 0; g < groups; g++, wp += LANES, xp += LANES) {
            __m256d w[4];
            for (int r = 0; r < R; r++) w[r] = _mm256_loadu_pd(wp + r * BCHUNK);
            for (int k = 0; k < K; k++) {
                const __m256d xv = _mm256_loadu_pd(xp + k * BCHUNK);
                for (int r = 0; r < R; r++) a[r][k] = _mm256_fmadd_pd(w[r], xv, a[r][k]);
            }
        }
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) _mm256_storeu_pd(acc[r][k0 + k] + 4 * q, a[r][k]);
    }
}

/* The block shapes as compile-time constants, so the accumulators are
 * registers: up to 4 rows x 2 tokens here, 4 x 4 in dot_avx512.c, whose
 * mma_shape is this switch over its own, larger set of shapes. */
static inline void mma_shape(double (*restrict acc)[TILE_T][LANES], int R, int K, int k0,
                             const double *restrict wd, const double *restrict xd,
                             uint64_t groups) {
    switch (R * 8 + K) {
    case 4 * 8 + 2: mma_block(acc, 4, 2, k0, wd, xd, groups); break;
    case 4 * 8 + 1: mma_block(acc, 4, 1, k0, wd, xd, groups); break;
    case 3 * 8 + 2: mma_block(acc, 3, 2, k0, wd, xd, groups); break;
    case 3 * 8 + 1: mma_block(acc, 3, 1, k0, wd, xd, groups); break;
    case 2 * 8 + 2: mma_block(acc, 2, 2, k0, wd, xd, groups); break;
    case 2 * 8 + 1: mma_block(acc, 2, 1, k0, wd, xd, groups); break;
    case 1 * 8 + 2: mma_block(acc, 1, 2, k0, wd, xd, groups); break;
    default: mma_block(acc, 1, 1, k0, wd, xd, groups); break;
    }
}

static inline void mma(double (*restrict acc)[TILE_T][LANES], int nr, int nt,
                       const double *restrict wd, const double *restrict xd, uint64_t m) {
    const uint64_t groups = m / LANES;
    for (int k0 = 0; k0 < nt; k0 += 2)
        mma_shape(acc, nr, nt - k0 < 2 ? nt - k0 : 2, k0, wd, xd, groups);
    if (m % LANES) mma_portable(acc, nr, nt, wd + groups * LANES, xd + groups * LANES, m % LANES);
}

#define KERN_LANES_ADD lanes_add
#define KERN_ROWS_FMA rows_fma
#define KERN_DEQUANT dequant_chunk
#define KERN_FUSED fused_none
#define KERN_MMA mma
#include "quant/dot_job.h"

const ds4_dot_kern ds4_dot_avx2 = {"avx2", kern_dot_f32, kern_row_dot, kern_job};

#endif
