/* Tests of ref/forward/rope.c.
 *
 * References:
 *   - the official float32 tables of vectors/official/rope/
 *     ([347][32][2] (cos, sin), from the official precompute_freqs_cis);
 *   - the C library's long double pow / cos / sin rounded to float;
 *   - the YaRN correction range of the real model, 15 and 25 (floor and
 *     ceil of 64 ln(65536 / (2 pi beta)) / (2 ln 160000) for beta 32 and
 *     1, the official inference/model.py's find_correction_range), and of
 *     the oracle's tiny model, 0 and 7;
 *   - exact long double arithmetic for the rotation. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/forward/rope.h"
#include "testutil.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Distance in floats between two finite floats (0 = same bits). */
static long ulp_dist(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    int64_t la = ia < 0 ? (int64_t)INT32_MIN - ia : ia, lb = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return (long)(la > lb ? la - lb : lb - la);
}

/* The long double references need a real >= 64-bit significand at run time:
 * valgrind, for one, computes x87 long double in double precision. */
static int have_long_double(void) {
    volatile long double one = 1.0L, tiny = 0x1p-63L;
    return LDBL_MANT_DIG >= 64 && one + tiny != one;
}

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static uint64_t rnd(void) {
    return tu_splitmix64(&rng);
}

static double uni(double a, double b) {
    return tu_uniform(&rng, a, b);
}

static const ds4_yarn FLASH_YARN = {16.0, 65536, 32.0, 1.0}; /* DS4 Flash */
static const ds4_yarn TINY_YARN = {16.0, 64, 32.0, 1.0};     /* the oracle's tiny model */

static void init_ok(ds4_rope *r, uint32_t dim, double base, const ds4_yarn *y) {
    ds4err err;
    assert_int_equal(ds4_rope_init(r, dim, base, y, &err), 0);
}

/* ---- the official tables ---- */

struct table_stats {
    long same, total, max_ulp, cr_diffs;
};

/* Compares ds4_rope_cos_sin for positions 0..346 with an official table. */
static void compare_official(const char *rel, const ds4_rope *r, struct table_stats *st) {
    char *path = tu_official(rel);
    if (!path)
        fail_msg("the official tables are missing");
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = tu_read_file(path, &buf, &len);
    free(path);
    assert_int_equal(rc, 0);
    assert_int_equal(len, 347 * 32 * 2 * sizeof(float));
    const float *t = (const float *)buf;
    memset(st, 0, sizeof *st);
    for (uint32_t p = 0; p < 347; p++) {
        float cs[64];
        ds4_rope_cos_sin(r, p, cs);
        for (int k = 0; k < 64; k++) {
            long d = ulp_dist(cs[k], t[p * 64 + k]);
            st->total++;
            st->same += d == 0;
            if (d > st->max_ulp)
                st->max_ulp = d;
            if (d == 0 || !have_long_double())
                continue;
            /* Where we differ from the official table, ours must be the
             * correctly rounded value of the same f32 angle: the official
             * entry then carries torch's f32 sin/cos error. */
            float angle = (float)p * r->freq[k / 2];
            long double v = k % 2 ? sinl(angle) : cosl(angle);
            st->cr_diffs += fbits(cs[k]) == fbits((float)v);
        }
    }
    free(buf);
    print_message("%s: %ld of %ld entries bit-identical (%.2f%%), max %ld ulp; "
                  "%ld of the %ld others are ours correctly rounded\n",
                  rel, st->same, st->total, 100.0 * st->same / st->total, st->max_ulp,
                  st->cr_diffs, st->total - st->same);
}

/* The official tables agree with ours to 1 ulp everywhere.  The README's
 * "99 % bit-identical" is 98.94 % for ratio 0 and 99.50 % for the compressed
 * table; every differing entry is one where torch's f32 sin/cos is not
 * correctly rounded and ours is.  So: each table >= 98.5 %, both together
 * >= 99 %, and every difference explained. */
static void test_official_tables(void **state) {
    (void)state;
    ds4_rope r0, rc;
    init_ok(&r0, 64, 10000.0, NULL);
    init_ok(&rc, 64, 160000.0, &TINY_YARN);
    struct table_stats a, b;
    compare_official("rope/rope_ratio0.f32", &r0, &a);
    compare_official("rope/rope_compressed.f32", &rc, &b);
    assert_true(a.max_ulp <= 1 && b.max_ulp <= 1);
    assert_true(a.same * 1000 >= a.total * 985 && b.same * 1000 >= b.total * 985);
    assert_true((a.same + b.same) * 100 >= (a.total + b.total) * 99);
    if (have_long_double()) {
        assert_int_equal(a.cr_diffs, a.total - a.same);
        assert_int_equal(b.cr_diffs, b.total - b.same);
    }
}

/* ---- frequencies ---- */

static void test_freqs_vs_long_double(void **state) {
    (void)state;
    if (!have_long_double()) {
        print_message("skipping: long double has fewer than 64 bits here (or under valgrind)\n");
        skip();
    }
    static const double bases[] = {10000.0, 160000.0, 500000.0, 1234.5};
    for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
        ds4_rope r;
        init_ok(&r, 64, bases[b], NULL);
        assert_int_equal(r.n_pairs, 32);
        assert_false(r.yarn);
        for (uint32_t j = 0; j < 32; j++) {
            float pw = (float)powl((long double)(float)bases[b], (long double)j / 32);
            float want = 1.0f / pw;
            if (fbits(r.freq[j]) != fbits(want)) {
                print_error("base %g pair %u: freq %a, want %a\n", bases[b], j, r.freq[j], want);
                fail();
            }
        }
    }
}

static void test_yarn_range_and_blend(void **state) {
    (void)state;
    ds4_rope plain, y;
    init_ok(&plain, 64, 160000.0, NULL);
    init_ok(&y, 64, 160000.0, &FLASH_YARN);
    assert_true(y.yarn);
    assert_int_equal(y.yarn_low, 15);
    assert_int_equal(y.yarn_high, 25);
    /* below low the ramp is 0 (frequency kept), from high on it is 1 (divided
     * by the factor); in between strictly in between */
    for (uint32_t j = 0; j < 32; j++) {
        float f = plain.freq[j];
        if (j <= 15)
            assert_true(fbits(y.freq[j]) == fbits(f));
        else if (j >= 25)
            assert_true(fbits(y.freq[j]) == fbits(f / 16.0f));
        else
            assert_true(y.freq[j] < f && y.freq[j] > f / 16.0f);
    }

    /* With a factor that is not a power of two the f32 operation order
     * matters (in ~2% of the blended entries); this is the official
     * expression, transcribed from model.py:
     * freqs / factor * (1 - smooth) + freqs * smooth, smooth = 1 - ramp. */
    static const double factors[] = {40.0, 3.0, 7.0, 10.0, 33.0, 5.5};
    for (size_t fi = 0; fi < sizeof factors / sizeof factors[0]; fi++)
        for (double base = 10000.0; base < 2e6; base *= 1.7) {
            ds4_yarn yf = FLASH_YARN;
            yf.factor = factors[fi];
            ds4_rope p, b;
            init_ok(&p, 64, base, NULL);
            init_ok(&b, 64, base, &yf);
            float lo = (float)b.yarn_low, span = (float)(b.yarn_high - b.yarn_low);
            float fac = (float)factors[fi];
            for (uint32_t j = 0; j < 32; j++) {
                float ramp = ((float)j - lo) / span;
                ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
                float smooth = 1.0f - ramp, f = p.freq[j];
                float want = f / fac * (1.0f - smooth) + f * smooth;
                assert_true(fbits(b.freq[j]) == fbits(want));
            }
        }

    ds4_rope tiny;
    init_ok(&tiny, 64, 160000.0, &TINY_YARN);
    assert_int_equal(tiny.yarn_low, 0);
    assert_int_equal(tiny.yarn_high, 7);

    /* low == high: the official ramp divides by 0.001 instead, a step at low.
     * orig 6, beta_slow 1, base 1e4: ceil(64 ln(6/2pi) / (2 ln 1e4)) = 0. */
    ds4_yarn step = {4.0, 6, 32.0, 1.0};
    ds4_rope s, s0;
    init_ok(&s, 64, 10000.0, &step);
    init_ok(&s0, 64, 10000.0, NULL);
    assert_int_equal(s.yarn_low, 0);
    assert_int_equal(s.yarn_high, 0);
    assert_true(fbits(s.freq[0]) == fbits(s0.freq[0]));
    for (uint32_t j = 1; j < 32; j++)
        assert_true(fbits(s.freq[j]) == fbits(s0.freq[j] / 4.0f));
}

/* ---- cos/sin for a position ---- */

static void test_cos_sin(void **state) {
    (void)state;
    ds4_rope r;
    init_ok(&r, 64, 10000.0, NULL);
    float cs[64];
    ds4_rope_cos_sin(&r, 0, cs);
    for (int j = 0; j < 32; j++) {
        assert_true(fbits(cs[2 * j]) == fbits(1.0f));
        assert_true(fbits(cs[2 * j + 1]) == fbits(0.0f));
    }
    if (!have_long_double())
        return;
    /* Up to a million positions (pair 0 has frequency 1, so its angle is
     * fl32(pos) itself, ~1e6 radians), and beyond 2^24 where fl32(pos)
     * rounds. */
    static const uint32_t pos[] = {1, 346, 65535, 1000000, 1048575, 16777217, 4000000000u};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++) {
        ds4_rope_cos_sin(&r, pos[i], cs);
        for (int j = 0; j < 32; j++) {
            float angle = (float)pos[i] * r.freq[j];
            assert_true(fbits(cs[2 * j]) == fbits((float)cosl(angle)));
            assert_true(fbits(cs[2 * j + 1]) == fbits((float)sinl(angle)));
        }
    }
}

/* ---- rotation ---- */

static float rnd_float(double lo, double hi) {
    return (float)((rnd() & 1 ? -1 : 1) * exp2(uni(lo, hi)));
}

/* A hand-made double-rounding trap: x0*c = 1 + 2^-11 + 2^-24 is a tie
 * between two floats, and x1*s = -/+2^-80 decides it.  A double sum loses
 * the 2^-80 and would round the tie to even both times. */
static void test_rotate_tie(void **state) {
    (void)state;
    const float a = 1.0f + 0x1p-12f;
    for (int sign = -1; sign <= 1; sign += 2) {
        float x[2] = {a, 0x1p-40f};
        float cs[2] = {a, -sign * 0x1p-40f};
        ds4_rope_rotate(x, cs, 1, false);
        float want = sign > 0 ? 1.0f + 0x1p-11f + 0x1p-23f : 1.0f + 0x1p-11f;
        assert_true(fbits(x[0]) == fbits(want));
        /* x1' = a*s + 2^-40*a = (1 - sign) * a * 2^-40, exact */
        assert_true(fbits(x[1]) == fbits(sign > 0 ? 0.0f : a * 0x1p-39f));
    }
}

/* Against exact long double arithmetic: the products of floats have 48
 * bits, and with operands within 2^11 of each other the difference of two
 * such products is exact in 64 bits. */
static void test_rotate_exact(void **state) {
    (void)state;
    if (!have_long_double())
        skip();
    for (int t = 0; t < 100000; t++) {
        float x[2] = {rnd_float(-3, 3), rnd_float(-3, 3)};
        float cs[2] = {rnd_float(-6, 0), rnd_float(-6, 0)};
        bool inv = t % 2;
        float y[2] = {x[0], x[1]};
        ds4_rope_rotate(y, cs, 1, inv);
        long double c = cs[0], s = inv ? -(long double)cs[1] : cs[1];
        long double r0 = (long double)x[0] * c - (long double)x[1] * s;
        long double r1 = (long double)x[0] * s + (long double)x[1] * c;
        assert_true(r0 + (long double)x[1] * s == (long double)x[0] * c); /* exact */
        assert_true(r1 - (long double)x[1] * c == (long double)x[0] * s);
        if (fbits(y[0]) != fbits((float)r0) || fbits(y[1]) != fbits((float)r1)) {
            print_error("rotate (%a, %a) by (%a, %a): got (%a, %a), want (%a, %a)\n", x[0], x[1],
                        cs[0], cs[1], y[0], y[1], (float)r0, (float)r1);
            fail();
        }
    }
}

/* Rotating by +theta then -theta gives (c^2 + s^2) x up to the two
 * roundings (<= 1/2 ulp each, the first one rotated): within 1.25 ulp of the
 * largest magnitude involved.  c^2 + s^2 itself differs from 1 by up to
 * ~2^-23.5 because c and s are floats, so the plain round trip is only
 * within ~2.2 ulp of x (the largest we see is 2.0). */
static void test_rotate_roundtrip(void **state) {
    (void)state;
    ds4_rope r;
    init_ok(&r, 64, 160000.0, &FLASH_YARN);
    double worst_plain = 0.0;
    for (int t = 0; t < 20000; t++) {
        uint32_t pos = (uint32_t)(rnd() % 1048576);
        float x[64], y[64], z[64], cs[64];
        for (int i = 0; i < 64; i++)
            x[i] = y[i] = rnd_float(-10, 10);
        ds4_rope_cos_sin(&r, pos, cs);
        ds4_rope_rotate(y, cs, 32, false);
        memcpy(z, y, sizeof z);
        ds4_rope_rotate(z, cs, 32, true);
        for (int j = 0; j < 32; j++) {
            float m = 0.0f;
            for (int k = 0; k < 2; k++)
                m = fmaxf(m, fmaxf(fabsf(x[2 * j + k]), fabsf(y[2 * j + k])));
            double u = (double)nextafterf(m, INFINITY) - m;
            double n2 = (double)cs[2 * j] * cs[2 * j] + (double)cs[2 * j + 1] * cs[2 * j + 1];
            for (int k = 0; k < 2; k++) {
                int i = 2 * j + k;
                double e = fabs(z[i] - n2 * x[i]) / u;
                double plain = fabs((double)z[i] - x[i]) / u;
                if (plain > worst_plain)
                    worst_plain = plain;
                if (!(e <= 1.25)) {
                    print_error("pos %u pair %d: %a -> %a -> %a (%.3f ulp)\n", pos, j, x[i], y[i],
                                z[i], e);
                    fail();
                }
            }
        }
    }
    print_message("rotate +theta then -theta: max %.3f ulp from the input\n", worst_plain);
    assert_true(worst_plain <= 2.25);
}

static void test_apply(void **state) {
    (void)state;
    ds4_rope r;
    init_ok(&r, 64, 10000.0, NULL);
    float x[64], y[64], cs[64];
    for (int i = 0; i < 64; i++)
        x[i] = y[i] = rnd_float(-5, 5);
    ds4_rope_apply(&r, x, 0, false); /* position 0: the identity, bit for bit */
    assert_memory_equal(x, y, sizeof x);
    ds4_rope_apply(&r, x, 777, true);
    ds4_rope_cos_sin(&r, 777, cs);
    ds4_rope_rotate(y, cs, 32, true);
    assert_memory_equal(x, y, sizeof x);
}

static void test_init_errors(void **state) {
    (void)state;
    ds4_rope r;
    ds4err err;
    assert_int_equal(ds4_rope_init(&r, 63, 10000.0, NULL, &err), -1);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_int_equal(ds4_rope_init(&r, 0, 10000.0, NULL, &err), -1);
    assert_int_equal(ds4_rope_init(&r, 2 * DS4_ROPE_MAX_PAIRS + 2, 10000.0, NULL, &err), -1);
    assert_int_equal(ds4_rope_init(&r, 64, 1.0, NULL, &err), -1);
    assert_int_equal(ds4_rope_init(&r, 64, NAN, NULL, &err), -1);
    assert_int_equal(ds4_rope_init(&r, 64, 1e39, NULL, &err), -1);
    ds4_yarn y = FLASH_YARN;
    y.factor = 0.0;
    assert_int_equal(ds4_rope_init(&r, 64, 160000.0, &y, &err), -1);
    y = FLASH_YARN;
    y.orig_ctx = 0;
    assert_int_equal(ds4_rope_init(&r, 64, 160000.0, &y, &err), -1);
    y = FLASH_YARN;
    y.beta_slow = NAN;
    assert_int_equal(ds4_rope_init(&r, 64, 160000.0, &y, &err), -1);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_int_equal(ds4_rope_init(&r, 2 * DS4_ROPE_MAX_PAIRS, 10000.0, NULL, &err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_official_tables),
        cmocka_unit_test(test_freqs_vs_long_double),
        cmocka_unit_test(test_yarn_range_and_blend),
        cmocka_unit_test(test_cos_sin),
        cmocka_unit_test(test_rotate_tie),
        cmocka_unit_test(test_rotate_exact),
        cmocka_unit_test(test_rotate_roundtrip),
        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_init_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
