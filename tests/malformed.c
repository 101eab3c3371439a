/* The malformed-GGUF catalogue.  Each case is a tiny file with exactly one
 * thing wrong, written out field by field so that the bytes can be read
 * against the GGUF layout. */
#include "malformed.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "quant/gguf.h"

/* ========================================================================
 * A byte builder with sticky OOM.
 * ======================================================================== */

typedef struct bb {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} bb;

static void b_bytes(bb *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void b_u8(bb *b, uint8_t v) { b_bytes(b, &v, 1); }

static void b_u32(bb *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b_u8(b, (uint8_t)(v >> 8 * i));
}

static void b_u64(bb *b, uint64_t v) {
    b_u32(b, (uint32_t)v);
    b_u32(b, (uint32_t)(v >> 32));
}

static void b_strn(bb *b, const char *s, size_t n) {
    b_u64(b, n);
    b_bytes(b, s, n);
}

static void b_str(bb *b, const char *s) { b_strn(b, s, strlen(s)); }

static void b_pad(bb *b, size_t align) {
    while (b->len % align) b_u8(b, 0);
}

/* Data bytes 0, 1, 2, ... so that a wrong offset reads visibly wrong data. */
static void b_data(bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) b_u8(b, (uint8_t)i);
}

static void b_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_bytes(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}

static void b_key(bb *b, const char *key, uint32_t type) {
    b_str(b, key);
    b_u32(b, type);
}

static void b_kv_u32(bb *b, const char *key, uint32_t v) {
    b_key(b, key, GGUF_U32);
    b_u32(b, v);
}

static void b_tensor(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                     uint64_t off) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) b_u64(b, ne[d]);
    b_u32(b, type);
    b_u64(b, off);
}

/* ========================================================================
 * Base files.
 * ======================================================================== */

enum { T_F32 = 0, T_F16 = 1, T_Q8_0 = 8, T_Q6_K = 14 };

static void valid_small(bb *b, uint32_t version) {
    b_header(b, version, 2, 3);
    b_kv_u32(b, "general.alignment", 32);
    b_key(b, "a.str", GGUF_STR);
    b_str(b, "hi");
    b_key(b, "a.arr", GGUF_ARR);
    b_u32(b, GGUF_U8);
    b_u64(b, 3);
    b_u8(b, 1);
    b_u8(b, 2);
    b_u8(b, 3);
    b_tensor(b, "t0", 2, (const uint64_t[]){4, 2}, T_F32, 0);
    b_tensor(b, "t1", 1, (const uint64_t[]){32}, T_F16, 32);
    b_pad(b, 32);
    b_data(b, 32 + 64);
}

/* One key (written by the caller after this), no tensors. */
static void one_kv(bb *b) { b_header(b, 3, 0, 1); }

/* One tensor "w", no keys, default alignment, `data` bytes of data. */
static void one_tensor(bb *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off,
                       size_t data) {
    b_header(b, 3, 1, 0);
    b_tensor(b, "w", n_dims, ne, type, off);
    b_pad(b, 32);
    b_data(b, data);
}

/* Overwrite a little-endian u32/u64 already written at `off`. */
static void patch(bb *b, size_t off, uint64_t v, int bytes) {
    if (b->oom || off + (size_t)bytes > b->len) return;
    for (int i = 0; i < bytes; i++) b->p[off + (size_t)i] = (uint8_t)(v >> 8 * i);
}

static void nested(bb *b, int depth) {
    one_kv(b);
    b_key(b, "nested", GGUF_ARR);
    for (int d = 1; d < depth; d++) {
        b_u32(b, GGUF_ARR);
        b_u64(b, 1);
    }
    b_u32(b, GGUF_U8);
    b_u64(b, 0);
}

static void alignment_file(bb *b, uint32_t type, uint64_t v, int bytes) {
    b_header(b, 3, 1, 1);
    b_key(b, "general.alignment", type);
    for (int i = 0; i < bytes; i++) b_u8(b, (uint8_t)(v >> 8 * i));
    b_tensor(b, "w", 1, (const uint64_t[]){8}, T_F32, 0);
    b_pad(b, 32);
    b_data(b, 32);
}

/* ========================================================================
 * The cases.  Header fields of valid_small: magic 0, version 4,
 * n_tensors 8, n_kv 16.
 * ======================================================================== */

static void c_empty(bb *b) { (void)b; }

static void c_short_header(bb *b) {
    valid_small(b, 3);
    if (b->len > 10) b->len = 10;
}

/* Patches of one header field of the valid file. */
static void c_bad_magic(bb *b) {
    valid_small(b, 3);
    patch(b, 0, 0x46554758, 4);   /* "XGUF" */
}

static void c_big_endian(bb *b) {
    valid_small(b, 3);
    patch(b, 4, 0x03000000, 4);   /* version 3 written big-endian */
}

static void c_version_0(bb *b) {
    valid_small(b, 3);
    patch(b, 4, 0, 4);
}

static void c_version_1(bb *b) {
    valid_small(b, 3);
    patch(b, 4, 1, 4);
}

static void c_version_4(bb *b) {
    valid_small(b, 3);
    patch(b, 4, 4, 4);
}

static void c_n_kv_absurd(bb *b) {
    valid_small(b, 3);
    patch(b, 16, 1ull << 62, 8);
}

static void c_n_kv_max(bb *b) {
    valid_small(b, 3);
    patch(b, 16, UINT64_MAX, 8);
}

static void c_n_tensors_absurd(bb *b) {
    valid_small(b, 3);
    patch(b, 8, 1ull << 40, 8);
}

static void c_n_tensors_max(bb *b) {
    valid_small(b, 3);
    patch(b, 8, UINT64_MAX, 8);
}

/* Counts that pass the up-front bound, but the records are not there. */
static void c_kv_missing(bb *b) {
    b_header(b, 3, 0, 2);
    b_key(b, "k", GGUF_STR);
    b_strn(b, "0123456789012345678901234567890123456789", 40);
}

static void c_tensor_missing(bb *b) {
    b_header(b, 3, 2, 1);
    b_key(b, "k", GGUF_STR);
    b_strn(b, "0123456789012345678901234567890123456789", 40);
    b_tensor(b, "w", 1, (const uint64_t[]){8}, T_F32, 0);
}

static void c_key_len_absurd(bb *b) {
    one_kv(b);
    b_u64(b, 1ull << 63);
    b_bytes(b, "key", 3);
    b_u32(b, GGUF_U8);
    b_u8(b, 0);
}

static void c_key_len_past_eof(bb *b) {
    one_kv(b);
    b_u64(b, 100);
    b_bytes(b, "key", 3);
    b_u32(b, GGUF_U8);
    b_u8(b, 0);
}

static void c_str_len_absurd(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_STR);
    b_u64(b, UINT64_MAX);
    b_bytes(b, "abc", 3);
}

static void c_arr_len_absurd(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_ARR);
    b_u32(b, GGUF_U32);
    b_u64(b, 1ull << 40);
    b_u32(b, 7);
}

static void c_arr_len_max(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_ARR);
    b_u32(b, GGUF_U64);
    b_u64(b, UINT64_MAX);
    b_u64(b, 7);
}

static void c_arr_str_len_absurd(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_ARR);
    b_u32(b, GGUF_STR);
    b_u64(b, 1ull << 61);
    b_str(b, "x");
}

static void c_arr_str_elem_len_absurd(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_ARR);
    b_u32(b, GGUF_STR);
    b_u64(b, 2);
    b_str(b, "x");
    b_u64(b, 1ull << 50);
    b_bytes(b, "yz", 2);
}

static void c_arr_arr_len_absurd(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_ARR);
    b_u32(b, GGUF_ARR);
    b_u64(b, UINT64_MAX / 2);
    b_u32(b, GGUF_U8);
    b_u64(b, 0);
}

static void c_vtype_13(bb *b) {
    one_kv(b);
    b_key(b, "k", 13);
    b_u32(b, 0);
}

static void c_vtype_max(bb *b) {
    one_kv(b);
    b_key(b, "k", UINT32_MAX);
    b_u32(b, 0);
}

static void c_arr_vtype_unknown(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_ARR);
    b_u32(b, 99);
    b_u64(b, 1);
    b_u32(b, 0);
}

static void c_nested_too_deep(bb *b) { nested(b, GGUF_MAX_ARRAY_DEPTH + 1); }

static void c_bool_2(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_BOOL);
    b_u8(b, 2);
}

static void c_bool_arr_2(bb *b) {
    one_kv(b);
    b_key(b, "k", GGUF_ARR);
    b_u32(b, GGUF_BOOL);
    b_u64(b, 3);
    b_u8(b, 1);
    b_u8(b, 0);
    b_u8(b, 2);
}

static void c_dup_key(bb *b) {
    b_header(b, 3, 0, 3);
    b_kv_u32(b, "a.b", 1);
    b_kv_u32(b, "a.c", 2);
    b_kv_u32(b, "a.b", 3);
}

static void c_empty_key(bb *b) {
    one_kv(b);
    b_key(b, "", GGUF_U32);
    b_u32(b, 1);
}

static void c_key_nul(bb *b) {
    one_kv(b);
    b_strn(b, "a\0b", 3);
    b_u32(b, GGUF_U32);
    b_u32(b, 1);
}

static void c_dup_tensor(bb *b) {
    b_header(b, 3, 3, 0);
    b_tensor(b, "w", 1, (const uint64_t[]){8}, T_F32, 0);
    b_tensor(b, "v", 1, (const uint64_t[]){8}, T_F32, 32);
    b_tensor(b, "w", 1, (const uint64_t[]){8}, T_F32, 64);
    b_pad(b, 32);
    b_data(b, 96);
}

static void c_empty_tensor_name(bb *b) {
    b_header(b, 3, 1, 0);
    b_tensor(b, "", 1, (const uint64_t[]){8}, T_F32, 0);
    b_pad(b, 32);
    b_data(b, 32);
}

static void c_tensor_name_nul(bb *b) {
    b_header(b, 3, 1, 0);
    b_strn(b, "w\0", 2);
    b_u32(b, 1);
    b_u64(b, 8);
    b_u32(b, T_F32);
    b_u64(b, 0);
    b_pad(b, 32);
    b_data(b, 32);
}

/* One tensor "w" with one field wrong. */
static void c_n_dims_0(bb *b) { one_tensor(b, 0, NULL, T_F32, 0, 32); }

static void c_n_dims_5(bb *b) {
    one_tensor(b, 5, (const uint64_t[]){1, 1, 1, 1, 1}, T_F32, 0, 32);
}

static void c_ne_0(bb *b) { one_tensor(b, 2, (const uint64_t[]){4, 0}, T_F32, 0, 32); }

static void c_ne_absurd(bb *b) { one_tensor(b, 1, (const uint64_t[]){1ull << 63}, T_F32, 0, 32); }

static void c_n_elem_overflow(bb *b) {
    one_tensor(b, 3, (const uint64_t[]){1ull << 32, 1, 1ull << 31}, T_F32, 0, 32);
}

static void c_nbytes_overflow(bb *b) {
    one_tensor(b, 2, (const uint64_t[]){1ull << 31, 1ull << 31}, T_F32, 0, 32);
}

static void c_type_q6_k(bb *b) { one_tensor(b, 1, (const uint64_t[]){256}, T_Q6_K, 0, 256); }

static void c_type_absurd(bb *b) { one_tensor(b, 1, (const uint64_t[]){8}, 1000, 0, 32); }

static void c_ne0_not_block(bb *b) { one_tensor(b, 2, (const uint64_t[]){48, 2}, T_Q8_0, 0, 128); }

static void c_misaligned(bb *b) { one_tensor(b, 1, (const uint64_t[]){8}, T_F32, 16, 64); }

static void c_data_truncated(bb *b) { one_tensor(b, 1, (const uint64_t[]){8}, T_F32, 0, 31); }

static void c_off_past_eof(bb *b) { one_tensor(b, 1, (const uint64_t[]){8}, T_F32, 1ull << 32, 32); }

static void c_off_overflow(bb *b) {
    one_tensor(b, 1, (const uint64_t[]){8}, T_F32, UINT64_MAX - 31, 32);
}

static void c_overlap(bb *b) {
    b_header(b, 3, 2, 0);
    b_tensor(b, "a", 1, (const uint64_t[]){16}, T_F32, 0);
    b_tensor(b, "b", 1, (const uint64_t[]){8}, T_F32, 32);
    b_pad(b, 32);
    b_data(b, 64);
}

static void c_same_offset(bb *b) {
    b_header(b, 3, 2, 0);
    b_tensor(b, "a", 1, (const uint64_t[]){8}, T_F32, 32);
    b_tensor(b, "b", 1, (const uint64_t[]){8}, T_F32, 32);
    b_pad(b, 32);
    b_data(b, 64);
}

static void c_align_0(bb *b) { alignment_file(b, GGUF_U32, 0, 4); }

static void c_align_48(bb *b) { alignment_file(b, GGUF_U32, 48, 4); }

static void c_align_2_17(bb *b) { alignment_file(b, GGUF_U32, 1u << 17, 4); }

static void c_align_neg(bb *b) { alignment_file(b, GGUF_I32, (uint32_t)-32, 4); }

static void c_align_huge_u64(bb *b) { alignment_file(b, GGUF_U64, 1ull << 40, 8); }

static void c_align_f32(bb *b) { alignment_file(b, GGUF_F32, 0x42000000, 4); /* 32.0f */ }

static void c_align_str(bb *b) {
    b_header(b, 3, 1, 1);
    b_key(b, "general.alignment", GGUF_STR);
    b_str(b, "32");
    b_tensor(b, "w", 1, (const uint64_t[]){8}, T_F32, 0);
    b_pad(b, 32);
    b_data(b, 32);
}

/* Valid at the file's alignment of 64 only if the offset were a multiple
 * of 64. */
static void c_misaligned_64(bb *b) {
    b_header(b, 3, 2, 1);
    b_kv_u32(b, "general.alignment", 64);
    b_tensor(b, "a", 1, (const uint64_t[]){8}, T_F32, 0);
    b_tensor(b, "b", 1, (const uint64_t[]){8}, T_F32, 32);
    b_pad(b, 64);
    b_data(b, 64);
}

typedef struct mf_def {
    const char *name;
    const char *expect;
    void (*build)(bb *b);
} mf_def;

static const mf_def defs[] = {
    {"empty", "truncated file: expected 4 bytes, got 0", c_empty},
    {"short_header", "tensor count (at byte 8): truncated file", c_short_header},
    {"bad_magic", "not a GGUF file", c_bad_magic},
    {"big_endian", "unsupported GGUF version: expected 2 or 3, got 50331648", c_big_endian},
    {"version_0", "unsupported GGUF version: expected 2 or 3, got 0", c_version_0},
    {"version_1", "GGUF v1 (32-bit counts) is not supported", c_version_1},
    {"version_4", "unsupported GGUF version: expected 2 or 3, got 4", c_version_4},
    {"n_kv_absurd", "too many metadata keys", c_n_kv_absurd},
    {"n_kv_max", "too many metadata keys", c_n_kv_max},
    {"n_tensors_absurd", "too many tensors", c_n_tensors_absurd},
    {"n_tensors_max", "too many tensors", c_n_tensors_max},
    {"kv_missing", "key #1 key (at byte 85): truncated file", c_kv_missing},
    {"tensor_missing", "tensor #1 tensor name (at byte 118): truncated file", c_tensor_missing},
    {"key_len_absurd", "key #0 key (at byte 24): string length: expected at most",
     c_key_len_absurd},
    {"key_len_past_eof", "got 100", c_key_len_past_eof},
    {"str_len_absurd", "key #0 'k' value (at byte 37): string length", c_str_len_absurd},
    {"arr_len_absurd", "array length (at byte 41): expected at most 1 u32 elements",
     c_arr_len_absurd},
    {"arr_len_max", "array length (at byte 41): expected at most 1 u64 elements", c_arr_len_max},
    {"arr_str_len_absurd", "expected at most 1 str elements", c_arr_str_len_absurd},
    {"arr_str_elem_len_absurd", "array element (at byte 58): string length",
     c_arr_str_elem_len_absurd},
    {"arr_arr_len_absurd", "expected at most 1 arr elements", c_arr_arr_len_absurd},
    {"vtype_13", "unknown value type: expected 0..12, got 13", c_vtype_13},
    {"vtype_max", "unknown value type: expected 0..12, got 4294967295", c_vtype_max},
    {"arr_vtype_unknown", "array element type (at byte 37): unknown value type", c_arr_vtype_unknown},
    {"nested_too_deep", "arrays nested too deep: expected at most 8 levels, got 9",
     c_nested_too_deep},
    {"bool_2", "key #0 'k' value (at byte 37): bool value: expected 0 or 1, got 2", c_bool_2},
    {"bool_arr_2", "array element (at byte 51): bool value: expected 0 or 1, got 2", c_bool_arr_2},
    {"dup_key", "duplicate key 'a.b'", c_dup_key},
    {"empty_key", "empty key", c_empty_key},
    {"key_nul", "key 'a\\x00b' contains a NUL byte at index 1", c_key_nul},
    {"dup_tensor", "duplicate tensor name 'w'", c_dup_tensor},
    {"empty_tensor_name", "empty tensor name", c_empty_tensor_name},
    {"tensor_name_nul", "contains a NUL byte", c_tensor_name_nul},
    {"n_dims_0", "n_dims (at byte 33): expected 1..4, got 0", c_n_dims_0},
    {"n_dims_5", "n_dims (at byte 33): expected 1..4, got 5", c_n_dims_5},
    {"ne_0", "ne[1] (at byte 45): expected a dimension in [1, 2^63), got 0", c_ne_0},
    {"ne_absurd", "ne[0] (at byte 37): expected a dimension in [1, 2^63), got 9223372036854775808",
     c_ne_absurd},
    {"n_elem_overflow", "ne[2] (at byte 53): element count overflows", c_n_elem_overflow},
    {"nbytes_overflow", "byte size overflows", c_nbytes_overflow},
    {"type_q6_K", "unsupported tensor type: expected one of f32, f16, q8_0, q2_K, q4_K, iq2_xxs, "
     "i32, bf16, got 14 (q6_K)", c_type_q6_k},
    /* 1000 is ds4ref's own id of the checkpoint's FP8 (types.h), never a
     * GGUF type. */
    {"type_absurd", "unsupported tensor type: expected one of f32, f16, q8_0, q2_K, q4_K, "
     "iq2_xxs, i32, bf16, got 1000 (unknown)", c_type_absurd},
    {"ne0_not_block", "expected a multiple of the q8_0 block size 32, got 48", c_ne0_not_block},
    {"misaligned", "data offset (at byte 49): expected a multiple of the alignment 32, got 16",
     c_misaligned},
    {"misaligned_64", "expected a multiple of the alignment 64, got 32", c_misaligned_64},
    {"data_truncated", "data [64, 96) extends past end of file (95 bytes)", c_data_truncated},
    {"off_past_eof", "extends past end of file", c_off_past_eof},
    {"off_overflow", "data offset overflows", c_off_overflow},
    {"overlap", "tensor #1 'b' info (at byte 57): data [128, 160) overlaps tensor 'a' [96, 160)",
     c_overlap},
    {"same_offset", "overlaps tensor", c_same_offset},
    {"align_0", "expected a power of two in [1, 65536], got 0", c_align_0},
    {"align_48", "expected a power of two in [1, 65536], got 48", c_align_48},
    {"align_2_17", "expected a power of two in [1, 65536], got 131072", c_align_2_17},
    {"align_neg", "expected a power of two in [1, 65536], got -32", c_align_neg},
    {"align_huge_u64", "got 1099511627776", c_align_huge_u64},
    {"align_f32", "key 'general.alignment' value (at byte 53): expected an integer type, got f32",
     c_align_f32},
    {"align_str", "expected an integer type, got str", c_align_str},
};

int mf_catalogue(mf_case **cases, size_t *n) {
    size_t count = sizeof(defs) / sizeof(defs[0]);
    mf_case *c = calloc(count, sizeof(*c));
    if (!c) return -1;
    for (size_t i = 0; i < count; i++) {
        bb b = {0};
        defs[i].build(&b);
        if (b.oom) {
            free(b.p);
            mf_free(c, i);
            return -1;
        }
        c[i] = (mf_case){defs[i].name, defs[i].expect, b.p, b.len};
    }
    *cases = c;
    *n = count;
    return 0;
}

void mf_free(mf_case *cases, size_t n) {
    for (size_t i = 0; cases && i < n; i++) free(cases[i].buf);
    free(cases);
}

static int finish(bb *b, uint8_t **buf, size_t *len) {
    if (b->oom) {
        free(b->p);
        return -1;
    }
    *buf = b->p;
    *len = b->len;
    return 0;
}

int mf_valid_small(uint32_t version, uint8_t **buf, size_t *len) {
    bb b = {0};
    valid_small(&b, version);
    return finish(&b, buf, len);
}

int mf_nested_arrays(int depth, uint8_t **buf, size_t *len) {
    bb b = {0};
    nested(&b, depth);
    return finish(&b, buf, len);
}
