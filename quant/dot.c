/* The canonical reductions of dot.h: dot products, sums of squares and
 * matrix-vector / matrix-matrix products.
 *
 * There is exactly one evaluation order (dot.h): element i's product, formed
 * in double, goes to lane i % 16, and the lanes meet in a fixed halving tree.
 * The lanes are an explicit array in the C code, so the compiler may put them
 * in vector registers of any width but never has to reorder an addition:
 * -O0 and -O3 -march=native give the same bits.
 *
 * Quantized rows are dequantized a chunk at a time into a small stack buffer
 * and fed to the same lanes.  Chunks start at multiples of 16 elements, so an
 * element lands in the same lane as in ds4_dot_f32 over the whole
 * dequantized row, and the result is the same bits.  Nothing here allocates:
 * every buffer has a fixed size on the stack, so the functions cannot fail
 * halfway. */
#include "dot.h"

#include <math.h>
#include <string.h>

#include "formats.h"

/* Elements dequantized at once: a multiple of every block size (1, 32, 256)
 * and of DS4_LANES.  1 KiB of floats stays in L1. */
#define CHUNK 256

/* Tokens whose lanes are kept at once by the matrix kernels: 64 x 16 doubles
 * = 8 KiB of stack.  A weight row is dequantized once per group of TILE
 * tokens, i.e. exactly once for T <= TILE. */
#define TILE 64

/* Below this many multiply-adds a matrix product runs on the calling thread:
 * waking the OpenMP team would cost more than the work.  Either way every
 * output is computed by the same code, so the result does not change. */
#define PARALLEL_MIN_WORK (1u << 15)

/* l[i % 16] += a[i] * b[i] for i in [0, n), where element 0 of a and b is
 * element 16k of the whole vector (so lane i % 16 is the right lane). */
static inline void lanes_add(double *restrict l, const float *restrict a,
                             const float *restrict b, uint64_t n) {
    double acc[DS4_LANES];
    memcpy(acc, l, sizeof(acc));
    uint64_t i = 0;
    for (; i + DS4_LANES <= n; i += DS4_LANES)
        for (int k = 0; k < DS4_LANES; k++)
            acc[k] += (double)a[i + k] * (double)b[i + k];
    for (int k = 0; i + (uint64_t)k < n; k++)
        acc[k] += (double)a[i + k] * (double)b[i + k];
    memcpy(l, acc, sizeof(acc));
}

/* The same with the first operand already widened to double (exactly). */
static inline void lanes_add_wd(double *restrict l, const double *restrict a,
                                const float *restrict b, uint64_t n) {
    double acc[DS4_LANES];
    memcpy(acc, l, sizeof(acc));
    uint64_t i = 0;
    for (; i + DS4_LANES <= n; i += DS4_LANES)
        for (int k = 0; k < DS4_LANES; k++)
            acc[k] += a[i + k] * (double)b[i + k];
    for (int k = 0; i + (uint64_t)k < n; k++)
        acc[k] += a[i + k] * (double)b[i + k];
    memcpy(l, acc, sizeof(acc));
}

/* The fixed halving tree of dot.h.  Destroys l. */
static inline double lanes_sum(double *l) {
    for (int k = 0; k < 8; k++) l[k] += l[k + 8];
    for (int k = 0; k < 4; k++) l[k] += l[k + 4];
    for (int k = 0; k < 2; k++) l[k] += l[k + 2];
    return l[0] + l[1];
}

double ds4_dot_f32(const float *a, const float *b, uint64_t n) {
    double l[DS4_LANES] = {0};
    lanes_add(l, a, b, n);
    return lanes_sum(l);
}

double ds4_sumsq_f32(const float *a, uint64_t n) {
    return ds4_dot_f32(a, a, n);
}

/* Checks shared by the row kernels: a known type and a whole number of
 * blocks.  Callers validate shapes at load time, so failing here is a bug. */
static const ds4_type_info *row_type(uint32_t type, uint64_t n) {
    const ds4_type_info *t = ds4_type_info_get(type);
    if (!t || (n != 0 && ds4_row_bytes(type, n) == 0)) return NULL;
    return t;
}

/* Dequantize elements [off, off+m) of a row; off is a multiple of CHUNK and m
 * a whole number of blocks (row_type checked the row). */
static inline void dequant_chunk(const ds4_type_info *t, const uint8_t *row,
                                 uint64_t off, float *w, uint64_t m) {
    ds4_dequant_row(t->id, row + off / t->blck * t->bytes, w, m);
}

/* An invalid type or width has no defined value; NaN makes the mistake loud
 * instead of looking like a plausible number. */
double ds4_dot_row(uint32_t type, const void *row, const float *x, uint64_t n) {
    const ds4_type_info *t = row_type(type, n);
    if (!t) return NAN;
    float w[CHUNK];
    double l[DS4_LANES] = {0};
    for (uint64_t off = 0; off < n; off += CHUNK) {
        const uint64_t m = n - off < CHUNK ? n - off : CHUNK;
        dequant_chunk(t, row, off, w, m);
        lanes_add(l, w, x + off, m);
    }
    return lanes_sum(l);
}

ds4_mat ds4_mat_expert(const ds4_mat *stacked, uint64_t expert) {
    ds4_mat m = *stacked;
    m.data = stacked->data + expert * stacked->rows * stacked->row_bytes;
    return m;
}

/* Row r of W against tokens [0, T): y[t*ldy + r].  Each chunk of the row is
 * dequantized once and used by every token of the tile, each token with its
 * own 16 lanes, so every value equals ds4_dot_row(row r, x + t*ldx). */
static void matmul_row(const ds4_mat *W, const ds4_type_info *t, uint64_t r,
                       const float *x, uint64_t ldx, int T, float *y, uint64_t ldy) {
    const uint8_t *row = W->data + r * W->row_bytes;
    const uint64_t n = W->cols;
    float w[CHUNK];
    double wd[CHUNK];
    double l[TILE][DS4_LANES];

    for (int t0 = 0; t0 < T; t0 += TILE) {
        const int nt = T - t0 < TILE ? T - t0 : TILE;
        memset(l, 0, (size_t)nt * sizeof(l[0]));
        for (uint64_t off = 0; off < n; off += CHUNK) {
            const uint64_t m = n - off < CHUNK ? n - off : CHUNK;
            dequant_chunk(t, row, off, w, m);
            if (nt == 1) {
                lanes_add(l[0], w, x + (uint64_t)t0 * ldx + off, m);
                continue;
            }
            /* Widen the weights once for all the tokens (exact). */
            for (uint64_t i = 0; i < m; i++) wd[i] = w[i];
            for (int k = 0; k < nt; k++)
                lanes_add_wd(l[k], wd, x + (uint64_t)(t0 + k) * ldx + off, m);
        }
        for (int k = 0; k < nt; k++)
            y[(uint64_t)(t0 + k) * ldy + r] = (float)lanes_sum(l[k]);
    }
}

/* Outputs of an invalid matrix are NaN (see ds4_dot_row). */
static void fill_nan(uint64_t r0, uint64_t r1, int T, float *y, uint64_t ldy) {
    for (int k = 0; k < T; k++)
        for (uint64_t r = r0; r < r1; r++) y[(uint64_t)k * ldy + r] = NAN;
}

void ds4_matmul_rows(const ds4_mat *W, uint64_t r0, uint64_t r1,
                     const float *x, uint64_t ldx, int T, float *y, uint64_t ldy) {
    const ds4_type_info *t = row_type(W->type, W->cols);
    if (!t) {
        fill_nan(r0, r1, T, y, ldy);
        return;
    }
    for (uint64_t r = r0; r < r1; r++) matmul_row(W, t, r, x, ldx, T, y, ldy);
}

void ds4_matmul(const ds4_mat *W, const float *x, uint64_t ldx, int T,
                float *y, uint64_t ldy) {
    const ds4_type_info *t = row_type(W->type, W->cols);
    if (!t) {
        fill_nan(0, W->rows, T, y, ldy);
        return;
    }
    const uint64_t rows = W->rows;
    const int parallel = T > 0 && (double)rows * (double)W->cols * T >= PARALLEL_MIN_WORK;
    /* Rows are independent and each is computed whole by one thread. */
    #pragma omp parallel for schedule(static) if (parallel)
    for (uint64_t r = 0; r < rows; r++) matmul_row(W, t, r, x, ldx, T, y, ldy);
}
