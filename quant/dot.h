/* The canonical reductions of ds4ref.
 *
 * Every dot product, sum of squares and matrix-vector product in the model is
 * defined by ONE evaluation order, so results never depend on the thread count,
 * the batch shape, the compiler or the vector width:
 *
 *   - each product a[i]*b[i] is formed in double from two f32 values, which is
 *     exact (24+24 significant bits < 53);
 *   - product i is added to lane (i % DS4_LANES) in increasing i, in double;
 *   - the lanes are combined by the fixed halving tree
 *       l[k] += l[k+8] (k<8); l[k] += l[k+4] (k<4); l[k] += l[k+2] (k<2);
 *       result = l[0] + l[1];
 *   - the caller rounds the double result to f32 once, where the model stores
 *     an activation.
 *
 * Because the lanes are explicit in the C code, a compiler may vectorize them
 * with any vector width without reassociating anything; the result is the same
 * bits on x86-64 and aarch64, at -O0 and -O3.
 *
 * A quantized weight row takes part through its exact f32 dequantization
 * (formats.h): dot(row, x) == ds4_dot_f32(dequant(row), x) bit for bit. */
#ifndef DS4_DOT_H
#define DS4_DOT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#define DS4_LANES 16

double ds4_dot_f32(const float *a, const float *b, uint64_t n);
double ds4_dot_sumsq_f32(const float *a, uint64_t n);   /* == ds4_dot_f32(a, a, n) */

/* Dot product of one stored row of `type` (n elements) with f32 x. */
double ds4_dot_row(uint32_t type, const void *row, const float *x, uint64_t n);

/* v moved one unit in the last place, away from zero or towards it as a
 * hash of its bits and of row (the output's row in its matrix) says: the
 * same value in the same row always moves the same way, whatever the token
 * and the batch, and about half of all values move each way.  0, the
 * largest finite magnitude, infinities and NaN stay as they are. */
float ds4_dot_jitter(float v, uint64_t row);

/* A 2-D weight matrix as stored in GGUF: `rows` rows of `cols` elements of
 * `type`, row r at data + r*row_bytes.  A 3-D expert tensor [cols, rows, E]
 * gives one view per expert (ds4_dot_expert). */
enum ds4_dot_out { DS4_OUT_NONE = 0, DS4_OUT_BF16 = 1, DS4_OUT_JITTER = 2 };

typedef struct ds4_mat {
    uint32_t type;
    uint64_t cols;       /* ne0: input width */
    uint64_t rows;       /* ne1: output width */
    uint64_t row_bytes;
    const uint8_t *data;
    /* How a product rounds its input first (quant/actround.h): DS4_ACT_NONE
     * (0) under the official numerics; another engine's rounding under a
     * numerics profile.  Each input row is rounded alone, so the batch
     * still never changes a value. */
    uint8_t act;
    /* What a product does to its outputs, a set: DS4_OUT_NONE (0);
     * DS4_OUT_BF16, the official checkpoint's fp8_gemm and fp4_gemm, which
     * write BF16: the canonical sum rounded to f32, then to bfloat16
     * (nearest even); DS4_OUT_JITTER, each f32 output moved by one unit in
     * the last place, up or down as a hash of its bits and its row says
     * (ds4_dot_jitter), before any BF16 rounding: what summing in another
     * order does to a product, for the "jitter" numerics (model/numerics.h). */
    uint8_t out;
    /* A block-scaled type's E8M0 scales (types.h, DS4_TYPE_FP8_B128 and
     * DS4_TYPE_FP4_B32): scale row r / scale_rows at scale + that *
     * scale_stride, one byte per scale_cols elements.  NULL for the GGUF
     * types; a block-scaled matrix without them is invalid. */
    const uint8_t *scale;
    uint64_t scale_stride;
    /* Experts stored one tensor each (the official checkpoint), rather
     * than stacked: expert e's weights at parts[e] and, for a block-scaled
     * type, its scales at parts[n_parts + e].  NULL for a stacked or plain
     * matrix. */
    const uint8_t *const *parts;
    uint64_t n_parts;
} ds4_mat;

/* Expert `expert` of a tensor of experts, stacked or one tensor each. */
ds4_mat ds4_dot_expert(const ds4_mat *stacked, uint64_t expert);

/* A block-scaled matrix of `rows` x `cols` (blockfp.h): the weights at
 * data, row-major, and their scales at scale, row-major with one row per
 * block row; `act` as above. */
ds4_mat ds4_dot_scaled(uint32_t type, uint64_t cols, uint64_t rows, const uint8_t *data,
                       const uint8_t *scale, uint8_t act);

/* y[t*ldy + r] = (float) dot(row r of W, x + t*ldx) for r in [0, W->rows) and
 * t in [0, T).  Rows are split over OpenMP threads; every output value is
 * computed by one thread with the canonical order above, so the result is the
 * same for any thread count and any T. */
void ds4_dot_matmul(const ds4_mat *W, const float *x, uint64_t ldx, int T,
                float *y, uint64_t ldy);

/* Same for a row range [r0, r1) only, without OpenMP (the caller parallelizes
 * over something else, e.g. experts). */
void ds4_dot_matmul_rows(const ds4_mat *W, uint64_t r0, uint64_t r1,
                     const float *x, uint64_t ldx, int T, float *y, uint64_t ldy);

/* One product of ds4_dot_matmul_many: y[t*ldy + r] = dot(row r of W, x + t*ldx)
 * for t < T. */
typedef struct ds4_matmul_op {
    const ds4_mat *W;
    const float *x;
    uint64_t ldx;
    int T;
    float *y;
    uint64_t ldy;
} ds4_matmul_op;

/* Independent products (no op may read another's output) in one parallel
 * region: one fork/join instead of n_ops, and the threads share the work of
 * all of them.  Every value equals ds4_dot_matmul's. */
void ds4_dot_matmul_many(const ds4_matmul_op *ops, int n_ops);

/* Is a loop of about `work` multiply-adds (or steps of similar cost) worth
 * a parallel region?  Waking the OpenMP team costs microseconds on an idle
 * machine and, on a busy one, up to a scheduler time slice: a thread that
 * lost its core holds everyone up at the end of the region.  Work below
 * about 0.1 ms therefore runs on the calling thread.  Which thread computes
 * a value never changes it. */
static inline bool ds4_worth_threads(double work) {
    return work >= (double)(1u << 20);
}

/* The kernels: every variant this build has (portable; AVX2 and AVX-512 on
 * x86-64, NEON on aarch64) computes the same canonical order, so the choice
 * never changes a bit.  The best one the CPU supports is chosen at the first
 * use, unless the environment variable DS4REF_KERNELS names another. */

/* The name of the variant in use: "avx512", "avx2", "neon" or "portable". */
const char *ds4_dot_kernels(void);

/* The variants this build and CPU can run, best first, space separated. */
const char *ds4_dot_available(void);

/* An error (DS4_E_UNSUPPORTED, naming the variable and what is available)
 * when DS4REF_KERNELS names a variant that cannot be used here; the best
 * variant is in use then.  Programs call it once at startup. */
int ds4_dot_check(ds4err *err);

/* Switch to the named variant (tests and benchmarks compare them).  Not
 * while a product runs on another thread. */
int ds4_dot_use(const char *name, ds4err *err);

#endif
