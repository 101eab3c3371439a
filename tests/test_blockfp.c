/* The official checkpoint's FP8 and FP4 weights.
 *
 * Expected values come from the formats' definitions computed here in
 * double from the bit fields (pow of 2 by repeated doubling), from values
 * spelled out by hand, and from the QAT rounding (an E4M3 value is its own
 * nearest E4M3 value), never from the code under test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "quant/qat.h"
#include "quant/blockfp.h"

static double two_to(int k) {
    double v = 1.0;
    for (; k > 0; k--) v *= 2.0;
    for (; k < 0; k++) v /= 2.0;
    return v;
}

/* E4M3FN from its definition: (-1)^s * 2^(e-7) * (1 + m/8), or
 * 2^-6 * m/8 when e = 0. */
static double e4m3_def(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e ? two_to(e - 7) * (1.0 + m / 8.0) : two_to(-6) * (m / 8.0);
    return s ? -v : v;
}

static void test_e4m3(void **state) {
    (void)state;
    assert_true(isnan(ds4_blockfp_e4m3(0x7f)));
    assert_true(isnan(ds4_blockfp_e4m3(0xff)));
    const struct { uint8_t b; double v; } known[] = {
        {0x00, 0.0}, {0x01, 0.001953125}, {0x07, 0.013671875}, {0x08, 0.015625},
        {0x38, 1.0}, {0x40, 2.0}, {0x7e, 448.0}, {0xb8, -1.0}, {0xfe, -448.0}, {0xc4, -3.0},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        assert_true(ds4_blockfp_e4m3(known[i].b) == known[i].v);
    assert_true(signbit(ds4_blockfp_e4m3(0x80)) && ds4_blockfp_e4m3(0x80) == 0.0f);
    double prev = -1.0;
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f) continue;
        float v = ds4_blockfp_e4m3((uint8_t)b);
        assert_true(v == e4m3_def((uint8_t)b));
        assert_true(ds4_qat_e4m3_round(v) == v);
        /* The positive codes increase with their value. */
        if (b < 0x80) {
            assert_true(b == 0 || v > prev);
            prev = v;
        }
    }
}

static void test_e2m1(void **state) {
    (void)state;
    const double want[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
    for (int c = 0; c < 16; c++) {
        assert_true(ds4_blockfp_e2m1((uint8_t)c) == want[c]);
        assert_true(ds4_blockfp_e2m1((uint8_t)(c | 0xf0)) == want[c]);   /* low 4 bits only */
        assert_true(ds4_qat_e2m1_round(want[c]) == want[c]);
    }
}

/* A 130 x 260 FP8 matrix: 2 x 3 blocks, the last ones partial, every scale
 * different; each element checked against the definition. */
static void test_fp8_rows(void **state) {
    (void)state;
    enum { OUT = 130, IN = 260, BR = 2, BC = 3 };
    static uint8_t w[OUT * IN];
    static float row[IN];
    const uint8_t scale[BR * BC] = {127, 120, 130, 100, 140, 127};
    for (int i = 0; i < OUT * IN; i++) {
        w[i] = (uint8_t)(i * 37 + i / 7);
        if ((w[i] & 0x7f) == 0x7f) w[i] ^= 1;
    }
    for (uint64_t r = 0; r < OUT; r++) {
        uint64_t bad = 99;
        assert_int_equal(ds4_blockfp_fp8_row(w, scale, IN, r, row, &bad), 0);
        for (uint64_t k = 0; k < IN; k++) {
            int s = scale[(r / 128) * BC + k / 128];
            if (row[k] != e4m3_def(w[r * IN + k]) * two_to(s - 127))
                fail_msg("row %d col %d: %.9g", (int)r, (int)k, row[k]);
        }
    }
}

/* FP4: the low nibble is the even element; one scale per 32 of a row. */
static void test_fp4_rows(void **state) {
    (void)state;
    enum { OUT = 3, IN = 64 };
    uint8_t w[OUT * IN / 2];
    uint8_t scale[OUT * IN / 32] = {127, 126, 130, 127, 1, 254};
    float row[IN];
    for (int i = 0; i < OUT * IN / 2; i++) w[i] = (uint8_t)(i * 29 + 3);
    const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    for (uint64_t r = 0; r < OUT; r++) {
        uint64_t bad;
        if (r == 2) {
            /* Under 2^127 a magnitude of 2 or more leaves f32's range (2^128
             * is past FLT_MAX): refused at the first such column of the
             * second block. */
            uint64_t first = 0;
            for (uint64_t k = 32; k < IN && !first; k++) {
                uint8_t byte = w[r * IN / 2 + k / 2];
                uint8_t code = (k % 2 == 0) ? (byte & 15) : (byte >> 4);
                if (mag[code & 7] >= 2) first = k;
            }
            assert_true(first >= 32);
            assert_int_equal(ds4_blockfp_fp4_row(w, scale, IN, r, row, &bad), -1);
            assert_int_equal(bad, first);
            continue;
        }
        assert_int_equal(ds4_blockfp_fp4_row(w, scale, IN, r, row, &bad), 0);
        for (uint64_t k = 0; k < IN; k++) {
            uint8_t byte = w[r * IN / 2 + k / 2];
            uint8_t code = (k % 2 == 0) ? (byte & 15) : (byte >> 4);
            double v = mag[code & 7] * two_to(scale[r * 2 + k / 32] - 127);
            assert_true(row[k] == ((code & 8) ? -v : v));
        }
    }
    /* The byte 0x21 holds 0.5 then 1.0. */
    uint8_t one[16] = {0x21}, s1[1] = {127};
    float r1[32];
    uint64_t bad;
    assert_int_equal(ds4_blockfp_fp4_row(one, s1, 32, 0, r1, &bad), 0);
    assert_true(r1[0] == 0.5f && r1[1] == 1.0f && r1[2] == 0.0f);
}

/* What cannot be an exact f32 is refused, with the column: NaN codes, the
 * NaN scale, products past f32's range; the largest scale that keeps 448 in
 * range is accepted. */
static void test_refusals(void **state) {
    (void)state;
    uint8_t w[4] = {0x38, 0x7e, 0xff, 0x00};
    uint8_t s[1] = {127};
    float out[4];
    uint64_t bad = 0;
    assert_int_equal(ds4_blockfp_fp8_row(w, s, 4, 0, out, &bad), -1);
    assert_int_equal(bad, 2);
    w[2] = 0x01;
    s[0] = 255;
    assert_int_equal(ds4_blockfp_fp8_row(w, s, 4, 0, out, &bad), -1);
    assert_int_equal(bad, 0);
    s[0] = 127 + 120;   /* 448 * 2^120 = 1.75 * 2^128: past FLT_MAX */
    assert_int_equal(ds4_blockfp_fp8_row(w, s, 4, 0, out, &bad), -1);
    assert_int_equal(bad, 1);
    s[0] = 127 + 119;
    assert_int_equal(ds4_blockfp_fp8_row(w, s, 4, 0, out, &bad), 0);
    assert_true(out[1] == 448.0f * 0x1p119f && out[1] <= FLT_MAX);
    /* Far below: 2^-9 * 2^-127 = 2^-136, a subnormal f32, exactly. */
    s[0] = 0;
    assert_int_equal(ds4_blockfp_fp8_row(w, s, 4, 0, out, &bad), 0);
    assert_true(out[2] == 0x1p-136f);
}

/* The scale shapes of the release's own tensors (config.json's sizes):
 * wq_b [32768, 1024] has [256, 8]; an expert's w2, [4096, 2048] unpacked,
 * has [4096, 64]; and partial blocks round up. */
static void test_scale_shape(void **state) {
    (void)state;
    uint64_t s[2];
    ds4_blockfp_scale_shape(0, 32768, 1024, s);
    assert_true(s[0] == 256 && s[1] == 8);
    ds4_blockfp_scale_shape(0, 130, 260, s);
    assert_true(s[0] == 2 && s[1] == 3);
    ds4_blockfp_scale_shape(1, 4096, 2048, s);
    assert_true(s[0] == 4096 && s[1] == 64);
}

/* The kernels' spans against the definitions, for every code and every
 * scale: the exact product where it is an f32, an infinity of the code's
 * sign past f32's range (both formats' largest products with scales 247+
 * and 253+), NaN for a NaN code or scale.  The scale 0 is the subnormal
 * 2^-127, so the products underflow into subnormals, still exactly. */
static void check_span_value(float got, double code, int scale, const char *what, int b) {
    if (scale == 255 || code != code) {
        if (!isnan(got)) fail_msg("%s code %d scale %d: got %a, want NaN", what, b, scale, got);
        return;
    }
    const double want = code * two_to(scale - 127);
    if (fabs(want) > FLT_MAX) {
        if (!isinf(got) || (got > 0) != (want > 0))
            fail_msg("%s code %d scale %d: got %a, want an infinity", what, b, scale, got);
    } else if ((double)got != want || !signbit(got) != !signbit(want)) {
        fail_msg("%s code %d scale %d: got %a, want %a", what, b, scale, got, want);
    }
}

static void test_spans(void **state) {
    (void)state;
    uint8_t w[256], s[2];
    float out[256];
    for (int b = 0; b < 256; b++) w[b] = (uint8_t)b;
    for (int scale = 0; scale < 256; scale++) {
        /* FP8: 256 codes over two 128-blocks, the second scaled by 2^0, from
         * element 0 and from element 130 (a span that starts mid-block). */
        s[0] = (uint8_t)scale, s[1] = 127;
        ds4_blockfp_fp8_span(w, s, 0, out, 256);
        for (int b = 0; b < 256; b++) {
            const double code = (b & 0x7f) == 0x7f ? NAN : e4m3_def((uint8_t)b);
            check_span_value(out[b], code, b < 128 ? scale : 127, "fp8", b);
        }
        ds4_blockfp_fp8_span(w, s, 130, out, 126);
        for (int b = 130; b < 256; b++) {
            const double code = (b & 0x7f) == 0x7f ? NAN : e4m3_def((uint8_t)b);
            check_span_value(out[b - 130], code, 127, "fp8 at 130", b);
        }
        /* A span that crosses the blocks: elements 100..227. */
        ds4_blockfp_fp8_span(w, s, 100, out, 128);
        for (int b = 100; b < 228; b++) {
            const double code = (b & 0x7f) == 0x7f ? NAN : e4m3_def((uint8_t)b);
            check_span_value(out[b - 100], code, b < 128 ? scale : 127, "fp8 at 100", b);
        }
        /* FP4: the 256 bytes are 512 codes, the low nibble first; the
         * scale per 32 alternates between `scale` and 2^0. */
        uint8_t s4[16];
        for (int k = 0; k < 16; k++) s4[k] = k & 1 ? 127 : (uint8_t)scale;
        float o4[512];
        ds4_blockfp_fp4_span(w, s4, 0, o4, 512);
        for (int k = 0; k < 512; k++) {
            const int code = k & 1 ? w[k / 2] >> 4 : w[k / 2] & 15;
            const double v = (code & 8 ? -1 : 1) * (double)(int[]){0, 1, 2, 3, 4, 6, 8, 12}[code & 7] / 2;
            check_span_value(o4[k], v, s4[k / 32], "fp4", k);
        }
        /* From an odd element, across two block boundaries: 31..102. */
        ds4_blockfp_fp4_span(w, s4, 31, o4, 72);
        for (int k = 31; k < 103; k++) {
            const int code = k & 1 ? w[k / 2] >> 4 : w[k / 2] & 15;
            const double v = (code & 8 ? -1 : 1) * (double)(int[]){0, 1, 2, 3, 4, 6, 8, 12}[code & 7] / 2;
            check_span_value(o4[k - 31], v, s4[k / 32], "fp4 at 31", k);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3),      cmocka_unit_test(test_e2m1),
        cmocka_unit_test(test_fp8_rows),  cmocka_unit_test(test_fp4_rows),
        cmocka_unit_test(test_refusals),  cmocka_unit_test(test_scale_shape),
        cmocka_unit_test(test_spans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
