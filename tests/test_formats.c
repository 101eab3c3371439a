/* Tests of quant/formats.c and types.c: half/bfloat conversions, the
 * block dequantizers and the table of types.
 *
 * Every expected value is computed independently of the code under test:
 * halves and bfloats from ldexp() of their fields, roundings by searching
 * for the nearest representable value in double, and block elements from
 * per-element index formulas of ggml's block layouts (ggml-quants.c's
 * dequantize_row_*, written out element by element in tests/refquant.c;
 * the implementation walks the blocks with loops instead).  The f32 arithmetic of each formula is written out in the
 * order ggml uses, and the tests compare bits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/actround.h"
#include "quant/formats.h"
#include "quant/types.h"
#include "refquant.h"
#include "testutil.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float ffrom(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rnd(void) {
    return tu_splitmix64(&rng_state);
}

static void put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A random finite, non-zero half with a varied mantissa (a scale). */
static uint16_t rnd_f16_scale(void) {
    for (;;) {
        const uint16_t h = (uint16_t)rnd();
        if ((h & 0x7c00) != 0x7c00 && (h & 0x7fff) != 0) return h;
    }
}

static void assert_same_float(float got, float want, const char *what, long idx) {
    if (fbits(got) != fbits(want)) {
        print_error("%s[%ld]: got %a (0x%08x), want %a (0x%08x)\n", what, idx,
                    (double)got, fbits(got), (double)want, fbits(want));
        fail();
    }
}

/* ------------------------------------------------------------------------ */
/* F16                                                                      */
/* ------------------------------------------------------------------------ */

static void test_f16_to_f32_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float got = ds4_formats_f16_to_f32((uint16_t)h);
        const int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31 && m) {
            /* NaN: sign kept, payload shifted to the top of the f32 mantissa. */
            assert_true(isnan(got));
            assert_int_equal(fbits(got), (h & 0x8000) << 16 | 0x7f800000u | (uint32_t)m << 13);
        } else {
            assert_same_float(got, (float)rq_f16((uint16_t)h), "f16", (long)h);
        }
    }
}

/* The row path has its own fast path for ordinary values: check it on all
 * 65536 halves, in order and interleaved so special values sit among
 * ordinary ones. */
static void test_f16_row_exhaustive(void **state) {
    (void)state;
    uint8_t *raw = malloc(2 * 65536);
    float *y = malloc(sizeof(float) * 65536);
    assert_non_null(raw);
    assert_non_null(y);
    for (int order = 0; order < 2; order++) {
        uint16_t hs[65536];
        for (uint32_t i = 0; i < 65536; i++)
            hs[i] = (uint16_t)(order == 0 ? i : (i * 40503u + 12345u) & 0xffff);
        for (uint32_t i = 0; i < 65536; i++) put16(raw + 2 * i, hs[i]);
        assert_int_equal(ds4_types_dequant_row(DS4_TYPE_F16, raw, y, 65536), 0);
        for (uint32_t i = 0; i < 65536; i++) {
            const uint16_t h = hs[i];
            const int e = (h >> 10) & 31, m = h & 1023;
            if (e == 31 && m)
                assert_int_equal(fbits(y[i]), (h & 0x8000u) << 16 | 0x7f800000u | (uint32_t)m << 13);
            else
                assert_same_float(y[i], (float)rq_f16(h), "f16 row", (long)i);
        }
    }
    free(raw);
    free(y);
}

/* Reference f32 -> f16: the nearest half by binary search over the table of
 * all finite non-negative halves, ties to the even code, overflow to Inf
 * (2^16 stands for the code after 0x7bff, as in IEEE rounding). */
static double f16_table[0x7c00];

static void build_f16_table(void) {
    for (uint32_t h = 0; h < 0x7c00; h++) f16_table[h] = rq_f16((uint16_t)h);
}

static uint16_t ref_f32_to_f16(float f) {
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f)) return sign | 0x7e00;
    const double a = fabs((double)f);
    if (a >= 65536.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7c00;   /* f16_table[lo] <= a < value(hi) */
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (f16_table[mid] <= a) lo = mid;
        else hi = mid;
    }
    const double vlo = f16_table[lo];
    const double vhi = hi == 0x7c00 ? 65536.0 : f16_table[hi];
    const double dlo = a - vlo, dhi = vhi - a;   /* exact in double */
    uint32_t r;
    if (dlo < dhi) r = lo;
    else if (dhi < dlo) r = hi;
    else r = (lo & 1) ? hi : lo;
    return (uint16_t)(sign | r);
}

static void check_f32_to_f16(float f) {
    const uint16_t got = ds4_formats_f32_to_f16(f), want = ref_f32_to_f16(f);
    if (got != want) {
        print_error("f32_to_f16(%a = 0x%08x): got 0x%04x want 0x%04x\n", (double)f,
                    fbits(f), got, want);
        fail();
    }
}

static void test_f32_to_f16_rounding(void **state) {
    (void)state;
    build_f16_table();

    /* Hand-picked boundaries with their known answers. */
    static const struct { uint32_t f; uint16_t h; } cases[] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000},
        {0x477fe000, 0x7bff},                        /* 65504, largest half */
        {0x477fefff, 0x7bff},                        /* just below 65520 */
        {0x477ff000, 0x7c00},                        /* 65520: tie, to even = Inf */
        {0xc77ff000, 0xfc00},
        {0x47800000, 0x7c00}, {0x7f7fffff, 0x7c00},   /* overflow */
        {0x7f800000, 0x7c00}, {0xff800000, 0xfc00},   /* +-Inf */
        {0x33800000, 0x0001},                        /* 2^-24, smallest subnormal */
        {0x33000000, 0x0000},                        /* 2^-25: tie, to even = 0 */
        {0xb3000000, 0x8000},
        {0x33000001, 0x0001},                        /* just above 2^-25 */
        {0x32ffffff, 0x0000},
        {0x33c00000, 0x0002},                        /* 1.5 * 2^-24: tie -> even 2 */
        {0x34200000, 0x0002},                        /* 2.5 * 2^-24: tie -> even 2 */
        {0x34400000, 0x0003},                        /* 3 * 2^-24 exactly */
        {0x387fc000, 0x03ff},                        /* largest subnormal */
        {0x387fe000, 0x0400},                        /* tie between 0x3ff and 0x400 -> even */
        {0x38800000, 0x0400},                        /* 2^-14, smallest normal */
        {0x00000001, 0x0000}, {0x80000001, 0x8000},   /* f32 subnormals */
        {0x3f801000, 0x3c00},                        /* 1 + 2^-11: tie -> 1.0 */
        {0x3f803000, 0x3c02},                        /* 1 + 3*2^-11: tie -> even 0x3c02 */
        {0x3f801001, 0x3c01},
        {0x7fc00000, 0x7e00}, {0xffc00000, 0xfe00},   /* quiet NaN */
        {0x7f800001, 0x7e00}, {0xff812345, 0xfe00},   /* signalling NaN, payloads */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const uint16_t got = ds4_formats_f32_to_f16(ffrom(cases[i].f));
        if (got != cases[i].h) {
            print_error("f32_to_f16(0x%08x): got 0x%04x want 0x%04x\n", cases[i].f, got, cases[i].h);
            fail();
        }
        check_f32_to_f16(ffrom(cases[i].f));   /* the reference agrees too */
    }

    /* Every half round-trips; every midpoint between neighbours (a tie) and
     * the floats right next to it round as the reference says. */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (uint32_t s = 0; s < 2; s++) {
            const uint16_t hh = (uint16_t)(h | s << 15);
            assert_int_equal(ds4_formats_f32_to_f16(ds4_formats_f16_to_f32(hh)), hh);
        }
        const double next = h + 1 < 0x7c00 ? f16_table[h + 1] : 65536.0;
        const float mid = (float)((f16_table[h] + next) / 2);   /* exact */
        check_f32_to_f16(mid);
        check_f32_to_f16(-mid);
        check_f32_to_f16(nextafterf(mid, 0.0f));
        check_f32_to_f16(nextafterf(mid, INFINITY));
    }

    /* A sweep over all f32 bit patterns with a prime stride, and random ones. */
    for (uint64_t u = 0; u < (1ull << 32); u += 65521) check_f32_to_f16(ffrom((uint32_t)u));
    for (int i = 0; i < 100000; i++) check_f32_to_f16(ffrom((uint32_t)rnd()));
}

/* ------------------------------------------------------------------------ */
/* BF16                                                                     */
/* ------------------------------------------------------------------------ */

static uint16_t ref_f32_to_bf16(float f) {
    const uint32_t u = fbits(f);
    if (isnan(f)) return 0;   /* callers check NaN separately */
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const uint32_t lo = (u >> 16) & 0x7fff;          /* truncated magnitude code */
    if (lo == 0x7f80) return sign | 0x7f80;          /* Inf */
    const double a = fabs((double)f);
    const double vlo = fabs(rq_bf16((uint16_t)lo));
    const double vhi = lo + 1 == 0x7f80 ? ldexp(1, 128) : fabs(rq_bf16((uint16_t)(lo + 1)));
    const double dlo = a - vlo, dhi = vhi - a;
    uint32_t r;
    if (dlo < dhi) r = lo;
    else if (dhi < dlo) r = lo + 1;
    else r = (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | r);
}

static void test_bf16(void **state) {
    (void)state;
    /* bf16 -> f32: exhaustive against the field formula. */
    for (uint32_t h = 0; h < 65536; h++) {
        const float got = ds4_formats_bf16_to_f32((uint16_t)h);
        if (((h >> 7) & 255) == 255 && (h & 127)) {
            assert_true(isnan(got));
            assert_int_equal(fbits(got), h << 16);
        } else {
            assert_same_float(got, (float)rq_bf16((uint16_t)h), "bf16", (long)h);
        }
    }

    static const struct { uint32_t f; uint16_t h; } cases[] = {
        {0x3f800000, 0x3f80}, {0x3f808000, 0x3f80},   /* tie -> even (down) */
        {0x3f818000, 0x3f82},                         /* tie -> even (up) */
        {0x3f808001, 0x3f81}, {0x3f807fff, 0x3f80},
        {0xbf818000, 0xbf82},
        {0x7f7fffff, 0x7f80}, {0x7f7f7fff, 0x7f7f},   /* overflow to Inf / not */
        {0x7f7f8000, 0x7f80},                         /* tie at the top, odd -> Inf */
        {0x7f800000, 0x7f80}, {0xff800000, 0xff80},
        {0x00008000, 0x0000}, {0x00018000, 0x0002},   /* subnormal ties */
        {0x80000001, 0x8000},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(ds4_formats_f32_to_bf16(ffrom(cases[i].f)), cases[i].h);
        assert_int_equal(ref_f32_to_bf16(ffrom(cases[i].f)), cases[i].h);
    }

    /* NaN stays NaN, with its sign, even when the payload is only in the
     * dropped low bits. */
    static const uint32_t nans[] = {0x7f800001, 0xff800001, 0x7fc00000, 0x7fffffff, 0xffff0000};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        const uint16_t h = ds4_formats_f32_to_bf16(ffrom(nans[i]));
        assert_int_equal(h & 0x7f80, 0x7f80);
        assert_true((h & 0x7f) != 0);
        assert_int_equal(h & 0x8000, (nans[i] >> 16) & 0x8000);
    }

    for (uint64_t u = 0; u < (1ull << 32); u += 65521) {
        const float f = ffrom((uint32_t)u);
        if (!isnan(f)) assert_int_equal(ds4_formats_f32_to_bf16(f), ref_f32_to_bf16(f));
    }
    for (int i = 0; i < 100000; i++) {
        const float f = ffrom((uint32_t)rnd());
        if (!isnan(f)) assert_int_equal(ds4_formats_f32_to_bf16(f), ref_f32_to_bf16(f));
    }

    /* A BF16 row. */
    uint8_t raw[2 * 64];
    float y[64];
    uint16_t hs[64];
    for (int i = 0; i < 64; i++) {
        hs[i] = (uint16_t)rnd();
        if ((hs[i] & 0x7f80) == 0x7f80) hs[i] &= 0xbfff;   /* keep it finite */
        put16(raw + 2 * i, hs[i]);
    }
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_BF16, raw, y, 64), 0);
    for (int i = 0; i < 64; i++) assert_same_float(y[i], (float)rq_bf16(hs[i]), "bf16 row", i);
}

/* ------------------------------------------------------------------------ */
/* F32 and I32 rows                                                         */
/* ------------------------------------------------------------------------ */

static void test_f32_row(void **state) {
    (void)state;
    static const uint32_t v[] = {0x3f800000, 0x80000000, 0x00000001, 0x7f800000,
                                 0xff800000, 0x7fc01234, 0xc0490fdb, 0x7f7fffff, 0x12345678};
    enum { N = sizeof(v) / sizeof(v[0]) };
    uint8_t raw[4 * N + 1];
    float y[N];
    /* Start at an odd address: rows inside a GGUF need not be aligned. */
    for (int i = 0; i < N; i++) put32(raw + 1 + 4 * i, v[i]);
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_F32, raw + 1, y, N), 0);
    for (int i = 0; i < N; i++) assert_int_equal(fbits(y[i]), v[i]);
}

static void test_i32_row(void **state) {
    (void)state;
    /* Hand-computed answers: exact below 2^24, round to nearest even above. */
    static const struct { int64_t v; float f; } cases[] = {
        {0, 0.0f}, {1, 1.0f}, {-1, -1.0f}, {255, 255.0f},
        {16777216, 16777216.0f}, {16777217, 16777216.0f},   /* tie -> even */
        {16777219, 16777220.0f},                            /* tie -> even (up) */
        {-16777217, -16777216.0f}, {16777218, 16777218.0f},
        {2147483647, 2147483648.0f}, {-2147483648LL, -2147483648.0f},
        {123456789, 123456792.0f},
    };
    enum { N = sizeof(cases) / sizeof(cases[0]) };
    uint8_t raw[4 * N];
    float y[N];
    for (int i = 0; i < N; i++) put32(raw + 4 * i, (uint32_t)(cases[i].v & 0xffffffff));
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_I32, raw, y, N), 0);
    for (int i = 0; i < N; i++) assert_same_float(y[i], cases[i].f, "i32", i);
}

/* ------------------------------------------------------------------------ */
/* Q8_0                                                                     */
/* ------------------------------------------------------------------------ */

static void test_q8_0(void **state) {
    (void)state;
    /* Scales: 1, -2, smallest subnormal, largest half, 1/3-ish, -0, 0.1-ish,
     * a random one.  Each block of the row gets every q in its 32-slice of
     * [-128, 127]; 8 blocks per scale cover all 256 values. */
    const uint16_t scales[] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x3555, 0x8000, 0x2e66,
                               rnd_f16_scale()};
    enum { NS = sizeof(scales) / sizeof(scales[0]), NB = 8 * NS };
    uint8_t raw[34 * NB];
    float y[32 * NB];
    for (int b = 0; b < NB; b++) {
        put16(raw + 34 * b, scales[b / 8]);
        for (int i = 0; i < 32; i++) raw[34 * b + 2 + i] = (uint8_t)(32 * (b % 8) + i);
    }
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q8_0, raw, y, 32 * NB), 0);
    for (int e = 0; e < 32 * NB; e++) {
        const int b = e / 32, i = e % 32;
        const int q = (32 * (b % 8) + i) - ((32 * (b % 8) + i) >= 128 ? 256 : 0);
        const float d = (float)rq_f16(scales[b / 8]);
        assert_same_float(y[e], (float)q * d, "q8_0", e);
    }
}

/* ------------------------------------------------------------------------ */
/* Q2_K (ggml's block_q2_K)                                                 */
/* ------------------------------------------------------------------------ */

static void test_q2_K_element_order(void **state) {
    (void)state;
    uint8_t blk[84];
    float y[256];
    for (int s = 0; s < 16; s++) blk[s] = (uint8_t)(((s * 7 + 3) & 15) | ((s * 5 + 1) & 15) << 4);
    put16(blk + 80, 0x3a3b);   /* d    ~ 0.779 */
    put16(blk + 82, 0x2d1f);   /* dmin ~ 0.0787 */
    /* Each element alone set to 1, 2, 3: only that element may change. */
    for (int e = 0; e < 256; e++) {
        for (int q = 1; q <= 3; q++) {
            memset(blk + 16, 0, 64);
            int byte, shift;
            rq_q2k_pos(e, &byte, &shift);
            blk[16 + byte] = (uint8_t)(q << shift);
            assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q2_K, blk, y, 256), 0);
            for (int i = 0; i < 256; i++) {
                const int sc = blk[i / 16];
                const float d = (float)rq_f16(0x3a3b), dmin = (float)rq_f16(0x2d1f);
                const float want = d * (float)(sc & 15) * (float)(i == e ? q : 0) -
                                   dmin * (float)(sc >> 4);
                assert_same_float(y[i], want, "q2_K one element", 256 * e + i);
            }
        }
    }
}

static void test_q2_K_random(void **state) {
    (void)state;
    enum { NB = 64 };
    uint8_t raw[84 * NB];
    float y[256 * NB];
    for (int i = 0; i < 84 * NB; i++) raw[i] = (uint8_t)rnd();
    for (int b = 0; b < NB; b++) {
        put16(raw + 84 * b + 80, rnd_f16_scale());
        put16(raw + 84 * b + 82, rnd_f16_scale());
    }
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q2_K, raw, y, 256 * NB), 0);
    for (int e = 0; e < 256 * NB; e++)
        assert_same_float(y[e], rq_q2k_elem(raw + 84 * (e / 256), e % 256), "q2_K", e);
}

/* ------------------------------------------------------------------------ */
/* Q4_K (ggml's block_q4_K)                                                 */
/* ------------------------------------------------------------------------ */

static void test_q4_K_scales(void **state) {
    (void)state;
    uint8_t blk[144];
    float y[256];
    put16(blk + 0, 0x3c00);        /* d = 1 */
    put16(blk + 2, 0x3c00);        /* dmin = 1 */
    memset(blk + 16, 0x11, 128);   /* q = 1 everywhere: y = sc_j - m_j */
    /* Each of the 96 scale bits alone: exactly one sub-block moves, by the
     * bit's weight, up for a scale bit and down for a min bit. */
    for (int i = 0; i < 12; i++) {
        for (int k = 0; k < 8; k++) {
            memset(blk + 4, 0, 12);
            blk[4 + i] = (uint8_t)(1 << k);
            int is_min, j, w;
            rq_q4k_bit_owner(i, k, &is_min, &j, &w);
            assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q4_K, blk, y, 256), 0);
            for (int e = 0; e < 256; e++) {
                const float want = e / 32 == j ? (float)(is_min ? -w : w) : 0.0f;
                assert_same_float(y[e], want, "q4_K scale bit", 256 * (8 * i + k) + e);
            }
        }
    }
    /* All 8 sub-blocks at once with distinct 6-bit scales and mins. */
    static const int want_sc[8] = {63, 1, 42, 17, 60, 33, 5, 48};
    static const int want_m[8] = {7, 62, 21, 36, 11, 50, 63, 2};
    memset(blk + 4, 0, 12);
    for (int j = 0; j < 8; j++)
        for (int bit = 0; bit < 6; bit++)
            for (int i = 0; i < 12; i++)
                for (int k = 0; k < 8; k++) {
                    int is_min, jj, w;
                    rq_q4k_bit_owner(i, k, &is_min, &jj, &w);
                    const int v = is_min ? want_m[j] : want_sc[j];
                    if (jj == j && w == 1 << bit && ((v >> bit) & 1)) blk[4 + i] |= (uint8_t)(1 << k);
                }
    for (int e = 0; e < 128; e++) blk[16 + e] = (uint8_t)(e * 37 + 11);
    put16(blk + 0, 0x2b45);
    put16(blk + 2, 0x2411);
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q4_K, blk, y, 256), 0);
    for (int e = 0; e < 256; e++) {
        const int j = e / 32;
        const uint8_t byte = blk[16 + 32 * (e / 64) + e % 32];
        const int q = j % 2 ? byte >> 4 : byte & 15;
        const float d1 = (float)rq_f16(0x2b45) * (float)want_sc[j];
        const float m1 = (float)rq_f16(0x2411) * (float)want_m[j];
        assert_same_float(y[e], d1 * (float)q - m1, "q4_K all sub-blocks", e);
    }
}

static void test_q4_K_random(void **state) {
    (void)state;
    enum { NB = 32 };
    uint8_t raw[144 * NB];
    float y[256 * NB];
    for (int i = 0; i < 144 * NB; i++) raw[i] = (uint8_t)rnd();
    for (int b = 0; b < NB; b++) {
        put16(raw + 144 * b, rnd_f16_scale());
        put16(raw + 144 * b + 2, rnd_f16_scale());
    }
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q4_K, raw, y, 256 * NB), 0);
    for (int e = 0; e < 256 * NB; e++)
        assert_same_float(y[e], rq_q4k_elem(raw + 144 * (e / 256), e % 256), "q4_K", e);
}

/* ------------------------------------------------------------------------ */
/* IQ2_XXS (ggml's block_iq2_xxs)                                          */
/* ------------------------------------------------------------------------ */

/* The tables against ggml's: ksigns from its definition; the grid by a
 * FNV-1a 64 hash of all 256 entries (little-endian bytes), computed from the
 * iq2xxs_grid numbers of ggml's ggml-common.h, plus a few entries copied by
 * hand and structural properties. */
static void test_iq2xxs_tables(void **state) {
    (void)state;
    for (int k = 0; k < 128; k++)
        assert_int_equal(ds4_formats_ksigns_iq2xs[k], k | rq_parity7(k) << 7);

    uint64_t h = 0xcbf29ce484222325ull;
    for (int g = 0; g < 256; g++)
        for (int j = 0; j < 8; j++) {
            h ^= (ds4_formats_iq2xxs_grid[g] >> (8 * j)) & 0xff;
            h *= 0x100000001b3ull;
        }
    assert_int_equal(h, 0xbb4ee025b5ac6e8eull);

    assert_int_equal(ds4_formats_iq2xxs_grid[0], 0x0808080808080808ull);
    assert_int_equal(ds4_formats_iq2xxs_grid[1], 0x080808080808082bull);
    assert_int_equal(ds4_formats_iq2xxs_grid[37], 0x0808190819080808ull);
    assert_int_equal(ds4_formats_iq2xxs_grid[100], 0x08192b0808081908ull);
    assert_int_equal(ds4_formats_iq2xxs_grid[128], 0x082b2b0808082b08ull);
    assert_int_equal(ds4_formats_iq2xxs_grid[200], 0x192b081908080808ull);
    assert_int_equal(ds4_formats_iq2xxs_grid[255], 0x2b2b2b1908081908ull);
    for (int g = 0; g < 256; g++) {
        if (g) assert_true(ds4_formats_iq2xxs_grid[g - 1] < ds4_formats_iq2xxs_grid[g]);
        for (int j = 0; j < 8; j++) {
            const unsigned v = (unsigned)(ds4_formats_iq2xxs_grid[g] >> (8 * j)) & 0xff;
            assert_true(v == 8 || v == 25 || v == 43);
        }
    }
}

/* Builds group ib of a block from grid indices, sign indices and a scale. */
static void iq2_set_group(uint8_t *blk, int ib, const int g[4], const int k[4], int s) {
    uint8_t *grp = blk + 2 + 8 * ib;
    uint32_t a1 = (uint32_t)s << 28;
    for (int l = 0; l < 4; l++) {
        grp[l] = (uint8_t)g[l];
        a1 |= (uint32_t)k[l] << (7 * l);
    }
    put32(grp + 4, a1);
}

static void check_iq2_row(const uint8_t *raw, int nb, const char *what) {
    float *y = malloc(sizeof(float) * 256 * (size_t)nb);
    assert_non_null(y);
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_IQ2_XXS, raw, y, 256 * (uint64_t)nb), 0);
    for (int e = 0; e < 256 * nb; e++)
        assert_same_float(y[e], rq_iq2_elem(raw + 66 * (e / 256), e % 256), what, e);
    free(y);
}

static void test_iq2_xxs_grid_signs_scales(void **state) {
    (void)state;
    enum { NB = 8 };
    uint8_t raw[66 * NB];

    /* Every grid entry once (64 groups x 4 slots), all positive, the group
     * scale running through all 16 values; checked also against plain
     * numbers: element j is db * grid byte j. */
    for (int b = 0; b < NB; b++) {
        put16(raw + 66 * b, 0x3a1b);
        for (int ib = 0; ib < 8; ib++) {
            const int gi = 8 * b + ib;
            const int g[4] = {4 * gi, 4 * gi + 1, 4 * gi + 2, 4 * gi + 3};
            const int k[4] = {0, 0, 0, 0};
            iq2_set_group(raw + 66 * b, ib, g, k, gi % 16);
        }
    }
    check_iq2_row(raw, NB, "iq2_xxs grid");
    float y[256 * NB];
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_IQ2_XXS, raw, y, 256 * NB), 0);
    for (int e = 0; e < 256 * NB; e++) {
        const int slot = e / 8, s = (e / 32) % 16;
        const float db = (float)rq_f16(0x3a1b) * (0.5f + (float)s) * 0.25f;
        const float v = (float)((ds4_formats_iq2xxs_grid[slot] >> (8 * (e % 8))) & 0xff);
        assert_same_float(y[e], db * v, "iq2_xxs grid plain", e);
    }

    /* Every sign pattern once (32 groups x 4 slots), with the sign of each
     * element also checked directly; random grid indices and scales. */
    for (int b = 0; b < 4; b++) {
        put16(raw + 66 * b, rnd_f16_scale());
        for (int ib = 0; ib < 8; ib++) {
            const int gi = 8 * b + ib;
            const int g[4] = {(int)(rnd() & 255), (int)(rnd() & 255), (int)(rnd() & 255),
                              (int)(rnd() & 255)};
            const int k[4] = {4 * gi, 4 * gi + 1, 4 * gi + 2, 4 * gi + 3};
            iq2_set_group(raw + 66 * b, ib, g, k, (int)(rnd() & 15));
        }
    }
    check_iq2_row(raw, 4, "iq2_xxs signs");
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_IQ2_XXS, raw, y, 256 * 4), 0);
    for (int e = 0; e < 256 * 4; e++) {
        const int k = e / 8, j = e % 8;
        const int neg = j < 7 ? (k >> j) & 1 : rq_parity7(k);
        const uint16_t d = (uint16_t)(raw[66 * (e / 256)] | raw[66 * (e / 256) + 1] << 8);
        assert_int_equal(signbit(y[e]) != 0, neg != (signbit(rq_f16(d)) != 0));
    }

    /* Random blocks, all fields at once. */
    for (int i = 0; i < 66 * NB; i++) raw[i] = (uint8_t)rnd();
    for (int b = 0; b < NB; b++) put16(raw + 66 * b, rnd_f16_scale());
    check_iq2_row(raw, NB, "iq2_xxs random");
}

/* ------------------------------------------------------------------------ */
/* Arguments                                                                */
/* ------------------------------------------------------------------------ */

static void test_dequant_bad_args(void **state) {
    (void)state;
    uint8_t raw[256] = {0};
    float y[256];
    assert_int_equal(ds4_types_dequant_row(2, raw, y, 32), -1);     /* q4_0: unsupported */
    assert_int_equal(ds4_types_dequant_row(9999, raw, y, 1), -1);
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q8_0, raw, y, 31), -1);
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q2_K, raw, y, 128), -1);
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_IQ2_XXS, raw, y, 255), -1);
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_F32, raw, y, UINT64_MAX / 2), -1);   /* overflow */
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_Q4_K, raw, y, 0), 0);
    assert_int_equal(ds4_types_dequant_row(DS4_TYPE_F16, raw, y, 0), 0);
}

/* ------------------------------------------------------------------------ */
/* The type table                                                           */
/* ------------------------------------------------------------------------ */

/* Every row of types.c against facts written down here from their sources:
 * ids, names, block sizes and bytes from ggml.c's type_traits; the ggml-act
 * input rounding from ggml-cpu.c's type_traits_cpu (vec_dot_type); the
 * ds4-act one from ds4.c's CPU matmuls (its own Q8_0 activation before a
 * Q8_0 weight, quantize_row_q8_K before the K and IQ types, none before a
 * float weight); the block-scaled types from the official kernel.py
 * (fp8_gemm: 128x128 scale blocks; fp4_gemm: 32 elements a scale).  A row
 * added without facts here fails, as does a row missing a field. */
static void test_type_rows(void **state) {
    (void)state;
    static const struct {
        uint32_t id;
        const char *name;
        uint32_t blck, bytes, scale_rows, scale_cols;
        uint8_t act_ggml, act_ds4;
        bool is_float, fused;
    } want[] = {
        {0, "f32", 1, 4, 0, 0, DS4_ACT_NONE, DS4_ACT_NONE, true, false},
        {1, "f16", 1, 2, 0, 0, DS4_ACT_F16, DS4_ACT_NONE, true, false},
        {8, "q8_0", 32, 34, 0, 0, DS4_ACT_Q8_0_GGML, DS4_ACT_Q8_0_DS4, true, true},
        {10, "q2_K", 256, 84, 0, 0, DS4_ACT_Q8_K, DS4_ACT_Q8_K, true, true},
        {12, "q4_K", 256, 144, 0, 0, DS4_ACT_Q8_K, DS4_ACT_Q8_K, true, true},
        {16, "iq2_xxs", 256, 66, 0, 0, DS4_ACT_Q8_K, DS4_ACT_Q8_K, true, true},
        {26, "i32", 1, 4, 0, 0, DS4_ACT_NONE, DS4_ACT_NONE, false, false},
        {30, "bf16", 1, 2, 0, 0, DS4_ACT_BF16, DS4_ACT_NONE, true, false},
        {1000, "fp8_e4m3_b128", 1, 1, 128, 128, DS4_ACT_NONE, DS4_ACT_NONE, true, false},
        {1001, "fp4_e2m1_b32", 2, 1, 1, 32, DS4_ACT_NONE, DS4_ACT_NONE, true, false},
    };
    const size_t n_want = sizeof(want) / sizeof(want[0]);
    size_t rows = 0;
    for (uint32_t id = 0; id < 4096; id++) {
        const ds4_type_info *t = ds4_types_info(id);
        if (!t) continue;
        rows++;
        size_t i = 0;
        while (i < n_want && want[i].id != id) i++;
        if (i == n_want) fail_msg("type %u (%s) has a row but no facts in this test", id, t->name);
        assert_int_equal(t->id, id);
        assert_string_equal(t->name, want[i].name);
        assert_string_equal(ds4_types_name(id), want[i].name);
        assert_int_equal(t->blck, want[i].blck);
        assert_int_equal(t->bytes, want[i].bytes);
        assert_int_equal(t->scale_rows, want[i].scale_rows);
        assert_int_equal(t->scale_cols, want[i].scale_cols);
        assert_int_equal(t->act_ggml, want[i].act_ggml);
        assert_int_equal(t->act_ds4, want[i].act_ds4);
        assert_int_equal(t->is_float, want[i].is_float);
        assert_int_equal(t->fused, want[i].fused);
        /* Exactly one dequantizer, the one its scales need. */
        assert_true((t->dequant != NULL) != (t->span != NULL));
        assert_int_equal(t->span != NULL, want[i].scale_rows != 0);
    }
    assert_int_equal(rows, n_want);
}

/* ------------------------------------------------------------------------ */
/* The oracle model                                                         */
/* ------------------------------------------------------------------------ */

/* Just enough GGUF to find the tensors of the oracle model: the GGUF reader
 * of ds4ref is tested on its own, this test does not depend on it. */
typedef struct {
    const uint8_t *p;
    size_t n, off;
    int bad;
} cursor;

static uint64_t cur_u(cursor *c, int bytes) {
    if (c->bad || c->n - c->off < (size_t)bytes) {
        c->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)c->p[c->off + i] << (8 * i);
    c->off += (size_t)bytes;
    return v;
}

static void cur_skip(cursor *c, uint64_t bytes) {
    if (c->bad || c->n - c->off < bytes) c->bad = 1;
    else c->off += (size_t)bytes;
}

static void skip_value(cursor *c, uint32_t type, int depth) {
    static const int size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
        cur_skip(c, cur_u(c, 8));
    } else if (type == 9 && depth == 0) {
        const uint32_t et = (uint32_t)cur_u(c, 4);
        const uint64_t cnt = cur_u(c, 8);
        for (uint64_t i = 0; i < cnt && !c->bad; i++) skip_value(c, et, 1);
    } else if (type <= 12 && size[type]) {
        cur_skip(c, (uint64_t)size[type]);
    } else {
        c->bad = 1;
    }
}

/* Dequantizes every Q8_0 / F16 / IQ2_XXS / Q2_K tensor of the oracle model
 * and checks the values against how the weights were made (oracle README
 * §3.3: uniform u in [-1, 1) times sqrt(3/ne0) for matrices, times 8 for
 * ffn_gate_inp, 0.5 for the APEs, 1 for token_embd), so the root mean square
 * of a tensor is its amplitude / sqrt(3).  A layout or scale slip (a factor
 * 2 in a scale, elements from the wrong place, garbage) moves that far
 * outside the band; quantization noise does not. */
static void test_oracle_model(void **state) {
    (void)state;
    const char *path = "../shared/oracle/tiny-ds4types/model.gguf";
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_message("skipping: %s not found (run from the repository root)\n", path);
        skip();
    }
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    const long size = ftell(f);
    assert_true(size > 0);
    rewind(f);
    uint8_t *buf = malloc((size_t)size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);

    cursor c = {buf, (size_t)size, 0, 0};
    assert_int_equal(cur_u(&c, 4), 0x46554747);   /* "GGUF" */
    assert_int_equal(cur_u(&c, 4), 3);
    const uint64_t n_tensors = cur_u(&c, 8), n_kv = cur_u(&c, 8);
    for (uint64_t i = 0; i < n_kv && !c.bad; i++) {
        cur_skip(&c, cur_u(&c, 8));   /* key */
        skip_value(&c, (uint32_t)cur_u(&c, 4), 0);
    }
    assert_false(c.bad);

    struct tinfo { char name[96]; uint64_t ne[4]; uint32_t nd, type; uint64_t off; };
    struct tinfo *ti = calloc(n_tensors, sizeof(*ti));
    assert_non_null(ti);
    for (uint64_t i = 0; i < n_tensors && !c.bad; i++) {
        const uint64_t len = cur_u(&c, 8);
        assert_true(len < sizeof(ti[i].name) && c.n - c.off >= len);
        memcpy(ti[i].name, c.p + c.off, (size_t)len);
        cur_skip(&c, len);
        ti[i].nd = (uint32_t)cur_u(&c, 4);
        assert_true(ti[i].nd >= 1 && ti[i].nd <= 4);
        for (uint32_t d = 0; d < ti[i].nd; d++) ti[i].ne[d] = cur_u(&c, 8);
        ti[i].type = (uint32_t)cur_u(&c, 4);
        ti[i].off = cur_u(&c, 8);
    }
    assert_false(c.bad);
    const size_t data = (c.off + 31) / 32 * 32;   /* general.alignment = 32 */

    int checked[32] = {0};
    for (uint64_t i = 0; i < n_tensors; i++) {
        const uint32_t type = ti[i].type;
        if (type != DS4_TYPE_Q8_0 && type != DS4_TYPE_F16 && type != DS4_TYPE_IQ2_XXS &&
            type != DS4_TYPE_Q2_K)
            continue;
        uint64_t nel = 1;
        for (uint32_t d = 0; d < ti[i].nd; d++) nel *= ti[i].ne[d];
        const uint64_t bytes = ds4_types_row_bytes(type, nel);
        assert_true(bytes > 0 && ti[i].off <= (uint64_t)size - data &&
                    bytes <= (uint64_t)size - data - ti[i].off);
        float *w = malloc(sizeof(float) * nel);
        assert_non_null(w);
        assert_int_equal(ds4_types_dequant_row(type, buf + data + ti[i].off, w, nel), 0);

        double amp = sqrt(3.0 / (double)ti[i].ne[0]);
        if (strstr(ti[i].name, "ffn_gate_inp")) amp *= 8;
        if (strstr(ti[i].name, "_ape")) amp = 0.5;
        if (!strcmp(ti[i].name, "token_embd.weight")) amp = 1.0;
        double ss = 0, sum = 0, maxabs = 0;
        for (uint64_t e = 0; e < nel; e++) {
            assert_true(isfinite(w[e]));
            ss += (double)w[e] * w[e];
            sum += w[e];
            if (fabs(w[e]) > maxabs) maxabs = fabs(w[e]);
        }
        const double rms = sqrt(ss / (double)nel) / (amp / sqrt(3.0));
        const double mean = sum / (double)nel / amp;
        /* 2-bit formats reproduce the amplitude less faithfully. */
        const int lowbit = type == DS4_TYPE_IQ2_XXS || type == DS4_TYPE_Q2_K;
        if (rms < (lowbit ? 0.9 : 0.97) || rms > (lowbit ? 1.1 : 1.03) ||
            fabs(mean) > 0.05 || maxabs > amp * (lowbit ? 1.45 : 1.01)) {
            print_error("%s (%s): rms/expected %.4f, mean/amp %.4f, max/amp %.4f\n",
                        ti[i].name, ds4_types_name(type), rms, mean, maxabs / amp);
            fail();
        }
        checked[type]++;
        free(w);
    }
    assert_true(checked[DS4_TYPE_Q8_0] > 0 && checked[DS4_TYPE_F16] > 0 &&
                checked[DS4_TYPE_IQ2_XXS] > 0 && checked[DS4_TYPE_Q2_K] > 0);
    free(ti);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_to_f32_exhaustive),
        cmocka_unit_test(test_f16_row_exhaustive),
        cmocka_unit_test(test_f32_to_f16_rounding),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_f32_row),
        cmocka_unit_test(test_i32_row),
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q2_K_element_order),
        cmocka_unit_test(test_q2_K_random),
        cmocka_unit_test(test_q4_K_scales),
        cmocka_unit_test(test_q4_K_random),
        cmocka_unit_test(test_iq2xxs_tables),
        cmocka_unit_test(test_iq2_xxs_grid_signs_scales),
        cmocka_unit_test(test_dequant_bad_args),
        cmocka_unit_test(test_type_rows),
        cmocka_unit_test(test_oracle_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
