/* Tests of ref/forward/kvstate.c's sizing: the bytes a state for --ctx needs, and
 * the clear refusal of a context that cannot fit in memory. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "ref/forward/kvstate.h"

/* A DS4-shaped config: head 512, indexer 128, window 128. */
static ds4_config shape(void) {
    ds4_config c;
    memset(&c, 0, sizeof(c));
    c.head_dim = 512;
    c.idx_dim = 128;
    c.swa = 128;
    return c;
}

/* Bytes by hand for layers of ratio 0, 4 and 128 (f32 everywhere):
 *   raw ring          (swa + chunk + rollback) rows of head_dim;
 *   ratio-4 attention ring of 2*4 + chunk + rollback positions, each a kv
 *                     and a score row of 2*head_dim; ctx/4 + 1 rows of
 *                     head_dim;
 *   ratio-4 indexer   the same with idx_dim;
 *   ratio-128         ring of 128 + chunk + rollback positions of head_dim
 *                     kv + score; ctx/128 + 1 rows. */
static void test_bytes_by_hand(void **state) {
    (void)state;
    ds4_config c = shape();
    const uint32_t ratios[3] = {0, 4, 128}, ctx = 1000, chunk = 16, rollback = 8;
    const uint64_t raw = (128 + 16 + 8) * 512 * 4;
    const uint64_t r4 = (8 + 16 + 8) * (2 * 512) * 2 * 4 + (1000 / 4 + 1) * 512 * 4;
    const uint64_t i4 = (8 + 16 + 8) * (2 * 128) * 2 * 4 + (1000 / 4 + 1) * 128 * 4;
    const uint64_t r128 = (128 + 16 + 8) * 512 * 2 * 4 + (1000 / 128 + 1) * 512 * 4;
    const uint64_t want = 3 * raw + r4 + i4 + r128;
    assert_int_equal(ds4_kv_bytes(&c, ratios, 3, ctx, chunk, rollback), want);
    ds4_kv kv;
    ds4err err = {0};
    assert_int_equal(ds4_kv_init(&kv, &c, ratios, 3, ctx, chunk, rollback, &err), 0);
    assert_int_equal(kv.bytes, want);
    ds4_kv_free(&kv);
}

/* The real model at the largest context the counters allow needs terabytes:
 * refused before any allocation, with a message that names the context and
 * the way out. */
static void test_context_too_large(void **state) {
    (void)state;
    ds4_config c = shape();
    uint32_t ratios[43];
    for (int l = 0; l < 43; l++) ratios[l] = l < 2 ? 0 : (l & 1) ? 128 : 4;
    const uint32_t ctx = 0x7fffffffu;
    assert_true(ds4_kv_bytes(&c, ratios, 43, ctx, 256, 32) > (1ull << 40));
    ds4_kv kv;
    ds4err err = {0};
    assert_int_equal(ds4_kv_init(&kv, &c, ratios, 43, ctx, 256, 32, &err), -1);
    assert_int_equal(err.code, DS4_E_NOMEM);
    assert_non_null(strstr(err.msg, "--ctx 2147483647 needs"));
    assert_null(kv.L);
}

/* Ring sizes that overflow their 32-bit counters are an argument error. */
static void test_ring_overflow(void **state) {
    (void)state;
    ds4_config c = shape();
    const uint32_t ratios[1] = {4};
    ds4_kv kv;
    ds4err err = {0};
    assert_int_equal(ds4_kv_init(&kv, &c, ratios, 1, 64, 0xfffffff0u, 0xfffffff0u, &err), -1);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_non_null(strstr(err.msg, "rollback"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_by_hand),
        cmocka_unit_test(test_context_too_large),
        cmocka_unit_test(test_ring_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
