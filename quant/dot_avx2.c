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
    for (; i + L <= n; i += L)
        for (int q = 0; q < 4; q++)
            v[q] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i + 4 * q)),
                                   _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4 * q)), v[q]);
    for (int q = 0; q < 4; q++) _mm256_storeu_pd(l + 4 * q, v[q]);
    lanes_add_portable(l, a + i, b + i, n - i);
}

/* 16 lanes are four 4-double registers; two rows at a time keep 8
 * accumulators and the 4 activation registers within the 16 ymm. */
static inline __attribute__((always_inline)) void
rows_fma_n(double (*restrict acc)[L], const int nr, const float *restrict w,
           const float *restrict x, uint64_t m) {
    __m256d a[2][4];
    for (int j = 0; j < nr; j++)
        for (int q = 0; q < 4; q++) a[j][q] = _mm256_loadu_pd(acc[j] + 4 * q);
    uint64_t i = 0;
    for (; i + L <= m; i += L) {
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

static inline void rows_fma(double (*restrict acc)[L], int nr, const float *restrict w,
                     const float *restrict x, uint64_t m) {
    for (int j = 0; j < nr; j += 2) {
        if (nr - j >= 2) rows_fma_n(acc + j, 2, w + (uint64_t)j * CHUNK, x, m);
        else rows_fma_n(acc + j, 1, w + (uint64_t)j * CHUNK, x, m);
    }
}

#define KERN_LANES_ADD lanes_add
#define KERN_ROWS_FMA rows_fma
#define KERN_DEQUANT dequant_portable
#define KERN_FUSED fused_none
#include "quant/dot_job.h"

const ds4_dot_kern ds4_dot_avx2 = {"avx2", kern_dot_f32, kern_row_dot, kern_job};

#endif
