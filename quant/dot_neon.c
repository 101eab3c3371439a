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
    for (; i + LANES <= n; i += LANES) fma16(v, a + i, b + i);
    for (int q = 0; q < 8; q++) vst1q_f64(l + 2 * q, v[q]);
    lanes_add_portable(l, a + i, b + i, n - i);
}

/* Two rows at a time: 16 accumulators and the widened activations stay
 * within the 32 vector registers. */
static inline void rows_fma(double (*restrict acc)[LANES], int nr, const float *restrict w,
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
        for (; i + LANES <= m; i += LANES) {
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

/* The blocked multiply of several tokens (dot_job.h): R rows x K tokens of
 * a chunk already in double, one pair of lanes at a time: R*K accumulators,
 * R weight registers and one activation register, at most 4 x 4 + 4 + 1 =
 * 21 of the 32.  The pairs are independent chains.
 *
 * mma_block is the same loop in dot_avx2.c, dot_avx512.c and dot_neon.c,
 * written out in each: what differs is the instruction set's (vector type,
 * width, aligned or unaligned loads, the operand order of its fused
 * multiply-add) and the block that fits its registers, and one shared body
 * would take a macro for each of those inside the innermost loop. */
static inline __attribute__((always_inline)) void
mma_block(double (*restrict acc)[TILE_T][LANES], const int R, const int K, int k0,
          const double *restrict wd, const double *restrict xd, uint64_t groups) {
    for (int q = 0; q < 8; q++) {
        float64x2_t a[4][4];
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) a[r][k] = vld1q_f64(acc[r][k0 + k] + 2 * q);
        const double *wp = wd + 2 * q, *xp = xd + (uint64_t)k0 * BCHUNK + 2 * q;
        for (uint64_t g = 0; g < groups; g++, wp += LANES, xp += LANES) {
            float64x2_t w[4];
            for (int r = 0; r < R; r++) w[r] = vld1q_f64(wp + r * BCHUNK);
            for (int k = 0; k < K; k++) {
                const float64x2_t xv = vld1q_f64(xp + k * BCHUNK);
                for (int r = 0; r < R; r++) a[r][k] = vfmaq_f64(a[r][k], w[r], xv);
            }
        }
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) vst1q_f64(acc[r][k0 + k] + 2 * q, a[r][k]);
    }
}

/* Full blocks of 4 rows x 4 tokens as compile-time shapes; the edges of a
 * job (fewer rows or tokens) through the general loop. */
static inline void mma(double (*restrict acc)[TILE_T][LANES], int nr, int nt,
                       const double *restrict wd, const double *restrict xd, uint64_t m) {
    const uint64_t groups = m / LANES;
    int k0 = 0;
    if (nr == 4)
        for (; k0 + 4 <= nt; k0 += 4) mma_block(acc, 4, 4, k0, wd, xd, groups);
    for (; k0 < nt; k0++) mma_block(acc, nr, 1, k0, wd, xd, groups);
    if (m % LANES) mma_portable(acc, nr, nt, wd + groups * LANES, xd + groups * LANES, m % LANES);
}

#define KERN_LANES_ADD lanes_add
#define KERN_ROWS_FMA rows_fma
#define KERN_DEQUANT dequant_portable
#define KERN_FUSED fused_none
#define KERN_MMA mma
#include "quant/dot_job.h"

const ds4_dot_kern ds4_dot_neon = {"neon", kern_dot_f32, kern_row_dot, kern_job};

#endif
