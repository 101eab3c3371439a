/* Tests of quant/dot.c: the canonical summation order and the matrix
 * kernels built on it.
 *
 * The reference is ref_dot below: a deliberately naive transcription of the
 * order of dot.h (lane i % 16, then the halving tree), written as a plain
 * loop over i.  The library's version is written for vectorization; the two
 * must agree bit for bit at any optimization level, which is what makes the
 * results independent of compiler flags.  Matrix kernels are checked against
 * ref_dot of the dequantized rows (dequantization has its own tests). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/blockfp.h"
#include "quant/dot.h"
#include "quant/formats.h"
#include "quant/types.h"
#include "testutil.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) {
    return tu_splitmix64(&rng_state);
}

/* Uniform in [-1, 1). */
static float rnd_unit(void) {
    return (float)((double)(rnd() >> 11) * 0x1p-52 - 1.0);
}

/* Values over a wide range of magnitudes, so rounding depends on order. */
static float rnd_wide(void) {
    return ldexpf(rnd_unit(), (int)(rnd() % 41) - 20);
}

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* The order of dot.h, written the plainest way. */
static double ref_dot(const float *a, const float *b, uint64_t n) {
    double lane[16];
    for (int k = 0; k < 16; k++) lane[k] = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        const double p = (double)a[i] * (double)b[i];
        lane[i % 16] = lane[i % 16] + p;
    }
    for (int width = 8; width >= 1; width /= 2)
        for (int k = 0; k < width; k++) lane[k] = lane[k] + lane[k + width];
    return lane[0];
}

/* Left-to-right double sum: what a different order would give. */
static double sequential_dot(const float *a, const float *b, uint64_t n) {
    double s = 0.0;
    for (uint64_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

static void assert_same_double(double got, double want, const char *what, long idx) {
    if (dbits(got) != dbits(want)) {
        print_error("%s[%ld]: got %a, want %a\n", what, idx, got, want);
        fail();
    }
}

/* ------------------------------------------------------------------------ */
/* The order itself                                                         */
/* ------------------------------------------------------------------------ */

/* Products chosen so that each plausible other order gives 0 where the
 * canonical one gives 1:
 *   - 2^60 (i=0) and -2^60 (i=16) share lane 0, while 1 (i=1) sits in
 *     lane 1: sequential summation absorbs the 1 into 2^60 first;
 *   - 8 lanes instead of 16 would put i=0, 8, 16 together;
 *   - the halving tree adds lane 8 to lane 0 before lane 1 meets either. */
static void test_lane_order_cancellation(void **state) {
    (void)state;
    float a[17] = {0}, b[17] = {0};
    for (int i = 0; i < 17; i++) b[i] = 1.0f;
    a[0] = 0x1p60f;
    a[1] = 1.0f;
    a[16] = -0x1p60f;
    assert_same_double(ds4_dot_f32(a, b, 17), 1.0, "lanes", 0);
    assert_same_double(sequential_dot(a, b, 17), 0.0, "sequential", 0);

    /* i = 0, 8, 16: lanes 0, 8, 0 with 16 lanes; all lane 0 with 8. */
    memset(a, 0, sizeof(a));
    a[0] = 0x1p60f;
    a[8] = 1.0f;
    a[16] = -0x1p60f;
    assert_same_double(ds4_dot_f32(a, b, 17), 1.0, "16 lanes", 0);

    /* The tree: lane 0 = 2^60, lane 1 = 1, lane 8 = -2^60.  Halving adds
     * lane 8 into lane 0 first (0), then lane 1 survives: 1.  Summing the
     * lanes in index order would give (2^60 + 1) - 2^60 = 0. */
    memset(a, 0, sizeof(a));
    a[0] = 0x1p60f;
    a[1] = 1.0f;
    a[8] = -0x1p60f;
    assert_same_double(ds4_dot_f32(a, b, 16), 1.0, "halving tree", 0);
    double lanes_in_order = 0;
    for (int k = 0; k < 16; k++) lanes_in_order += (double)a[k];
    assert_same_double(lanes_in_order, 0.0, "lanes in order", 0);

    /* Products are exact in double: 2^-149 * 2^-149 (far below f32) and
     * (1 + 2^-23)^2 (47 significant bits) survive unrounded. */
    const float tiny = 0x1p-149f, one_ulp = 1.0f + 0x1p-23f;
    assert_same_double(ds4_dot_f32(&tiny, &tiny, 1), 0x1p-298, "exact product", 0);
    assert_same_double(ds4_dot_f32(&one_ulp, &one_ulp, 1), 1.0 + 0x1p-22 + 0x1p-46, "exact product", 1);
}

/* Random vectors of every length up to 300 and some long ones, ragged and
 * not, against the reference; and proof that the data is order-sensitive. */
static void test_dot_f32_vs_reference(void **state) {
    (void)state;
    enum { MAXN = 5000 };
    float *a = malloc(sizeof(float) * MAXN), *b = malloc(sizeof(float) * MAXN);
    assert_non_null(a);
    assert_non_null(b);
    int differs_from_sequential = 0;
    for (uint64_t n = 0; n <= MAXN; n = n < 300 ? n + 1 : n + 1173) {
        for (uint64_t i = 0; i < n; i++) {
            a[i] = rnd_wide();
            b[i] = rnd_wide();
        }
        const double want = ref_dot(a, b, n);
        assert_same_double(ds4_dot_f32(a, b, n), want, "dot_f32", (long)n);
        assert_same_double(ds4_dot_sumsq_f32(a, n), ref_dot(a, a, n), "sumsq", (long)n);
        differs_from_sequential |= dbits(sequential_dot(a, b, n)) != dbits(want);
    }
    assert_true(differs_from_sequential);
    assert_same_double(ds4_dot_f32(a, b, 0), 0.0, "empty", 0);
    free(a);
    free(b);
}

/* ------------------------------------------------------------------------ */
/* Rows of every type                                                       */
/* ------------------------------------------------------------------------ */

static const uint32_t all_types[] = {DS4_TYPE_F32, DS4_TYPE_F16, DS4_TYPE_BF16, DS4_TYPE_I32,
                                     DS4_TYPE_Q8_0, DS4_TYPE_Q2_K, DS4_TYPE_Q4_K,
                                     DS4_TYPE_IQ2_XXS};
enum { NTYPES = sizeof(all_types) / sizeof(all_types[0]) };

/* Random stored data of `type` whose values are all finite: the scales (and
 * F16/BF16/F32 elements) get a moderate exponent. */
static void fill_row(uint32_t type, uint8_t *p, uint64_t n) {
    const ds4_type_info *t = ds4_types_info(type);
    const uint64_t bytes = ds4_types_row_bytes(type, n);
    for (uint64_t i = 0; i < bytes; i++) p[i] = (uint8_t)rnd();
    for (uint64_t b = 0; b < n / t->blck; b++) {
        uint8_t *blk = p + b * t->bytes;
        switch (type) {
        case DS4_TYPE_F32: blk[3] = (uint8_t)((blk[3] & 0x80) | 0x3c | (blk[3] & 3)); break;
        case DS4_TYPE_F16: blk[1] = (uint8_t)((blk[1] & 0x83) | 0x30); break;
        case DS4_TYPE_BF16: blk[1] = (uint8_t)((blk[1] & 0x80) | 0x3e); break;
        case DS4_TYPE_Q8_0:
        case DS4_TYPE_IQ2_XXS: blk[1] = (uint8_t)((blk[1] & 0x83) | 0x20); break;
        case DS4_TYPE_Q2_K: blk[81] = (uint8_t)((blk[81] & 0x83) | 0x20); blk[83] = 0x1c; break;
        case DS4_TYPE_Q4_K: blk[1] = (uint8_t)((blk[1] & 0x83) | 0x20); blk[3] = 0x1c; break;
        default: break;   /* I32: any value */
        }
    }
}

static double ref_dot_row(uint32_t type, const uint8_t *row, const float *x, uint64_t n) {
    float *w = malloc(sizeof(float) * (n ? n : 1));
    assert_non_null(w);
    assert_int_equal(ds4_types_dequant_row(type, row, w, n), 0);
    const double d = ref_dot(w, x, n);
    free(w);
    return d;
}

static void test_dot_row_every_type(void **state) {
    (void)state;
    static const uint64_t widths1[] = {1, 15, 16, 17, 255, 256, 257, 700, 4099};
    static const uint64_t widths32[] = {32, 96, 256, 288, 800, 4096};
    static const uint64_t widths256[] = {256, 512, 768, 1280, 4096};
    for (int ti = 0; ti < NTYPES; ti++) {
        const uint32_t type = all_types[ti];
        const uint32_t blck = ds4_types_info(type)->blck;
        const uint64_t *widths = blck == 1 ? widths1 : blck == 32 ? widths32 : widths256;
        const int nw = blck == 1 ? 9 : blck == 32 ? 6 : 5;
        for (int wi = 0; wi < nw; wi++) {
            const uint64_t n = widths[wi];
            uint8_t *row = malloc(ds4_types_row_bytes(type, n));
            float *x = malloc(sizeof(float) * n);
            assert_non_null(row);
            assert_non_null(x);
            fill_row(type, row, n);
            for (uint64_t i = 0; i < n; i++) x[i] = rnd_wide();
            assert_same_double(ds4_dot_row(type, row, x, n), ref_dot_row(type, row, x, n),
                               ds4_types_name(type), (long)n);
            free(row);
            free(x);
        }
        assert_same_double(ds4_dot_row(type, NULL, NULL, 0), 0.0, "empty row", ti);
    }
    /* No defined value for an unknown type or a partial block. */
    float x[32] = {0};
    uint8_t row[64] = {0};
    assert_true(isnan(ds4_dot_row(2, row, x, 32)));
    assert_true(isnan(ds4_dot_row(DS4_TYPE_Q8_0, row, x, 16)));
}

/* ------------------------------------------------------------------------ */
/* Matrices                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    ds4_mat W;
    uint8_t *data;
    float *x;        /* maxT tokens, stride ldx */
    uint64_t ldx;
    int maxT;
    float *want;     /* want[t * rows + r] */
} mcase;

static void mcase_init(mcase *c, uint32_t type, uint64_t cols, uint64_t rows, int maxT) {
    const uint64_t rb = ds4_types_row_bytes(type, cols);
    c->data = malloc(rb * rows);
    assert_non_null(c->data);
    for (uint64_t r = 0; r < rows; r++) fill_row(type, c->data + r * rb, cols);
    c->W = (ds4_mat){.type = type, .cols = cols, .rows = rows, .row_bytes = rb, .data = c->data};
    c->ldx = cols + 5;   /* padded strides catch index mix-ups */
    c->maxT = maxT;
    c->x = malloc(sizeof(float) * c->ldx * (uint64_t)maxT);
    assert_non_null(c->x);
    for (uint64_t i = 0; i < c->ldx * (uint64_t)maxT; i++) c->x[i] = rnd_unit();
    c->want = malloc(sizeof(float) * rows * (uint64_t)maxT);
    assert_non_null(c->want);
    for (int t = 0; t < maxT; t++)
        for (uint64_t r = 0; r < rows; r++)
            c->want[(uint64_t)t * rows + r] =
                (float)ref_dot_row(type, c->data + r * rb, c->x + (uint64_t)t * c->ldx, cols);
}

static void mcase_free(mcase *c) {
    free(c->data);
    free(c->x);
    free(c->want);
}

/* Runs ds4_dot_matmul (r1 == 0) or ds4_dot_matmul_rows [r0, r1) with T tokens into
 * a padded output and checks every value and that nothing else changed. */
static void mcase_check(const mcase *c, int T, uint64_t r0, uint64_t r1, int use_rows) {
    const uint64_t rows = c->W.rows, ldy = rows + 3;
    const float sentinel = -1234.5f;
    float *y = malloc(sizeof(float) * ldy * (uint64_t)T);
    assert_non_null(y);
    for (uint64_t i = 0; i < ldy * (uint64_t)T; i++) y[i] = sentinel;
    if (use_rows) ds4_dot_matmul_rows(&c->W, r0, r1, c->x, c->ldx, T, y, ldy);
    else ds4_dot_matmul(&c->W, c->x, c->ldx, T, y, ldy);
    for (int t = 0; t < T; t++)
        for (uint64_t r = 0; r < ldy; r++) {
            const float got = y[(uint64_t)t * ldy + r];
            const int inside = r >= r0 && r < r1;
            const float want = inside ? c->want[(uint64_t)t * rows + r] : sentinel;
            if (fbits(got) != fbits(want)) {
                print_error("%s matmul%s T=%d t=%d r=%llu: got %a want %a\n",
                            ds4_types_name(c->W.type), use_rows ? "_rows" : "", T, t,
                            (unsigned long long)r, (double)got, (double)want);
                fail();
            }
        }
    free(y);
}

/* Every (t, r) value equals the single-token dot of row r, whatever the
 * number of tokens (1, 7, 64, and 70 which spans two token tiles) and
 * threads. */
static void test_matmul_batch_and_threads(void **state) {
    (void)state;
    const int saved = omp_get_max_threads();
    for (int ti = 0; ti < NTYPES; ti++) {
        const uint32_t type = all_types[ti];
        const uint32_t blck = ds4_types_info(type)->blck;
        const uint64_t cols = blck == 1 ? 300 : blck == 32 ? 800 : 768;
        mcase c;
        mcase_init(&c, type, cols, 37, 70);
        static const int Ts[] = {1, 7, 64, 70};
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            for (int k = 0; k < 4; k++) mcase_check(&c, Ts[k], 0, c.W.rows, 0);
        }
        omp_set_num_threads(2);
        mcase_check(&c, 7, 5, 29, 1);
        mcase_check(&c, 1, 36, 37, 1);
        mcase_check(&c, 3, 10, 10, 1);
        mcase_free(&c);
    }
    /* Large enough that a single token goes parallel too. */
    mcase c;
    mcase_init(&c, DS4_TYPE_Q8_0, 1024, 101, 2);
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        mcase_check(&c, 1, 0, c.W.rows, 0);
        mcase_check(&c, 2, 0, c.W.rows, 0);
    }
    mcase_free(&c);
    omp_set_num_threads(saved);
}

/* An invalid matrix gives NaN outputs instead of plausible numbers. */
static void test_matmul_invalid(void **state) {
    (void)state;
    uint8_t data[34 * 4] = {0};
    float x[64] = {0}, y[4];
    ds4_mat bad_type = {.type = 2, .cols = 32, .rows = 4, .row_bytes = 34, .data = data};
    ds4_dot_matmul(&bad_type, x, 32, 1, y, 4);
    for (int r = 0; r < 4; r++) assert_true(isnan(y[r]));
    ds4_mat bad_cols = {.type = DS4_TYPE_Q8_0, .cols = 48, .rows = 2, .row_bytes = 34, .data = data};
    y[0] = y[1] = 0;
    ds4_dot_matmul_rows(&bad_cols, 0, 2, x, 48, 1, y, 2);
    assert_true(isnan(y[0]) && isnan(y[1]));
}

/* A stacked expert tensor [cols, rows, E]: expert e's row r is stored row
 * e*rows + r of the whole. */
static void test_mat_expert(void **state) {
    (void)state;
    enum { COLS = 64, ROWS = 3, E = 4 };
    const uint64_t rb = ds4_types_row_bytes(DS4_TYPE_Q8_0, COLS);
    uint8_t *data = malloc(rb * ROWS * E);
    assert_non_null(data);
    fill_row(DS4_TYPE_Q8_0, data, (uint64_t)COLS * ROWS * E);
    const ds4_mat all = {.type = DS4_TYPE_Q8_0, .cols = COLS, .rows = ROWS, .row_bytes = rb, .data = data};
    float x[COLS], y[ROWS];
    for (int i = 0; i < COLS; i++) x[i] = rnd_unit();
    for (uint64_t e = 0; e < E; e++) {
        const ds4_mat m = ds4_dot_expert(&all, e);
        assert_int_equal(m.type, DS4_TYPE_Q8_0);
        assert_int_equal(m.cols, COLS);
        assert_int_equal(m.rows, ROWS);
        assert_int_equal(m.row_bytes, rb);
        assert_ptr_equal(m.data, data + e * ROWS * rb);
        ds4_dot_matmul(&m, x, COLS, 1, y, ROWS);
        for (uint64_t r = 0; r < ROWS; r++) {
            const float want = (float)ref_dot_row(DS4_TYPE_Q8_0, data + (e * ROWS + r) * rb, x, COLS);
            assert_int_equal(fbits(y[r]), fbits(want));
        }
    }
    free(data);
}

/* ------------------------------------------------------------------------ */
/* Vector kernels against the portable ones                                 */
/* ------------------------------------------------------------------------ */

/* The lemma behind the vector kernels' fused multiply-adds: for f32 a, b
 * and any double c, fma(a, b, c) == c + (double)a * (double)b, because the
 * product of two f32 values is exact in double.  Checked on random values
 * over the whole f32 range, subnormals, extremes and signed zeros. */
static void test_fma_equals_mul_add(void **state) {
    (void)state;
    static const float special[] = {0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 0x1p-126f,
                                    0x1.fffffep127f, -0x1.fffffep127f, 1.0f + 0x1p-23f,
                                    3.0f, 0x1.fffffep-1f};
    enum { NS = sizeof(special) / sizeof(special[0]) };
    for (int i = 0; i < 200000; i++) {
        float a, b;
        uint32_t ua = (uint32_t)rnd(), ub = (uint32_t)rnd();
        if (i < NS * NS) {
            a = special[i / NS];
            b = special[i % NS];
        } else {
            /* Any finite f32 bit pattern: exponent 0xff becomes 0xfe. */
            if ((ua >> 23 & 0xff) == 0xff) ua &= ~0x00800000u;
            if ((ub >> 23 & 0xff) == 0xff) ub &= ~0x00800000u;
            memcpy(&a, &ua, 4);
            memcpy(&b, &ub, 4);
        }
        const double c = (i & 1) ? (double)rnd_wide() * (double)rnd_wide() : ldexp((double)rnd_unit(), (int)(rnd() % 600) - 300);
        const double fused = fma((double)a, (double)b, c);
        const double plain = c + (double)a * (double)b;
        if (dbits(fused) != dbits(plain)) {
            print_error("fma(%a, %a, %a) = %a, mul+add = %a\n", (double)a, (double)b, c, fused, plain);
            fail();
        }
    }
}

/* The kernel variants this build and CPU can run (ds4_dot_available),
 * portable last. */
static int variants(char names[4][16]) {
    int n = 0;
    const char *p = ds4_dot_available();
    while (*p && n < 4) {
        size_t len = strcspn(p, " ");
        assert_true(len < 16);
        memcpy(names[n], p, len);
        names[n++][len] = '\0';
        p += len + (p[len] == ' ');
    }
    assert_string_equal(names[n - 1], "portable");
    return n;
}

static void use(const char *name) {
    ds4err err = {0};
    if (ds4_dot_use(name, &err)) fail_msg("%s", err.msg);
}

/* Runs the same product and dot products through every variant and
 * requires the portable kernels' bits (NaN == NaN). */
static void check_variants_vs_portable(const ds4_mat *W, const float *x, uint64_t ldx, int T) {
    char names[4][16];
    const int nv = variants(names);
    const uint64_t rows = W->rows;
    float *a = malloc(sizeof(float) * rows * (uint64_t)T), *b = malloc(sizeof(float) * rows * (uint64_t)T);
    assert_non_null(a);
    assert_non_null(b);
    use("portable");
    ds4_dot_matmul_rows(W, 0, rows, x, ldx, T, b, rows);
    const double row0 = ds4_dot_row(W->type, W->data, x, W->cols);
    for (int v = 0; v + 1 < nv; v++) {
        use(names[v]);
        ds4_dot_matmul_rows(W, 0, rows, x, ldx, T, a, rows);
        for (uint64_t i = 0; i < rows * (uint64_t)T; i++) {
            if (fbits(a[i]) != fbits(b[i]) && !(isnan(a[i]) && isnan(b[i]))) {
                print_error("%s %s cols=%llu T=%d [%llu]: %a, portable %a\n", names[v],
                            ds4_types_name(W->type), (unsigned long long)W->cols, T,
                            (unsigned long long)i, (double)a[i], (double)b[i]);
                fail();
            }
        }
        const double r = ds4_dot_row(W->type, W->data, x, W->cols);
        if (dbits(r) != dbits(row0) && !(isnan(r) && isnan(row0))) {
            print_error("%s %s ds4_dot_row: %a, portable %a\n", names[v], ds4_types_name(W->type), r,
                        row0);
            fail();
        }
    }
    use(names[0]);
    free(a);
    free(b);
}

/* ds4_dot_f32 of every variant against the portable one over lengths
 * around the 16 lanes. */
static void test_dot_f32_every_variant(void **state) {
    (void)state;
    char names[4][16];
    const int nv = variants(names);
    float a[100], b[100];
    for (int i = 0; i < 100; i++) a[i] = rnd_wide(), b[i] = rnd_wide();
    for (uint64_t n = 0; n <= 100; n += 3) {
        use("portable");
        const double want = ds4_dot_f32(a, b, n);
        for (int v = 0; v + 1 < nv; v++) {
            use(names[v]);
            const double got = ds4_dot_f32(a, b, n);
            if (dbits(got) != dbits(want)) {
                print_error("%s: ds4_dot_f32 n=%llu: %a, portable %a\n", names[v],
                            (unsigned long long)n, got, want);
                fail();
            }
        }
    }
    use(names[0]);
    ds4err err = {0};
    assert_int_not_equal(ds4_dot_use("sse9", &err), 0);
    assert_non_null(strstr(err.msg, "sse9"));
}

/* Every type, widths with and without a partial chunk, token counts around
 * the tile size, activations over a wide range of magnitudes; then rows
 * with NaN/Inf block scales and F16 rows with subnormals, infinities and
 * NaNs, which the vector kernels hand back to the portable code. */
static void test_variants_match_portable(void **state) {
    (void)state;
    char names[4][16];
    variants(names);
    assert_string_equal(ds4_dot_kernels(), names[0]);
    /* 1 and 2 take the fused kernels where the variant has them, the
     * others the blocked multiply: whole tiles, short ones and both. */
    static const int Ts[] = {1, 2, 3, 7, 8, 9, 17};
    const int nT = (int)(sizeof(Ts) / sizeof(Ts[0]));
    for (int ti = 0; ti < NTYPES; ti++) {
        const uint32_t type = all_types[ti];
        const uint32_t blck = ds4_types_info(type)->blck;
        const uint64_t widths[] = {blck == 1 ? 23 : blck, blck == 1 ? 531 : blck * (blck == 32 ? 17 : 3)};
        for (int wi = 0; wi < 2; wi++) {
            const uint64_t cols = widths[wi], rows = 13, rb = ds4_types_row_bytes(type, cols);
            uint8_t *data = malloc(rb * rows);
            float *x = malloc(sizeof(float) * cols * 17);
            assert_non_null(data);
            assert_non_null(x);
            for (uint64_t r = 0; r < rows; r++) fill_row(type, data + r * rb, cols);
            for (uint64_t i = 0; i < cols * 17; i++) x[i] = rnd_wide();
            const ds4_mat W = {.type = type, .cols = cols, .rows = rows, .row_bytes = rb, .data = data};
            for (int q = 0; q < nT; q++) check_variants_vs_portable(&W, x, cols, Ts[q]);
            /* Special scales: row 3's first block and row 7's last block. */
            const ds4_type_info *t = ds4_types_info(type);
            if (t->blck > 1) {
                static const int off[] = {[DS4_TYPE_Q8_0] = 0, [DS4_TYPE_Q2_K] = 80,
                                          [DS4_TYPE_Q4_K] = 2, [DS4_TYPE_IQ2_XXS] = 0};
                uint8_t *b3 = data + 3 * rb + off[type];
                uint8_t *b7 = data + 7 * rb + rb - t->bytes + off[type];
                b3[0] = 0x00, b3[1] = 0x7c;   /* +Inf */
                b7[0] = 0x01, b7[1] = 0xfe;   /* NaN */
            } else if (type == DS4_TYPE_F16) {
                uint8_t *e = data + 5 * rb;
                e[0] = 0x01, e[1] = 0x00;     /* smallest subnormal */
                e[40] = 0xff, e[41] = 0x03;   /* largest subnormal */
                e[2 * 17] = 0x00, e[2 * 17 + 1] = 0xfc;   /* -Inf */
                data[9 * rb + 6] = 0x00, data[9 * rb + 7] = 0x7e;   /* NaN */
            }
            for (int q = 0; q < nT; q++) check_variants_vs_portable(&W, x, cols, Ts[q]);
            free(data);
            free(x);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The official checkpoint's block-scaled matrices                          */
/* ------------------------------------------------------------------------ */

/* A block-scaled matrix with its weights dequantized the independent way
 * (blockfp.h's row functions: ldexp of the format's definition), rows x
 * cols, random codes (no NaN code) and scales 2^-10 .. 2^3. */
typedef struct scase {
    ds4_mat W;
    uint8_t *w, *scale;
    float *deq;
} scase;

static void scase_init(scase *c, uint32_t type, uint64_t cols, uint64_t rows) {
    const int fp4 = type == DS4_TYPE_FP4_B32;
    uint64_t sshape[2];
    ds4_blockfp_scale_shape(fp4, rows, cols, sshape);
    const uint64_t wbytes = rows * (fp4 ? cols / 2 : cols);
    c->w = malloc(wbytes);
    c->scale = malloc(sshape[0] * sshape[1]);
    c->deq = malloc(sizeof(float) * rows * cols);
    assert_true(c->w && c->scale && c->deq);
    for (uint64_t i = 0; i < wbytes; i++) {
        c->w[i] = (uint8_t)rnd();
        if (!fp4 && (c->w[i] & 0x7f) == 0x7f) c->w[i] ^= 1;   /* not the NaN code */
    }
    for (uint64_t i = 0; i < sshape[0] * sshape[1]; i++) c->scale[i] = (uint8_t)(117 + rnd() % 14);
    c->W = ds4_dot_scaled(type, cols, rows, c->w, c->scale, 0);
    assert_int_equal(c->W.scale_stride, sshape[1]);
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t bad = 0;
        const int rc = fp4 ? ds4_blockfp_fp4_row(c->w, c->scale, cols, r, c->deq + r * cols, &bad)
                           : ds4_blockfp_fp8_row(c->w, c->scale, cols, r, c->deq + r * cols, &bad);
        assert_int_equal(rc, 0);
    }
}

static void scase_free(scase *c) {
    free(c->w);
    free(c->scale);
    free(c->deq);
}

/* Rows [r0, r1) x T tokens of c through the kernels in use against ref_dot
 * of the dequantized rows, bit for bit (NaN only where the reference has
 * one). */
static void scase_check(const scase *c, const float *x, uint64_t ldx, int T, uint64_t r0,
                        uint64_t r1) {
    const uint64_t rows = c->W.rows, cols = c->W.cols;
    float *y = malloc(sizeof(float) * rows * (uint64_t)T);
    assert_non_null(y);
    for (uint64_t i = 0; i < rows * (uint64_t)T; i++) y[i] = -7.0f;
    if (r0 == 0 && r1 == rows) ds4_dot_matmul(&c->W, x, ldx, T, y, rows);
    else ds4_dot_matmul_rows(&c->W, r0, r1, x, ldx, T, y, rows);
    for (int t = 0; t < T; t++)
        for (uint64_t r = r0; r < r1; r++) {
            const float want = (float)ref_dot(c->deq + r * cols, x + (uint64_t)t * ldx, cols);
            const float got = y[(uint64_t)t * rows + r];
            if (fbits(got) != fbits(want) && !(isnan(got) && isnan(want))) {
                print_error("%s %s T=%d t=%d r=%llu: got %a, want %a\n", ds4_types_name(c->W.type),
                            ds4_dot_kernels(), T, t, (unsigned long long)r, got, want);
                fail();
            }
        }
    free(y);
}

/* Every value of a product of an FP8 or FP4 matrix equals the canonical dot
 * of its independently dequantized row, for every variant, token count,
 * thread count and row range.  The FP8 matrix has a partial 128-block both
 * ways (300 x 300); the FP4 one rows of 7 scale blocks (224), so a 256-wide
 * chunk ends inside a row. */
static void test_matmul_block_scaled(void **state) {
    (void)state;
    char names[4][16];
    const int nv = variants(names);
    const int saved = omp_get_max_threads();
    static const int Ts[] = {1, 2, 7, 17, 70};
    static const struct { uint32_t type; uint64_t cols, rows; } shapes[] = {
        {DS4_TYPE_FP8_B128, 300, 300}, {DS4_TYPE_FP8_B128, 128, 3}, {DS4_TYPE_FP4_B32, 224, 37},
        {DS4_TYPE_FP4_B32, 512, 9},
    };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        scase c;
        scase_init(&c, shapes[s].type, shapes[s].cols, shapes[s].rows);
        const uint64_t ldx = shapes[s].cols + 3;
        float *x = malloc(sizeof(float) * ldx * 70);
        assert_non_null(x);
        for (uint64_t i = 0; i < ldx * 70; i++) x[i] = rnd_wide();
        for (int v = 0; v < nv; v++) {
            use(names[v]);
            for (int threads = 1; threads <= 3; threads += 2) {
                omp_set_num_threads(threads);
                for (int k = 0; k < 5; k++) scase_check(&c, x, ldx, Ts[k], 0, c.W.rows);
            }
            scase_check(&c, x, ldx, 7, 1, c.W.rows - 1);
            scase_check(&c, x, ldx, 1, c.W.rows - 1, c.W.rows);
        }
        free(x);
        scase_free(&c);
    }
    use(names[0]);
    omp_set_num_threads(saved);
}

/* A NaN scale or an FP8 NaN code makes its rows' values NaN, a scale past
 * f32's range for the block's largest code an infinity, in every variant;
 * the other rows keep their values.  A block-scaled matrix without scales, or FP4 rows that
 * are not whole scale blocks, is invalid: NaN, as a bad type. */
static void test_matmul_block_scaled_specials(void **state) {
    (void)state;
    char names[4][16];
    const int nv = variants(names);
    scase c;
    scase_init(&c, DS4_TYPE_FP4_B32, 64, 6);
    c.scale[5 * 2 + 1] = 255;      /* row 5, second block: NaN */
    scase f;
    scase_init(&f, DS4_TYPE_FP8_B128, 128, 130);
    memset(f.w + 128 * 128, 0x7e, 2 * 128);   /* block row 1: all 448 */
    f.scale[1] = 250;                          /* 448 * 2^123: past f32 */
    f.w[2 * 128 + 21] = 0xff;                  /* row 2: the (negative) NaN code */
    float x[128];
    for (int i = 0; i < 128; i++) x[i] = 1.0f + (float)i / 128;
    for (int v = 0; v < nv; v++) {
        use(names[v]);
        float y[130];
        ds4_dot_matmul(&c.W, x, 64, 1, y, 6);
        for (int r = 0; r < 6; r++) {
            assert_int_equal(isnan(y[r]) != 0, r == 5);
            if (r != 5) assert_int_equal(fbits(y[r]), fbits((float)ref_dot(c.deq + r * 64, x, 64)));
        }
        ds4_dot_matmul(&f.W, x, 128, 1, y, 130);
        for (int r = 0; r < 130; r++) {
            assert_int_equal(isinf(y[r]) != 0, r >= 128);
            assert_int_equal(isnan(y[r]) != 0, r == 2);
        }
    }
    use(names[0]);
    float y[6];
    ds4_mat no_scale = c.W;
    no_scale.scale = NULL;
    ds4_dot_matmul(&no_scale, x, 64, 1, y, 6);
    for (int r = 0; r < 6; r++) assert_true(isnan(y[r]));
    ds4_mat partial = ds4_dot_scaled(DS4_TYPE_FP4_B32, 48, 6, c.w, c.scale, 0);
    ds4_dot_matmul(&partial, x, 48, 1, y, 6);
    for (int r = 0; r < 6; r++) assert_true(isnan(y[r]));
    scase_free(&c);
    scase_free(&f);
}

/* Expert e of a stacked FP8 tensor: its rows and its block rows of scales
 * (130 rows: two block rows an expert, the second partial). */
static void test_mat_expert_block_scaled(void **state) {
    (void)state;
    scase all;
    scase_init(&all, DS4_TYPE_FP8_B128, 256, 130 * 3);
    /* The stacked scales are each expert's [2][2], one after the other,
     * not the whole tensor's [4][2]: rebuild them that way. */
    uint8_t *sc = malloc(3 * 2 * 2);
    assert_non_null(sc);
    for (int i = 0; i < 12; i++) sc[i] = (uint8_t)(120 + i);
    const ds4_mat stacked = ds4_dot_scaled(DS4_TYPE_FP8_B128, 256, 130, all.w, sc, 0);
    float x[256], y[130];
    for (int i = 0; i < 256; i++) x[i] = rnd_unit();
    for (uint64_t e = 0; e < 3; e++) {
        const ds4_mat m = ds4_dot_expert(&stacked, e);
        assert_ptr_equal(m.data, all.w + e * 130 * 256);
        assert_ptr_equal(m.scale, sc + e * 4);
        ds4_dot_matmul(&m, x, 256, 1, y, 130);
        float deq[256];
        for (uint64_t r = 0; r < 130; r += 43) {
            uint64_t bad;
            assert_int_equal(ds4_blockfp_fp8_row(all.w + e * 130 * 256, sc + e * 4, 256, r, deq, &bad), 0);
            assert_int_equal(fbits(y[r]), fbits((float)ref_dot(deq, x, 256)));
        }
    }
    free(sc);
    scase_free(&all);
}

/* Outputs rounded to BF16 (the official fp8_gemm's): each value is the
 * canonical dot rounded to f32 and then to bfloat16, nearest even, for one
 * token and several, in every variant. */
static void test_matmul_bf16_out(void **state) {
    (void)state;
    char names[4][16];
    const int nv = variants(names);
    scase c;
    scase_init(&c, DS4_TYPE_FP8_B128, 256, 40);
    c.W.out = DS4_OUT_BF16;
    float x[256 * 7], y[40 * 7];
    for (int i = 0; i < 256 * 7; i++) x[i] = rnd_wide();
    for (int v = 0; v < nv; v++) {
        use(names[v]);
        for (int T = 1; T <= 7; T += 6) {
            ds4_dot_matmul(&c.W, x, 256, T, y, 40);
            for (int t = 0; t < T; t++)
                for (int r = 0; r < 40; r++) {
                    const float f = (float)ref_dot(c.deq + r * 256, x + t * 256, 256);
                    const float want = ds4_formats_bf16_to_f32(ds4_formats_f32_to_bf16(f));
                    if (fbits(y[t * 40 + r]) != fbits(want))
                        fail_msg("%s T=%d t=%d r=%d: got %a, want %a", names[v], T, t, r,
                                 y[t * 40 + r], want);
                }
        }
    }
    use(names[0]);
    scase_free(&c);
}

/* The jitter numerics: each output one unit in the last place from the
 * canonical f32 value, up or down, the same for a token whatever the
 * batch, about as often up as down, and before a BF16 output rounding. */
static void test_matmul_jitter(void **state) {
    (void)state;
    scase c;
    scase_init(&c, DS4_TYPE_FP8_B128, 256, 40);
    float x[256 * 7], y[40 * 7], y1[40], yb[40 * 7];
    for (int i = 0; i < 256 * 7; i++) x[i] = rnd_wide();
    c.W.out = DS4_OUT_JITTER;
    ds4_dot_matmul(&c.W, x, 256, 7, y, 40);
    int up = 0, down = 0;
    for (int t = 0; t < 7; t++) {
        ds4_dot_matmul(&c.W, x + t * 256, 256, 1, y1, 40);
        for (int r = 0; r < 40; r++) {
            const float want = (float)ref_dot(c.deq + r * 256, x + t * 256, 256);
            const float got = y[t * 40 + r];
            if (fbits(got) != fbits(y1[r]))
                fail_msg("t=%d r=%d: %a in a batch, %a alone", t, r, got, y1[r]);
            if (want == 0) continue;
            const uint32_t gw = fbits(got) & 0x7fffffffu, ww = fbits(want) & 0x7fffffffu;
            if ((fbits(got) ^ fbits(want)) >> 31 || (gw != ww + 1 && gw != ww - 1))
                fail_msg("t=%d r=%d: %a is not one ulp from %a", t, r, got, want);
            up += gw > ww;
            down += gw < ww;
        }
    }
    if (up < 70 || down < 70) fail_msg("%d moved away from zero, %d towards it, of 280", up, down);
    c.W.out = DS4_OUT_JITTER | DS4_OUT_BF16;
    ds4_dot_matmul(&c.W, x, 256, 7, yb, 40);
    for (int i = 0; i < 40 * 7; i++) {
        const float want = ds4_formats_bf16_to_f32(ds4_formats_f32_to_bf16(y[i]));
        if (fbits(yb[i]) != fbits(want))
            fail_msg("%d: BF16 of the jittered %a is %a, got %a", i, y[i], want, yb[i]);
    }
    /* Before the BF16 rounding: an output exactly halfway between two
     * bfloat16 values (1 + 2^-8) rounds to even (1) alone, and once moved
     * up by an ulp to the next one (1 + 2^-7): among 64 rows both happen. */
    float w[64 * 32] = {0}, one[32] = {1}, half[64];
    for (int r = 0; r < 64; r++) w[r * 32] = 1.0f + 0x1p-8f;
    const ds4_mat hw = {.type = DS4_TYPE_F32, .cols = 32, .rows = 64, .row_bytes = sizeof(float) * 32,
                        .data = (const uint8_t *)w, .out = DS4_OUT_JITTER | DS4_OUT_BF16};
    ds4_dot_matmul(&hw, one, 32, 1, half, 64);
    int lo = 0, hi = 0;
    for (int r = 0; r < 64; r++) {
        lo += half[r] == 1.0f;
        hi += half[r] == 1.0f + 0x1p-7f;
    }
    if (lo + hi != 64 || !lo || !hi) fail_msg("halfway outputs: %d to 1, %d to 1 + 2^-7", lo, hi);
    /* Values it leaves alone, and the smallest subnormal, which goes to 0
     * or to twice itself. */
    const float keep[] = {0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX};
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
        for (uint64_t r = 0; r < 8; r++)
            if (fbits(ds4_dot_jitter(keep[i], r)) != fbits(keep[i])) fail_msg("%a moved", keep[i]);
    if (!isnan(ds4_dot_jitter(NAN, 3))) fail_msg("NaN moved");
    for (uint64_t r = 0; r < 8; r++) {
        const float v = ds4_dot_jitter(0x1p-149f, r);
        if (v != 0.0f && v != 0x1p-148f)
            fail_msg("row %llu: the least subnormal became %a", (unsigned long long)r, v);
    }
    scase_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fma_equals_mul_add),
        cmocka_unit_test(test_variants_match_portable),
        cmocka_unit_test(test_dot_f32_every_variant),
        cmocka_unit_test(test_lane_order_cancellation),
        cmocka_unit_test(test_dot_f32_vs_reference),
        cmocka_unit_test(test_dot_row_every_type),
        cmocka_unit_test(test_matmul_batch_and_threads),
        cmocka_unit_test(test_matmul_invalid),
        cmocka_unit_test(test_mat_expert),
        cmocka_unit_test(test_matmul_block_scaled),
        cmocka_unit_test(test_matmul_block_scaled_specials),
        cmocka_unit_test(test_mat_expert_block_scaled),
        cmocka_unit_test(test_matmul_bf16_out),
        cmocka_unit_test(test_matmul_jitter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
