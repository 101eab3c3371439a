/* A checkpoint folder: config.json, the index and the shards, written here
 * by hand in the published layout, then broken one way at a time. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ckpt/checkpoint.h"
#include "testutil.h"

static void write_file(const char *dir, const char *name, const void *p, size_t n) {
    char *path = tu_path(dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    free(path);
}

static void write_text(const char *dir, const char *name, const char *s) {
    write_file(dir, name, s, strlen(s));
}

/* A shard: the header, then data_len bytes. */
static void write_shard(const char *dir, const char *name, const char *header, size_t data_len) {
    size_t n = strlen(header), len = 8 + n + data_len;
    uint8_t *b = calloc(1, len);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, header, n);
    for (size_t i = 0; i < data_len; i++) b[8 + n + i] = (uint8_t)(100 + i);
    write_file(dir, name, b, len);
    free(b);
}

/* Two shards: s1 holds a (F8_E4M3 [2, 2]) and a.scale (F8_E8M0 [1, 1]),
 * s2 holds b (BF16 [3]); 11 bytes in all. */
static char *good_folder(void) {
    char *d = tu_tmpdir();
    write_text(d, "config.json", "{\"hidden_size\": 4096, \"num_hidden_layers\": 43}");
    write_shard(d, "s1.safetensors",
                "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                "\"a.scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[1,1],\"data_offsets\":[4,5]}}", 5);
    write_shard(d, "s2.safetensors",
                "{\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6);
    write_text(d, "model.safetensors.index.json",
               "{\"metadata\": {\"total_size\": 11}, \"weight_map\": {\"a\": \"s1.safetensors\", "
               "\"b\": \"s2.safetensors\", \"a.scale\": \"s1.safetensors\"}}");
    return d;
}

static void remove_folder(char *d) {
    const char *names[] = {"config.json", "s1.safetensors", "s2.safetensors",
                           "model.safetensors.index.json"};
    for (size_t i = 0; i < 4; i++) {
        char *p = tu_path(d, names[i]);
        remove(p);
        free(p);
    }
    tu_rmdir(d);
}

static void test_folder(void **state) {
    (void)state;
    char *d = good_folder();
    ds4_ckpt c;
    ds4err err = {0};
    if (ds4_checkpoint_open(&c, d, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.n_shards, 2);
    assert_int_equal(c.n_tensors, 3);
    const ds4_st_tensor *a = ds4_checkpoint_find(&c, "a"), *b = ds4_checkpoint_find(&c, "b");
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->dtype, DS4_ST_F8_E4M3);
    assert_int_equal(a->data[0], 100);
    assert_int_equal(b->dtype, DS4_ST_BF16);
    assert_int_equal(b->data[5], 105);
    assert_int_equal(ds4_checkpoint_find(&c, "a.scale")->data[0], 104);
    assert_null(ds4_checkpoint_find(&c, "c"));
    const ds4_json *h = ds4_json_get(ds4_checkpoint_config(&c), "hidden_size");
    assert_non_null(h);
    assert_true(h->num == 4096.0);
    ds4_checkpoint_close(&c);
    remove_folder(d);
}

/* One shard named directly, config.json beside it. */
static void test_single_file(void **state) {
    (void)state;
    char *d = good_folder();
    char *s2 = tu_path(d, "s2.safetensors");
    ds4_ckpt c;
    ds4err err = {0};
    if (ds4_checkpoint_open(&c, s2, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.n_shards, 1);
    assert_non_null(ds4_checkpoint_find(&c, "b"));
    assert_null(ds4_checkpoint_find(&c, "a"));
    assert_non_null(ds4_json_get(ds4_checkpoint_config(&c), "num_hidden_layers"));
    ds4_checkpoint_close(&c);
    free(s2);
    remove_folder(d);
}

typedef struct broken {
    const char *file, *text;   /* written over the good folder's file */
    const char *expect;
} broken;

static void test_refusals(void **state) {
    (void)state;
    const char *ix = "model.safetensors.index.json";
    const broken cases[] = {
        {ix, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\", "
             "\"a.scale\": \"s1.safetensors\", \"zz\": \"s1.safetensors\"}}",
         "names tensor 'zz' in s1.safetensors, which does not hold it"},
        {ix, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}",
         "s1.safetensors: holds tensor 'a.scale', which"},
        {ix, "{\"weight_map\": {\"a\": \"s2.safetensors\", \"b\": \"s1.safetensors\", "
             "\"a.scale\": \"s1.safetensors\"}}",
         "names tensor 'a' in s2.safetensors, but it is in s1.safetensors"},
        {ix, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s3.safetensors\", "
             "\"a.scale\": \"s1.safetensors\"}}",
         "s3.safetensors: cannot open"},
        {ix, "{\"weight_map\": {\"a\": \"../s1.safetensors\"}}",
         "tensor 'a': the shard must be a file name in the checkpoint's folder"},
        {ix, "{\"weight_map\": {\"a\": \"..\"}}", "the shard must be a file name"},
        {ix, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"a\": \"s1.safetensors\"}}",
         "\"weight_map\" names tensor 'a' twice"},
        {ix, "{\"weight_map\": {\"a\": 1}}", "the shard must be a file name"},
        {ix, "{\"weight_map\": []}", "no \"weight_map\" object"},
        {ix, "{\"metadata\": {\"total_size\": 12}, \"weight_map\": {\"a\": \"s1.safetensors\", "
             "\"b\": \"s2.safetensors\", \"a.scale\": \"s1.safetensors\"}}",
         "\"total_size\" is 12, but the shards' tensors hold 11 bytes"},
        {ix, "{\"metadata\": {\"total_size\": 1.1e1}, \"weight_map\": {}}",
         "\"total_size\" is not an integer"},
        {ix, "[", "model.safetensors.index.json: byte 1: expected a value, found end of input"},
        {"s2.safetensors", NULL, "tensor 'a' is in two shards, s1.safetensors and s2.safetensors"},
        {"config.json", "[1, 2]", "config.json: not a JSON object"},
        {"config.json", "{\"a\": }", "config.json: byte 6: expected a value"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *d = good_folder();
        if (cases[i].text) write_text(d, cases[i].file, cases[i].text);
        else write_shard(d, cases[i].file,
                         "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6);
        ds4_ckpt c;
        ds4err err = {0};
        if (!ds4_checkpoint_open(&c, d, &err)) fail_msg("case %zu was accepted", i);
        if (!strstr(err.msg, cases[i].expect))
            fail_msg("case %zu: '%s'\nwanted '%s'", i, err.msg, cases[i].expect);
        remove_folder(d);
    }
}

/* What is missing is named: the index, config.json, the path itself. */
static void test_missing(void **state) {
    (void)state;
    ds4_ckpt c;
    ds4err err = {0};
    char *d = good_folder();
    char *p = tu_path(d, "model.safetensors.index.json");
    remove(p);
    assert_int_equal(ds4_checkpoint_open(&c, d, &err), -1);
    assert_non_null(strstr(err.msg, "a checkpoint folder holds config.json, "
                                    "model.safetensors.index.json and its shards"));
    free(p);
    remove_folder(d);
    d = good_folder();
    p = tu_path(d, "config.json");
    remove(p);
    assert_int_equal(ds4_checkpoint_open(&c, d, &err), -1);
    assert_non_null(strstr(err.msg, "config.json: cannot open"));
    free(p);
    p = tu_path(d, "nothing");
    assert_int_equal(ds4_checkpoint_open(&c, p, &err), -1);
    assert_int_equal(err.code, DS4_E_IO);
    assert_non_null(strstr(err.msg, "nothing: cannot open"));
    free(p);
    remove_folder(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folder),
        cmocka_unit_test(test_single_file),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
