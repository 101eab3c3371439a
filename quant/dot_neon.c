/* The NEON kernels (aarch64): the canonical order of dot_lanes.h with
 * 2-double registers.  Advanced SIMD is part of every aarch64 CPU, so this
 * variant needs no check.  Products are formed exactly in double and added
 * with vfmaq_f64, a fused multiply-add whose single rounding is the
 * rounding of the addition (dot_avx2.c says why); the dequantization is the
 * portable one. */
#include "quant/dot_kern.h"

#if defined(__aarch64__)

#include <arm_neon.h>

#include "quant/dot_lanes.h"

/* v[q] += a[i + 2q .. +1] * b[...] for the 8 pairs of one group of 16. */
static inline void fma16(float64x2_t v[8], const float *a, const float *b) {
    for (int h = 0; h < 4; h++) {
        const float32x4_t av = vld1q_f32(a + 4 * h), bv = vld1q_f32(b + 4 * h);
        v[2 * h] = vfmaq_f64(v[2 * h], vcvt_f64_f32(vget_low_f32(av)),
                             vcvt_f64_f32(vget_low_f32(bv)));
        v[2 * h + 1] = vfmaq_f64(v[2 * h + 1], vcvt_high_f64_f32(av), vcvt_high_f64_f32(bv));
    }
}

static inline void lanes_add(double *restrict l, const float *restrict a, const float *restrict b,
                             uint64_t n) {
    float64x2_t v[8];
    for (int q = 0; q < 8; q++) v[q] = vld1q_f64(l + 2 * q);
    uint64_t i = 0;
    for (; i + L <= n; i += L) fma16(v, a + i, b + i);
    for (int q = 0; q < 8; q++) vst1q_f64(l + 2 * q, v[q]);
    lanes_add_portable(l, a + i, b + i, n - i);
}

/* Two rows at a time: 16 accumulators and the widened activations stay
 * within the 32 vector registers. */
static inline void rows_fma(double (*restrict acc)[L], int nr, const float *restrict w,
                            const float *restrict x, uint64_t m) {
    for (int j = 0; j < nr; j += 2) {
        const int two = nr - j >= 2;
        float64x2_t a0[8], a1[8];
        for (int q = 0; q < 8; q++) {
            a0[q] = vld1q_f64(acc[j] + 2 * q);
            if (two) a1[q] = vld1q_f64(acc[j + 1] + 2 * q);
        }
        const float *w0 = w + (uint64_t)j * CHUNK, *w1 = w0 + CHUNK;
        uint64_t i = 0;
        for (; i + L <= m; i += L) {
            fma16(a0, w0 + i, x + i);
            if (two) fma16(a1, w1 + i, x + i);
        }
        for (int q = 0; q < 8; q++) {
            vst1q_f64(acc[j] + 2 * q, a0[q]);
            if (two) vst1q_f64(acc[j + 1] + 2 * q, a1[q]);
        }
        if (i < m) rows_fma_portable(acc + j, two ? 2 : 1, w0 + i, x + i, m - i);
    }
}

#define KERN_LANES_ADD lanes_add
#define KERN_ROWS_FMA rows_fma
#define KERN_DEQUANT dequant_portable
#define KERN_FUSED fused_none
#include "quant/dot_job.h"

const ds4_dot_kern ds4_dot_neon = {"neon", kern_dot_f32, kern_row_dot, kern_job};

#endif
