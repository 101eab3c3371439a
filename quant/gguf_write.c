/* GGUF v3 writer.
 *
 * Metadata records are serialized as they are added, into one growing
 * buffer, so a file is exactly the sequence of calls that built it: the same
 * calls always give the same bytes.  Tensors are only referenced; their
 * offsets are assigned when the file is produced (each one aligned, padding
 * zero, the file padded to the alignment after the last tensor, as ggml does).
 *
 * The writer does not judge content: tests use it to build deliberately odd
 * files, and the reader is where files are validated.  The one thing it adds
 * on its own is general.alignment (a u32, as the first key) when the caller
 * did not write that key, so that every file it produces states the alignment
 * its data is laid out with. */
#include "quant/gguf.h"
#include "quant/gguf_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t *ne;
    const void *data;
    uint64_t nbytes;
} wtensor;

struct ds4_gguf_writer {
    uint32_t alignment;
    ds4_buf kv;                 /* serialized metadata records, in call order */
    uint64_t n_kv;
    bool has_alignment_key;
    wtensor *t;
    size_t n_t, cap_t;
};

static const char alignment_key[] = "general.alignment";

/* Records are appended to a ds4_buf, whose failure is sticky: the caller
 * checks once at the end. */
static void put(ds4_buf *b, const void *src, size_t n) {
    ds4_buf_put(b, src, n);
}

static void put_u8(ds4_buf *b, uint8_t v) { put(b, &v, 1); }

static void put_u32(ds4_buf *b, uint32_t v) {
    uint8_t le[4];
    for (int i = 0; i < 4; i++) le[i] = (uint8_t)(v >> (8 * i));
    put(b, le, 4);
}

static void put_u64(ds4_buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_f32(ds4_buf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}

static void put_str(ds4_buf *b, const char *s, size_t len) {
    put_u64(b, len);
    put(b, s, len);
}

static void put_zeros(ds4_buf *b, size_t n) {
    static const uint8_t zero[64];
    for (; n > sizeof(zero); n -= sizeof(zero)) put(b, zero, sizeof(zero));
    put(b, zero, n);
}

/* ========================================================================
 * Metadata.  Each record is begun with kv_begin() and closed with kv_end(),
 * which drops a half-written record if memory ran out.
 * ======================================================================== */

static size_t kv_begin(ds4_gguf_writer *w, const char *key, uint32_t type) {
    size_t mark = w->kv.len;
    put_str(&w->kv, key, strlen(key));
    put_u32(&w->kv, type);
    return mark;
}

static int kv_end(ds4_gguf_writer *w, const char *key, size_t mark) {
    if (w->kv.failed) {
        w->kv.len = mark;
        w->kv.failed = false;
        return -1;
    }
    w->n_kv++;
    if (strcmp(key, alignment_key) == 0) w->has_alignment_key = true;
    return 0;
}

static size_t arr_begin(ds4_gguf_writer *w, const char *key, uint32_t elem_type, size_t n) {
    size_t mark = kv_begin(w, key, GGUF_ARR);
    put_u32(&w->kv, elem_type);
    put_u64(&w->kv, n);
    return mark;
}

/* A scalar record: the value's `bytes` low bytes of bits, little-endian. */
static int kv_scalar(ds4_gguf_writer *w, const char *key, uint32_t type, uint64_t bits, int bytes) {
    size_t mark = kv_begin(w, key, type);
    for (int i = 0; i < bytes; i++) put_u8(&w->kv, (uint8_t)(bits >> (8 * i)));
    return kv_end(w, key, mark);
}

int ds4_gguf_write_u8(ds4_gguf_writer *w, const char *key, uint8_t v) { return kv_scalar(w, key,
                      GGUF_U8, v, 1); }
int ds4_gguf_write_i8(ds4_gguf_writer *w, const char *key, int8_t v) {
    return kv_scalar(w, key, GGUF_I8, (uint8_t)v, 1);
}
int ds4_gguf_write_u16(ds4_gguf_writer *w, const char *key, uint16_t v) {
    return kv_scalar(w, key, GGUF_U16, v, 2);
}
int ds4_gguf_write_i16(ds4_gguf_writer *w, const char *key, int16_t v) {
    return kv_scalar(w, key, GGUF_I16, (uint16_t)v, 2);
}
int ds4_gguf_write_u32(ds4_gguf_writer *w, const char *key, uint32_t v) {
    return kv_scalar(w, key, GGUF_U32, v, 4);
}
int ds4_gguf_write_i32(ds4_gguf_writer *w, const char *key, int32_t v) {
    return kv_scalar(w, key, GGUF_I32, (uint32_t)v, 4);
}
int ds4_gguf_write_u64(ds4_gguf_writer *w, const char *key, uint64_t v) {
    return kv_scalar(w, key, GGUF_U64, v, 8);
}
int ds4_gguf_write_i64(ds4_gguf_writer *w, const char *key, int64_t v) {
    return kv_scalar(w, key, GGUF_I64, (uint64_t)v, 8);
}
int ds4_gguf_write_bool(ds4_gguf_writer *w, const char *key, bool v) {
    return kv_scalar(w, key, GGUF_BOOL, v ? 1 : 0, 1);
}

int ds4_gguf_write_f32(ds4_gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return kv_scalar(w, key, GGUF_F32, u, 4);
}

int ds4_gguf_write_f64(ds4_gguf_writer *w, const char *key, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return kv_scalar(w, key, GGUF_F64, u, 8);
}

int ds4_gguf_write_str(ds4_gguf_writer *w, const char *key, const char *v) {
    return ds4_gguf_write_str_n(w, key, v, strlen(v));
}

int ds4_gguf_write_str_n(ds4_gguf_writer *w, const char *key, const char *v, size_t len) {
    size_t mark = kv_begin(w, key, GGUF_STR);
    put_str(&w->kv, v, len);
    return kv_end(w, key, mark);
}

int ds4_gguf_write_raw(ds4_gguf_writer *w, const char *key, uint32_t type, const void *value,
                       size_t len) {
    size_t mark = kv_begin(w, key, type);
    put(&w->kv, value, len);
    return kv_end(w, key, mark);
}

int ds4_gguf_write_arr_u32(ds4_gguf_writer *w, const char *key, const uint32_t *v, size_t n) {
    size_t mark = arr_begin(w, key, GGUF_U32, n);
    for (size_t i = 0; i < n; i++) put_u32(&w->kv, v[i]);
    return kv_end(w, key, mark);
}

int ds4_gguf_write_arr_i32(ds4_gguf_writer *w, const char *key, const int32_t *v, size_t n) {
    size_t mark = arr_begin(w, key, GGUF_I32, n);
    for (size_t i = 0; i < n; i++) put_u32(&w->kv, (uint32_t)v[i]);
    return kv_end(w, key, mark);
}

int ds4_gguf_write_arr_f32(ds4_gguf_writer *w, const char *key, const float *v, size_t n) {
    size_t mark = arr_begin(w, key, GGUF_F32, n);
    for (size_t i = 0; i < n; i++) put_f32(&w->kv, v[i]);
    return kv_end(w, key, mark);
}

int ds4_gguf_write_arr_str(ds4_gguf_writer *w, const char *key, const char *const *strs,
                   const size_t *lens, size_t n) {
    size_t mark = arr_begin(w, key, GGUF_STR, n);
    for (size_t i = 0; i < n; i++) put_str(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i]));
    return kv_end(w, key, mark);
}

/* ========================================================================
 * Tensors.
 * ======================================================================== */

int ds4_gguf_write_tensor(ds4_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                  const uint64_t *ne, const void *data, uint64_t nbytes) {
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 16;
        if (cap > SIZE_MAX / sizeof(*w->t)) return -1;
        wtensor *t = realloc(w->t, cap * sizeof(*t));
        if (!t) return -1;
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (n_dims) t->ne = malloc((size_t)n_dims * sizeof(*t->ne));
    if (!t->name || (n_dims && !t->ne)) {
        free(t->name);
        free(t->ne);
        return -1;
    }
    if (n_dims) memcpy(t->ne, ne, (size_t)n_dims * sizeof(*t->ne));
    t->type = type;
    t->n_dims = n_dims;
    t->data = data;
    t->nbytes = nbytes;
    w->n_t++;
    return 0;
}

/* ========================================================================
 * Layout and output.
 * ======================================================================== */

ds4_gguf_writer *ds4_gguf_writer_new(uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1))) return NULL;
    ds4_gguf_writer *w = calloc(1, sizeof(*w));
    if (w) w->alignment = alignment;
    return w;
}

void ds4_gguf_writer_free(ds4_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].ne);
    }
    free(w->t);
    free(w->kv.p);
    free(w);
}

/* Where everything goes: the header (everything before the data section) in
 * memory, each tensor's offset inside the data section, the total size. */
typedef struct layout {
    ds4_buf head;               /* header + metadata + tensor infos + padding */
    uint64_t *rel_off;
    uint64_t data_bytes;     /* the data section, padded */
    uint64_t total;
} layout;

static int align_up(uint64_t v, uint64_t a, uint64_t *out) {
    uint64_t r = v % a;
    if (r && v > UINT64_MAX - (a - r)) return -1;
    *out = r ? v + (a - r) : v;
    return 0;
}

/* Each tensor at the next aligned offset after the previous one. */
static int assign_offsets(const ds4_gguf_writer *w, layout *l) {
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        l->rel_off[i] = off;
        if (w->t[i].nbytes > UINT64_MAX - off ||
            align_up(off + w->t[i].nbytes, w->alignment, &off))
            return -1;
    }
    l->data_bytes = off;
    return 0;
}

static void put_header(const ds4_gguf_writer *w, layout *l) {
    ds4_buf *h = &l->head;
    bool add_alignment = !w->has_alignment_key;
    put_u32(h, GGUF_MAGIC);
    put_u32(h, 3);
    put_u64(h, w->n_t);
    put_u64(h, w->n_kv + (add_alignment ? 1 : 0));
    if (add_alignment) {
        put_str(h, alignment_key, strlen(alignment_key));
        put_u32(h, GGUF_U32);
        put_u32(h, w->alignment);
    }
    put(h, w->kv.p, w->kv.len);
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(h, t->name, strlen(t->name));
        put_u32(h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(h, t->ne[d]);
        put_u32(h, t->type);
        put_u64(h, l->rel_off[i]);
    }
    put_zeros(h, (w->alignment - h->len % w->alignment) % w->alignment);
}

static void layout_free(layout *l) {
    free(l->head.p);
    free(l->rel_off);
}

static int make_layout(const ds4_gguf_writer *w, layout *l, ds4err *err) {
    memset(l, 0, sizeof(*l));
    l->rel_off = calloc(w->n_t ? w->n_t : 1, sizeof(*l->rel_off));
    if (!l->rel_off) return ds4_err_set(err, DS4_E_NOMEM, "gguf writer: out of memory");
    /* Offsets first: they go into the tensor infos. */
    bool ok = assign_offsets(w, l) == 0;
    if (ok) put_header(w, l);
    ok = ok && !l->head.failed && l->data_bytes <= UINT64_MAX - l->head.len;
    if (!ok) {
        layout_free(l);
        return ds4_err_set(err, DS4_E_NOMEM, "gguf writer: out of memory or file size overflows "
                          "64 bits (%zu tensors)", w->n_t);
    }
    l->total = l->head.len + l->data_bytes;
    return 0;
}

static int write_zeros(ds4_afile *f, uint64_t n, ds4err *err) {
    static const uint8_t zero[4096];
    for (; n; n -= n > sizeof(zero) ? sizeof(zero) : n)
        if (ds4_file_atomic_write(f, zero, n > sizeof(zero) ? sizeof(zero) : n, err)) return -1;
    return 0;
}

/* Header, then each tensor followed by zeros up to the next aligned offset
 * (or to the padded end of the file for the last one). */
static int write_file(ds4_afile *f, const ds4_gguf_writer *w, const layout *l, ds4err *err) {
    if (ds4_file_atomic_write(f, l->head.p, l->head.len, err)) return -1;
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t end = l->head.len + l->rel_off[i] + w->t[i].nbytes;
        uint64_t next = i + 1 < w->n_t ? l->head.len + l->rel_off[i + 1] : l->total;
        if (ds4_file_atomic_write(f, w->t[i].data, w->t[i].nbytes, err) ||
            write_zeros(f, next - end, err))
            return -1;
    }
    return 0;
}

/* Through the atomic writer (base/file.h): the target is replaced only
 * by a complete file. */
int ds4_gguf_writer_save(ds4_gguf_writer *w, const char *path, ds4err *err) {
    layout l;
    if (make_layout(w, &l, err)) return -1;
    ds4_afile f;
    int rc = ds4_file_atomic_open(&f, path, err);
    if (rc == 0 && write_file(&f, w, &l, err)) {
        ds4_file_atomic_abort(&f);
        rc = -1;
    }
    if (rc == 0) rc = ds4_file_atomic_commit(&f, err);
    layout_free(&l);
    return rc;
}
