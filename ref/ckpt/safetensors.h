/* safetensors reader: mmap-based, bounds-checked, never trusts the file.
 *
 * The official DeepSeek V4 checkpoint is a folder of safetensors shards.  A
 * shard is an 8-byte little-endian header length N, N bytes of JSON, then
 * the data area:
 *
 *   {"__metadata__": {"format": "pt"},
 *    "model.embed.weight": {"dtype": "BF16", "shape": [129280, 4096],
 *                           "data_offsets": [0, 1059061760]}, ...}
 *
 * Offsets count from the start of the data area.  ds4_safetensors_open()
 * validates the whole header before returning, by the rules of the format's
 * own reader (huggingface/safetensors, tensor.rs) and a few stricter ones:
 *   - N is at most 100,000,000 bytes and 8 + N fits in the file;
 *   - the header is one JSON object (strict JSON: ref/text/json.h), padded
 *     with spaces at most; no name appears twice, at any level;
 *   - "__metadata__", when present, maps strings to strings;
 *   - every other member is a tensor with exactly "dtype" (a known name),
 *     "shape" (at most DS4_ST_MAX_DIMS integers) and "data_offsets" (two
 *     integers), written as plain non-negative integers: no fraction, no
 *     exponent, nothing past 2^63;
 *   - its byte count is the product of the shape times the element size,
 *     computed without overflow, and equals end - begin;
 *   - taken in offset order, the tensors tile the data area from 0 to its
 *     end, with no gap and no overlap.
 * Errors name the file, the tensor or key, and what was expected, e.g.
 *   "x.safetensors: tensor 'a.weight': data_offsets [0, 10) hold 10 bytes,
 *    but dtype F32 and shape [2, 2] make 16".
 *
 * Tensor data is used in place and may be unaligned (the header length
 * need not be a multiple of 8): readers load elements with memcpy. */
#ifndef DS4_SAFETENSORS_H
#define DS4_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DS4_ST_MAX_DIMS 8
#define DS4_ST_MAX_HEADER 100000000u

/* The element types of the format, and F8_E8M0 (a power-of-two scale byte,
 * torch.float8_e8m0fnu), which later versions of the format added. */
typedef enum ds4_st_dtype {
    DS4_ST_BOOL, DS4_ST_U8, DS4_ST_I8, DS4_ST_F8_E5M2, DS4_ST_F8_E4M3, DS4_ST_F8_E8M0,
    DS4_ST_I16, DS4_ST_U16, DS4_ST_F16, DS4_ST_BF16, DS4_ST_I32, DS4_ST_U32,
    DS4_ST_F32, DS4_ST_F64, DS4_ST_I64, DS4_ST_U64,
    DS4_ST_N_DTYPES
} ds4_st_dtype;

typedef struct ds4_st_tensor {
    char *name;              /* NUL-terminated copy */
    ds4_st_dtype dtype;
    uint32_t n_dims;
    uint64_t shape[DS4_ST_MAX_DIMS];   /* shape[0] outermost, as written */
    uint64_t n_elem;
    uint64_t begin, end;     /* data_offsets, relative to the data area */
    const uint8_t *data;     /* the data area + begin */
} ds4_st_tensor;

typedef struct ds4_st_file {
    char *path;
    const uint8_t *map;
    uint64_t size;
    bool mapped;
    uint64_t header_len;     /* N */
    size_t n_tensors;
    ds4_st_tensor *tensors;  /* sorted by name */
    size_t n_meta;
    char **meta_keys, **meta_values;   /* "__metadata__", in file order */
} ds4_st_file;

/* Map and validate a file.  On failure *f is left closed (nothing to free). */
int ds4_safetensors_open(ds4_st_file *f, const char *path, ds4err *err);

/* Validate a caller-owned buffer (kept alive until ds4_safetensors_close);
 * `name` labels the messages.  Used by tests and fuzzers. */
int ds4_safetensors_parse(ds4_st_file *f, const uint8_t *buf, uint64_t size, const char *name,
                          ds4err *err);

void ds4_safetensors_close(ds4_st_file *f);

/* The tensor of that name, or NULL. */
const ds4_st_tensor *ds4_safetensors_find(const ds4_st_file *f, const char *name);

/* A "__metadata__" value, or NULL. */
const char *ds4_safetensors_meta(const ds4_st_file *f, const char *key);

/* "F32", "F8_E4M3", ...; the element size in bytes. */
/* One tensor to write: its bytes are the elements of shape, of dtype,
 * little-endian, row-major. */
typedef struct ds4_st_out {
    const char *name;
    ds4_st_dtype dtype;
    uint32_t n_dims;
    uint64_t shape[DS4_ST_MAX_DIMS];
    const void *data;
} ds4_st_out;

/* Write tensors t[0..n) to path, in that order, as the format's writer
 * lays them out: the header's length, the header (names in the given
 * order, no "__metadata__") padded with spaces to a multiple of 8, the
 * data.  Atomic (base/file.h): on failure nothing is left at path. */
int ds4_safetensors_write(const char *path, const ds4_st_out *t, size_t n, ds4err *err);

const char *ds4_safetensors_dtype_name(ds4_st_dtype t);
size_t ds4_safetensors_dtype_size(ds4_st_dtype t);

#endif
