/* The canonical order of quant/dot.h written out in plain C: the reference
 * every kernel variant (dot_portable.c, dot_avx2.c, dot_avx512.c,
 * dot_neon.c) reproduces bit for bit, and the code their vector paths fall
 * back to for tails and for blocks whose scales are NaN or Inf.  Internal
 * to quant/. */
#ifndef DS4_DOT_LANES_H
#define DS4_DOT_LANES_H

#include <stdint.h>
#include <string.h>

#include "quant/blockfp.h"
#include "quant/dot.h"
#include "quant/types.h"

/* The lanes of the canonical order (dot.h), which every kernel keeps. */
enum { LANES = DS4_LANES };

/* Elements per column chunk: a multiple of every block size (1, 32, 256)
 * and of the 16 lanes; the f32 chunks of RB rows (4 KiB) stay in L1. */
#define CHUNK 256

/* Elements per column chunk of a product of several tokens (dot_job.h),
 * and the stride of its widened rows and tokens.  A longer chunk loads and
 * stores the lanes a block of rows x tokens keeps in registers once per
 * more multiply-adds, but the tile's widened activations (TILE_T x BCHUNK
 * doubles, 32 KiB here) then leave L1.  512 and 1024 were measured against
 * 256 (docs/PERFORMANCE.md, 16-core machine): no gain on the Intel machine
 * (the multiply alone falls from 80% to 68% of the FMA peak at 512), 5-10%
 * with the weights in L2 on an AMD one; 256 stays. */
#define BCHUNK 256

/* Rows dequantized and accumulated together (register blocking). */
#define RB 4

/* The most rows of one job (dot.c cuts products into jobs).  The more rows
 * a job has, the more of them share one widening of the tile's
 * activations; consecutive jobs of a thread share their weights in cache
 * when T > TILE_T. */
#define JOB_ROWS 64

/* Tokens sharing one dequantization of the weights. */
#define TILE_T 16

/* The most tokens a variant's fused kernels (KERN_FUSED) take at once. */
#define FUSED_T 2

/* The fixed halving tree of dot.h.  Destroys l. */
static inline double lanes_sum(double *l) {
    for (int k = 0; k < 8; k++) l[k] += l[k + 8];
    for (int k = 0; k < 4; k++) l[k] += l[k + 4];
    for (int k = 0; k < 2; k++) l[k] += l[k + 2];
    return l[0] + l[1];
}

/* l[i % 16] += a[i] * b[i] for i in [0, n), element 0 being a multiple of
 * 16 of the whole vector. */
static inline void lanes_add_portable(double *restrict l, const float *restrict a,
                                      const float *restrict b, uint64_t n) {
    double acc[LANES];
    memcpy(acc, l, sizeof(acc));
    uint64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += (double)a[i + k] * (double)b[i + k];
    for (int k = 0; i + (uint64_t)k < n; k++) acc[k] += (double)a[i + k] * (double)b[i + k];
    memcpy(l, acc, sizeof(acc));
}

/* acc[j][i % 16] += w[j*CHUNK + i] * x[i] for rows j < nr and i < m. */
static inline void rows_fma_portable(double (*restrict acc)[LANES], int nr, const float *restrict w,
                                     const float *restrict x, uint64_t m) {
    for (int j = 0; j < nr; j++) lanes_add_portable(acc[j], w + (uint64_t)j * CHUNK, x, m);
}

/* Elements [off, off+m) of a row as f32 (formats.h values; blockfp.h's
 * for a block-scaled type, whose scales are srow); off is a multiple of
 * CHUNK and m a whole number of blocks. */
static inline void dequant_portable(const ds4_type_info *t, const uint8_t *row,
                                    const uint8_t *srow, uint64_t off, float *w, uint64_t m) {
    if (t->span)
        t->span(row, srow, off, w, m);
    else
        t->dequant(row + off / t->blck * t->bytes, w, m);
}

/* acc[r][k][i % 16] += wd[r*BCHUNK + i] * xd[k*BCHUNK + i] for rows r < nr,
 * tokens k < nt and i < m, on weights and activations already widened to
 * double (exact: they are f32 values).  The vector variants run the whole
 * groups of 16 and leave the tail (m % 16 elements, from a multiple of 16)
 * to this. */
static inline void mma_portable(double (*restrict acc)[TILE_T][LANES], int nr, int nt,
                                const double *restrict wd, const double *restrict xd,
                                uint64_t m) {
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < nt; k++) {
            const double *w = wd + (uint64_t)r * BCHUNK, *x = xd + (uint64_t)k * BCHUNK;
            double a[LANES];
            memcpy(a, acc[r][k], sizeof(a));
            uint64_t i = 0;
            for (; i + LANES <= m; i += LANES)
                for (int l = 0; l < LANES; l++) a[l] += w[i + l] * x[i + l];
            for (int l = 0; i + (uint64_t)l < m; l++) a[l] += w[i + l] * x[i + l];
            memcpy(acc[r][k], a, sizeof(a));
        }
}

/* The fused path of a variant that has none: it declines, and the tokens
 * go through the f32 chunks. */
static inline int fused_none(const ds4_type_info *t, const uint8_t *const *rows, int nr,
                             const float *x, uint64_t ldx, int nt, uint64_t n,
                             double (*acc)[RB][LANES]) {
    (void)t, (void)rows, (void)nr, (void)x, (void)ldx, (void)nt, (void)n, (void)acc;
    return 0;
}

#endif
