/* safetensors reader.
 *
 * The valid files are the byte vectors of the format's own test suite
 * (huggingface/safetensors, tensor.rs: test_serialization, test_empty),
 * spelled out here, and headers written by hand; every refusal is a
 * hand-built file with the message it must give. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ckpt/safetensors.h"
#include "testutil.h"

/* 8-byte length, the header, then data_len bytes counting up from 0. */
static uint8_t *st_bytes(const char *header, size_t data_len, size_t *len) {
    size_t n = strlen(header);
    *len = 8 + n + data_len;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, header, n);
    for (size_t i = 0; i < data_len; i++) b[8 + n + i] = (uint8_t)i;
    return b;
}

static void assert_err(const ds4err *err, const char *substr) {
    if (err->code != DS4_E_FORMAT || !strstr(err->msg, substr) || !strstr(err->msg, "x.st"))
        fail_msg("error (code %d): '%s'\nwanted '%s' and the file name", err->code, err->msg,
                 substr);
}

/* test_serialization's expected bytes: one F32 tensor "attn.0" of shape
 * [1, 2, 3] holding 0..5, a header of 64 bytes. */
static const uint8_t rust_vector[] = {
    64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100,
    116, 121, 112, 101, 34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34,
    58, 91, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97, 116, 97, 95, 111, 102, 102, 115,
    101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0, 0, 0, 0, 0, 128, 63,
    0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64};

/* test_empty's second vector: no tensor, metadata {"framework": "pt"},
 * padded with spaces to 40 bytes. */
static const uint8_t rust_empty_meta[] = {
    40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97, 116, 97, 95,
    95, 34, 58, 123, 34, 102, 114, 97, 109, 101, 119, 111, 114, 107, 34, 58, 34, 112,
    116, 34, 125, 125, 32, 32, 32, 32, 32};

static void test_format_vectors(void **state) {
    (void)state;
    ds4_st_file f;
    ds4err err = {0};
    assert_int_equal(ds4_safetensors_parse(&f, rust_vector, sizeof(rust_vector), "x.st", &err), 0);
    assert_int_equal(f.header_len, 64);
    assert_int_equal(f.n_tensors, 1);
    const ds4_st_tensor *t = ds4_safetensors_find(&f, "attn.0");
    assert_non_null(t);
    assert_int_equal(t->dtype, DS4_ST_F32);
    assert_string_equal(ds4_safetensors_dtype_name(t->dtype), "F32");
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->shape[0], 1);
    assert_int_equal(t->shape[1], 2);
    assert_int_equal(t->shape[2], 3);
    assert_int_equal(t->n_elem, 6);
    assert_int_equal(t->begin, 0);
    assert_int_equal(t->end, 24);
    assert_ptr_equal(t->data, rust_vector + 72);
    for (int i = 0; i < 6; i++) {
        float v;
        memcpy(&v, t->data + 4 * i, 4);
        assert_true(v == (float)i);
    }
    assert_null(ds4_safetensors_find(&f, "attn.1"));
    assert_null(ds4_safetensors_meta(&f, "format"));
    ds4_safetensors_close(&f);

    assert_int_equal(ds4_safetensors_parse(&f, rust_empty_meta, sizeof(rust_empty_meta), "x.st",
                                           &err), 0);
    assert_int_equal(f.n_tensors, 0);
    assert_string_equal(ds4_safetensors_meta(&f, "framework"), "pt");
    ds4_safetensors_close(&f);
}

/* Several tensors in an order other than their offsets', an empty one, the
 * one-byte types of the official checkpoint, and a header whose length is
 * not a multiple of 8 (unaligned data). */
static void test_tiling_in_any_order(void **state) {
    (void)state;
    const char *h =
        "{\"b\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,3],\"data_offsets\":[4,10]},"
        "\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
        "\"a.scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[4],\"data_offsets\":[0,4]},"
        "\"empty\":{\"dtype\":\"BF16\",\"shape\":[0,7],\"data_offsets\":[10,10]},"
        "\"c\":{\"shape\":[1],\"dtype\":\"I64\",\"data_offsets\":[10,18]}}";
    size_t len;
    uint8_t *b = st_bytes(h, 18, &len);
    ds4_st_file f;
    ds4err err = {0};
    assert_int_equal(ds4_safetensors_parse(&f, b, len, "x.st", &err), 0);
    assert_int_equal(f.n_tensors, 4);
    const uint8_t *data = b + 8 + strlen(h);
    const ds4_st_tensor *t = ds4_safetensors_find(&f, "b");
    assert_int_equal(t->dtype, DS4_ST_F8_E4M3);
    assert_int_equal(t->n_elem, 6);
    assert_ptr_equal(t->data, data + 4);
    assert_int_equal(ds4_safetensors_find(&f, "a.scale")->dtype, DS4_ST_F8_E8M0);
    assert_int_equal(ds4_safetensors_find(&f, "empty")->n_elem, 0);
    assert_int_equal(ds4_safetensors_find(&f, "c")->data[0], 10);
    assert_int_equal(ds4_safetensors_dtype_size(DS4_ST_I64), 8);
    assert_string_equal(ds4_safetensors_meta(&f, "k"), "v");
    ds4_safetensors_close(&f);
    free(b);
}

typedef struct bad_case {
    const char *header;    /* NULL: the raw bytes below */
    size_t data_len;
    const char *expect;
} bad_case;

static void test_refusals(void **state) {
    (void)state;
    const char *one = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char buf[4][256];
    snprintf(buf[0], sizeof(buf[0]), "{%s,%s}", one, one);
    snprintf(buf[1], sizeof(buf[1]), "{\"__metadata__\":{},%s,\"__metadata__\":{}}", one);
    snprintf(buf[2], sizeof(buf[2]), "{%s}", one);
    const bad_case cases[] = {
        {"[]", 0, "the header must be one JSON object, '{' first, then spaces only"},
        {" {}", 0, "'{' first"},
        {"{}\n", 0, "then spaces only"},
        {"{\"t\": [}", 0, "(header)"},
        {buf[0], 16, "tensor 't' is named twice"},
        {buf[1], 8, "\"__metadata__\" given twice"},
        {"{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
         "'dtype' given twice"},
        {"{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "names 'a' twice"},
        {"{\"__metadata__\":{\"a\":1}}", 0, "must be strings"},
        {"{\"__metadata__\":[]}", 0, "is not an object of strings"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1e3],\"data_offsets\":[0,4000]}}", 4000,
         "shape[0] is not an integer"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
         "shape[0] is not an integer"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8,
         "shape[0] is not an integer"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[9223372036854775809],\"data_offsets\":[0,1]}}", 1,
         "shape[0] is not an integer"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,18446744073709551616]}}", 1,
         "\"data_offsets\" is not two integers"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
         "\"data_offsets\" is not two integers"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}", 1,
         "end before they begin"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,4]}}",
         4, "overflows 64 bits"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
         "9 dimensions, at most 8"},
        {"{\"t\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "\"dtype\" is not text"},
        {"{\"t\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1,
         "dtype 'F4' is not one of"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":\"1\",\"data_offsets\":[0,1]}}", 1,
         "\"shape\" is not an array"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":0}}", 1,
         "unknown member 'x'"},
        {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "no \"data_offsets\""},
        {"{\"t\":[]}", 0, "tensor 't' is not an object"},
        {"{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "non-empty text"},
        {"{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         "non-empty text"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,10]}}", 10,
         "hold 10 bytes, but dtype F32 and shape [2, 2] make 16"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6,
         "tensor 'b': data [2, 6) overlaps the tensor before it, which ends at 4"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[5,9]}}", 9,
         "tensor 'b': data [5, 9) leaves a gap after the tensor before it"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[1,5]}}", 5,
         "leaves a gap after the data area's start at 0"},
        {buf[2], 4, "end at data byte 8, but the data area holds 4 bytes (the file is truncated)"},
        {buf[2], 9, "(the file is longer than its tensors)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len;
        uint8_t *b = st_bytes(cases[i].header, cases[i].data_len, &len);
        ds4_st_file f;
        ds4err err = {0};
        if (!ds4_safetensors_parse(&f, b, len, "x.st", &err))
            fail_msg("case %zu (%s) was accepted", i, cases[i].header);
        assert_err(&err, cases[i].expect);
        free(b);
    }
}

/* The length field: too short a file, a header past its end, one over the
 * format's 100 MB limit. */
static void test_header_length(void **state) {
    (void)state;
    ds4_st_file f;
    ds4err err = {0};
    const uint8_t five[5] = {0};
    assert_int_equal(ds4_safetensors_parse(&f, five, 5, "x.st", &err), -1);
    assert_err(&err, "truncated: 5 bytes");
    uint8_t b[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(ds4_safetensors_parse(&f, b, 10, "x.st", &err), -1);
    assert_err(&err, "header length 9 runs past the end of the file (10 bytes)");
    memset(b, 0xff, 8);
    assert_int_equal(ds4_safetensors_parse(&f, b, 16, "x.st", &err), -1);
    assert_err(&err, "header length 18446744073709551615 is over the format's limit");
    b[0] = 0x01, b[1] = 0xe1, b[2] = 0xf5, b[3] = 0x05;   /* 100,000,001 */
    memset(b + 4, 0, 4);
    assert_int_equal(ds4_safetensors_parse(&f, b, 16, "x.st", &err), -1);
    assert_err(&err, "header length 100000001 is over");
}

/* From a file: mapped, closed, and the open errors name the path. */
static void test_open(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "m.safetensors");
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(rust_vector, 1, sizeof(rust_vector), fp), sizeof(rust_vector));
    fclose(fp);
    ds4_st_file f;
    ds4err err = {0};
    assert_int_equal(ds4_safetensors_open(&f, path, &err), 0);
    assert_true(f.mapped);
    assert_int_equal(ds4_safetensors_find(&f, "attn.0")->end, 24);
    ds4_safetensors_close(&f);
    fp = fopen(path, "wb");
    fclose(fp);
    assert_int_equal(ds4_safetensors_open(&f, path, &err), -1);
    assert_non_null(strstr(err.msg, "m.safetensors: truncated: 0 bytes"));
    assert_int_equal(ds4_safetensors_open(&f, dir, &err), -1);
    assert_int_equal(err.code, DS4_E_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    remove(path);
    assert_int_equal(ds4_safetensors_open(&f, path, &err), -1);
    assert_non_null(strstr(err.msg, "m.safetensors: cannot open"));
    free(path);
    tu_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_vectors),
        cmocka_unit_test(test_tiling_in_any_order),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
