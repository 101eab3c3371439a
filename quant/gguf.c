/* GGUF reader.
 *
 * The file is untrusted input.  Every field is read through one cursor that
 * checks the bytes are there before touching them, every count is bounded by
 * what the rest of the file could possibly hold before anything is allocated
 * for it, and every size and offset is checked for overflow before it is
 * used.  Once ds4_gguf_open() returns 0 the whole structure has been validated,
 * so the accessors only have to find things, not distrust them.
 *
 * Lookups go through indexes sorted by key / tensor name: building them is
 * also how duplicates are found, in O(n log n) even for the ~1300 tensors of
 * the real model. */
#include "quant/gguf.h"

#include "base/bits.h"
#include "base/file.h"
#include "quant/types.h"

#include <float.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Smallest possible encodings of one record.  A count larger than the rest of
 * the file divided by these cannot be honest, and is refused before any
 * allocation sized by it. */
enum {
    HEADER_BYTES = 4 + 4 + 8 + 8,
    MIN_KV_BYTES = 8 + 1 + 4 + 1,              /* 1-byte key, 1-byte value */
    MIN_TENSOR_BYTES = 8 + 1 + 4 + 8 + 4 + 8,  /* 1-byte name, one dim */
    ARR_HEADER_BYTES = 4 + 8,
    MAX_ALIGNMENT = 1 << 16,
    DEFAULT_ALIGNMENT = 32
};

/* ========================================================================
 * Little-endian decoding.  Assembling bytes keeps the reader independent of
 * the host's byte order and of the alignment of the mapping.
 * ======================================================================== */


static double bits_f64(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

/* ========================================================================
 * Value types.
 * ======================================================================== */

static const char *const vtype_names[] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};
#define N_VTYPES (sizeof(vtype_names) / sizeof(vtype_names[0]))

const char *ds4_gguf_vtype_name(uint32_t type) {
    return type < N_VTYPES ? vtype_names[type] : "unknown";
}

/* Bytes of a fixed-size value, 0 for STR and ARR (variable size). */
static uint64_t vtype_size(uint32_t type) {
    switch (type) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* Smallest encoding of one value of `type` (an element of an array). */
static uint64_t vtype_min_size(uint32_t type) {
    if (type == GGUF_STR) return 8;
    if (type == GGUF_ARR) return ARR_HEADER_BYTES;
    return vtype_size(type);
}

static bool vtype_is_int(uint32_t type) {
    switch (type) {
    case GGUF_U8: case GGUF_I8: case GGUF_U16: case GGUF_I16: case GGUF_U32:
    case GGUF_I32: case GGUF_U64: case GGUF_I64: return true;
    default: return false;
    }
}

static bool vtype_is_signed(uint32_t type) {
    return type == GGUF_I8 || type == GGUF_I16 || type == GGUF_I32 || type == GGUF_I64;
}

/* ========================================================================
 * Names in messages.  Keys and tensor names are arbitrary bytes; quoting
 * them keeps an error message one printable line.
 * ======================================================================== */

static void quote(char *out, size_t cap, const char *s, uint64_t n) {
    size_t o = 0;
    const size_t limit = 80;
    for (uint64_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == limit) {
            o += (size_t)snprintf(out + o, cap - o, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o < cap ? o : cap - 1] = '\0';
}

/* ========================================================================
 * The parser: a bounds-checked cursor plus what is being read, for messages.
 * ======================================================================== */

typedef struct parser {
    const char *name;        /* file name for messages */
    const uint8_t *buf;
    uint64_t size;
    uint64_t pos;
    char what[160];          /* current record: "key #3 'x'", "tensor #7 'y'" */
    ds4err *err;
} parser;

/* "<file>: <record> <field> (at byte N): <detail>" */
__attribute__((format(printf, 4, 5)))
static int bad(parser *p, const char *field, uint64_t at, const char *fmt, ...) {
    char detail[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    return ds4_err_set(p->err, DS4_E_FORMAT, "%s: %s%s%s (at byte %" PRIu64 "): %s", p->name,
                      p->what, p->what[0] ? " " : "", field, at, detail);
}

static uint64_t left(const parser *p) { return p->size - p->pos; }

static int need(parser *p, const char *field, uint64_t n) {
    if (left(p) >= n) return 0;
    return bad(p, field, p->pos, "truncated file: expected %" PRIu64 " bytes, got %" PRIu64, n,
               left(p));
}

static int rd_u32(parser *p, const char *field, uint32_t *v) {
    if (need(p, field, 4)) return -1;
    *v = ds4_bits_le32(p->buf + p->pos);
    p->pos += 4;
    return 0;
}

static int rd_u64(parser *p, const char *field, uint64_t *v) {
    if (need(p, field, 8)) return -1;
    *v = ds4_bits_le64(p->buf + p->pos);
    p->pos += 8;
    return 0;
}

/* A string: u64 length, then that many bytes, which must be in the file. */
static int rd_str(parser *p, const char *field, ds4_gguf_str *s) {
    uint64_t at = p->pos, len;
    if (rd_u64(p, field, &len)) return -1;
    if (len > left(p))
        return bad(p, field, at,
                   "string length: expected at most %" PRIu64 " (bytes left in file), got %" PRIu64,
                   left(p), len);
    s->ptr = (const char *)p->buf + p->pos;
    s->len = len;
    p->pos += len;
    return 0;
}

/* A key or tensor name: a string that is non-empty and NUL-free, copied so
 * that callers get a C string. */
static int rd_name(parser *p, const char *field, char **out) {
    uint64_t at = p->pos;
    ds4_gguf_str s = {0};
    if (rd_str(p, field, &s)) return -1;
    if (s.len == 0) return bad(p, field, at, "empty %s: expected at least 1 byte, got 0", field);
    const char *nul = memchr(s.ptr, 0, s.len);
    if (nul) {
        char q[400];
        quote(q, sizeof(q), s.ptr, s.len);
        return bad(p, field, at, "%s '%s' contains a NUL byte at index %td: expected none", field,
                   q, nul - s.ptr);
    }
    if (s.len > SIZE_MAX - 1 || !(*out = malloc((size_t)s.len + 1)))
        return ds4_err_set(p->err, DS4_E_NOMEM, "%s: out of memory reading %s at byte %" PRIu64,
                          p->name, field, at);
    memcpy(*out, s.ptr, (size_t)s.len);
    (*out)[s.len] = '\0';
    return 0;
}

static void set_what(parser *p, const char *kind, uint64_t i, const char *name) {
    char q[120];
    quote(q, sizeof(q), name ? name : "", name ? strlen(name) : 0);
    if (name)
        snprintf(p->what, sizeof(p->what), "%s #%" PRIu64 " '%s'", kind, i, q);
    else
        snprintf(p->what, sizeof(p->what), "%s #%" PRIu64, kind, i);
}

/* ========================================================================
 * Metadata values: walked once at open to validate them and find where they
 * end; decoded later, on lookup.
 * ======================================================================== */

static int check_value(parser *p, uint32_t type, int depth, const char *field);

static int check_vtype(parser *p, const char *field, uint64_t at, uint32_t type) {
    if (type < N_VTYPES) return 0;
    return bad(p, field, at, "unknown value type: expected 0..%zu, got %" PRIu32, N_VTYPES - 1,
               type);
}

static int check_bool(parser *p, const char *field) {
    if (need(p, field, 1)) return -1;
    uint8_t b = p->buf[p->pos];
    if (b > 1) return bad(p, field, p->pos, "bool value: expected 0 or 1, got %u", b);
    p->pos++;
    return 0;
}

/* Array header (element type, count) and body.  `depth` is this array's
 * nesting level: 1 for a key's own array, 2 for an array inside it, ... */
static int check_array(parser *p, int depth, uint32_t *elem_type, uint64_t *n, uint64_t *first,
                       const char *field) {
    uint64_t at = p->pos;
    uint32_t et;
    uint64_t count;
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return bad(p, field, at, "arrays nested too deep: expected at most %d levels, got %d",
                   GGUF_MAX_ARRAY_DEPTH, depth);
    if (rd_u32(p, "array element type", &et)) return -1;
    if (check_vtype(p, "array element type", at, et)) return -1;
    uint64_t count_at = p->pos;
    if (rd_u64(p, "array length", &count)) return -1;
    uint64_t min = vtype_min_size(et);
    if (count > left(p) / min)
        return bad(p, "array length", count_at,
                   "expected at most %" PRIu64 " %s elements (bytes left in file), got %" PRIu64,
                   left(p) / min, ds4_gguf_vtype_name(et), count);
    *elem_type = et;
    *n = count;
    *first = p->pos;
    if (et != GGUF_STR && et != GGUF_ARR && et != GGUF_BOOL) {
        p->pos += count * min;   /* in the file: checked just above */
        return 0;
    }
    for (uint64_t i = 0; i < count; i++)
        if (check_value(p, et, depth, "array element")) return -1;
    return 0;
}

/* Validate one value of `type` at the cursor and move past it.  `depth` is
 * the number of arrays this value is an element of. */
static int check_value(parser *p, uint32_t type, int depth, const char *field) {
    ds4_gguf_str s = {0};
    uint32_t et;
    uint64_t n, first;
    switch (type) {
    case GGUF_BOOL: return check_bool(p, field);
    case GGUF_STR: return rd_str(p, field, &s);
    case GGUF_ARR: return check_array(p, depth + 1, &et, &n, &first, field);
    default:
        if (check_vtype(p, field, p->pos, type) || need(p, field, vtype_size(type))) return -1;
        p->pos += vtype_size(type);
        return 0;
    }
}

static int read_kv(parser *p, uint64_t i, ds4_gguf_kv *kv) {
    uint64_t at;
    set_what(p, "key", i, NULL);
    if (rd_name(p, "key", &kv->key)) return -1;
    set_what(p, "key", i, kv->key);
    at = p->pos;
    if (rd_u32(p, "value type", &kv->type) || check_vtype(p, "value type", at, kv->type))
        return -1;
    kv->value_off = p->pos;
    if (kv->type == GGUF_ARR)
        return check_array(p, 1, &kv->arr_type, &kv->arr_n, &kv->arr_off, "value");
    return check_value(p, kv->type, 0, "value");
}

/* ========================================================================
 * Sorted indexes: lookup by binary search, duplicates are neighbours.
 * Ties are broken by position so the order is total and the "first" of two
 * duplicates is the earlier one in the file.
 * ======================================================================== */

static int cmp_kv(const void *a, const void *b) {
    const ds4_gguf_kv *x = *(const ds4_gguf_kv *const *)a, *y = *(const ds4_gguf_kv *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x > y) - (x < y);
}

static int cmp_tensor_name(const void *a, const void *b) {
    const ds4_gguf_tensor *x = *(const ds4_gguf_tensor *const *)a,
          *y = *(const ds4_gguf_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

static int cmp_tensor_off(const void *a, const void *b) {
    const ds4_gguf_tensor *x = *(const ds4_gguf_tensor *const *)a,
          *y = *(const ds4_gguf_tensor *const *)b;
    if (x->rel_off != y->rel_off) return x->rel_off < y->rel_off ? -1 : 1;
    return (x > y) - (x < y);
}

static int index_kvs(parser *p, ds4_gguf_file *g) {
    if (g->n_kv == 0) return 0;
    g->kv_index = malloc((size_t)g->n_kv * sizeof(*g->kv_index));
    if (!g->kv_index)
        return ds4_err_set(p->err, DS4_E_NOMEM, "%s: out of memory indexing %" PRIu64 " keys",
                          p->name, g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) g->kv_index[i] = &g->kv[i];
    qsort(g->kv_index, (size_t)g->n_kv, sizeof(*g->kv_index), cmp_kv);
    for (uint64_t i = 1; i < g->n_kv; i++) {
        const ds4_gguf_kv *a = g->kv_index[i - 1], *b = g->kv_index[i];
        if (strcmp(a->key, b->key)) continue;
        char q[400];
        quote(q, sizeof(q), b->key, strlen(b->key));
        p->what[0] = '\0';
        return bad(p, "metadata", b->value_off,
                   "duplicate key '%s': expected unique keys, got a second one (first value at "
                   "byte %" PRIu64 ")", q, a->value_off);
    }
    return 0;
}

/* ========================================================================
 * general.alignment: any integer type holding a power of two in 1..2^16.
 * ======================================================================== */

/* An integer value widened without loss: `neg` for negative values. */
typedef struct wide {
    bool neg;
    uint64_t mag;
} wide;

static wide decode_int(const uint8_t *v, uint32_t type) {
    int64_t s;
    switch (type) {
    case GGUF_U8: return (wide){false, v[0]};
    case GGUF_U16: return (wide){false, ds4_bits_le16(v)};
    case GGUF_U32: return (wide){false, ds4_bits_le32(v)};
    case GGUF_U64: return (wide){false, ds4_bits_le64(v)};
    case GGUF_I8: s = (int8_t)v[0]; break;
    case GGUF_I16: s = (int16_t)ds4_bits_le16(v); break;
    case GGUF_I32: s = (int32_t)ds4_bits_le32(v); break;
    default: s = (int64_t)ds4_bits_le64(v); break;
    }
    /* The magnitude of INT64_MIN is 2^63, which a u64 holds. */
    return s < 0 ? (wide){true, (uint64_t)0 - (uint64_t)s} : (wide){false, (uint64_t)s};
}

/* The signed value of w, which must lie in [INT64_MIN, INT64_MAX]. */
static int64_t wide_i64(wide w) {
    return w.neg ? -(int64_t)(w.mag - 1) - 1 : (int64_t)w.mag;
}

static void wide_str(char *out, size_t cap, wide w) {
    snprintf(out, cap, "%s%" PRIu64, w.neg ? "-" : "", w.mag);
}

static int apply_alignment(parser *p, ds4_gguf_file *g) {
    g->alignment = DEFAULT_ALIGNMENT;
    const ds4_gguf_kv *kv = ds4_gguf_find_kv(g, "general.alignment");
    if (!kv) return 0;
    snprintf(p->what, sizeof(p->what), "key 'general.alignment'");
    if (!vtype_is_int(kv->type))
        return bad(p, "value", kv->value_off, "expected an integer type, got %s",
                   ds4_gguf_vtype_name(kv->type));
    wide a = decode_int(p->buf + kv->value_off, kv->type);
    if (a.neg || a.mag == 0 || a.mag > MAX_ALIGNMENT || (a.mag & (a.mag - 1))) {
        char v[32];
        wide_str(v, sizeof(v), a);
        return bad(p, "value", kv->value_off,
                   "expected a power of two in [1, %d], got %s", MAX_ALIGNMENT, v);
    }
    g->alignment = a.mag;
    return 0;
}

/* ========================================================================
 * Tensor directory.
 * ======================================================================== */

/* "f32, f16, q8_0, ..." for the unsupported-type message. */
static void supported_types(char *out, size_t cap) {
    size_t o = 0;
    out[0] = '\0';
    for (uint32_t id = 0; id < 64 && o < cap; id++) {   /* ggml's ids, not ds4ref's own */
        const ds4_type_info *t = ds4_types_info(id);
        if (t) o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? ", " : "", t->name);
    }
}

static int check_type(parser *p, uint64_t at, ds4_gguf_tensor *t) {
    const ds4_type_info *ti = ds4_types_info(t->type);
    if (ti && !ti->scale_cols) return 0;   /* the block-scaled ids are ds4ref's, not ggml's */
    char names[200];
    supported_types(names, sizeof(names));
    return bad(p, "type", at, "unsupported tensor type: expected one of %s, got %" PRIu32 " (%s)",
               names, t->type, ti ? "unknown" : ds4_types_name(t->type));
}

static int read_dims(parser *p, ds4_gguf_tensor *t) {
    uint64_t at = p->pos;
    if (rd_u32(p, "n_dims", &t->n_dims)) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return bad(p, "n_dims", at, "expected 1..%d, got %" PRIu32, GGUF_MAX_DIMS, t->n_dims);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    t->n_elem = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        char field[16];
        snprintf(field, sizeof(field), "ne[%" PRIu32 "]", d);
        at = p->pos;
        if (rd_u64(p, field, &t->ne[d])) return -1;
        /* ggml holds dimensions in int64_t. */
        if (t->ne[d] < 1 || t->ne[d] > (uint64_t)INT64_MAX)
            return bad(p, field, at, "expected a dimension in [1, 2^63), got %" PRIu64, t->ne[d]);
        if (t->n_elem > (uint64_t)INT64_MAX / t->ne[d])
            return bad(p, field, at, "element count overflows: expected a product of dimensions "
                       "below 2^63, got %" PRIu64 " x %" PRIu64, t->n_elem, t->ne[d]);
        t->n_elem *= t->ne[d];
    }
    return 0;
}

/* nbytes = bytes of one ne0 row times the number of rows. */
static int tensor_size(parser *p, uint64_t ne0_at, uint64_t type_at, ds4_gguf_tensor *t) {
    const ds4_type_info *ti = ds4_types_info(t->type);
    if (t->ne[0] % ti->blck)
        return bad(p, "ne[0]", ne0_at,
                   "expected a multiple of the %s block size %" PRIu32 ", got %" PRIu64, ti->name,
                   ti->blck, t->ne[0]);
    uint64_t row = ds4_types_row_bytes(t->type, t->ne[0]);
    uint64_t rows = t->n_elem / t->ne[0];
    if (row == 0 || rows > UINT64_MAX / row)
        return bad(p, "type", type_at, "byte size overflows: %" PRIu64 " rows of %" PRIu64
                   " %s elements do not fit in 64 bits", rows, t->ne[0], ti->name);
    t->nbytes = row * rows;
    return 0;
}

static int read_tensor(parser *p, uint64_t i, uint64_t alignment, ds4_gguf_tensor *t) {
    set_what(p, "tensor", i, NULL);
    t->info_off = p->pos;
    if (rd_name(p, "tensor name", &t->name)) return -1;
    set_what(p, "tensor", i, t->name);
    uint64_t ne0_at = p->pos + 4;
    if (read_dims(p, t)) return -1;
    uint64_t type_at = p->pos;
    if (rd_u32(p, "type", &t->type) || check_type(p, type_at, t) ||
        tensor_size(p, ne0_at, type_at, t))
        return -1;
    uint64_t off_at = p->pos;
    if (rd_u64(p, "data offset", &t->rel_off)) return -1;
    if (t->rel_off % alignment)
        return bad(p, "data offset", off_at,
                   "expected a multiple of the alignment %" PRIu64 ", got %" PRIu64, alignment,
                   t->rel_off);
    return 0;
}

static int index_tensors(parser *p, ds4_gguf_file *g) {
    if (g->n_tensors == 0) return 0;
    g->tensor_index = malloc((size_t)g->n_tensors * sizeof(*g->tensor_index));
    if (!g->tensor_index)
        return ds4_err_set(p->err, DS4_E_NOMEM, "%s: out of memory indexing %" PRIu64 " tensors",
                          p->name, g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) g->tensor_index[i] = &g->tensors[i];
    qsort(g->tensor_index, (size_t)g->n_tensors, sizeof(*g->tensor_index), cmp_tensor_name);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const ds4_gguf_tensor *a = g->tensor_index[i - 1], *b = g->tensor_index[i];
        if (strcmp(a->name, b->name)) continue;
        char q[400];
        quote(q, sizeof(q), b->name, strlen(b->name));
        p->what[0] = '\0';
        return bad(p, "tensor directory", b->info_off,
                   "duplicate tensor name '%s': expected unique names, got a second one (first "
                   "info at byte %" PRIu64 ")", q, a->info_off);
    }
    return 0;
}

/* Every tensor's bytes inside the file, and no two sharing a byte. */
static int place_tensors(parser *p, ds4_gguf_file *g) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        ds4_gguf_tensor *t = &g->tensors[i];
        set_what(p, "tensor", i, t->name);
        if (t->rel_off > UINT64_MAX - g->data_off ||
            t->nbytes > UINT64_MAX - (g->data_off + t->rel_off))
            return bad(p, "info", t->info_off,
                       "data offset overflows: data section at %" PRIu64 " + offset %" PRIu64
                       " + %" PRIu64 " bytes exceeds 64 bits", g->data_off, t->rel_off, t->nbytes);
        uint64_t start = g->data_off + t->rel_off, end = start + t->nbytes;
        if (end > g->size)
            return bad(p, "info", t->info_off,
                       "data [%" PRIu64 ", %" PRIu64 ") extends past end of file (%" PRIu64
                       " bytes)", start, end, g->size);
        t->data = g->map + start;
    }
    if (g->n_tensors < 2) return 0;
    ds4_gguf_tensor **by_off = malloc((size_t)g->n_tensors * sizeof(*by_off));
    if (!by_off)
        return ds4_err_set(p->err, DS4_E_NOMEM, "%s: out of memory sorting %" PRIu64 " tensors",
                          p->name, g->n_tensors);
    memcpy(by_off, g->tensor_index, (size_t)g->n_tensors * sizeof(*by_off));
    qsort(by_off, (size_t)g->n_tensors, sizeof(*by_off), cmp_tensor_off);
    int rc = 0;
    for (uint64_t i = 1; i < g->n_tensors && rc == 0; i++) {
        const ds4_gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->rel_off + a->nbytes <= b->rel_off) continue;
        char q[200];
        quote(q, sizeof(q), a->name, strlen(a->name));
        set_what(p, "tensor", (uint64_t)(b - g->tensors), b->name);
        rc = bad(p, "info", b->info_off,
                 "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64 ", %" PRIu64
                 "): expected disjoint tensors", g->data_off + b->rel_off,
                 g->data_off + b->rel_off + b->nbytes, q, g->data_off + a->rel_off,
                 g->data_off + a->rel_off + a->nbytes);
    }
    free(by_off);
    return rc;
}

/* ========================================================================
 * Header and the whole parse.
 * ======================================================================== */

static int read_header(parser *p, ds4_gguf_file *g) {
    uint32_t magic;
    if (rd_u32(p, "magic", &magic)) return -1;
    if (magic != GGUF_MAGIC) {
        const uint8_t *m = p->buf;
        return bad(p, "magic", 0,
                   "not a GGUF file: expected \"GGUF\" (47 47 55 46), got %02x %02x %02x %02x",
                   m[0], m[1], m[2], m[3]);
    }
    if (rd_u32(p, "version", &g->version)) return -1;
    if (g->version == 1)
        return bad(p, "version", 4, "GGUF v1 (32-bit counts) is not supported: expected 2 or 3, "
                   "got 1");
    if (g->version != 2 && g->version != 3)
        return bad(p, "version", 4, "unsupported GGUF version: expected 2 or 3, got %" PRIu32,
                   g->version);
    if (rd_u64(p, "tensor count", &g->n_tensors) || rd_u64(p, "metadata count", &g->n_kv))
        return -1;
    /* Bound both counts by the smallest records before allocating for them. */
    uint64_t max_kv = left(p) / MIN_KV_BYTES;
    if (g->n_kv > max_kv)
        return bad(p, "metadata count", 16,
                   "too many metadata keys: expected at most %" PRIu64 " in a %" PRIu64
                   "-byte file, got %" PRIu64, max_kv, p->size, g->n_kv);
    uint64_t max_t = (left(p) - g->n_kv * MIN_KV_BYTES) / MIN_TENSOR_BYTES;
    if (g->n_tensors > max_t)
        return bad(p, "tensor count", 8,
                   "too many tensors: expected at most %" PRIu64 " in a %" PRIu64
                   "-byte file with %" PRIu64 " keys, got %" PRIu64, max_t, p->size, g->n_kv,
                   g->n_tensors);
    return 0;
}

static int read_metadata(parser *p, ds4_gguf_file *g) {
    if (g->n_kv && !(g->kv = calloc((size_t)g->n_kv, sizeof(*g->kv))))
        return ds4_err_set(p->err, DS4_E_NOMEM, "%s: out of memory for %" PRIu64 " keys", p->name,
                          g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (read_kv(p, i, &g->kv[i])) return -1;
    p->what[0] = '\0';
    return index_kvs(p, g) || apply_alignment(p, g) ? -1 : 0;
}

static int read_tensors(parser *p, ds4_gguf_file *g) {
    if (g->n_tensors && !(g->tensors = calloc((size_t)g->n_tensors, sizeof(*g->tensors))))
        return ds4_err_set(p->err, DS4_E_NOMEM, "%s: out of memory for %" PRIu64 " tensors",
                          p->name, g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (read_tensor(p, i, g->alignment, &g->tensors[i])) return -1;
    /* The data section starts at the next multiple of the alignment; pos is
     * at most the file size, so this cannot overflow. */
    g->data_off = (p->pos + g->alignment - 1) / g->alignment * g->alignment;
    return index_tensors(p, g) || place_tensors(p, g) ? -1 : 0;
}

static int parse(ds4_gguf_file *g, const uint8_t *buf, uint64_t size, ds4err *err) {
    parser p = {.name = g->path, .buf = buf, .size = size, .err = err};
    g->map = buf;
    g->size = size;
    if (read_header(&p, g) || read_metadata(&p, g) || read_tensors(&p, g)) return -1;
    return 0;
}

/* Frees what parse() allocated; the mapping is the caller's business. */
static void free_parsed(ds4_gguf_file *g) {
    for (uint64_t i = 0; g->kv && i < g->n_kv; i++) free(g->kv[i].key);
    for (uint64_t i = 0; g->tensors && i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->kv_index);
    free(g->tensor_index);
    free(g->path);
    memset(g, 0, sizeof(*g));
}

int ds4_gguf_parse(ds4_gguf_file *g, const uint8_t *buf, uint64_t size, const char *name,
                   ds4err *err) {
    memset(g, 0, sizeof(*g));
    if (!(g->path = strdup(name)))
        return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
    if (parse(g, buf, size, err)) {
        free_parsed(g);
        return -1;
    }
    return 0;
}

int ds4_gguf_open(ds4_gguf_file *g, const char *path, ds4err *err) {
    memset(g, 0, sizeof(*g));
    ds4_fmap m;
    if (ds4_file_map(path, &m, err)) return -1;
    if (ds4_gguf_parse(g, m.data, m.size, path, err)) {
        ds4_file_unmap(&m);
        return -1;
    }
    g->mapped = m.mapped;
    return 0;
}

void ds4_gguf_close(ds4_gguf_file *g) {
    if (g->mapped) {
        ds4_fmap m = {.data = g->map, .size = (size_t)g->size, .mapped = true};
        ds4_file_unmap(&m);
    }
    free_parsed(g);
}

/* ========================================================================
 * Lookup.
 * ======================================================================== */

static int cmp_key_kv(const void *key, const void *elem) {
    return strcmp(key, (*(const ds4_gguf_kv *const *)elem)->key);
}

static int cmp_name_tensor(const void *name, const void *elem) {
    return strcmp(name, (*(const ds4_gguf_tensor *const *)elem)->name);
}

const ds4_gguf_kv *ds4_gguf_find_kv(const ds4_gguf_file *g, const char *key) {
    if (!g->kv_index) return NULL;
    const ds4_gguf_kv *const *kv =
        bsearch(key, g->kv_index, (size_t)g->n_kv, sizeof(*g->kv_index), cmp_key_kv);
    return kv ? *kv : NULL;
}

const ds4_gguf_tensor *ds4_gguf_find_tensor(const ds4_gguf_file *g, const char *name) {
    if (!g->tensor_index) return NULL;
    const ds4_gguf_tensor *const *t = bsearch(name, g->tensor_index, (size_t)g->n_tensors,
                                          sizeof(*g->tensor_index), cmp_name_tensor);
    return t ? *t : NULL;
}

/* ========================================================================
 * Generic value access (printing, nested arrays).  Offsets come from the
 * caller, so they are bounds-checked again here.
 * ======================================================================== */

static parser value_parser(const ds4_gguf_file *g, uint64_t off, ds4err *err) {
    parser p = {.name = g->path, .buf = g->map, .size = g->size, .err = err};
    p.pos = off <= g->size ? off : g->size;
    snprintf(p.what, sizeof(p.what), "value");
    return p;
}

static int check_off(const ds4_gguf_file *g, uint64_t off, ds4err *err) {
    if (off <= g->size) return 0;
    return ds4_err_set(err, DS4_E_ARG, "%s: value offset %" PRIu64 " is past end of file (%" PRIu64
                      " bytes)", g->path, off, g->size);
}

int ds4_gguf_read_scalar(const ds4_gguf_file *g, uint32_t type, uint64_t off, ds4_gguf_scalar *out,
                     uint64_t *next_off, ds4err *err) {
    if (check_off(g, off, err)) return -1;
    if (type == GGUF_ARR)
        return ds4_err_set(err, DS4_E_ARG, "%s: value at byte %" PRIu64
                          ": arr is not a scalar (use ds4_gguf_read_arr)", g->path, off);
    parser p = value_parser(g, off, err);
    if (check_value(&p, type, 0, "scalar")) return -1;
    const uint8_t *v = g->map + off;
    memset(out, 0, sizeof(*out));
    out->type = type;
    if (vtype_is_int(type)) {
        wide w = decode_int(v, type);
        if (vtype_is_signed(type))
            out->v.i = wide_i64(w);
        else
            out->v.u = w.mag;
    } else if (type == GGUF_F32) {
        out->v.f = ds4_bits_to_f32(ds4_bits_le32(v));
    } else if (type == GGUF_F64) {
        out->v.f = bits_f64(ds4_bits_le64(v));
    } else if (type == GGUF_BOOL) {
        out->v.b = v[0] != 0;
    } else {   /* GGUF_STR */
        out->v.s.len = ds4_bits_le64(v);
        out->v.s.ptr = (const char *)v + 8;
    }
    if (next_off) *next_off = p.pos;
    return 0;
}

int ds4_gguf_read_arr(const ds4_gguf_file *g, uint64_t off, uint32_t *elem_type, uint64_t *n,
                  uint64_t *first_off, ds4err *err) {
    if (check_off(g, off, err)) return -1;
    parser p = value_parser(g, off, err);
    if (need(&p, "array", ARR_HEADER_BYTES)) return -1;
    uint32_t et = ds4_bits_le32(g->map + off);
    if (check_vtype(&p, "array element type", off, et)) return -1;
    *elem_type = et;
    *n = ds4_bits_le64(g->map + off + 4);
    *first_off = off + ARR_HEADER_BYTES;
    return 0;
}

int ds4_gguf_skip_value(const ds4_gguf_file *g, uint32_t type, uint64_t off, uint64_t *next_off,
                    ds4err *err) {
    if (check_off(g, off, err)) return -1;
    parser p = value_parser(g, off, err);
    if (check_value(&p, type, 0, "value")) return -1;
    *next_off = p.pos;
    return 0;
}

/* ========================================================================
 * Typed getters.
 * ======================================================================== */

static const ds4_gguf_kv *need_kv(const ds4_gguf_file *g, const char *key, ds4err *err) {
    const ds4_gguf_kv *kv = ds4_gguf_find_kv(g, key);
    if (!kv) ds4_err_set(err, DS4_E_MODEL, "%s: metadata key '%s' is missing", g->path, key);
    return kv;
}

static int wrong_type(const ds4_gguf_file *g, const ds4_gguf_kv *kv, const char *want,
                      ds4err *err) {
    char got[32];
    if (kv->type == GGUF_ARR)
        snprintf(got, sizeof(got), "arr[%s; %" PRIu64 "]", ds4_gguf_vtype_name(kv->arr_type),
                 kv->arr_n);
    else
        snprintf(got, sizeof(got), "%s", ds4_gguf_vtype_name(kv->type));
    return ds4_err_set(err, DS4_E_MODEL, "%s: key '%s' (value at byte %" PRIu64
                      "): expected %s, got %s", g->path, kv->key, kv->value_off, want, got);
}

/* Where a value sits, for messages: "key 'k'" or "key 'k' element 3". */
typedef struct where {
    const ds4_gguf_file *g;
    const ds4_gguf_kv *kv;
    uint64_t elem;           /* UINT64_MAX for a scalar key */
    uint64_t off;
} where;

static int out_of_range(const where *w, const char *want, const char *got, ds4err *err) {
    char el[40] = "";
    if (w->elem != UINT64_MAX) snprintf(el, sizeof(el), " element %" PRIu64, w->elem);
    return ds4_err_set(err, DS4_E_MODEL, "%s: key '%s'%s (at byte %" PRIu64 "): expected %s, got %s",
                      w->g->path, w->kv->key, el, w->off, want, got);
}

/* An integer of `type` at w->off, required to lie in [-lo_mag, hi]. */
static int int_in_range(const where *w, uint32_t type, uint64_t lo_mag, uint64_t hi,
                        const char *want, wide *out, ds4err *err) {
    wide v = decode_int(w->g->map + w->off, type);
    if (v.neg ? v.mag > lo_mag : v.mag > hi) {
        char got[48];
        wide_str(got, sizeof(got), v);
        strncat(got, " (", sizeof(got) - strlen(got) - 1);
        strncat(got, ds4_gguf_vtype_name(type), sizeof(got) - strlen(got) - 1);
        strncat(got, ")", sizeof(got) - strlen(got) - 1);
        return out_of_range(w, want, got, err);
    }
    *out = v;
    return 0;
}

static const char want_u32[] = "an integer in [0, 4294967295]";
static const char want_u64[] = "a non-negative integer";
static const char want_i32[] = "an integer in [-2147483648, 2147483647]";
static const char want_f32[] = "a finite value representable as f32";

static int to_u32(const where *w, uint32_t type, uint32_t *out, ds4err *err) {
    wide v = {0};
    if (int_in_range(w, type, 0, UINT32_MAX, want_u32, &v, err)) return -1;
    *out = (uint32_t)v.mag;
    return 0;
}

static int to_i32(const where *w, uint32_t type, int32_t *out, ds4err *err) {
    wide v = {0};
    if (int_in_range(w, type, (uint64_t)INT32_MAX + 1, INT32_MAX, want_i32, &v, err)) return -1;
    *out = (int32_t)wide_i64(v);
    return 0;
}

static int to_f32(const where *w, uint32_t type, float *out, ds4err *err) {
    if (type == GGUF_F32) {
        *out = ds4_bits_to_f32(ds4_bits_le32(w->g->map + w->off));
        return 0;
    }
    double d = bits_f64(ds4_bits_le64(w->g->map + w->off));
    /* Written so that NaN fails too. */
    if (!(d >= -FLT_MAX && d <= FLT_MAX)) {
        char got[48];
        snprintf(got, sizeof(got), "%.17g (f64)", d);
        return out_of_range(w, want_f32, got, err);
    }
    *out = (float)d;
    return 0;
}

int ds4_gguf_get_u32(const ds4_gguf_file *g, const char *key, uint32_t *out, ds4err *err) {
    const ds4_gguf_kv *kv = need_kv(g, key, err);
    if (!kv) return -1;
    if (!vtype_is_int(kv->type)) return wrong_type(g, kv, "an integer (u32)", err);
    where w = {g, kv, UINT64_MAX, kv->value_off};
    return to_u32(&w, kv->type, out, err);
}

int ds4_gguf_get_u64(const ds4_gguf_file *g, const char *key, uint64_t *out, ds4err *err) {
    const ds4_gguf_kv *kv = need_kv(g, key, err);
    if (!kv) return -1;
    if (!vtype_is_int(kv->type)) return wrong_type(g, kv, "an integer (u64)", err);
    where w = {g, kv, UINT64_MAX, kv->value_off};
    wide v = {0};
    if (int_in_range(&w, kv->type, 0, UINT64_MAX, want_u64, &v, err)) return -1;
    *out = v.mag;
    return 0;
}

int ds4_gguf_get_f32(const ds4_gguf_file *g, const char *key, float *out, ds4err *err) {
    const ds4_gguf_kv *kv = need_kv(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_F32 && kv->type != GGUF_F64) return wrong_type(g, kv, "f32 or f64", err);
    where w = {g, kv, UINT64_MAX, kv->value_off};
    return to_f32(&w, kv->type, out, err);
}

int ds4_gguf_get_bool(const ds4_gguf_file *g, const char *key, bool *out, ds4err *err) {
    const ds4_gguf_kv *kv = need_kv(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_BOOL) return wrong_type(g, kv, "bool", err);
    *out = g->map[kv->value_off] != 0;
    return 0;
}

int ds4_gguf_get_str(const ds4_gguf_file *g, const char *key, ds4_gguf_str *out, ds4err *err) {
    const ds4_gguf_kv *kv = need_kv(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_STR) return wrong_type(g, kv, "str", err);
    out->len = ds4_bits_le64(g->map + kv->value_off);
    out->ptr = (const char *)g->map + kv->value_off + 8;
    return 0;
}

/* The array `key` with an element type accepted by `ok`, holding exactly n
 * elements. */
static const ds4_gguf_kv *need_arr(const ds4_gguf_file *g, const char *key, bool (*ok)(uint32_t),
                               const char *want, uint64_t n, ds4err *err) {
    const ds4_gguf_kv *kv = need_kv(g, key, err);
    if (!kv) return NULL;
    if (kv->type != GGUF_ARR || !ok(kv->arr_type)) {
        wrong_type(g, kv, want, err);
        return NULL;
    }
    if (kv->arr_n != n) {
        ds4_err_set(err, DS4_E_MODEL, "%s: key '%s' (value at byte %" PRIu64 "): expected %" PRIu64
                   " elements, got %" PRIu64, g->path, key, kv->value_off, n, kv->arr_n);
        return NULL;
    }
    return kv;
}

static bool is_float_type(uint32_t t) { return t == GGUF_F32 || t == GGUF_F64; }

/* The three typed array readers below are one loop each over need_arr's
 * elements: they differ in the output type and its converter (to_u32,
 * to_i32, to_f32), and a shared loop would take the output as void * and a
 * converter cast to match, losing the types the compiler checks. */

int ds4_gguf_get_arr_u32(const ds4_gguf_file *g, const char *key, uint32_t *out, uint64_t n,
                     ds4err *err) {
    const ds4_gguf_kv *kv = need_arr(g, key, vtype_is_int, "an integer array", n, err);
    if (!kv) return -1;
    where w = {g, kv, 0, kv->arr_off};
    for (; w.elem < n; w.elem++, w.off += vtype_size(kv->arr_type))
        if (to_u32(&w, kv->arr_type, &out[w.elem], err)) return -1;
    return 0;
}

int ds4_gguf_get_arr_i32(const ds4_gguf_file *g, const char *key, int32_t *out, uint64_t n,
                     ds4err *err) {
    const ds4_gguf_kv *kv = need_arr(g, key, vtype_is_int, "an integer array", n, err);
    if (!kv) return -1;
    where w = {g, kv, 0, kv->arr_off};
    for (; w.elem < n; w.elem++, w.off += vtype_size(kv->arr_type))
        if (to_i32(&w, kv->arr_type, &out[w.elem], err)) return -1;
    return 0;
}

int ds4_gguf_get_arr_f32(const ds4_gguf_file *g, const char *key, float *out, uint64_t n,
                     ds4err *err) {
    const ds4_gguf_kv *kv = need_arr(g, key, is_float_type, "an f32 or f64 array", n, err);
    if (!kv) return -1;
    where w = {g, kv, 0, kv->arr_off};
    for (; w.elem < n; w.elem++, w.off += vtype_size(kv->arr_type))
        if (to_f32(&w, kv->arr_type, &out[w.elem], err)) return -1;
    return 0;
}

int ds4_gguf_get_arr_str(const ds4_gguf_file *g, const char *key, ds4_gguf_str *out, uint64_t cap,
                     uint64_t *n_out, ds4err *err) {
    const ds4_gguf_kv *kv = need_kv(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_ARR || kv->arr_type != GGUF_STR)
        return wrong_type(g, kv, "arr[str]", err);
    *n_out = kv->arr_n;
    if (!out) return 0;
    if (cap < kv->arr_n)
        return ds4_err_set(err, DS4_E_ARG, "%s: key '%s' (value at byte %" PRIu64 "): expected at "
                          "most %" PRIu64 " strings (caller's capacity), got %" PRIu64, g->path,
                          key, kv->value_off, cap, kv->arr_n);
    /* Validated at open: every length and its bytes lie in the file. */
    uint64_t off = kv->arr_off;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        out[i].len = ds4_bits_le64(g->map + off);
        out[i].ptr = (const char *)g->map + off + 8;
        off += 8 + out[i].len;
    }
    return 0;
}
