/* safetensors reader (safetensors.h says what is checked and why). */
#include "ref/ckpt/safetensors.h"

#include "base/file.h"
#include "ref/text/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[DS4_ST_N_DTYPES] = {
    [DS4_ST_BOOL] = {"BOOL", 1},       [DS4_ST_U8] = {"U8", 1},
    [DS4_ST_I8] = {"I8", 1},           [DS4_ST_F8_E5M2] = {"F8_E5M2", 1},
    [DS4_ST_F8_E4M3] = {"F8_E4M3", 1}, [DS4_ST_F8_E8M0] = {"F8_E8M0", 1},
    [DS4_ST_I16] = {"I16", 2},         [DS4_ST_U16] = {"U16", 2},
    [DS4_ST_F16] = {"F16", 2},         [DS4_ST_BF16] = {"BF16", 2},
    [DS4_ST_I32] = {"I32", 4},         [DS4_ST_U32] = {"U32", 4},
    [DS4_ST_F32] = {"F32", 4},         [DS4_ST_F64] = {"F64", 8},
    [DS4_ST_I64] = {"I64", 8},         [DS4_ST_U64] = {"U64", 8},
};

const char *ds4_safetensors_dtype_name(ds4_st_dtype t) {
    return (unsigned)t < DS4_ST_N_DTYPES ? dtypes[t].name : "?";
}

size_t ds4_safetensors_dtype_size(ds4_st_dtype t) {
    return (unsigned)t < DS4_ST_N_DTYPES ? dtypes[t].size : 0;
}

/* Shapes and offsets: plain integers up to 2^63. */
static bool read_uint(const ds4_json *v, uint64_t *out) {
    return ds4_json_uint(v, UINT64_C(1) << 63, out);
}

/* A key or string value usable as a C string: no NUL inside. */
static bool plain_string(const ds4_json *v) {
    return v->type == DS4_JSON_STRING && strlen(v->str) == v->len;
}

static void free_parsed(ds4_st_file *f) {
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    free(f->path);
    memset(f, 0, sizeof(*f));
}

static int cmp_strs(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_metadata(ds4_st_file *f, const ds4_json *m, ds4err *err) {
    if (m->type != DS4_JSON_OBJECT)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: \"__metadata__\" is not an object of strings",
                           f->path);
    f->meta_keys = calloc(m->n ? m->n : 1, sizeof(char *));
    f->meta_values = calloc(m->n ? m->n : 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_values)
        return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < m->n; i++) {
        const ds4_json *k = &m->keys[i], *v = &m->elems[i];
        if (!plain_string(k) || !plain_string(v))
            return ds4_err_set(err, DS4_E_FORMAT,
                               "%s: \"__metadata__\" member %zu: keys and values must be strings "
                               "without NUL bytes", f->path, i);
        f->n_meta = i + 1;   /* before the copies: free_parsed frees what they made */
        if (!(f->meta_keys[i] = strdup(k->str)) || !(f->meta_values[i] = strdup(v->str)))
            return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", f->path);
    }
    /* Duplicates, through a sorted copy: a 100 MB header may hold millions
     * of keys, too many to compare pairwise. */
    char **sorted = malloc((m->n ? m->n : 1) * sizeof(char *));
    if (!sorted) return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", f->path);
    memcpy(sorted, f->meta_keys, m->n * sizeof(char *));
    qsort(sorted, m->n, sizeof(char *), cmp_strs);
    int rc = 0;
    for (size_t i = 1; i < m->n && !rc; i++)
        if (!strcmp(sorted[i - 1], sorted[i]))
            rc = ds4_err_set(err, DS4_E_FORMAT, "%s: \"__metadata__\" names '%s' twice", f->path,
                             sorted[i]);
    free(sorted);
    return rc;
}

/* Writes "[2, 3]" into buf, for messages. */
static void shape_str(const ds4_st_tensor *t, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < t->n_dims && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

static int read_shape(ds4_st_file *f, ds4_st_tensor *t, const ds4_json *v, ds4err *err) {
    if (v->type != DS4_JSON_ARRAY)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s': \"shape\" is not an array",
                           f->path, t->name);
    if (v->n > DS4_ST_MAX_DIMS)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s': %zu dimensions, at most %d",
                           f->path, t->name, v->n, DS4_ST_MAX_DIMS);
    t->n_dims = (uint32_t)v->n;
    t->n_elem = 1;
    bool overflow = false;
    for (size_t d = 0; d < v->n; d++) {
        if (!read_uint(&v->elems[d], &t->shape[d]))
            return ds4_err_set(err, DS4_E_FORMAT,
                               "%s: tensor '%s': shape[%zu] is not an integer from 0 to 2^63",
                               f->path, t->name, d);
        if (t->shape[d] && t->n_elem > UINT64_MAX / t->shape[d]) overflow = true;
        else t->n_elem *= t->shape[d];
    }
    /* A zero dimension makes the tensor empty whatever the others are. */
    for (size_t d = 0; d < v->n; d++)
        if (t->shape[d] == 0) t->n_elem = 0, overflow = false;
    if (overflow || t->n_elem > UINT64_MAX / dtypes[t->dtype].size) {
        char s[200];
        shape_str(t, s, sizeof(s));
        return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s': shape %s overflows 64 bits",
                           f->path, t->name, s);
    }
    return 0;
}

static int read_tensor(ds4_st_file *f, ds4_st_tensor *t, const ds4_json *e, ds4err *err) {
    if (e->type != DS4_JSON_OBJECT)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s' is not an object", f->path,
                           t->name);
    const ds4_json *dtype = NULL, *shape = NULL, *offs = NULL;
    for (size_t i = 0; i < e->n; i++) {
        const ds4_json *k = &e->keys[i], **slot;
        if (ds4_json_is_str(k, "dtype")) slot = &dtype;
        else if (ds4_json_is_str(k, "shape")) slot = &shape;
        else if (ds4_json_is_str(k, "data_offsets")) slot = &offs;
        else
            return ds4_err_set(err, DS4_E_FORMAT,
                               "%s: tensor '%s': unknown member '%.*s' (expected dtype, shape, "
                               "data_offsets)", f->path, t->name, (int)k->len, k->str);
        if (*slot)
            return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s': '%s' given twice", f->path,
                               t->name, k->str);
        *slot = &e->elems[i];
    }
    if (!dtype || !shape || !offs)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s': no \"%s\"", f->path, t->name,
                           !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    int found = -1;
    for (int i = 0; i < DS4_ST_N_DTYPES && found < 0; i++)
        if (ds4_json_is_str(dtype, dtypes[i].name)) found = i;
    if (found < 0 && dtype->type != DS4_JSON_STRING)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s': \"dtype\" is not text", f->path,
                           t->name);
    if (found < 0)
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: tensor '%s': dtype '%.*s' is not one of BOOL, U8, I8, F8_E5M2, "
                           "F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64",
                           f->path, t->name, (int)dtype->len, dtype->str);
    t->dtype = (ds4_st_dtype)found;
    if (read_shape(f, t, shape, err)) return -1;
    if (offs->type != DS4_JSON_ARRAY || offs->n != 2 || !read_uint(&offs->elems[0], &t->begin) ||
        !read_uint(&offs->elems[1], &t->end))
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: tensor '%s': \"data_offsets\" is not two integers from 0 to 2^63",
                           f->path, t->name);
    if (t->end < t->begin)
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 ") end before "
                           "they begin", f->path, t->name, t->begin, t->end);
    uint64_t nbytes = t->n_elem * dtypes[t->dtype].size;
    if (t->end - t->begin != nbytes) {
        char s[200];
        shape_str(t, s, sizeof(s));
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 ") hold %" PRIu64
                           " bytes, but dtype %s and shape %s make %" PRIu64, f->path, t->name,
                           t->begin, t->end, t->end - t->begin, dtypes[t->dtype].name, s, nbytes);
    }
    return 0;
}

static int cmp_offsets(const void *a, const void *b) {
    const ds4_st_tensor *x = *(const ds4_st_tensor *const *)a, *y = *(const ds4_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(((const ds4_st_tensor *)a)->name, ((const ds4_st_tensor *)b)->name);
}

/* In offset order the tensors must tile [0, data_len) exactly. */
static int check_tiling(ds4_st_file *f, uint64_t data_len, ds4err *err) {
    ds4_st_tensor **order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof(*order));
    if (!order) return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof(*order), cmp_offsets);
    uint64_t at = 0;
    const char *prev = NULL;
    int rc = 0;
    for (size_t i = 0; i < f->n_tensors && !rc; i++) {
        const ds4_st_tensor *t = order[i];
        if (t->begin != at)
            rc = ds4_err_set(err, DS4_E_FORMAT,
                             "%s: tensor '%s': data [%" PRIu64 ", %" PRIu64 ") %s %s at %" PRIu64
                             " (tensors must tile the data area with no gap or overlap)",
                             f->path, t->name, t->begin, t->end,
                             t->begin < at ? "overlaps" : "leaves a gap after",
                             prev ? "the tensor before it, which ends" : "the data area's start",
                             at);
        at = t->end;
        prev = t->name;
    }
    if (!rc && at != data_len)
        rc = ds4_err_set(err, DS4_E_FORMAT,
                         "%s: the tensors end at data byte %" PRIu64 ", but the data area holds %"
                         PRIu64 " bytes (the file is %s)", f->path, at, data_len,
                         at > data_len ? "truncated" : "longer than its tensors");
    free(order);
    return rc;
}

static int parse(ds4_st_file *f, const uint8_t *buf, uint64_t size, ds4err *err) {
    f->map = buf;
    f->size = size;
    if (size < 8)
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: truncated: %" PRIu64 " bytes, where a safetensors file starts with "
                           "an 8-byte header length", f->path, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    if (n > DS4_ST_MAX_HEADER)
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: header length %" PRIu64 " is over the format's limit of %u bytes",
                           f->path, n, DS4_ST_MAX_HEADER);
    if (n > size - 8)
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64
                           " bytes)", f->path, n, size);
    f->header_len = n;
    /* The object itself, then spaces only, as the format's writer pads it
     * (its reader refuses a header that does not start with '{'). */
    uint64_t last = n;
    while (last > 0 && buf[8 + last - 1] == ' ') last--;
    if (n == 0 || buf[8] != '{' || last == 0 || buf[8 + last - 1] != '}')
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: the header must be one JSON object, '{' first, then spaces only",
                           f->path);
    char *label = malloc(strlen(f->path) + 16);
    if (!label) return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", f->path);
    sprintf(label, "%s (header)", f->path);
    ds4_json_doc *doc;
    int rc = ds4_json_parse((const char *)buf + 8, (size_t)n, label, &doc, err);
    free(label);
    if (rc) return -1;
    const ds4_json *root = ds4_json_root(doc);   /* an object: it parsed from '{' to '}' */
    f->tensors = calloc(root->n ? root->n : 1, sizeof(*f->tensors));
    if (!f->tensors) {
        ds4_json_free(doc);
        return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", f->path);
    }
    bool have_meta = false;
    for (size_t i = 0; i < root->n && !rc; i++) {
        const ds4_json *k = &root->keys[i];
        if (!plain_string(k) || k->len == 0) {
            rc = ds4_err_set(err, DS4_E_FORMAT,
                             "%s: header member %zu: a tensor name must be non-empty text without "
                             "NUL bytes", f->path, i);
        } else if (ds4_json_is_str(k, "__metadata__")) {
            rc = have_meta ? ds4_err_set(err, DS4_E_FORMAT, "%s: \"__metadata__\" given twice",
                                         f->path)
                           : read_metadata(f, &root->elems[i], err);
            have_meta = true;
        } else {
            ds4_st_tensor *t = &f->tensors[f->n_tensors];
            if (!(t->name = strdup(k->str))) {
                rc = ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", f->path);
                break;
            }
            f->n_tensors++;
            rc = read_tensor(f, t, &root->elems[i], err);
        }
    }
    ds4_json_free(doc);
    if (rc) return -1;
    qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), cmp_names);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name))
            return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s' is named twice in the header",
                               f->path, f->tensors[i].name);
    if (check_tiling(f, size - 8 - n, err)) return -1;
    for (size_t i = 0; i < f->n_tensors; i++) f->tensors[i].data = buf + 8 + n + f->tensors[i].begin;
    return 0;
}

int ds4_safetensors_parse(ds4_st_file *f, const uint8_t *buf, uint64_t size, const char *name,
                          ds4err *err) {
    memset(f, 0, sizeof(*f));
    if (!(f->path = strdup(name))) return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
    if (parse(f, buf, size, err)) {
        free_parsed(f);
        return -1;
    }
    return 0;
}

int ds4_safetensors_open(ds4_st_file *f, const char *path, ds4err *err) {
    memset(f, 0, sizeof(*f));
    ds4_fmap m;
    if (ds4_file_map(path, &m, err)) return -1;
    if (ds4_safetensors_parse(f, m.data, m.size, path, err)) {
        ds4_file_unmap(&m);
        return -1;
    }
    f->mapped = m.mapped;
    return 0;
}

void ds4_safetensors_close(ds4_st_file *f) {
    if (f->mapped) {
        ds4_fmap m = {.data = f->map, .size = (size_t)f->size, .mapped = true};
        ds4_file_unmap(&m);
    }
    free_parsed(f);
}

const ds4_st_tensor *ds4_safetensors_find(const ds4_st_file *f, const char *name) {
    ds4_st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, f->n_tensors, sizeof(*f->tensors), cmp_names);
}

const char *ds4_safetensors_meta(const ds4_st_file *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_values[i];
    return NULL;
}

/* ---- Writing ---- */

static uint64_t out_bytes(const ds4_st_out *t) {
    uint64_t n = ds4_safetensors_dtype_size(t->dtype);
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->shape[d];
    return n;
}

int ds4_safetensors_write(const char *path, const ds4_st_out *t, size_t n, ds4err *err) {
    ds4_buf h = {0};
    uint64_t off = 0;
    ds4_buf_putc(&h, '{');
    for (size_t i = 0; i < n; i++) {
        ds4_buf_puts(&h, i ? "," : "");
        ds4_json_put_str(&h, t[i].name, strlen(t[i].name));
        ds4_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", ds4_safetensors_dtype_name(t[i].dtype));
        for (uint32_t d = 0; d < t[i].n_dims; d++)
            ds4_buf_printf(&h, "%s%" PRIu64, d ? "," : "", t[i].shape[d]);
        const uint64_t nb = out_bytes(&t[i]);
        ds4_buf_printf(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
        off += nb;
    }
    ds4_buf_putc(&h, '}');
    while (h.len % 8) ds4_buf_putc(&h, ' ');
    if (h.failed) {
        ds4_buf_free(&h);
        return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", path);
    }
    uint8_t len[8];
    for (int k = 0; k < 8; k++) len[k] = (uint8_t)((uint64_t)h.len >> (8 * k));
    ds4_afile f;
    int rc = ds4_file_atomic_open(&f, path, err);
    if (!rc) rc = ds4_file_atomic_write(&f, len, 8, err);
    if (!rc) rc = ds4_file_atomic_write(&f, h.p, h.len, err);
    for (size_t i = 0; !rc && i < n; i++) {
        rc = ds4_file_atomic_write(&f, t[i].data, (size_t)out_bytes(&t[i]), err);
        if (!rc) rc = ds4_file_atomic_flush(&f, err);
    }
    if (!rc) rc = ds4_file_atomic_commit(&f, err);
    else ds4_file_atomic_abort(&f);
    ds4_buf_free(&h);
    return rc;
}
