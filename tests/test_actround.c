/* Activation rounding (quant/actround.h) against hand-built blocks whose
 * answers follow from the quantizers' definitions by hand: scales chosen so
 * that 1/d is exact, values on half steps (halves to even in ggml's x86
 * quantizer, ds4.c's lrintf and ggml's nearest_int), the one product where
 * ggml's x86 multiplier 127/amax and the reciprocal of the rounded d part
 * ways, the binary16 scale of ggml's Q8_0 against ds4.c's f32 one, Q8_K's
 * cap and its first-largest scale; the numerics profiles' names, and the
 * rounding each profile gives a model's products, against what llama.cpp's
 * CPU backend (ggml-cpu.c's vec_dot_type of each weight type) and ds4.c's
 * CPU matmuls do, written down here per tensor of the tiny model. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ref/model/numerics.h"
#include "ref/model/model.h"
#include "quant/actround.h"
#include "testutil.h"

/* A block of n zeros with the given values at the front. */
static void block(float *x, uint32_t n, const float *front, uint32_t k) {
    memset(x, 0, sizeof(float) * n);
    memcpy(x, front, sizeof(float) * k);
}

static void test_q8_0_halves(void **state) {
    (void)state;
    /* amax 127: d = 1, 1/d = 1, so q is the value rounded. */
    const float in[] = {127.0f, 2.5f, -2.5f, 3.5f, 0.4999f, 126.5f, -0.5f};
    const float ggml[] = {127, 2, -2, 4, 0, 126, -0.0f}; /* halves to even */
    const float ds4[] = {127, 2, -2, 4, 0, 126, -0.0f};
    float x[32], y[32];
    block(x, 32, in, 7);
    ds4_actround_row(DS4_ACT_Q8_0_GGML, x, y, 32);
    for (int i = 0; i < 7; i++) assert_true(y[i] == ggml[i]);
    ds4_actround_row(DS4_ACT_Q8_0_DS4, x, y, 32);
    for (int i = 0; i < 7; i++) assert_true(y[i] == ds4[i]);
    for (int i = 7; i < 32; i++) assert_true(y[i] == 0);
}

static void test_q8_0_scales(void **state) {
    (void)state;
    /* amax 1: d = fl(1/127) = 0x1.020408p-7.  ggml stores it as binary16,
     * 0x1.02p-7, so 127 steps give 0x1.fff8p-1; ds4.c keeps it in f32,
     * and 127 steps give 1 exactly. */
    float x[32], y[32];
    const float one[] = {1.0f};
    block(x, 32, one, 1);
    ds4_actround_row(DS4_ACT_Q8_0_GGML, x, y, 32);
    assert_true(y[0] == 0x1.fff8p-1f);
    ds4_actround_row(DS4_ACT_Q8_0_DS4, x, y, 32);
    assert_true(y[0] == 1.0f);
    /* Each block of a row on its own: a second block of amax 127. */
    float row[64], out[64];
    const float big[] = {127.0f, 2.5f};
    block(row, 32, one, 1);
    block(row + 32, 32, big, 2);
    ds4_actround_row(DS4_ACT_Q8_0_GGML, row, out, 64);
    assert_true(out[0] == 0x1.fff8p-1f && out[33] == 2.0f);
    /* An all-zero block stays zero; rounding in place gives the same. */
    memset(x, 0, sizeof(x));
    ds4_actround_row(DS4_ACT_Q8_0_DS4, x, x, 32);
    for (int i = 0; i < 32; i++) assert_true(x[i] == 0);
    ds4_actround_row(DS4_ACT_Q8_0_GGML, row, row, 64);
    assert_memory_equal(row, out, sizeof(out));
}

/* amax 11: x * (127/11) is 1.5 exactly for x = 0x1.0a1428p-3, so ggml's
 * x86 quantizer rounds it to 2 (halves to even); the reciprocal of the
 * rounded d = fl(11/127) gives 1.4999999 there, which a quantizer taking
 * it would round to 1.  A value of exactly one step, 11/127, is q = 1. */
static void test_q8_0_multiplier(void **state) {
    (void)state;
    float x[32], y[32];
    const float in[] = {11.0f, 0x1.0a1428p-3f, 11.0f / 127.0f};
    block(x, 32, in, 3);
    ds4_actround_row(DS4_ACT_Q8_0_GGML, x, y, 32);
    assert_true(y[2] > 0 && y[1] == 2 * y[2] && y[0] == 127 * y[2]);
}

static void test_q8_k(void **state) {
    (void)state;
    float x[256], y[256];
    /* The first value of largest magnitude, -127, sets iscale = 1: q is the
     * value rounded half to even, and +127 stays 127. */
    const float in[] = {1.0f, -127.0f, 2.5f, 3.5f, -2.5f, 127.0f, 126.5f};
    const float want[] = {1, -127, 2, 4, -2, 127, 126};
    block(x, 256, in, 7);
    ds4_actround_row(DS4_ACT_Q8_K, x, y, 256);
    for (int i = 0; i < 7; i++) assert_true(y[i] == want[i]);
    /* amax 1 (the first, -1): iscale = 127, d = fl(1/127) = 0x1.020408p-7;
     * 0.5 is 63.5 steps, to even 64: 0x1.020408p-1. */
    const float small[] = {-1.0f, 0.5f};
    block(x, 256, small, 2);
    ds4_actround_row(DS4_ACT_Q8_K, x, y, 256);
    assert_true(y[1] == 0x1.020408p-1f);
    assert_true(y[0] == -127.0f * 0x1.020408p-7f);
    /* A zero block. */
    memset(x, 0, sizeof(x));
    ds4_actround_row(DS4_ACT_Q8_K, x, y, 256);
    for (int i = 0; i < 256; i++) assert_true(y[i] == 0);
}

static void test_floats(void **state) {
    (void)state;
    /* binary16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 (to even: 1);
     * 1 + 3 * 2^-11 halfway to 1 + 2^-9.  bfloat16: 1 + 2^-8 halfway. */
    const float x[4] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 1.0f + 0x1p-8f, -65504.0f};
    float y[4];
    ds4_actround_row(DS4_ACT_F16, x, y, 4);
    assert_true(y[0] == 1.0f && y[1] == 1.0f + 0x1p-9f && y[3] == -65504.0f);
    ds4_actround_row(DS4_ACT_BF16, x, y, 4);
    assert_true(y[2] == 1.0f);
    assert_int_equal(ds4_actround_block(DS4_ACT_Q8_K), 256);
    assert_int_equal(ds4_actround_block(DS4_ACT_Q8_0_GGML), 32);
}

static void test_profile_names(void **state) {
    (void)state;
    uint32_t set;
    ds4err err = {0};
    char name[64];
    assert_int_equal(ds4_numerics_parse(NULL, &set, &err), 0);
    assert_int_equal(set, 0);
    assert_int_equal(ds4_numerics_parse("official", &set, &err), 0);
    assert_int_equal(set, 0);
    ds4_numerics_name(set, name, sizeof(name));
    assert_string_equal(name, "official");
    assert_int_equal(ds4_numerics_parse("f16-kv,ggml-act", &set, &err), 0);
    assert_int_equal(set, DS4_NUMERICS_GGML_ACT | DS4_NUMERICS_F16_KV);
    ds4_numerics_name(set, name, sizeof(name));
    assert_string_equal(name, "ggml-act,f16-kv");
    assert_int_equal(ds4_numerics_parse("ds4", &set, &err), 0);
    ds4_numerics_name(set, name, sizeof(name));
    assert_string_equal(name, "ds4-act,f16-kv");
    assert_int_equal(ds4_numerics_parse("jitter,ds4", &set, &err), 0);
    assert_int_equal(set, DS4_NUMERICS_DS4_ACT | DS4_NUMERICS_F16_KV | DS4_NUMERICS_JITTER);
    ds4_numerics_name(set, name, sizeof(name));
    assert_string_equal(name, "ds4-act,f16-kv,jitter");
    assert_int_not_equal(ds4_numerics_parse("ggml-act,ds4-act", &set, &err), 0);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_non_null(strstr(err.msg, "choose one"));
    assert_int_not_equal(ds4_numerics_parse("ggml", &set, &err), 0);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_non_null(strstr(err.msg, "\"ggml\""));
    assert_int_equal(ds4_numerics_parse("f16-kv,", &set, &err), 0);
}

/* The official linear()'s FP8 activations (act_quant, blocks of 128,
 * UE8M0): hand-built blocks whose scale and grid values follow from the
 * definition.  Block 0: amax 449, fl32(449 * fl32(1/448)) is just above 1,
 * so s = 2^ceil(log2) = 2 and each x/s rounds on E4M3's grid: 448/2 = 224
 * (on the grid, spacing 16 in [128, 256)); 17/2 = 8.5, a tie between 8
 * and 9 (spacing 1 in [8, 16)), to the even code, 8; 19/2 = 9.5, a tie,
 * to 10; 0.3/2 = 0.15, 9.6 steps of 2^-6, so 10 steps, 0.15625;
 * 1e-3/2 = 0.256 subnormal steps of 2^-9, so 0; -449/2 = -224.5 -> -224;
 * zeros come out +0.  Block 1: every value 1e-6, so amax is floored at
 * 1e-4 and s = 2^ceil(log2(1e-4/448)) = 2^-22; 1e-6 / 2^-22 = 4.19...,
 * which rounds to 4 (spacing 0.5 in [4, 8)), giving 2^-20. */
static void test_fp8_linear_input(void **state) {
    (void)state;
    float x[256], y[256];
    const float front[] = {448.0f, 17.0f, 19.0f, 0.3f, 1e-3f, -449.0f, 0.0f, -0.0f};
    block(x, 128, front, 8);
    for (int i = 128; i < 256; i++) x[i] = 1e-6f;
    assert_int_equal(ds4_actround_block(DS4_ACT_FP8_B128), 128);
    ds4_actround_row(DS4_ACT_FP8_B128, x, y, 256);
    const float want[] = {448.0f, 16.0f, 20.0f, 0.3125f, 0.0f, -448.0f, 0.0f, 0.0f};
    for (int i = 0; i < 8; i++)
        if (y[i] != want[i]) fail_msg("block 0 element %d: got %a, want %a", i, y[i], want[i]);
    assert_false(signbit(y[7]));   /* the official straight-through gives +0 */
    for (int i = 128; i < 256; i++)
        if (y[i] != 0x1p-20f) fail_msg("block 1 element %d: got %a, want 0x1p-20", i - 128, y[i]);
    /* In place gives the same. */
    ds4_actround_row(DS4_ACT_FP8_B128, x, x, 256);
    assert_memory_equal(x, y, sizeof(y));
}

/* The tiny model's types (ds4's q2 layout): token_embd F16, output and
 * q_a Q8_0, gate_exps IQ2_XXS, down_exps Q2_K. */
static void test_profile_inputs(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny", 1, false, &err);
    if (!t) fail_msg("%s", err.msg);
    ds4_model *m = &t->m;
    static const struct {
        uint32_t set;
        uint8_t embd, output, q_a, gate, down;
    } want[] = {
        {0, DS4_ACT_NONE, DS4_ACT_NONE, DS4_ACT_NONE, DS4_ACT_NONE, DS4_ACT_NONE},
        {DS4_NUMERICS_GGML_ACT, DS4_ACT_F16, DS4_ACT_Q8_0_GGML, DS4_ACT_Q8_0_GGML, DS4_ACT_Q8_K,
         DS4_ACT_Q8_K},
        {DS4_NUMERICS_DS4_ACT, DS4_ACT_NONE, DS4_ACT_Q8_0_DS4, DS4_ACT_Q8_0_DS4, DS4_ACT_Q8_K,
         DS4_ACT_Q8_K},
        {DS4_NUMERICS_F16_KV | DS4_NUMERICS_JITTER, DS4_ACT_NONE, DS4_ACT_NONE, DS4_ACT_NONE,
         DS4_ACT_NONE, DS4_ACT_NONE},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        ds4_numerics_apply(m, want[i].set, false);
        assert_int_equal(m->token_embd.act, want[i].embd);
        assert_int_equal(m->output.act, want[i].output);
        for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
            assert_int_equal(m->layers[l].q_a.act, want[i].q_a);
            assert_int_equal(m->layers[l].gate_exps.act, want[i].gate);
            assert_int_equal(m->layers[l].down_exps.act, want[i].down);
        }
    }
    tu_model_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_halves), cmocka_unit_test(test_q8_0_scales),
        cmocka_unit_test(test_q8_0_multiplier),
        cmocka_unit_test(test_q8_k),
        cmocka_unit_test(test_fp8_linear_input),
        cmocka_unit_test(test_floats),
        cmocka_unit_test(test_profile_names),
        cmocka_unit_test(test_profile_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
