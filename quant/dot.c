/* The canonical reductions of dot.h: dot products, sums of squares and
 * matrix-vector / matrix-matrix products, and the choice of kernels.
 *
 * There is exactly one evaluation order (dot.h; written out in dot_lanes.h):
 * element i's product, formed in double, goes to lane i % 16, and the lanes
 * meet in a fixed halving tree.  The kernel variants (dot_kern.h) compute
 * that order with different instructions; this file decides which variant
 * runs and how a product is cut into jobs for the threads.  Nothing here may
 * change which additions happen or in which order, so every variant, thread
 * count and batch shape gives the same bits.
 *
 * A matrix product is cut into jobs: rows in groups of JOB_ROWS (divided by
 * 4, down to RB, while that leaves too few jobs for the threads), tokens in
 * tiles of at most TILE_T, the tokens spread evenly over them; one (group,
 * tile) pair is one job, and one thread owns a job, i.e. every output
 * value, whole.  Jobs are numbered group-major, tile-minor, so consecutive
 * jobs of one thread reuse the same rows while they are in cache.
 *
 * Nothing here allocates: every buffer has a fixed size on the stack (about
 * 44 KiB for a job of several tokens; the IQ2_XXS lookup tables of the
 * AVX-512 kernels are static, built once), so the functions cannot fail
 * halfway. */
#include "quant/dot.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "base/bits.h"
#include "quant/actround.h"
#include "quant/dot_kern.h"
#include "quant/dot_lanes.h"
#include "quant/formats.h"
#include "quant/types.h"

/* ------------------------------------------------------------------------ */
/* Choosing the kernels                                                     */
/* ------------------------------------------------------------------------ */

#if defined(__x86_64__)
/* F16C, which clang's __builtin_cpu_supports does not name: CPUID leaf 1,
 * ECX bit 29.  It is VEX-encoded, so the OS support that the AVX2 check
 * below confirms covers it. */
static bool cpu_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

/* Can this CPU run variant k?  __builtin_cpu_supports also checks that the
 * OS saves the wider registers. */
static bool cpu_has(const ds4_dot_kern *k) {
#if defined(__x86_64__)
    if (k == &ds4_dot_avx512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2") && cpu_f16c();
    if (k == &ds4_dot_avx2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c();
#endif
    (void)k;
    return true;
}

/* Every variant this build has, best first. */
static const ds4_dot_kern *const variants[] = {
#if defined(__x86_64__)
    &ds4_dot_avx512,
    &ds4_dot_avx2,
#elif defined(__aarch64__)
    &ds4_dot_neon,
#endif
    &ds4_dot_portable,
};
enum { N_VARIANTS = sizeof(variants) / sizeof(variants[0]) };

static const ds4_dot_kern *kern;
static char kern_error[160];
static char kern_list[64];       /* the variants this CPU can run, best first */
static pthread_once_t kern_once = PTHREAD_ONCE_INIT;

static const ds4_dot_kern *find(const char *name) {
    for (int i = 0; i < N_VARIANTS; i++)
        if (!strcmp(variants[i]->name, name)) return variants[i];
    return NULL;
}

/* The best variant, unless DS4REF_KERNELS names another; a name this build
 * or this CPU cannot honour leaves the best one chosen and an error for
 * ds4_dot_check to report. */
static void choose(void) {
    for (int i = N_VARIANTS - 1; i >= 0; i--)
        if (cpu_has(variants[i])) kern = variants[i];
    for (int i = 0; i < N_VARIANTS; i++) {
        if (!cpu_has(variants[i])) continue;
        size_t n = strlen(kern_list);
        snprintf(kern_list + n, sizeof(kern_list) - n, "%s%s", n ? " " : "", variants[i]->name);
    }
    const char *want = getenv("DS4REF_KERNELS");
    if (!want || !*want) return;
    const ds4_dot_kern *k = find(want);
    if (!k)
        snprintf(kern_error, sizeof(kern_error),
                 "DS4REF_KERNELS=%.40s: no such kernels here (this build and CPU have: %s)",
                 want, kern_list);
    else if (!cpu_has(k))
        snprintf(kern_error, sizeof(kern_error),
                 "DS4REF_KERNELS=%.40s: this CPU lacks the instructions they need", want);
    else
        kern = k;
}

static const ds4_dot_kern *kernels(void) {
    pthread_once(&kern_once, choose);
    return kern;
}

const char *ds4_dot_kernels(void) {
    return kernels()->name;
}

const char *ds4_dot_available(void) {
    kernels();
    return kern_list;
}

int ds4_dot_check(ds4err *err) {
    kernels();
    if (kern_error[0]) return ds4_err_set(err, DS4_E_UNSUPPORTED, "%s", kern_error);
    return 0;
}

int ds4_dot_use(const char *name, ds4err *err) {
    kernels();
    const ds4_dot_kern *k = find(name);
    if (!k || !cpu_has(k))
        return ds4_err_set(err, k ? DS4_E_UNSUPPORTED : DS4_E_ARG,
                          "no %s kernels here (this build and CPU have: %s)", name, kern_list);
    kern = k;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Products                                                                 */
/* ------------------------------------------------------------------------ */

double ds4_dot_f32(const float *a, const float *b, uint64_t n) {
    return kernels()->dot_f32(a, b, n);
}

double ds4_dot_sumsq_f32(const float *a, uint64_t n) {
    return ds4_dot_f32(a, a, n);
}

/* Checks shared by the row kernels: a known type, a whole number of
 * blocks, and the scales of a block-scaled type, whose rows of FP4 hold
 * whole scale blocks.  Callers validate shapes at load time, so failing
 * here is a bug. */
static const ds4_type_info *mat_type(const ds4_mat *W) {
    const uint64_t n = W->cols;
    const ds4_type_info *t = ds4_types_info(W->type);
    if (!t || (n != 0 && ds4_types_row_bytes(W->type, n) == 0)) return NULL;
    if (t->scale_cols && (!W->scale || (t->scale_rows == 1 && n % t->scale_cols))) return NULL;
    return t;
}

/* An invalid type or width has no defined value; NaN makes the mistake loud
 * instead of looking like a plausible number. */
double ds4_dot_row(uint32_t type, const void *row, const float *x, uint64_t n) {
    const ds4_mat W = {.type = type, .cols = n, .rows = 1, .row_bytes = ds4_types_row_bytes(type, n),
                       .data = row};
    const ds4_type_info *t = mat_type(&W);
    if (!t) return NAN;
    /* An empty row may come as NULL pointers, and NULL + 0 is undefined. */
    if (n == 0) return 0.0;
    return kernels()->row_dot(&W, t, x);
}

float ds4_dot_jitter(float v, uint64_t row) {
    uint32_t b = ds4_bits_of_f32(v);
    const uint32_t mag = b & 0x7fffffffu;
    if (mag == 0 || mag >= 0x7f7fffffu) return v;
    /* splitmix64's finalizer: every bit of the value and the row reaches
     * the one bit that picks the direction. */
    uint64_t h = ((uint64_t)row << 32 | b) + 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    /* Adding one to the magnitude's bits is the next float away from zero,
     * subtracting one the next towards it (subnormals included). */
    b = (b & 0x80000000u) | (h & 1 ? mag + 1 : mag - 1);
    return ds4_bits_to_f32(b);
}

ds4_mat ds4_dot_expert(const ds4_mat *stacked, uint64_t expert) {
    ds4_mat m = *stacked;
    if (stacked->parts) {
        m.parts = NULL;
        m.n_parts = 0;
        m.data = stacked->parts[expert];
        if (stacked->scale) m.scale = stacked->parts[stacked->n_parts + expert];
        return m;
    }
    m.data = stacked->data + expert * stacked->rows * stacked->row_bytes;
    const ds4_type_info *t = ds4_types_info(stacked->type);
    if (m.scale && t && t->scale_rows) {
        const uint64_t scale_rows = (stacked->rows + t->scale_rows - 1) / t->scale_rows;
        m.scale = stacked->scale + expert * scale_rows * stacked->scale_stride;
    }
    return m;
}

ds4_mat ds4_dot_scaled(uint32_t type, uint64_t cols, uint64_t rows, const uint8_t *data,
                       const uint8_t *scale, uint8_t act) {
    const ds4_type_info *t = ds4_types_info(type);
    const uint64_t per = t && t->scale_cols ? t->scale_cols : 1;
    const ds4_mat m = {.type = type, .cols = cols, .rows = rows,
                       .row_bytes = ds4_types_row_bytes(type, cols), .data = data, .act = act,
                       .scale = scale, .scale_stride = (cols + per - 1) / per};
    return m;
}

/* Outputs of an invalid matrix are NaN (see ds4_dot_row). */
static void fill_nan(uint64_t r0, uint64_t r1, int T, float *y, uint64_t ldy) {
    for (int k = 0; k < T; k++)
        for (uint64_t r = r0; r < r1; r++) y[(uint64_t)k * ldy + r] = NAN;
}

/* Job jobno of rows [r0, r1) in groups of `group` rows x ntiles token
 * tiles. */
static void run_job(const ds4_dot_kern *k, const ds4_mat *W, const ds4_type_info *t, uint64_t r0,
                    uint64_t r1, int group, uint64_t jobno, int ntiles, const float *x,
                    uint64_t ldx, int T, float *y, uint64_t ldy) {
    const uint64_t g0 = r0 + jobno / (uint64_t)ntiles * (uint64_t)group;
    /* The tokens are spread evenly over the tiles: 17 tokens are tiles of
     * 9 and 8, not 16 and a lone token that would read the rows again. */
    const int tile = (int)(jobno % (uint64_t)ntiles);
    const int t0 = (int)((int64_t)tile * T / ntiles), t1 = (int)((int64_t)(tile + 1) * T / ntiles);
    const int nr = r1 - g0 < (uint64_t)group ? (int)(r1 - g0) : group;
    const int nt = t1 - t0;
    k->job(W, t, g0, nr, x, ldx, t0, nt, y, ldy);
    if (!W->out) return;
    for (int tk = t0; tk < t1; tk++)
        for (int j = 0; j < nr; j++) {
            float *v = &y[(uint64_t)tk * ldy + g0 + (uint64_t)j];
            if (W->out & DS4_OUT_JITTER) *v = ds4_dot_jitter(*v, g0 + (uint64_t)j);
            if (W->out & DS4_OUT_BF16) *v = ds4_formats_bf16_to_f32(ds4_formats_f32_to_bf16(*v));
        }
}

static uint64_t n_jobs(uint64_t rows, int group, int ntiles) {
    return (rows + (uint64_t)group - 1) / (uint64_t)group * (uint64_t)ntiles;
}

void ds4_dot_matmul_rows(const ds4_mat *W, uint64_t r0, uint64_t r1,
                     const float *x, uint64_t ldx, int T, float *y, uint64_t ldy) {
    const ds4_type_info *t = mat_type(W);
    if (!t) {
        fill_nan(r0, r1, T, y, ldy);
        return;
    }
    if (T <= 0 || r1 <= r0) return;
    const ds4_dot_kern *k = kernels();
    const int ntiles = (T + TILE_T - 1) / TILE_T;
    const uint64_t jobs = n_jobs(r1 - r0, JOB_ROWS, ntiles);
    for (uint64_t j = 0; j < jobs; j++)
        run_job(k, W, t, r0, r1, JOB_ROWS, j, ntiles, x, ldx, T, y, ldy);
}

/* Job numbering of ds4_dot_matmul_many: op i owns jobs [first[i], first[i+1]). */
static uint64_t number_jobs(const ds4_matmul_op *ops, const ds4_type_info *const *types, int n,
                            int group, uint64_t *first) {
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        const int ntiles = (ops[i].T + TILE_T - 1) / TILE_T;
        first[i + 1] = first[i] + (types[i] && ops[i].T > 0 ? n_jobs(ops[i].W->rows, group, ntiles) : 0);
    }
    return first[n];
}

/* Several products in one parallel region: their jobs are numbered one
 * after the other and spread over the threads together.  Every output is
 * still one job's, computed by the same code as ds4_dot_matmul. */
static void matmul_many_plain(const ds4_matmul_op *ops, int n_ops) {
    enum { MAX_OPS = 64 };
    const int n = n_ops < MAX_OPS ? n_ops : MAX_OPS;
    const ds4_dot_kern *k = kernels();
    const ds4_type_info *types[MAX_OPS];
    uint64_t first[MAX_OPS + 1];
    double work = 0;
    for (int i = 0; i < n; i++) {
        types[i] = mat_type(ops[i].W);
        if (!types[i]) fill_nan(0, ops[i].W->rows, ops[i].T, ops[i].y, ops[i].ldy);
        work += (double)ops[i].W->rows * (double)ops[i].W->cols * (ops[i].T > 0 ? ops[i].T : 0);
    }
    const int parallel = ds4_worth_threads(work);
    /* Small products are cut finer so every thread gets work; the size of
     * a job never changes a value, only who computes it. */
    int group = JOB_ROWS;
    while (parallel && group > RB &&
           number_jobs(ops, types, n, group, first) < 4 * (uint64_t)omp_get_max_threads())
        group /= 4;
    const uint64_t jobs = number_jobs(ops, types, n, group, first);
    /* Dynamic: a thread that lost its core to another program takes fewer
     * jobs instead of holding the others up; chunks of consecutive jobs
     * keep a thread on the same rows. */
    const int chunk = (int)(jobs / (8 * (uint64_t)omp_get_max_threads())) + 1;
    #pragma omp parallel for schedule(dynamic, chunk) if (parallel)
    for (uint64_t j = 0; j < jobs; j++) {
        int i = 0;
        while (j >= first[i + 1]) i++;
        const ds4_matmul_op *o = &ops[i];
        const int ntiles = (o->T + TILE_T - 1) / TILE_T;
        run_job(k, o->W, types[i], 0, o->W->rows, group, j - first[i], ntiles, o->x, o->ldx, o->T,
                o->y, o->ldy);
    }
    if (n_ops > MAX_OPS) matmul_many_plain(ops + MAX_OPS, n_ops - MAX_OPS);
}

/* The inputs of op rounded as its matrix asks (quant/actround.h), into a
 * buffer of T rows of W->cols (NULL when out of memory: its outputs are
 * then NaN, as an invalid matrix's). */
static float *rounded_input(const ds4_matmul_op *op) {
    const uint64_t n = op->W->cols;
    float *r = malloc(sizeof(float) * n * (uint64_t)(op->T > 0 ? op->T : 1));
    if (!r) return NULL;
    #pragma omp parallel for schedule(static) if (ds4_worth_threads((double)n * op->T))
    for (int t = 0; t < op->T; t++)
        ds4_actround_row(op->W->act, op->x + (uint64_t)t * op->ldx, r + (uint64_t)t * n, n);
    return r;
}

/* Products whose matrices round their inputs (a numerics profile): the
 * rounded copies, then the same products.  The official numerics never
 * come here. */
static void matmul_rounded(const ds4_matmul_op *ops, int n_ops) {
    enum { MAX_OPS = 64 };
    ds4_matmul_op mine[MAX_OPS] = {{0}};
    float *bufs[MAX_OPS] = {0};
    const int n = n_ops < MAX_OPS ? n_ops : MAX_OPS;
    for (int i = 0; i < n; i++) {
        mine[i] = ops[i];
        bufs[i] = NULL;
        if (!ops[i].W->act || ops[i].T <= 0) continue;
        bufs[i] = rounded_input(&ops[i]);
        if (!bufs[i]) {
            fill_nan(0, ops[i].W->rows, ops[i].T, ops[i].y, ops[i].ldy);
            mine[i].T = 0;
            continue;
        }
        mine[i].x = bufs[i];
        mine[i].ldx = ops[i].W->cols;
    }
    matmul_many_plain(mine, n);
    for (int i = 0; i < n; i++) free(bufs[i]);
    if (n_ops > MAX_OPS) ds4_dot_matmul_many(ops + MAX_OPS, n_ops - MAX_OPS);
}

void ds4_dot_matmul_many(const ds4_matmul_op *ops, int n_ops) {
    for (int i = 0; i < n_ops; i++)
        if (ops[i].W->act) {
            matmul_rounded(ops, n_ops);
            return;
        }
    matmul_many_plain(ops, n_ops);
}

void ds4_dot_matmul(const ds4_mat *W, const float *x, uint64_t ldx, int T,
                float *y, uint64_t ldy) {
    const ds4_matmul_op op = {W, x, ldx, T, y, ldy};
    ds4_dot_matmul_many(&op, 1);
}
