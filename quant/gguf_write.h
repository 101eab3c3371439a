/* GGUF v3 writer, used by the synthetic-model generator and by tests that
 * build (also deliberately malformed) files.  Tensors are referenced, not
 * copied: their data must stay alive until the file is written. */
#ifndef DS4_GGUF_WRITE_H
#define DS4_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct ds4_gguf_writer ds4_gguf_writer;

/* NULL on OOM or when alignment is not a power of two.  Unless the caller
 * writes a "general.alignment" key itself, the file gets one (u32, as its
 * first key) stating this alignment. */
ds4_gguf_writer *ds4_gguf_writer_new(uint32_t alignment);
void ds4_gguf_writer_free(ds4_gguf_writer *w);

/* Metadata, written in call order.  Returns -1 on OOM only. */
int ds4_gguf_write_u8(ds4_gguf_writer *w, const char *key, uint8_t v);
int ds4_gguf_write_i8(ds4_gguf_writer *w, const char *key, int8_t v);
int ds4_gguf_write_u16(ds4_gguf_writer *w, const char *key, uint16_t v);
int ds4_gguf_write_i16(ds4_gguf_writer *w, const char *key, int16_t v);
int ds4_gguf_write_u32(ds4_gguf_writer *w, const char *key, uint32_t v);
int ds4_gguf_write_i32(ds4_gguf_writer *w, const char *key, int32_t v);
int ds4_gguf_write_u64(ds4_gguf_writer *w, const char *key, uint64_t v);
int ds4_gguf_write_i64(ds4_gguf_writer *w, const char *key, int64_t v);
int ds4_gguf_write_f32(ds4_gguf_writer *w, const char *key, float v);
int ds4_gguf_write_f64(ds4_gguf_writer *w, const char *key, double v);
int ds4_gguf_write_bool(ds4_gguf_writer *w, const char *key, bool v);
int ds4_gguf_write_str(ds4_gguf_writer *w, const char *key, const char *v);
int ds4_gguf_write_str_n(ds4_gguf_writer *w, const char *key, const char *v, size_t len);
int ds4_gguf_write_arr_u32(ds4_gguf_writer *w, const char *key, const uint32_t *v, size_t n);
int ds4_gguf_write_arr_i32(ds4_gguf_writer *w, const char *key, const int32_t *v, size_t n);
int ds4_gguf_write_arr_f32(ds4_gguf_writer *w, const char *key, const float *v, size_t n);
/* strs[i] of lens[i] bytes (lens may be NULL for NUL-terminated strings). */
int ds4_gguf_write_arr_str(ds4_gguf_writer *w, const char *key, const char *const *strs,
                   const size_t *lens, size_t n);

/* Any value, encoded by the caller: `type` is written as the value type and
 * the len bytes of `value` as-is after it (nested arrays, bool arrays,
 * deliberately malformed values). */
int ds4_gguf_write_raw(ds4_gguf_writer *w, const char *key, uint32_t type, const void *value,
                       size_t len);

/* A tensor: ne[0..n_dims) with ne[0] contiguous, ggml type id, nbytes bytes.
 * Not validated (the reader does that); -1 on OOM only. */
int ds4_gguf_write_tensor(ds4_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                  const uint64_t *ne, const void *data, uint64_t nbytes);

/* Write atomically (temporary file in the same directory, fsync, rename). */
int ds4_gguf_writer_save(ds4_gguf_writer *w, const char *path, ds4err *err);

#endif
