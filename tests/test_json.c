/* Tests for ref/text/json.c: the strict JSON parser and the string writer.
 * Expected values are written out by hand (decoded bytes of escapes, offsets
 * of errors counted in the literal inputs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/text/json.h"

static ds4_json_doc *parse_ok(const char *s, size_t n) {
    ds4err err = {0};
    ds4_json_doc *doc = NULL;
    int rc = ds4_json_parse(s, n, "t", &doc, &err);
    if (rc != 0) fail_msg("unexpected parse error: %s", err.msg);
    assert_non_null(doc);
    return doc;
}

/* Parse must fail with a message containing `needle`. */
static void parse_bad(const char *s, size_t n, const char *needle) {
    ds4err err = {0};
    ds4_json_doc *doc = (ds4_json_doc *)1;
    assert_int_equal(ds4_json_parse(s, n, "in.json", &doc, &err), -1);
    assert_null(doc);
    assert_int_equal(err.code, DS4_E_FORMAT);
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    assert_non_null(strstr(err.msg, "in.json: byte "));
}

static void test_scalars(void **state) {
    (void)state;
    ds4_json_doc *d = parse_ok(" true ", 6);
    assert_int_equal(ds4_json_root(d)->type, DS4_JSON_TRUE);
    assert_int_equal(ds4_json_root(d)->offset, 1);
    ds4_json_free(d);
    d = parse_ok("null", 4);
    assert_int_equal(ds4_json_root(d)->type, DS4_JSON_NULL);
    ds4_json_free(d);
    d = parse_ok("false", 5);
    assert_int_equal(ds4_json_root(d)->type, DS4_JSON_FALSE);
    ds4_json_free(d);

    static const struct { const char *lit; double v; } nums[] = {
        {"0", 0.0}, {"-0", -0.0}, {"12", 12.0}, {"-3.25", -3.25}, {"1e3", 1000.0},
        {"2E-2", 0.02}, {"-0.5e+1", -5.0}, {"123456789012345678901234567890", 1.2345678901234568e29},
    };
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        d = parse_ok(nums[i].lit, strlen(nums[i].lit));
        const ds4_json *r = ds4_json_root(d);
        assert_int_equal(r->type, DS4_JSON_NUMBER);
        assert_string_equal(r->str, nums[i].lit);   /* the literal, as written */
        assert_int_equal(r->len, strlen(nums[i].lit));
        assert_true(r->num == nums[i].v);
        ds4_json_free(d);
    }
}

static void test_strings(void **state) {
    (void)state;
    /* Every escape, a surrogate pair (U+1F600 = F0 9F 98 80), a BMP escape
     * (U+00E9 = C3 A9), raw UTF-8 (U+4E2D = E4 B8 AD) and an escaped NUL. */
    const char in[] = "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\xE4\xB8\xAD\\u0000z\"";
    const char want[] = "a\"\\/\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80\xE4\xB8\xAD\0z";
    ds4_json_doc *d = parse_ok(in, sizeof(in) - 1);
    const ds4_json *r = ds4_json_root(d);
    assert_int_equal(r->type, DS4_JSON_STRING);
    assert_int_equal(r->len, sizeof(want) - 1);
    assert_memory_equal(r->str, want, sizeof(want) - 1);
    assert_int_equal(r->str[r->len], '\0');
    ds4_json_free(d);

    d = parse_ok("\"\"", 2);
    assert_int_equal(ds4_json_root(d)->len, 0);
    ds4_json_free(d);
}

static void test_containers(void **state) {
    (void)state;
    const char in[] = "{\"a\": [1, {\"b\": null}, []], \"c\": {}, \"a\": \"last\"}";
    ds4_json_doc *d = parse_ok(in, sizeof(in) - 1);
    const ds4_json *r = ds4_json_root(d);
    assert_int_equal(r->type, DS4_JSON_OBJECT);
    assert_int_equal(r->n, 3);   /* duplicates are kept in order */
    assert_string_equal(r->keys[0].str, "a");
    assert_string_equal(r->keys[1].str, "c");
    assert_string_equal(r->keys[2].str, "a");
    const ds4_json *arr = &r->elems[0];
    assert_int_equal(arr->type, DS4_JSON_ARRAY);
    assert_int_equal(arr->n, 3);
    assert_int_equal(arr->offset, 6);
    assert_true(arr->elems[0].num == 1.0);
    assert_int_equal(ds4_json_get(&arr->elems[1], "b")->type, DS4_JSON_NULL);
    assert_int_equal(arr->elems[2].n, 0);
    assert_int_equal(r->elems[1].type, DS4_JSON_OBJECT);
    assert_int_equal(r->elems[1].n, 0);
    /* ds4_json_get: the last member of a name, as Python's json.loads. */
    assert_true(ds4_json_is_str(ds4_json_get(r, "a"), "last"));
    assert_null(ds4_json_get(r, "zz"));
    assert_null(ds4_json_get(arr, "a"));
    assert_false(ds4_json_is_str(ds4_json_get(r, "c"), ""));
    ds4_json_free(d);
}

static void test_errors(void **state) {
    (void)state;
    parse_bad("", 0, "byte 0: expected a value");
    parse_bad("[1,]", 4, "byte 3: expected a value");
    parse_bad("{\"a\":1,}", 8, "byte 7: expected a string key");
    parse_bad("[1 2]", 5, "byte 3: expected ',' or ']'");
    parse_bad("{\"a\" 1}", 7, "byte 5: expected ':'");
    parse_bad("01", 2, "byte 1: leading zero");
    parse_bad("1.", 2, "byte 2: expected a digit after '.'");
    parse_bad("1e+", 3, "byte 3: expected a digit in exponent");
    parse_bad("-", 1, "byte 1: expected a digit");
    parse_bad("NaN", 3, "byte 0: expected a value");
    parse_bad("tru", 3, "byte 0: expected a value");
    parse_bad("[1] x", 5, "byte 4: unexpected data");
    parse_bad("// c\n1", 6, "byte 0: expected a value");
    parse_bad("\"abc", 4, "byte 0: unterminated string");
    parse_bad("\"a\nb\"", 5, "byte 2: raw control character");
    parse_bad("\"\\x\"", 4, "byte 2: invalid escape");
    parse_bad("\"\\u12G4\"", 8, "byte 5: expected 4 hex digits");
    parse_bad("\"\\uD800\"", 8, "byte 1: high surrogate not followed by a \\u low");
    parse_bad("\"\\uD800\\u0041\"", 14, "byte 7: high surrogate not followed by a low");
    parse_bad("\"\\uDC00\"", 8, "byte 1: lone low surrogate");
    parse_bad("\"a\xFF\"", 4, "byte 2: invalid UTF-8");
    parse_bad("\"\xED\xA0\x80\"", 5, "byte 1: invalid UTF-8");   /* UTF-8 surrogate */
    parse_bad("\"\xC0\xAF\"", 4, "byte 1: invalid UTF-8");       /* overlong */
    parse_bad("\xEF\xBB\xBF{}", 5, "byte 0: expected a value");  /* BOM */
    parse_bad("{\"a\":[}", 7, "byte 6: expected a value");
    parse_bad("[", 1, "byte 1: expected a value, found end of input");
}

static void test_depth_limit(void **state) {
    (void)state;
    char buf[2 * (DS4_JSON_MAX_DEPTH + 1)];
    /* DS4_JSON_MAX_DEPTH nested arrays parse ... */
    size_t n = DS4_JSON_MAX_DEPTH;
    for (size_t i = 0; i < n; i++) buf[i] = '[';
    for (size_t i = 0; i < n; i++) buf[n + i] = ']';
    ds4_json_doc *d = parse_ok(buf, 2 * n);
    const ds4_json *v = ds4_json_root(d);
    size_t depth = 0;
    while (v->type == DS4_JSON_ARRAY && v->n == 1) { v = &v->elems[0]; depth++; }
    assert_int_equal(depth + 1, n);
    ds4_json_free(d);
    /* ... one more is refused at the innermost bracket. */
    n++;
    for (size_t i = 0; i < n; i++) buf[i] = '[';
    for (size_t i = 0; i < n; i++) buf[n + i] = ']';
    char want[64];
    snprintf(want, sizeof(want), "byte %d: nesting deeper than %d", DS4_JSON_MAX_DEPTH,
             DS4_JSON_MAX_DEPTH);
    parse_bad(buf, 2 * n, want);
}

static void test_writer(void **state) {
    (void)state;
    ds4_buf b = {0};
    const char in[] = "a\"\\/\b\f\n\r\t\x01\x1f\x7f\xC3\xA9";
    ds4_json_put_str(&b, in, sizeof(in) - 1);
    /* As Python's json.dumps(s, ensure_ascii=False) writes it. */
    assert_false(b.failed);
    assert_string_equal(b.p, "\"a\\\"\\\\/\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\xC3\xA9\"");
    ds4_buf_free(&b);
    ds4_json_put_str(&b, "", 0);
    assert_string_equal(b.p, "\"\"");
    ds4_buf_free(&b);
}

/* Writer and parser are inverse on every valid UTF-8 string, checked on
 * pseudo-random strings of ASCII (controls included) and multibyte
 * characters. */
static void test_writer_parser_round_trip(void **state) {
    (void)state;
    static const char *const pieces[] = {"\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\"", "\\"};
    uint64_t x = 12345;
    for (int iter = 0; iter < 2000; iter++) {
        char s[256];
        size_t n = 0;
        int len = (int)(x % 40);
        for (int i = 0; i < len; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            unsigned r = (unsigned)(x >> 33);
            if (r % 4 == 0) {
                const char *p = pieces[(r / 4) % 5];
                memcpy(s + n, p, strlen(p));
                n += strlen(p);
            } else {
                s[n++] = (char)(r % 128);
            }
        }
        ds4_buf b = {0};
        ds4_json_put_str(&b, s, n);
        ds4_json_doc *d = parse_ok(b.p, b.len);
        assert_int_equal(ds4_json_root(d)->len, n);
        assert_memory_equal(ds4_json_root(d)->str, s, n);
        ds4_json_free(d);
        ds4_buf_free(&b);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    }
}

static void test_buf(void **state) {
    (void)state;
    ds4_buf b = {0};
    for (int i = 0; i < 1000; i++) ds4_buf_puts(&b, "xyz");
    assert_int_equal(b.len, 3000);
    assert_int_equal(b.p[3000], '\0');
    assert_memory_equal(b.p + 2997, "xyz", 3);
    ds4_buf_put(&b, NULL, 0);
    assert_int_equal(b.len, 3000);
    ds4_buf_free(&b);
    assert_null(b.p);
}

/* Sizes and counts are read from the literal: plain digits up to a bound,
 * the bound itself included; 1e3, 2.0, -0, text and one past are refused. */
static void test_uint(void **state) {
    (void)state;
    const struct { const char *text; uint64_t max; int ok; uint64_t want; } cases[] = {
        {"0", 5, 1, 0},
        {"5", 5, 1, 5},
        {"9", 5, 0, 0},
        {"4294967295", 4294967295u, 1, 4294967295u},
        {"4294967296", 4294967295u, 0, 0},
        {"9223372036854775808", UINT64_C(1) << 63, 1, UINT64_C(1) << 63},
        {"9223372036854775809", UINT64_C(1) << 63, 0, 0},
        {"18446744073709551615", UINT64_MAX, 1, UINT64_MAX},
        {"18446744073709551616", UINT64_MAX, 0, 0},
        {"1e3", 5000, 0, 0},
        {"2.0", 5, 0, 0},
        {"-0", 5, 0, 0},
        {"\"7\"", 9, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ds4_json_doc *d = parse_ok(cases[i].text, strlen(cases[i].text));
        uint64_t got = 12345;
        int ok = ds4_json_uint(ds4_json_root(d), cases[i].max, &got);
        if (ok != cases[i].ok || (ok && got != cases[i].want))
            fail_msg("%s: ok %d value %llu", cases[i].text, ok, (unsigned long long)got);
        ds4_json_free(d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_containers),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_writer),
        cmocka_unit_test(test_writer_parser_round_trip),
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_uint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
