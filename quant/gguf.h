/* GGUF reader: mmap-based, bounds-checked, never trusts the file.
 *
 * ds4_gguf_open() maps the file read-only and validates the whole structure before
 * returning: header, every metadata record (incl. nested arrays, depth-limited),
 * the tensor directory, alignment, and that every tensor's byte range lies
 * inside the data section without overlapping another.  After a successful
 * open, every accessor below is safe to call on any key or tensor.
 *
 * Errors name the file, the key or tensor, the byte offset and what was
 * expected, e.g.
 *   "m.gguf: tensor 'blk.0.attn_q_a.weight' (info at byte 1234): data
 *    [5000, 9000) extends past end of file (8000 bytes)". */
#ifndef DS4_GGUF_H
#define DS4_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#define GGUF_MAGIC 0x46554747u   /* "GGUF" little-endian */
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_ARRAY_DEPTH 8   /* levels of arrays in arrays: a key's array is 1 */

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4,
    GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9,
    GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12
};

typedef struct ds4_gguf_str {
    const char *ptr;     /* into the mapping; NOT NUL-terminated */
    uint64_t len;
} ds4_gguf_str;

typedef struct ds4_gguf_kv {
    char *key;           /* NUL-terminated copy (keys with NUL bytes are rejected) */
    uint32_t type;       /* enum gguf_vtype */
    uint64_t value_off;  /* file offset of the value (after the type field) */
    /* Arrays: element type, count and file offset of the first element. */
    uint32_t arr_type;
    uint64_t arr_n;
    uint64_t arr_off;
} ds4_gguf_kv;

typedef struct ds4_gguf_tensor {
    char *name;          /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];   /* ne[0] contiguous; unused dims are 1 */
    uint32_t type;       /* ggml type id, always one ds4_types_info() knows */
    uint64_t n_elem;
    uint64_t nbytes;
    uint64_t rel_off;    /* offset inside the data section, as stored */
    uint64_t info_off;   /* file offset of this tensor's info record */
    const uint8_t *data; /* mapping + data_off + rel_off */
} ds4_gguf_tensor;

typedef struct ds4_gguf_file {
    char *path;
    const uint8_t *map;
    uint64_t size;
    bool mapped;         /* map is an mmap (else a caller-owned buffer) */
    uint32_t version;    /* 2 or 3 */
    uint64_t alignment;
    uint64_t data_off;   /* start of the tensor data section */
    uint64_t n_kv;
    ds4_gguf_kv *kv;
    uint64_t n_tensors;
    ds4_gguf_tensor *tensors;
    /* Private: pointers into kv / tensors sorted by key / name, for lookup. */
    ds4_gguf_kv **kv_index;
    ds4_gguf_tensor **tensor_index;
} ds4_gguf_file;

/* Map and validate a file.  On failure *g is left closed (nothing to free). */
int ds4_gguf_open(ds4_gguf_file *g, const char *path, ds4err *err);

/* Validate a caller-owned buffer (kept alive by the caller until ds4_gguf_close);
 * `name` is used in error messages.  Used by tests and fuzzers. */
int ds4_gguf_parse(ds4_gguf_file *g, const uint8_t *buf, uint64_t size, const char *name,
               ds4err *err);

void ds4_gguf_close(ds4_gguf_file *g);

const ds4_gguf_kv *ds4_gguf_find_kv(const ds4_gguf_file *g, const char *key);
const ds4_gguf_tensor *ds4_gguf_find_tensor(const ds4_gguf_file *g, const char *name);
const char *ds4_gguf_vtype_name(uint32_t type);

/* Typed getters.  Each fails with a clear message when the key is missing, has
 * another type, or (for the narrowing ones) does not fit.
 *   get_u32:  U8/U16/U32, or U64/I*-typed values in [0, 2^32)
 *   get_u64:  any integer type with a non-negative value
 *   get_f32:  F32, or F64 narrowed (fails if not representable-finite)
 *   get_bool: BOOL only
 *   get_str:  STR only */
int ds4_gguf_get_u32(const ds4_gguf_file *g, const char *key, uint32_t *out, ds4err *err);
int ds4_gguf_get_u64(const ds4_gguf_file *g, const char *key, uint64_t *out, ds4err *err);
int ds4_gguf_get_f32(const ds4_gguf_file *g, const char *key, float *out, ds4err *err);
int ds4_gguf_get_bool(const ds4_gguf_file *g, const char *key, bool *out, ds4err *err);
int ds4_gguf_get_str(const ds4_gguf_file *g, const char *key, ds4_gguf_str *out, ds4err *err);

/* Arrays of scalars, converted element-wise with the same rules as the scalar
 * getters; `n` must equal the array length (else an error saying both). */
int ds4_gguf_get_arr_u32(const ds4_gguf_file *g, const char *key, uint32_t *out, uint64_t n,
                     ds4err *err);
int ds4_gguf_get_arr_f32(const ds4_gguf_file *g, const char *key, float *out, uint64_t n,
                     ds4err *err);
int ds4_gguf_get_arr_i32(const ds4_gguf_file *g, const char *key, int32_t *out, uint64_t n,
                     ds4err *err);

/* Array of strings: *n_out = count, and if out != NULL fills out[0..count). */
int ds4_gguf_get_arr_str(const ds4_gguf_file *g, const char *key, ds4_gguf_str *out,
                     uint64_t cap, uint64_t *n_out, ds4err *err);

/* Generic access for printing (ds4ref-gguf info): read a scalar of type `type`
 * at file offset `off`; strings return via *s.  Offsets come from ds4_gguf_kv. */
typedef struct ds4_gguf_scalar {
    uint32_t type;
    union { uint64_t u; int64_t i; double f; bool b; ds4_gguf_str s; } v;
} ds4_gguf_scalar;
int ds4_gguf_read_scalar(const ds4_gguf_file *g, uint32_t type, uint64_t off, ds4_gguf_scalar *out,
                     uint64_t *next_off, ds4err *err);

/* Arrays (also nested ones): `off` is where an array value starts (a kv's
 * value_off, or an element's offset inside an array of arrays).  Gives the
 * element type, the count and the offset of the first element. */
int ds4_gguf_read_arr(const ds4_gguf_file *g, uint64_t off, uint32_t *elem_type, uint64_t *n,
                  uint64_t *first_off, ds4err *err);

/* Offset just past the value of `type` at `off`, arrays included. */
int ds4_gguf_skip_value(const ds4_gguf_file *g, uint32_t type, uint64_t off, uint64_t *next_off,
                    ds4err *err);

#endif
