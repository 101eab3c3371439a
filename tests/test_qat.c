/* Tests of quant/qat.c.
 *
 * References:
 *   - the official vectors of vectors/official/qat_unit (outputs of
 *     the official kernel.py act_quant / fp4_act_quant in qat mode, and of
 *     x H128 / sqrt(128)): bit for bit, and <= 1e-12 for the f64 Hadamard;
 *   - the E4M3FN and E2M1 grids built here from their bit layouts, with every
 *     grid value and every tie between neighbours;
 *   - the ue8m0 scale recomputed with frexpf;
 *   - the Hadamard transform as a plain O(n^2) long double matrix product. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/qat.h"
#include "testutil.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint64_t rng = 0x853c49e6748fea9bULL;

static uint64_t rnd(void) {
    return tu_splitmix64(&rng);
}

static double uni(double a, double b) {
    return tu_uniform(&rng, a, b);
}

/* ---- official vectors ---- */

/* Reads qat_unit/<name> of the shipped official oracle, which must be rows x
 * 128 x elem bytes. */
static void *load_vec(const char *name, size_t rows, size_t elem) {
    char rel[128];
    snprintf(rel, sizeof rel, "qat_unit/%s", name);
    char *path = tu_official(rel);
    if (!path)
        fail_msg("the official vectors are missing");
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = tu_read_file(path, &buf, &len);
    free(path);
    assert_int_equal(rc, 0);
    assert_int_equal(len, rows * 128 * elem);
    return buf;
}

/* Applies fn to each 128-value row of <in> and compares with <out> bit for
 * bit; returns the number of differing values. */
static int run_official(const char *in_name, const char *out_name, size_t rows,
                        int (*fn)(float *, size_t, ds4err *)) {
    float *in = load_vec(in_name, rows, sizeof(float));
    float *out = load_vec(out_name, rows, sizeof(float));
    int bad = 0;
    ds4err err;
    for (size_t r = 0; r < rows; r++) {
        float row[128];
        memcpy(row, in + r * 128, sizeof row);
        assert_int_equal(fn(row, 128, &err), 0);
        for (int i = 0; i < 128; i++)
            if (fbits(row[i]) != fbits(out[r * 128 + i])) {
                if (bad < 10)
                    print_error("%s row %zu col %d: in %a, got %a, official %a\n", in_name, r, i,
                                in[r * 128 + i], row[i], out[r * 128 + i]);
                bad++;
            }
    }
    print_message("%s: %d of %zu values differ from the official output\n", in_name, bad,
                  rows * 128);
    free(in);
    free(out);
    return bad;
}

static void test_official_fp8(void **state) {
    (void)state;
    assert_int_equal(run_official("fp8_in.f32", "fp8_out.f32", 63, ds4_qat_fp8_e4m3), 0);
}

static void test_official_fp4(void **state) {
    (void)state;
    assert_int_equal(run_official("fp4_in.f32", "fp4_out.f32", 64, ds4_qat_fp4_e2m1), 0);
}

static void test_official_hadamard(void **state) {
    (void)state;
    double *in = load_vec("hadamard128_in.f64", 16, sizeof(double));
    double *out = load_vec("hadamard128_out.f64", 16, sizeof(double));
    double worst = 0.0;
    ds4err err;
    for (int r = 0; r < 16; r++) {
        assert_int_equal(ds4_qat_hadamard_f64(in + r * 128, 128, &err), 0);
        for (int i = 0; i < 128; i++) {
            double d = fabs(in[r * 128 + i] - out[r * 128 + i]);
            if (!(d <= worst))
                worst = d;
        }
    }
    print_message("hadamard128: max |diff| %.3g against the official f64 output\n", worst);
    assert_true(worst <= 1e-12);
    free(in);
    free(out);
}

/* ---- grids built from the bit layouts ---- */

/* E4M3FN code 0..126 (127 is NaN): exponent field e, mantissa m. */
static double e4m3_value(int code) {
    int e = code >> 3, m = code & 7;
    return e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
}

/* E2M1 code 0..7. */
static double e2m1_value(int code) {
    int e = code >> 1, m = code & 1;
    return e == 0 ? 0.5 * m : ldexp(2 + m, e - 2);
}

static void check_grid(double (*round_fn)(double), double (*value)(int), int n_codes, double step) {
    assert_true(value(n_codes - 1) == (n_codes == 127 ? 448.0 : 6.0));
    for (int c = 0; c < n_codes; c++) {
        double v = value(c);
        assert_true(round_fn(v) == v);
        assert_true(round_fn(-v) == -v);
        if (c + 1 == n_codes)
            break;
        double w = value(c + 1), mid = (v + w) / 2;
        double even = c % 2 == 0 ? v : w;
        assert_true(round_fn(mid) == even);
        assert_true(round_fn(-mid) == -even);
        /* just off the tie, either way */
        assert_true(round_fn(mid - step * (w - v)) == v);
        assert_true(round_fn(mid + step * (w - v)) == w);
    }
}

static void test_e4m3_grid(void **state) {
    (void)state;
    check_grid(ds4_qat_e4m3_round, e4m3_value, 127, 0x1p-30);
    /* the subnormal end: anything at or below half the smallest step is 0 */
    assert_true(ds4_qat_e4m3_round(0x1p-10) == 0.0);
    assert_true(ds4_qat_e4m3_round(0x1p-10 + 0x1p-40) == 0x1p-9);
    assert_true(ds4_qat_e4m3_round(1e-30) == 0.0);
    assert_true(ds4_qat_e4m3_round(3 * 0x1p-11) == 0x1p-9); /* 0.75 steps -> 1 */
    /* the top binade is 256, 288, ..., 416, 448: 400 ties to 384 (code 124,
     * even), 432 to 448 (code 126) */
    assert_true(ds4_qat_e4m3_round(400.0) == 384.0);
    assert_true(ds4_qat_e4m3_round(420.0) == 416.0);
    assert_true(ds4_qat_e4m3_round(432.0) == 448.0);
    assert_true(ds4_qat_e4m3_round(447.0) == 448.0);
}

static void test_e2m1_grid(void **state) {
    (void)state;
    check_grid(ds4_qat_e2m1_round, e2m1_value, 8, 0x1p-30);
    /* the official table of ties (kernel.py _FP4_MIDS / _FP4_TIE_UP) */
    static const double tie[7][2] = {{0.25, 0}, {0.75, 1}, {1.25, 1}, {1.75, 2},
                                     {2.5, 2},  {3.5, 4},  {5, 4}};
    for (int i = 0; i < 7; i++) {
        assert_true(ds4_qat_e2m1_round(tie[i][0]) == tie[i][1]);
        assert_true(ds4_qat_e2m1_round(-tie[i][0]) == -tie[i][1]);
    }
}

/* ---- the ue8m0 scale ---- */

/* 2^ceil(log2(v)) for a positive normal float v, via frexpf. */
static float ceil_pow2(float v) {
    int e;
    float f = frexpf(v, &e); /* v = f * 2^e, f in [0.5, 1) */
    return ldexpf(1.0f, f == 0.5f ? e - 1 : e);
}

static void test_ue8m0_scale(void **state) {
    (void)state;
    const float i448 = (float)(1.0 / 448), i6 = (float)(1.0 / 6);
    for (int i = 0; i < 100000; i++) {
        float amax = (float)exp2(uni(-20.0, 20.0));
        float inv = i % 2 ? i448 : i6;
        assert_true(ds4_qat_ue8m0_scale(amax, inv) == ceil_pow2(amax * inv));
    }
    /* exact powers of two after the product stay, the next float steps up */
    assert_true(ds4_qat_ue8m0_scale(448.0f, i448) == 1.0f);
    assert_true(ds4_qat_ue8m0_scale(nextafterf(448.0f, 1e9f), i448) == 2.0f);
    assert_true(ds4_qat_ue8m0_scale(6.0f, i6) == 1.0f);
    assert_true(ds4_qat_ue8m0_scale(0x1.8p-124f, i6) == 0x1p-126f); /* the fp4 floor */
    /* the bit-pattern edge cases of the official formula */
    assert_true(fbits(ds4_qat_ue8m0_scale(0.0f, i6)) == fbits(0.0f));
    assert_true(ds4_qat_ue8m0_scale(0x1p-140f, 1.0f) == 0x1p-126f); /* subnormal -> 2^-126 */
    assert_true(isinf(ds4_qat_ue8m0_scale(INFINITY, 1.0f)));
}

/* ---- whole round trips on hand-made blocks ---- */

/* A 64-block holding 448 (so the scale is exactly 1) and every E4M3 value
 * and tie in turn: the round trip is the grid rounding itself. */
static void test_fp8_block_grid(void **state) {
    (void)state;
    ds4err err;
    for (int c = 0; c < 126; c++) {
        double v = e4m3_value(c), w = e4m3_value(c + 1);
        float x[64] = {448.0f, (float)v, (float)-v, (float)((v + w) / 2), (float)(-(v + w) / 2)};
        assert_int_equal(ds4_qat_fp8_e4m3(x, 64, &err), 0);
        double even = c % 2 == 0 ? v : w;
        assert_true(x[0] == 448.0f);
        assert_true(x[1] == (float)v && x[2] == (float)-v);
        assert_true(x[3] == (float)even && x[4] == (float)-even);
        for (int i = 5; i < 64; i++)
            assert_true(fbits(x[i]) == 0);
    }
}

static void test_fp4_block_ties(void **state) {
    (void)state;
    ds4err err;
    static const float in[16] = {6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5,
                                 -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5, -0.1f};
    static const float want[16] = {6, 0, 1, 1, 2, 2, 4, 4, 0, -1, -1, -2, -2, -4, -4, 0};
    for (int k = -20; k <= 20; k += 5) { /* the same block at other scales */
        float x[32] = {0};
        for (int i = 0; i < 16; i++)
            x[i] = ldexpf(in[i], k);
        assert_int_equal(ds4_qat_fp4_e2m1(x, 32, &err), 0);
        for (int i = 0; i < 32; i++) {
            float w = i < 16 ? ldexpf(want[i], k) : 0.0f;
            /* zeros come out +0, also from negative inputs */
            if (fbits(x[i]) != fbits(w)) {
                print_error("scale 2^%d, [%d]: got %a, want %a\n", k, i, x[i], w);
                fail();
            }
        }
    }
}

/* Scaling a block by 2^k scales its round trip by 2^k (the scale is a power
 * of two derived from amax), as long as amax stays above the fp8 floor of
 * 1e-4: every 32-block here holds a value of magnitude >= 1, and k >= -10. */
static void test_scale_invariance(void **state) {
    (void)state;
    ds4err err;
    for (int t = 0; t < 2000; t++) {
        float x[128], y[128];
        int k = (int)(rnd() % 31) - 10;
        for (int i = 0; i < 128; i++)
            x[i] = (float)(uni(-1.0, 1.0) * exp2(uni(-12.0, 0.0)));
        for (int i = 0; i < 128; i += 32)
            x[i + (int)(rnd() % 32)] = (float)(rnd() % 2 ? uni(1.0, 8.0) : -uni(1.0, 8.0));
        for (int i = 0; i < 128; i++)
            y[i] = ldexpf(x[i], k);
        int fp8 = t % 2;
        assert_int_equal(fp8 ? ds4_qat_fp8_e4m3(x, 128, &err) : ds4_qat_fp4_e2m1(x, 128, &err), 0);
        assert_int_equal(fp8 ? ds4_qat_fp8_e4m3(y, 128, &err) : ds4_qat_fp4_e2m1(y, 128, &err), 0);
        for (int i = 0; i < 128; i++)
            assert_true(fbits(ldexpf(x[i], k)) == fbits(y[i]));
    }
}

static void test_fp8_amax_floor(void **state) {
    (void)state;
    ds4err err;
    /* amax below 1e-4 is raised to it: s = 2^ceil(log2(1e-4/448)) = 2^-22,
     * so 2^-31 = 2^-9 * s survives and 2^-32 (a tie at 0.5 steps) goes to 0. */
    float x[64] = {0x1p-31f, 0x1p-32f, 3 * 0x1p-32f, -0x1p-31f};
    assert_int_equal(ds4_qat_fp8_e4m3(x, 64, &err), 0);
    assert_true(x[0] == 0x1p-31f);
    assert_true(fbits(x[1]) == 0);
    assert_true(x[2] == 0x1p-30f); /* 1.5 steps -> 2 (even) */
    assert_true(x[3] == -0x1p-31f);
}

static void test_bad_lengths(void **state) {
    (void)state;
    ds4err err;
    float x[128] = {0};
    double d[128] = {0};
    assert_int_equal(ds4_qat_fp8_e4m3(x, 96, &err), -1);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_int_equal(ds4_qat_fp4_e2m1(x, 48, &err), -1);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_int_equal(ds4_qat_hadamard_f32(x, 96, &err), -1);
    assert_int_equal(ds4_qat_hadamard_f32(x, 0, &err), -1);
    assert_int_equal(ds4_qat_hadamard_f32(x, 2 * DS4_HADAMARD_MAX, &err), -1);
    assert_int_equal(ds4_qat_hadamard_f64(d, 100, &err), -1);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_int_equal(ds4_qat_fp8_e4m3(x, 0, &err), 0); /* nothing to do */
}

/* ---- Hadamard against the matrix product ---- */

/* The long double references need a real >= 64-bit significand at run time:
 * valgrind, for one, computes x87 long double in double precision. */
static int have_long_double(void) {
    volatile long double one = 1.0L, tiny = 0x1p-63L;
    return LDBL_MANT_DIG >= 64 && one + tiny != one;
}

static int popcount(size_t v) {
    int n = 0;
    for (; v; v &= v - 1)
        n++;
    return n;
}

static void test_hadamard_matrix(void **state) {
    (void)state;
    ds4err err;
    const int exact_ref = have_long_double();
    for (size_t n = 1; n <= DS4_HADAMARD_MAX; n *= 2) {
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        double *xd = malloc(n * sizeof *xd);
        assert_non_null(x);
        assert_non_null(y);
        assert_non_null(xd);
        long double l1 = 0;
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)(uni(-1.0, 1.0) * exp2(uni(-8.0, 8.0)));
            xd[i] = y[i] = x[i];
            l1 += fabsl((long double)x[i]);
        }
        /* without a wide long double the reference sum itself errs by up to
         * n * 2^-53 * |x|_1 */
        long double slack = exact_ref ? 0.0L : l1 * (long double)n * 0x1p-53L;
        assert_int_equal(ds4_qat_hadamard_f32(y, n, &err), 0);
        assert_int_equal(ds4_qat_hadamard_f64(xd, n, &err), 0);
        for (size_t j = 0; j < n; j++) {
            long double acc = 0;
            for (size_t i = 0; i < n; i++)
                acc += popcount(i & j) % 2 ? -(long double)x[i] : (long double)x[i];
            long double ref = acc / sqrtl((long double)n);
            /* f32: one rounding of a double result; f64: double butterflies */
            float rf = fabsf((float)ref);
            long double ulp = (long double)nextafterf(rf, INFINITY) - rf;
            long double tol32 = ulp + l1 * 0x1p-45L + slack;
            assert_true(fabsl((long double)y[j] - ref) <= tol32);
            assert_true(fabsl((long double)xd[j] - ref) <= l1 * 0x1p-48L + slack);
        }
        /* H is its own inverse once scaled */
        assert_int_equal(ds4_qat_hadamard_f64(xd, n, &err), 0);
        for (size_t i = 0; i < n; i++)
            assert_true(fabs(xd[i] - x[i]) <= (double)l1 * 0x1p-48);
        free(x);
        free(y);
        free(xd);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_official_fp8),
        cmocka_unit_test(test_official_fp4),
        cmocka_unit_test(test_official_hadamard),
        cmocka_unit_test(test_e4m3_grid),
        cmocka_unit_test(test_e2m1_grid),
        cmocka_unit_test(test_ue8m0_scale),
        cmocka_unit_test(test_fp8_block_grid),
        cmocka_unit_test(test_fp4_block_ties),
        cmocka_unit_test(test_scale_invariance),
        cmocka_unit_test(test_fp8_amax_floor),
        cmocka_unit_test(test_bad_lengths),
        cmocka_unit_test(test_hadamard_matrix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
