/* GGUF reader and writer.
 *
 * Expected values are computed here from the GGUF layout (record sizes added
 * up by hand, block sizes spelled out), from bytes written out in the test, or
 * taken from the oracle's gguf_info.txt, never from the code under test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ds4ref.h"
#include "malformed.h"
#include "quant/types.h"
#include "quant/gguf.h"
#include "quant/gguf_write.h"
#include "testutil.h"

/* ggml type ids, spelled out independently of types.h. */
enum { F32 = 0, F16 = 1, Q8_0 = 8, Q2_K = 10, Q4_K = 12, IQ2_XXS = 16, I32 = 26, BF16 = 30 };

static uint64_t align_to(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* The bytes of the file w writes, read back (the writer's one output is a
 * file: ds4_gguf_writer_save into a scratch directory). */
static int writer_bytes(ds4_gguf_writer *w, uint8_t **buf, size_t *len, ds4err *err) {
    char *dir = tu_tmpdir();
    if (!dir) return ds4_err_set(err, DS4_E_IO, "no scratch directory");
    char *path = tu_path(dir, "w.gguf");
    int rc = ds4_gguf_writer_save(w, path, err);
    if (!rc && tu_read_file(path, buf, len))
        rc = ds4_err_set(err, DS4_E_IO, "%s: cannot read it back", path);
    remove(path);
    free(path);
    tu_rmdir(dir);
    return rc;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static bool str_eq(ds4_gguf_str s, const char *want, size_t len) {
    return s.len == len && memcmp(s.ptr, want, len) == 0;
}

static void assert_err(const ds4err *err, int code, const char *name, const char *substr) {
    if (!strstr(err->msg, substr) || !strstr(err->msg, name) || err->code != code)
        fail_msg("error (code %d, want %d): '%s'\nwanted '%s' and the file name '%s'", err->code,
                 code, err->msg, substr, name);
}

/* ========================================================================
 * Round trip: every metadata type, several tensor types and shapes.
 * ======================================================================== */

/* Tensor bytes. */
static uint64_t mix(uint64_t *s) {
    return tu_splitmix64(s);
}

typedef struct spec_tensor {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    uint64_t nbytes;         /* worked out by hand from the block sizes */
} spec_tensor;

static const spec_tensor spec_tensors[] = {
    {"w.f32", F32, 2, {4, 3, 1, 1}, 4 * 3 * 4},
    {"w.f16", F16, 1, {8, 1, 1, 1}, 8 * 2},
    {"w.q8_0", Q8_0, 2, {64, 2, 1, 1}, 2 * 2 * 34},
    {"w.i32", I32, 3, {3, 1, 2, 1}, 6 * 4},
    {"w.q2_K", Q2_K, 4, {256, 1, 1, 2}, 2 * 84},
    {"w.bf16", BF16, 1, {5, 1, 1, 1}, 5 * 2},
    {"w.iq2_xxs", IQ2_XXS, 1, {512, 1, 1, 1}, 2 * 66},
    {"w.q4_K", Q4_K, 2, {256, 3, 1, 1}, 3 * 144},
};
#define N_SPEC_TENSORS (sizeof(spec_tensors) / sizeof(spec_tensors[0]))

static char long_str[100000];
static const uint32_t arr_u32[] = {1, 2, 4000000000u};
static const int32_t arr_i32[] = {-1, 0, INT32_MAX, INT32_MIN};
static const float arr_f32[] = {0.5f, -0.0f, 3.25f};
static const char *const arr_str[] = {"a", "", "with\0nul"};
static const size_t arr_str_len[] = {1, 0, 8};

/* Hand-encoded values for ds4_gguf_write_raw. */
static const uint8_t nested_u16[] = {
    9, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,          /* arr of 3 arrays */
    2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0,   /* [1, 2] u16 */
    2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,          /* [] u16 */
    2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0,    /* [3] u16 */
};
static const uint8_t nested_str[] = {
    9, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,          /* arr of 2 arrays */
    8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,          /* arr of 2 strings */
    1, 0, 0, 0, 0, 0, 0, 0, 'x', 2, 0, 0, 0, 0, 0, 0, 0, 'y', 'y',
    8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,          /* empty arr of strings */
};
static const uint8_t arr_bool[] = {7, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1};
static const uint8_t arr_f64[] = {
    12, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
    0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f,   /* 0.1 */
    0, 0, 0, 0, 0, 0, 0, 0xc0,                        /* -2.0 */
};

/* Every key the round-trip file holds, in order, with its value's encoded
 * size (for the offsets), after the writer's own general.alignment. */
typedef struct spec_kv {
    const char *key;
    uint32_t type;
    uint64_t value_bytes;
} spec_kv;

static const spec_kv spec_kvs[] = {
    {"t.u8", GGUF_U8, 1},
    {"t.i8", GGUF_I8, 1},
    {"t.u16", GGUF_U16, 2},
    {"t.i16", GGUF_I16, 2},
    {"t.u32", GGUF_U32, 4},
    {"t.i32", GGUF_I32, 4},
    {"t.u64", GGUF_U64, 8},
    {"t.i64", GGUF_I64, 8},
    {"t.f32", GGUF_F32, 4},
    {"t.f64", GGUF_F64, 8},
    {"t.true", GGUF_BOOL, 1},
    {"t.false", GGUF_BOOL, 1},
    {"t.str", GGUF_STR, 8 + 12},
    {"t.empty_str", GGUF_STR, 8},
    {"t.long_str", GGUF_STR, 8 + sizeof(long_str)},
    {"t.arr_u32", GGUF_ARR, 12 + 3 * 4},
    {"t.arr_i32", GGUF_ARR, 12 + 4 * 4},
    {"t.arr_f32", GGUF_ARR, 12 + 3 * 4},
    {"t.arr_str", GGUF_ARR, 12 + (8 + 1) + 8 + (8 + 8)},
    {"t.arr_empty_u32", GGUF_ARR, 12},
    {"t.arr_empty_str", GGUF_ARR, 12},
    {"t.nested_u16", GGUF_ARR, sizeof(nested_u16)},
    {"t.nested_str", GGUF_ARR, sizeof(nested_str)},
    {"t.arr_bool", GGUF_ARR, sizeof(arr_bool)},
    {"t.arr_f64", GGUF_ARR, sizeof(arr_f64)},
};
#define N_SPEC_KVS (sizeof(spec_kvs) / sizeof(spec_kvs[0]))

typedef struct rt {
    uint32_t alignment;
    uint8_t *data[N_SPEC_TENSORS];
    uint8_t *buf;
    size_t len;
} rt;

static void fill_long_str(void) {
    for (size_t i = 0; i < sizeof(long_str); i++) long_str[i] = (char)(i * 131 + 7);
}

static ds4_gguf_writer *build_rt_writer(rt *r) {
    ds4_gguf_writer *w = ds4_gguf_writer_new(r->alignment);
    assert_non_null(w);
    assert_int_equal(ds4_gguf_write_u8(w, "t.u8", 200), 0);
    assert_int_equal(ds4_gguf_write_i8(w, "t.i8", -100), 0);
    assert_int_equal(ds4_gguf_write_u16(w, "t.u16", 60000), 0);
    assert_int_equal(ds4_gguf_write_i16(w, "t.i16", -30000), 0);
    assert_int_equal(ds4_gguf_write_u32(w, "t.u32", 4000000000u), 0);
    assert_int_equal(ds4_gguf_write_i32(w, "t.i32", -2000000000), 0);
    assert_int_equal(ds4_gguf_write_u64(w, "t.u64", 0xfedcba9876543210ull), 0);
    assert_int_equal(ds4_gguf_write_i64(w, "t.i64", INT64_MIN), 0);
    assert_int_equal(ds4_gguf_write_f32(w, "t.f32", -1.5e-7f), 0);
    assert_int_equal(ds4_gguf_write_f64(w, "t.f64", 1e300), 0);
    assert_int_equal(ds4_gguf_write_bool(w, "t.true", true), 0);
    assert_int_equal(ds4_gguf_write_bool(w, "t.false", false), 0);
    assert_int_equal(ds4_gguf_write_str(w, "t.str", "hello, world"), 0);
    assert_int_equal(ds4_gguf_write_str(w, "t.empty_str", ""), 0);
    assert_int_equal(ds4_gguf_write_str_n(w, "t.long_str", long_str, sizeof(long_str)), 0);
    assert_int_equal(ds4_gguf_write_arr_u32(w, "t.arr_u32", arr_u32, 3), 0);
    assert_int_equal(ds4_gguf_write_arr_i32(w, "t.arr_i32", arr_i32, 4), 0);
    assert_int_equal(ds4_gguf_write_arr_f32(w, "t.arr_f32", arr_f32, 3), 0);
    assert_int_equal(ds4_gguf_write_arr_str(w, "t.arr_str", arr_str, arr_str_len, 3), 0);
    assert_int_equal(ds4_gguf_write_arr_u32(w, "t.arr_empty_u32", NULL, 0), 0);
    assert_int_equal(ds4_gguf_write_arr_str(w, "t.arr_empty_str", NULL, NULL, 0), 0);
    assert_int_equal(ds4_gguf_write_raw(w, "t.nested_u16", GGUF_ARR, nested_u16,
                     sizeof(nested_u16)), 0);
    assert_int_equal(ds4_gguf_write_raw(w, "t.nested_str", GGUF_ARR, nested_str,
                     sizeof(nested_str)), 0);
    assert_int_equal(ds4_gguf_write_raw(w, "t.arr_bool", GGUF_ARR, arr_bool, sizeof(arr_bool)), 0);
    assert_int_equal(ds4_gguf_write_raw(w, "t.arr_f64", GGUF_ARR, arr_f64, sizeof(arr_f64)), 0);
    uint64_t seed = r->alignment;
    for (size_t i = 0; i < N_SPEC_TENSORS; i++) {
        const spec_tensor *t = &spec_tensors[i];
        r->data[i] = malloc(t->nbytes);
        assert_non_null(r->data[i]);
        for (uint64_t b = 0; b < t->nbytes; b++) r->data[i][b] = (uint8_t)mix(&seed);
        assert_int_equal(ds4_gguf_write_tensor(w, t->name, t->type, t->n_dims, t->ne, r->data[i],
                                       t->nbytes), 0);
    }
    return w;
}

static void rt_free(rt *r) {
    for (size_t i = 0; i < N_SPEC_TENSORS; i++) free(r->data[i]);
    free(r->buf);
}

/* Offsets of the layout, added up from the record sizes. */
typedef struct rt_layout {
    uint64_t value_off[N_SPEC_KVS + 1];
    uint64_t info_off[N_SPEC_TENSORS];
    uint64_t infos_end, data_off;
    uint64_t rel_off[N_SPEC_TENSORS];
    uint64_t file_size;
} rt_layout;

static rt_layout expected_layout(uint32_t alignment) {
    rt_layout l;
    uint64_t off = 24;
    off += 8 + strlen("general.alignment") + 4;
    l.value_off[0] = off;
    off += 4;
    for (size_t i = 0; i < N_SPEC_KVS; i++) {
        off += 8 + strlen(spec_kvs[i].key) + 4;
        l.value_off[i + 1] = off;
        off += spec_kvs[i].value_bytes;
    }
    for (size_t i = 0; i < N_SPEC_TENSORS; i++) {
        l.info_off[i] = off;
        off += 8 + strlen(spec_tensors[i].name) + 4 + 8 * spec_tensors[i].n_dims + 4 + 8;
    }
    l.infos_end = off;
    l.data_off = align_to(off, alignment);
    uint64_t rel = 0;
    for (size_t i = 0; i < N_SPEC_TENSORS; i++) {
        l.rel_off[i] = rel;
        rel = align_to(rel + spec_tensors[i].nbytes, alignment);
    }
    l.file_size = l.data_off + rel;
    return l;
}

static void check_rt_tensors(const ds4_gguf_file *g, const rt *r, const rt_layout *l) {
    assert_int_equal(g->n_tensors, N_SPEC_TENSORS);
    assert_int_equal(g->data_off, l->data_off);
    for (size_t i = 0; i < N_SPEC_TENSORS; i++) {
        const spec_tensor *s = &spec_tensors[i];
        const ds4_gguf_tensor *t = &g->tensors[i];
        assert_string_equal(t->name, s->name);
        assert_ptr_equal(ds4_gguf_find_tensor(g, s->name), t);
        assert_int_equal(t->type, s->type);
        assert_int_equal(t->n_dims, s->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], s->ne[d]);
        assert_int_equal(t->n_elem, s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3]);
        assert_int_equal(t->nbytes, s->nbytes);
        assert_int_equal(t->rel_off, l->rel_off[i]);
        assert_int_equal(t->info_off, l->info_off[i]);
        assert_ptr_equal(t->data, g->map + l->data_off + l->rel_off[i]);
        assert_memory_equal(t->data, r->data[i], s->nbytes);
    }
    assert_null(ds4_gguf_find_tensor(g, "w.missing"));
    assert_null(ds4_gguf_find_tensor(g, "w"));
}

/* Every byte not covered by a tensor after the infos is zero padding. */
static void check_padding(const uint8_t *buf, const rt_layout *l) {
    uint64_t pos = l->infos_end;
    for (size_t i = 0; i <= N_SPEC_TENSORS; i++) {
        uint64_t end = i < N_SPEC_TENSORS ? l->data_off + l->rel_off[i] : l->file_size;
        for (; pos < end; pos++)
            if (buf[pos] != 0) fail_msg("padding byte %llu is %u", (unsigned long long)pos, buf[pos]);
        if (i < N_SPEC_TENSORS) pos = end + spec_tensors[i].nbytes;
    }
}

static void check_rt_scalars(const ds4_gguf_file *g) {
    ds4err err = {0};
    ds4_gguf_scalar s;
    uint64_t next;
    uint32_t u32;
    uint64_t u64;
    float f;
    bool b;
    ds4_gguf_str str;
    assert_int_equal(ds4_gguf_get_u32(g, "t.u8", &u32, &err), 0);
    assert_int_equal(u32, 200);
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_I8, ds4_gguf_find_kv(g, "t.i8")->value_off, &s,
                     &next,
                                      &err), 0);
    assert_int_equal(s.v.i, -100);
    assert_int_equal(next, ds4_gguf_find_kv(g, "t.i8")->value_off + 1);
    assert_int_equal(ds4_gguf_get_u32(g, "t.u16", &u32, &err), 0);
    assert_int_equal(u32, 60000);
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_I16, ds4_gguf_find_kv(g, "t.i16")->value_off, &s,
                     NULL,
                                      &err), 0);
    assert_int_equal(s.v.i, -30000);
    assert_int_equal(ds4_gguf_get_u32(g, "t.u32", &u32, &err), 0);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_I32, ds4_gguf_find_kv(g, "t.i32")->value_off, &s,
                     NULL,
                                      &err), 0);
    assert_int_equal(s.v.i, -2000000000);
    assert_int_equal(ds4_gguf_get_u64(g, "t.u64", &u64, &err), 0);
    assert_true(u64 == 0xfedcba9876543210ull);
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_I64, ds4_gguf_find_kv(g, "t.i64")->value_off, &s,
                     NULL,
                                      &err), 0);
    assert_true(s.v.i == INT64_MIN);
    assert_int_equal(ds4_gguf_get_f32(g, "t.f32", &f, &err), 0);
    assert_true(f == -1.5e-7f);
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_F64, ds4_gguf_find_kv(g, "t.f64")->value_off, &s,
                     NULL,
                                      &err), 0);
    assert_true(s.v.f == 1e300);
    assert_int_equal(ds4_gguf_get_bool(g, "t.true", &b, &err), 0);
    assert_true(b);
    assert_int_equal(ds4_gguf_get_bool(g, "t.false", &b, &err), 0);
    assert_false(b);
    assert_int_equal(ds4_gguf_get_str(g, "t.str", &str, &err), 0);
    assert_true(str_eq(str, "hello, world", 12));
    assert_int_equal(ds4_gguf_get_str(g, "t.empty_str", &str, &err), 0);
    assert_int_equal(str.len, 0);
    assert_int_equal(ds4_gguf_get_str(g, "t.long_str", &str, &err), 0);
    assert_true(str_eq(str, long_str, sizeof(long_str)));
}

static void check_rt_arrays(const ds4_gguf_file *g) {
    ds4err err = {0};
    uint32_t u[3];
    int32_t i[4];
    float f[3];
    ds4_gguf_str s[3];
    uint64_t n = 99;
    assert_int_equal(ds4_gguf_get_arr_u32(g, "t.arr_u32", u, 3, &err), 0);
    assert_memory_equal(u, arr_u32, sizeof(u));
    assert_int_equal(ds4_gguf_get_arr_i32(g, "t.arr_i32", i, 4, &err), 0);
    assert_memory_equal(i, arr_i32, sizeof(i));
    assert_int_equal(ds4_gguf_get_arr_f32(g, "t.arr_f32", f, 3, &err), 0);
    assert_memory_equal(f, arr_f32, sizeof(f));   /* bitwise: keeps -0.0 */
    assert_int_equal(ds4_gguf_get_arr_str(g, "t.arr_str", s, 3, &n, &err), 0);
    assert_int_equal(n, 3);
    for (int k = 0; k < 3; k++) assert_true(str_eq(s[k], arr_str[k], arr_str_len[k]));
    assert_int_equal(ds4_gguf_get_arr_u32(g, "t.arr_empty_u32", NULL, 0, &err), 0);
    assert_int_equal(ds4_gguf_get_arr_str(g, "t.arr_empty_str", NULL, 0, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(ds4_gguf_get_arr_f32(g, "t.arr_f64", f, 2, &err), 0);
    assert_true(f[0] == 0.1f && f[1] == -2.0f);

    const ds4_gguf_kv *kv = ds4_gguf_find_kv(g, "t.arr_bool");
    assert_int_equal(kv->arr_type, GGUF_BOOL);
    assert_int_equal(kv->arr_n, 3);
    assert_int_equal(kv->arr_off, kv->value_off + 12);
    ds4_gguf_scalar sc;
    uint64_t off = kv->arr_off;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(ds4_gguf_read_scalar(g, GGUF_BOOL, off, &sc, &off, &err), 0);
        assert_int_equal(sc.v.b, arr_bool[12 + k]);
    }
}

/* [[1, 2], [], [3]] and [["x", "yy"], []], walked with the generic access. */
static void check_rt_nested(const ds4_gguf_file *g) {
    ds4err err = {0};
    const ds4_gguf_kv *kv = ds4_gguf_find_kv(g, "t.nested_u16");
    assert_int_equal(kv->arr_type, GGUF_ARR);
    assert_int_equal(kv->arr_n, 3);
    static const uint64_t want_n[] = {2, 0, 1};
    static const uint64_t want_v[] = {1, 2, 3};
    uint64_t off = kv->arr_off, next;
    int v = 0;
    for (int k = 0; k < 3; k++) {
        uint32_t et;
        uint64_t n, first;
        assert_int_equal(ds4_gguf_read_arr(g, off, &et, &n, &first, &err), 0);
        assert_int_equal(et, GGUF_U16);
        assert_int_equal(n, want_n[k]);
        for (uint64_t e = 0; e < n; e++) {
            ds4_gguf_scalar sc;
            assert_int_equal(ds4_gguf_read_scalar(g, GGUF_U16, first, &sc, &first, &err), 0);
            assert_int_equal(sc.v.u, want_v[v++]);
        }
        assert_int_equal(ds4_gguf_skip_value(g, GGUF_ARR, off, &next, &err), 0);
        assert_int_equal(next, first);
        off = next;
    }
    assert_int_equal(off, kv->value_off + sizeof(nested_u16));

    kv = ds4_gguf_find_kv(g, "t.nested_str");
    uint32_t et;
    uint64_t n, first;
    assert_int_equal(ds4_gguf_read_arr(g, kv->arr_off, &et, &n, &first, &err), 0);
    assert_int_equal(et, GGUF_STR);
    assert_int_equal(n, 2);
    ds4_gguf_scalar sc;
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_STR, first, &sc, &first, &err), 0);
    assert_true(str_eq(sc.v.s, "x", 1));
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_STR, first, &sc, &first, &err), 0);
    assert_true(str_eq(sc.v.s, "yy", 2));
    assert_int_equal(ds4_gguf_read_arr(g, first, &et, &n, &first, &err), 0);
    assert_int_equal(et, GGUF_STR);
    assert_int_equal(n, 0);
    assert_int_equal(first, kv->value_off + sizeof(nested_str));
}

static void check_rt_file(const ds4_gguf_file *g, const rt *r) {
    rt_layout l = expected_layout(r->alignment);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, r->alignment);
    assert_int_equal(g->size, l.file_size);
    assert_int_equal(g->n_kv, N_SPEC_KVS + 1);
    assert_string_equal(g->kv[0].key, "general.alignment");
    assert_int_equal(g->kv[0].type, GGUF_U32);
    assert_int_equal(rd32(g->map + g->kv[0].value_off), r->alignment);
    for (size_t i = 0; i < N_SPEC_KVS + 1; i++) {
        assert_int_equal(g->kv[i].value_off, l.value_off[i]);
        if (i == 0) continue;
        assert_string_equal(g->kv[i].key, spec_kvs[i - 1].key);
        assert_int_equal(g->kv[i].type, spec_kvs[i - 1].type);
        assert_ptr_equal(ds4_gguf_find_kv(g, spec_kvs[i - 1].key), &g->kv[i]);
    }
    assert_null(ds4_gguf_find_kv(g, "t.missing"));
    check_rt_tensors(g, r, &l);
    check_padding(g->map, &l);
    check_rt_scalars(g);
    check_rt_arrays(g);
    check_rt_nested(g);
}

static void round_trip(uint32_t alignment) {
    fill_long_str();
    rt r = {.alignment = alignment};
    ds4err err = {0};
    ds4_gguf_writer *w = build_rt_writer(&r);
    if (writer_bytes(w, &r.buf, &r.len, &err)) fail_msg("%s", err.msg);
    ds4_gguf_file g;
    if (ds4_gguf_parse(&g, r.buf, r.len, "rt.gguf", &err)) fail_msg("%s", err.msg);
    check_rt_file(&g, &r);
    ds4_gguf_close(&g);

    /* The same through a file: same bytes, same result, no leftovers. */
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char *path = tu_path(dir, "rt.gguf");
    if (ds4_gguf_writer_save(w, path, &err)) fail_msg("%s", err.msg);
    assert_int_equal(tu_count_entries(dir), 1);
    if (ds4_gguf_open(&g, path, &err)) fail_msg("%s", err.msg);
    assert_true(g.mapped);
    assert_int_equal(g.size, r.len);
    assert_memory_equal(g.map, r.buf, r.len);
    assert_string_equal(g.path, path);
    check_rt_file(&g, &r);
    ds4_gguf_close(&g);
    free(path);
    tu_rmdir(dir);
    ds4_gguf_writer_free(w);
    rt_free(&r);
}

static void test_round_trip_align32(void **state) { (void)state; round_trip(32); }
static void test_round_trip_align64(void **state) { (void)state; round_trip(64); }

/* Same calls, same bytes. */
static void test_writer_deterministic(void **state) {
    (void)state;
    fill_long_str();
    rt a = {.alignment = 32}, b = {.alignment = 32};
    ds4err err = {0};
    ds4_gguf_writer *wa = build_rt_writer(&a), *wb = build_rt_writer(&b);
    assert_int_equal(writer_bytes(wa, &a.buf, &a.len, &err), 0);
    assert_int_equal(writer_bytes(wb, &b.buf, &b.len, &err), 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.buf, b.buf, a.len);
    /* Serializing twice from one writer gives the same bytes too. */
    uint8_t *again;
    size_t again_len;
    assert_int_equal(writer_bytes(wa, &again, &again_len, &err), 0);
    assert_int_equal(again_len, a.len);
    assert_memory_equal(again, a.buf, a.len);
    free(again);
    ds4_gguf_writer_free(wa);
    ds4_gguf_writer_free(wb);
    rt_free(&a);
    rt_free(&b);
}

/* ========================================================================
 * Byte-exact writer output.
 * ======================================================================== */

static void test_writer_bytes(void **state) {
    (void)state;
    static const uint8_t want[] = {
        'G', 'G', 'U', 'F', 3, 0, 0, 0,            /* magic, version 3 */
        1, 0, 0, 0, 0, 0, 0, 0,                    /* 1 tensor */
        2, 0, 0, 0, 0, 0, 0, 0,                    /* 2 keys */
        17, 0, 0, 0, 0, 0, 0, 0,                   /* key added by the writer */
        'g', 'e', 'n', 'e', 'r', 'a', 'l', '.', 'a', 'l', 'i', 'g', 'n', 'm', 'e', 'n', 't',
        4, 0, 0, 0, 32, 0, 0, 0,                   /* u32 32 */
        1, 0, 0, 0, 0, 0, 0, 0, 's',               /* key "s" */
        8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i',   /* str "hi" */
        1, 0, 0, 0, 0, 0, 0, 0, 't',               /* tensor "t" */
        1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,        /* n_dims 1, ne {2} */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,        /* f32, offset 0 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   /* 113 -> 128 */
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0,   /* 1.0f, -2.0f */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   /* 136 -> 160 */
        0, 0, 0, 0, 0, 0, 0, 0,
    };
    static const float data[] = {1.0f, -2.0f};
    ds4_gguf_writer *w = ds4_gguf_writer_new(32);
    assert_non_null(w);
    assert_int_equal(ds4_gguf_write_str(w, "s", "hi"), 0);
    assert_int_equal(ds4_gguf_write_tensor(w, "t", F32, 1, (const uint64_t[]){2}, data, 8), 0);
    uint8_t *buf;
    size_t len;
    ds4err err = {0};
    assert_int_equal(writer_bytes(w, &buf, &len, &err), 0);
    assert_int_equal(len, sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));
    free(buf);
    ds4_gguf_writer_free(w);
}

/* A caller's own general.alignment is kept where it was written, not doubled;
 * no tensors: the file ends at the padded header. */
static void test_writer_own_alignment_key(void **state) {
    (void)state;
    ds4_gguf_writer *w = ds4_gguf_writer_new(64);
    assert_non_null(w);
    assert_int_equal(ds4_gguf_write_str(w, "a", "x"), 0);
    assert_int_equal(ds4_gguf_write_u32(w, "general.alignment", 64), 0);
    uint8_t *buf;
    size_t len;
    ds4err err = {0};
    assert_int_equal(writer_bytes(w, &buf, &len, &err), 0);
    /* 24 + "a" (8+1+4+8+1) + "general.alignment" (8+17+4+4) = 79, padded. */
    assert_int_equal(len, 128);
    assert_int_equal(rd64(buf + 16), 2);
    ds4_gguf_file g;
    if (ds4_gguf_parse(&g, buf, len, "own.gguf", &err)) fail_msg("%s", err.msg);
    assert_int_equal(g.n_kv, 2);
    assert_string_equal(g.kv[0].key, "a");
    assert_string_equal(g.kv[1].key, "general.alignment");
    assert_int_equal(g.alignment, 64);
    assert_int_equal(g.data_off, 128);
    ds4_gguf_close(&g);
    free(buf);
    ds4_gguf_writer_free(w);
    assert_null(ds4_gguf_writer_new(0));
    assert_null(ds4_gguf_writer_new(48));
}

static void test_writer_save_fails_cleanly(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char *path = tu_path(dir, "missing/sub/x.gguf");
    ds4_gguf_writer *w = ds4_gguf_writer_new(32);
    assert_int_equal(ds4_gguf_write_u32(w, "k", 1), 0);
    ds4err err = {0};
    assert_int_equal(ds4_gguf_writer_save(w, path, &err), -1);
    assert_err(&err, DS4_E_IO, path, "cannot be created: No such file or directory");
    assert_null(strstr(err.msg, ".tmp."));   /* the user's name, not the temporary one */
    assert_int_equal(tu_count_entries(dir), 0);
    ds4_gguf_writer_free(w);
    free(path);
    tu_rmdir(dir);
}

/* ========================================================================
 * The malformed catalogue, truncations, corruptions.
 * ======================================================================== */

static void test_valid_small(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        uint8_t *buf;
        size_t len;
        assert_int_equal(mf_valid_small(version, &buf, &len), 0);
        /* 24 + keys (33 + 27 + 32) + infos (42 + 34) = 192, no padding; 96 data. */
        assert_int_equal(len, 192 + 96);
        ds4_gguf_file g;
        ds4err err = {0};
        if (ds4_gguf_parse(&g, buf, len, "small.gguf", &err)) fail_msg("%s", err.msg);
        assert_int_equal(g.version, version);
        assert_int_equal(g.data_off, 192);
        assert_int_equal(g.tensors[0].nbytes, 32);
        assert_int_equal(g.tensors[1].nbytes, 64);
        assert_ptr_equal(g.tensors[1].data, buf + 224);
        assert_int_equal(g.tensors[1].data[0], 32);   /* data bytes count up from 0 */
        ds4_gguf_close(&g);
        free(buf);
    }
}

static void test_catalogue(void **state) {
    (void)state;
    mf_case *c;
    size_t n;
    assert_int_equal(mf_catalogue(&c, &n), 0);
    assert_true(n >= 50);
    for (size_t i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s.gguf", c[i].name);
        ds4_gguf_file g;
        ds4err err = {0};
        if (ds4_gguf_parse(&g, c[i].buf, c[i].len, name, &err) == 0) {
            ds4_gguf_close(&g);
            fail_msg("case %s: parsed without error", c[i].name);
        }
        assert_err(&err, DS4_E_FORMAT, name, c[i].expect);
        /* A failed parse leaves the struct closed. */
        assert_null(g.kv);
        assert_null(g.tensors);
        assert_null(g.path);
        if (strchr(err.msg, '\n')) fail_msg("case %s: multi-line message", c[i].name);
    }
    mf_free(c, n);
}

static void test_nesting_limit(void **state) {
    (void)state;
    uint8_t *buf;
    size_t len;
    ds4err err = {0};
    ds4_gguf_file g;
    assert_int_equal(mf_nested_arrays(GGUF_MAX_ARRAY_DEPTH, &buf, &len), 0);
    if (ds4_gguf_parse(&g, buf, len, "deep.gguf", &err)) fail_msg("%s", err.msg);
    /* The innermost array ends the file. */
    uint64_t next;
    assert_int_equal(ds4_gguf_skip_value(&g, GGUF_ARR, g.kv[0].value_off, &next, &err), 0);
    assert_int_equal(next, len);
    ds4_gguf_close(&g);
    free(buf);
}

/* Every proper prefix of the small file fails with a message naming it. */
static void test_truncations(void **state) {
    (void)state;
    uint8_t *buf;
    size_t len;
    assert_int_equal(mf_valid_small(3, &buf, &len), 0);
    for (size_t n = 0; n < len; n++) {
        /* A copy of exactly n bytes so that valgrind sees any overread. */
        uint8_t *prefix = malloc(n ? n : 1);
        memcpy(prefix, buf, n);
        ds4_gguf_file g;
        ds4err err = {0};
        if (ds4_gguf_parse(&g, prefix, n, "prefix.gguf", &err) == 0)
            fail_msg("prefix of %zu bytes parsed", n);
        assert_err(&err, DS4_E_FORMAT, "prefix.gguf", "(at byte ");
        free(prefix);
    }
    free(buf);
}

/* Same for the round-trip file, up to the end of its last tensor (the
 * trailing padding is not required). */
static void test_truncations_rich(void **state) {
    (void)state;
    fill_long_str();
    rt r = {.alignment = 32};
    ds4err err = {0};
    ds4_gguf_writer *w = build_rt_writer(&r);
    assert_int_equal(writer_bytes(w, &r.buf, &r.len, &err), 0);
    rt_layout l = expected_layout(32);
    const spec_tensor *last = &spec_tensors[N_SPEC_TENSORS - 1];
    uint64_t end = l.data_off + l.rel_off[N_SPEC_TENSORS - 1] + last->nbytes;
    for (uint64_t n = 0; n < end; n += (n > 1000 && n < 100000) ? 997 : 1) {
        ds4_gguf_file g;
        if (ds4_gguf_parse(&g, r.buf, n, "rich.gguf", &err) == 0)
            fail_msg("prefix of %llu bytes parsed", (unsigned long long)n);
        assert_err(&err, DS4_E_FORMAT, "rich.gguf", "(at byte ");
    }
    ds4_gguf_file g;
    assert_int_equal(ds4_gguf_parse(&g, r.buf, end, "rich.gguf", &err), 0);
    ds4_gguf_close(&g);
    ds4_gguf_writer_free(w);
    rt_free(&r);
}

/* Single-byte corruptions anywhere: parse or fail cleanly, never crash
 * (valgrind checks the reads). */
static void test_corruptions(void **state) {
    (void)state;
    static const uint8_t values[] = {0x00, 0x01, 0x02, 0x07, 0x09, 0x0d, 0x20, 0x7f, 0x80, 0xff};
    uint8_t *buf;
    size_t len;
    assert_int_equal(mf_valid_small(3, &buf, &len), 0);
    int failures = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t keep = buf[i];
        for (size_t v = 0; v < sizeof(values); v++) {
            buf[i] = values[v];
            ds4_gguf_file g;
            ds4err err = {0};
            if (ds4_gguf_parse(&g, buf, len, "flip.gguf", &err) == 0) {
                ds4_gguf_close(&g);
                continue;
            }
            failures++;
            if (!strstr(err.msg, "flip.gguf")) fail_msg("message without file name: %s", err.msg);
        }
        buf[i] = keep;
    }
    assert_true(failures > 0);
    free(buf);
}

static void test_open_errors(void **state) {
    (void)state;
    ds4_gguf_file g;
    ds4err err = {0};
    assert_int_equal(ds4_gguf_open(&g, "/nonexistent/dir/m.gguf", &err), -1);
    assert_err(&err, DS4_E_IO, "/nonexistent/dir/m.gguf", "cannot open");
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    assert_int_equal(ds4_gguf_open(&g, dir, &err), -1);
    assert_err(&err, DS4_E_IO, dir, "not a regular file");
    /* An empty file and a malformed one through the mmap path. */
    char *path = tu_path(dir, "bad.gguf");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(ds4_gguf_open(&g, path, &err), -1);
    assert_err(&err, DS4_E_FORMAT, path, "truncated");
    uint8_t *buf;
    size_t len;
    assert_int_equal(mf_valid_small(3, &buf, &len), 0);
    buf[4] = 1;
    f = fopen(path, "wb");
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
    assert_int_equal(ds4_gguf_open(&g, path, &err), -1);
    assert_err(&err, DS4_E_FORMAT, path, "GGUF v1");
    free(buf);
    free(path);
    tu_rmdir(dir);
}

/* ========================================================================
 * Getters.
 * ======================================================================== */

typedef struct getter_file {
    uint8_t *buf;
    size_t len;
    ds4_gguf_file g;
} getter_file;

static int getter_setup(void **state) {
    static const uint32_t u3[] = {1, 2, 3};
    static const int32_t ineg[] = {5, -1};
    static const uint32_t ubig[] = {7, 2147483648u};
    static const uint8_t f64big[] = {
        12, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0xe0, 0x3f,                      /* 0.5 */
        0x9c, 0x75, 0x00, 0x88, 0x3c, 0xe4, 0x37, 0x7e,    /* 1e300 */
    };
    static const uint8_t i64arr[] = {
        11, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0x80, 0xff, 0xff, 0xff, 0xff,            /* -2^31 */
    };
    getter_file *f = calloc(1, sizeof(*f));
    ds4_gguf_writer *w = ds4_gguf_writer_new(32);
    ds4err err = {0};
    int rc = !f || !w || ds4_gguf_write_u8(w, "u8", 7) || ds4_gguf_write_u16(w, "u16", 65535) ||
             ds4_gguf_write_u32(w, "u32", UINT32_MAX) || ds4_gguf_write_u64(w, "u64.small", 5) ||
             ds4_gguf_write_u64(w, "u64.big", 1ull << 32) || ds4_gguf_write_i32(w, "i32.neg", -1) ||
             ds4_gguf_write_i8(w, "i8.pos", 100) || ds4_gguf_write_i64(w, "i64.big", 1ll << 40) ||
             ds4_gguf_write_i64(w, "i64.min", INT64_MIN) || ds4_gguf_write_f32(w, "f32", 1.5f) ||
             ds4_gguf_write_f64(w, "f64", 0.1) || ds4_gguf_write_f64(w, "f64.big", 1e300) ||
             ds4_gguf_write_f64(w, "f64.nan", NAN) || ds4_gguf_write_bool(w, "bool", true) ||
             ds4_gguf_write_str(w, "str", "text") || ds4_gguf_write_arr_u32(w, "arr.u32", u3, 3) ||
             ds4_gguf_write_arr_i32(w, "arr.ineg", ineg, 2) || ds4_gguf_write_arr_u32(w,
                                    "arr.ubig", ubig, 2) ||
             ds4_gguf_write_raw(w, "arr.f64big", GGUF_ARR, f64big, sizeof(f64big)) ||
             ds4_gguf_write_raw(w, "arr.i64", GGUF_ARR, i64arr, sizeof(i64arr)) ||
             ds4_gguf_write_arr_str(w, "arr.str", (const char *const[]){"p", "qq"}, NULL, 2) ||
             writer_bytes(w, &f->buf, &f->len, &err) ||
             ds4_gguf_parse(&f->g, f->buf, f->len, "get.gguf", &err);
    ds4_gguf_writer_free(w);
    if (rc) {
        fprintf(stderr, "getter_setup: %s\n", err.msg);
        if (f) free(f->buf);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int getter_teardown(void **state) {
    getter_file *f = *state;
    ds4_gguf_close(&f->g);
    free(f->buf);
    free(f);
    return 0;
}

static void test_get_u32(void **state) {
    const ds4_gguf_file *g = &((getter_file *)*state)->g;
    ds4err err = {0};
    uint32_t v = 0;
    assert_int_equal(ds4_gguf_get_u32(g, "u8", &v, &err), 0);
    assert_int_equal(v, 7);
    assert_int_equal(ds4_gguf_get_u32(g, "u16", &v, &err), 0);
    assert_int_equal(v, 65535);
    assert_int_equal(ds4_gguf_get_u32(g, "u32", &v, &err), 0);
    assert_int_equal(v, UINT32_MAX);
    assert_int_equal(ds4_gguf_get_u32(g, "u64.small", &v, &err), 0);
    assert_int_equal(v, 5);
    assert_int_equal(ds4_gguf_get_u32(g, "i8.pos", &v, &err), 0);
    assert_int_equal(v, 100);
    assert_int_equal(ds4_gguf_get_u32(g, "u64.big", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf",
               "key 'u64.big' (at byte ");
    assert_err(&err, DS4_E_MODEL, "get.gguf",
               "expected an integer in [0, 4294967295], got 4294967296 (u64)");
    assert_int_equal(ds4_gguf_get_u32(g, "i32.neg", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "got -1 (i32)");
    assert_int_equal(ds4_gguf_get_u32(g, "f32", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "key 'f32' (value at byte ");
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected an integer (u32), got f32");
    assert_int_equal(ds4_gguf_get_u32(g, "nope", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "metadata key 'nope' is missing");
}

static void test_get_u64(void **state) {
    const ds4_gguf_file *g = &((getter_file *)*state)->g;
    ds4err err = {0};
    uint64_t v = 0;
    assert_int_equal(ds4_gguf_get_u64(g, "u64.big", &v, &err), 0);
    assert_int_equal(v, 1ull << 32);
    assert_int_equal(ds4_gguf_get_u64(g, "i64.big", &v, &err), 0);
    assert_int_equal(v, 1ull << 40);
    assert_int_equal(ds4_gguf_get_u64(g, "u8", &v, &err), 0);
    assert_int_equal(v, 7);
    assert_int_equal(ds4_gguf_get_u64(g, "i32.neg", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected a non-negative integer, got -1 (i32)");
    assert_int_equal(ds4_gguf_get_u64(g, "i64.min", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "got -9223372036854775808 (i64)");
    assert_int_equal(ds4_gguf_get_u64(g, "str", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected an integer (u64), got str");
}

static void test_get_f32(void **state) {
    const ds4_gguf_file *g = &((getter_file *)*state)->g;
    ds4err err = {0};
    float v = 0;
    assert_int_equal(ds4_gguf_get_f32(g, "f32", &v, &err), 0);
    assert_true(v == 1.5f);
    assert_int_equal(ds4_gguf_get_f32(g, "f64", &v, &err), 0);
    assert_true(v == 0.1f);
    assert_int_equal(ds4_gguf_get_f32(g, "f64.big", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected a finite value representable as f32, got "
               "1.0000000000000001e+300 (f64)");
    assert_int_equal(ds4_gguf_get_f32(g, "f64.nan", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "representable as f32, got nan");
    assert_int_equal(ds4_gguf_get_f32(g, "u32", &v, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected f32 or f64, got u32");
}

static void test_get_bool_str(void **state) {
    const ds4_gguf_file *g = &((getter_file *)*state)->g;
    ds4err err = {0};
    bool b = false;
    ds4_gguf_str s;
    assert_int_equal(ds4_gguf_get_bool(g, "bool", &b, &err), 0);
    assert_true(b);
    assert_int_equal(ds4_gguf_get_bool(g, "u8", &b, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "key 'u8' (value at byte ");
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected bool, got u8");
    assert_int_equal(ds4_gguf_get_str(g, "str", &s, &err), 0);
    assert_true(str_eq(s, "text", 4));
    assert_int_equal(ds4_gguf_get_str(g, "arr.u32", &s, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected str, got arr[u32; 3]");
    assert_int_equal(ds4_gguf_get_str(g, "missing", &s, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "'missing' is missing");
}

static void test_get_arrays(void **state) {
    const ds4_gguf_file *g = &((getter_file *)*state)->g;
    ds4err err = {0};
    uint32_t u[3];
    int32_t i[2];
    float f[2];
    assert_int_equal(ds4_gguf_get_arr_u32(g, "arr.u32", u, 2, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "key 'arr.u32' (value at byte ");
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected 2 elements, got 3");
    assert_int_equal(ds4_gguf_get_arr_u32(g, "arr.ineg", u, 2, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "key 'arr.ineg' element 1 (at byte ");
    assert_err(&err, DS4_E_MODEL, "get.gguf", "got -1 (i32)");
    assert_int_equal(ds4_gguf_get_arr_i32(g, "arr.ineg", i, 2, &err), 0);
    assert_true(i[0] == 5 && i[1] == -1);
    assert_int_equal(ds4_gguf_get_arr_i32(g, "arr.ubig", i, 2, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "element 1");
    assert_err(&err, DS4_E_MODEL, "get.gguf",
               "expected an integer in [-2147483648, 2147483647], got 2147483648 (u32)");
    assert_int_equal(ds4_gguf_get_arr_u32(g, "arr.ubig", u, 2, &err), 0);
    assert_true(u[0] == 7 && u[1] == 2147483648u);
    assert_int_equal(ds4_gguf_get_arr_i32(g, "arr.i64", i, 1, &err), 0);
    assert_true(i[0] == INT32_MIN);
    assert_int_equal(ds4_gguf_get_arr_f32(g, "arr.f64big", f, 2, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "key 'arr.f64big' element 1");
    assert_int_equal(ds4_gguf_get_arr_f32(g, "arr.u32", f, 3, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected an f32 or f64 array, got arr[u32; 3]");
    assert_int_equal(ds4_gguf_get_arr_u32(g, "u32", u, 1, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected an integer array, got u32");
    assert_int_equal(ds4_gguf_get_arr_u32(g, "none", u, 1, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "is missing");

    ds4_gguf_str s[2];
    uint64_t n = 0;
    assert_int_equal(ds4_gguf_get_arr_str(g, "arr.str", NULL, 0, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ds4_gguf_get_arr_str(g, "arr.str", s, 1, &n, &err), -1);
    assert_err(&err, DS4_E_ARG, "get.gguf", "expected at most 1 strings");
    assert_int_equal(ds4_gguf_get_arr_str(g, "arr.str", s, 2, &n, &err), 0);
    assert_true(str_eq(s[0], "p", 1) && str_eq(s[1], "qq", 2));
    assert_int_equal(ds4_gguf_get_arr_str(g, "arr.u32", s, 2, &n, &err), -1);
    assert_err(&err, DS4_E_MODEL, "get.gguf", "expected arr[str], got arr[u32; 3]");
}

static void test_read_scalar_checks(void **state) {
    const ds4_gguf_file *g = &((getter_file *)*state)->g;
    ds4err err = {0};
    ds4_gguf_scalar s;
    uint64_t next;
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_U8, g->size + 1, &s, &next, &err), -1);
    assert_err(&err, DS4_E_ARG, "get.gguf", "past end of file");
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_U64, g->size - 4, &s, &next, &err), -1);
    assert_err(&err, DS4_E_FORMAT, "get.gguf", "truncated");
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_ARR, 0, &s, &next, &err), -1);
    assert_err(&err, DS4_E_ARG, "get.gguf", "not a scalar");
    assert_int_equal(ds4_gguf_read_scalar(g, 77, 0, &s, &next, &err), -1);
    assert_err(&err, DS4_E_FORMAT, "get.gguf", "unknown value type");
    /* Offset 0 holds "GGUF": as a u32 that is the magic. */
    assert_int_equal(ds4_gguf_read_scalar(g, GGUF_U32, 0, &s, &next, &err), 0);
    assert_int_equal(s.v.u, 0x46554747);
    assert_int_equal(next, 4);
    assert_string_equal(ds4_gguf_vtype_name(GGUF_F64), "f64");
    assert_string_equal(ds4_gguf_vtype_name(13), "unknown");
}

/* ========================================================================
 * The oracle's files against its gguf_info.txt.
 * ======================================================================== */

/* Checks the tensor lines ("  name TYPE [ne0, ne1] offset") and metadata
 * lines ("  key = type value") of one "== file" section of gguf_info.txt. */
static void check_against_info(const ds4_gguf_file *g, char *section) {
    uint64_t n_kv = 0, n_t = 0;
    bool in_tensors = false;
    for (char *line = strtok(section, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "  tensor ", 9) == 0) {
            in_tensors = true;
            continue;
        }
        if (strncmp(line, "  ", 2) != 0) continue;
        if (!in_tensors) {
            char key[256], type[64];
            if (sscanf(line, " %255s = %63s", key, type) != 2) fail_msg("bad line: %s", line);
            assert_true(n_kv < g->n_kv);
            const ds4_gguf_kv *kv = &g->kv[n_kv++];
            assert_string_equal(kv->key, key);
            char ours[64];
            if (kv->type == GGUF_ARR)
                snprintf(ours, sizeof(ours), "arr[%s;", ds4_gguf_vtype_name(kv->arr_type));
            else
                snprintf(ours, sizeof(ours), "%s", ds4_gguf_vtype_name(kv->type));
            assert_string_equal(ours, type);
            unsigned long long v;
            if (kv->type == GGUF_U32 && sscanf(strstr(line, " = ") + 7, "%llu", &v) == 1) {
                uint32_t got;
                ds4err err = {0};
                assert_int_equal(ds4_gguf_get_u32(g, key, &got, &err), 0);
                assert_int_equal(got, v);
            }
            continue;
        }
        char name[256], type[32], dims[128];
        unsigned long long off;
        if (sscanf(line, " %255s %31s [%127[^]]] %llu", name, type, dims, &off) != 4)
            fail_msg("bad tensor line: %s", line);
        const ds4_gguf_tensor *t = ds4_gguf_find_tensor(g, name);
        if (!t) fail_msg("tensor %s missing", name);
        assert_ptr_equal(t, &g->tensors[n_t]);
        n_t++;
        assert_int_equal(strcasecmp(ds4_types_name(t->type), type), 0);
        uint64_t ne[4] = {1, 1, 1, 1};
        uint32_t nd = 0;
        for (char *p = dims; *p && nd < 4; nd++) {
            ne[nd] = strtoull(p, &p, 10);
            while (*p == ',' || *p == ' ') p++;
        }
        assert_int_equal(t->n_dims, nd);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], ne[d]);
        assert_int_equal(g->data_off + t->rel_off, off);
        assert_ptr_equal(t->data, g->map + off);
    }
    assert_int_equal(n_kv, g->n_kv);
    assert_int_equal(n_t, g->n_tensors);
}

static void check_official(const char *file) {
    char *info_path = tu_official("gguf_info.txt");
    char *path = tu_official(file);
    if (!info_path || !path) fail_msg("the official oracle is missing");
    uint8_t *info;
    size_t len;
    assert_int_equal(tu_read_file(info_path, &info, &len), 0);
    char *text = malloc(len + 1);
    memcpy(text, info, len);
    text[len] = '\0';
    ds4_gguf_file g;
    ds4err err = {0};
    if (ds4_gguf_open(&g, path, &err)) fail_msg("%s", err.msg);
    /* The section of this file: from its "== file:" line to the next "==". */
    char head[160];
    snprintf(head, sizeof(head), "== %s: GGUF v3, %llu metadata keys, %llu tensors, %llu bytes",
             file, (unsigned long long)g.n_kv, (unsigned long long)g.n_tensors,
             (unsigned long long)g.size);
    char *start = strstr(text, head);
    if (!start) fail_msg("'%s' not in gguf_info.txt", head);
    start += strlen(head);
    char *end = strstr(start, "\n==");
    if (end) *end = '\0';
    check_against_info(&g, start);
    assert_int_equal(g.version, 3);
    assert_int_equal(g.alignment, 32);
    ds4_gguf_close(&g);
    free(text);
    free(info);
    free(path);
    free(info_path);
}

static void test_official_model(void **state) {
    (void)state;
    check_official("model.gguf");
}

static void test_official_mtp(void **state) {
    (void)state;
    check_official("model-mtp.gguf");
}

/* tiny-ds4types: the real type mix, checked against the oracle README's
 * tensor table (n_embd 256, vocab 512, expert FF 256, 8 experts). */
static void test_tiny_ds4types(void **state) {
    (void)state;
    char *path = tu_shared("oracle/tiny-ds4types/model.gguf");
    if (!path) skip();
    ds4_gguf_file g;
    ds4err err = {0};
    if (ds4_gguf_open(&g, path, &err)) fail_msg("%s", err.msg);
    assert_int_equal(g.size, 5907872);
    assert_int_equal(g.n_tensors, 116);
    static const struct {
        const char *name;
        uint32_t type;
        uint64_t ne0, ne1, ne2;
    } want[] = {
        {"token_embd.weight", F16, 256, 512, 1},
        {"output.weight", Q8_0, 256, 512, 1},
        {"output_norm.weight", F32, 256, 1, 1},
        {"blk.0.ffn_gate_tid2eid.weight", I32, 2, 512, 1},
        {"blk.1.ffn_gate_exps.weight", IQ2_XXS, 256, 256, 8},
        {"blk.1.ffn_down_exps.weight", Q2_K, 256, 256, 8},
        {"blk.2.attn_q_a.weight", Q8_0, 256, 64, 1},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const ds4_gguf_tensor *t = ds4_gguf_find_tensor(&g, want[i].name);
        if (!t) fail_msg("missing %s", want[i].name);
        assert_int_equal(t->type, want[i].type);
        assert_int_equal(t->ne[0], want[i].ne0);
        assert_int_equal(t->ne[1], want[i].ne1);
        assert_int_equal(t->ne[2], want[i].ne2);
    }
    uint32_t ratios[4];
    assert_int_equal(ds4_gguf_get_arr_u32(&g, "deepseek4.attention.compress_ratios", ratios, 4,
                     &err),
                     0);
    assert_true(ratios[0] == 0 && ratios[1] == 0 && ratios[2] == 4 && ratios[3] == 128);
    uint64_t n_tok;
    assert_int_equal(ds4_gguf_get_arr_str(&g, "tokenizer.ggml.tokens", NULL, 0, &n_tok, &err), 0);
    assert_int_equal(n_tok, 512);
    ds4_gguf_close(&g);
    free(path);
}

/* ds4ref-gguf info's listing (ds4ref_gguf_describe) of the file w makes,
 * as a malloc'd string. */
static char *describe_text(ds4_gguf_writer *w) {
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "s.gguf"), *txt = tu_path(dir, "s.txt");
    ds4err err = {0};
    if (ds4_gguf_writer_save(w, path, &err)) fail_msg("%s", err.msg);
    ds4_gguf_writer_free(w);
    FILE *f = fopen(txt, "w+");
    assert_non_null(f);
    ds4ref_error e;
    assert_int_equal(ds4ref_gguf_describe(path, f, &e), 0);
    fclose(f);
    uint8_t *out;
    size_t len;
    assert_int_equal(tu_read_file(txt, &out, &len), 0);
    out = realloc(out, len + 1);
    out[len] = '\0';
    remove(path);
    remove(txt);
    free(path);
    free(txt);
    tu_rmdir(dir);
    return (char *)out;
}

static void expect_line(const char *out, const char *want) {
    if (!strstr(out, want)) fail_msg("not found: %s\nin: %s", want, out);
}

/* ds4ref-gguf info (ds4ref_gguf_describe) prints metadata strings safely
 * for a terminal: printable ASCII and well-formed UTF-8 as they are; quotes,
 * backslashes, controls, C1 controls, surrogates and stray bytes escaped. */
static void test_describe_escapes_strings(void **state) {
    (void)state;
    static const char value[] = "a\"\\\n\x01\xc2\x85" "b\xc3\xa9\xed\xa0\x80\xff" "c";
    ds4_gguf_writer *w = ds4_gguf_writer_new(32);
    assert_int_equal(ds4_gguf_write_str_n(w, "t.s", value, sizeof(value) - 1), 0);
    char *out = describe_text(w);
    expect_line(out, "t.s = str \"a\\\"\\\\\\n\\x01\\xc2\\x85b\xc3\xa9\\xed\\xa0\\x80\\xffc\"");
    free(out);
}

/* Floats as Python's repr writes them: the shortest digits that read back
 * (as the float32 for f32 keys), positional from 1e-4 to below 1e16; C's
 * spelling of the infinities and NaN.  The expected strings are Python's
 * repr() of the values (of the float32's shortest digits for f32). */
static void test_describe_floats(void **state) {
    (void)state;
    ds4_gguf_writer *w = ds4_gguf_writer_new(32);
    assert_int_equal(ds4_gguf_write_f32(w, "f.tenth", 0.1f), 0);
    assert_int_equal(ds4_gguf_write_f32(w, "f.eps", 1e-6f), 0);
    assert_int_equal(ds4_gguf_write_f32(w, "f.big", 3e10f),
                     0);        /* 30000001024 as a float32 */
    assert_int_equal(ds4_gguf_write_f32(w, "f.inf", INFINITY), 0);
    assert_int_equal(ds4_gguf_write_f64(w, "d.pow2", 0x1p-24),
                     0);     /* a lopsided rounding interval */
    assert_int_equal(ds4_gguf_write_f64(w, "d.negzero", -0.0), 0);
    assert_int_equal(ds4_gguf_write_f64(w, "d.e16", 1e16), 0);
    assert_int_equal(ds4_gguf_write_f64(w, "d.e15", 1e15), 0);
    assert_int_equal(ds4_gguf_write_f64(w, "d.small", 1.5e-5), 0);
    assert_int_equal(ds4_gguf_write_f64(w, "d.nan", NAN), 0);
    char *out = describe_text(w);
    expect_line(out, "f.tenth = f32 0.1\n");
    expect_line(out, "f.eps = f32 1e-06\n");
    expect_line(out, "f.big = f32 30000000000.0\n");
    expect_line(out, "f.inf = f32 inf\n");
    expect_line(out, "d.pow2 = f64 5.960464477539063e-08\n");
    expect_line(out, "d.negzero = f64 -0.0\n");
    expect_line(out, "d.e16 = f64 1e+16\n");
    expect_line(out, "d.e15 = f64 1000000000000000.0\n");
    expect_line(out, "d.small = f64 1.5e-05\n");
    expect_line(out, "d.nan = f64 nan\n");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_align32),
        cmocka_unit_test(test_round_trip_align64),
        cmocka_unit_test(test_writer_deterministic),
        cmocka_unit_test(test_writer_bytes),
        cmocka_unit_test(test_writer_own_alignment_key),
        cmocka_unit_test(test_writer_save_fails_cleanly),
        cmocka_unit_test(test_valid_small),
        cmocka_unit_test(test_catalogue),
        cmocka_unit_test(test_describe_escapes_strings),
        cmocka_unit_test(test_describe_floats),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_truncations_rich),
        cmocka_unit_test(test_corruptions),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test_setup_teardown(test_get_u32, getter_setup, getter_teardown),
        cmocka_unit_test_setup_teardown(test_get_u64, getter_setup, getter_teardown),
        cmocka_unit_test_setup_teardown(test_get_f32, getter_setup, getter_teardown),
        cmocka_unit_test_setup_teardown(test_get_bool_str, getter_setup, getter_teardown),
        cmocka_unit_test_setup_teardown(test_get_arrays, getter_setup, getter_teardown),
        cmocka_unit_test_setup_teardown(test_read_scalar_checks, getter_setup, getter_teardown),
        cmocka_unit_test(test_official_model),
        cmocka_unit_test(test_official_mtp),
        cmocka_unit_test(test_tiny_ds4types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
