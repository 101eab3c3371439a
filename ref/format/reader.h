/* The scaffold the trace readers share (golden streams, ds4 logprob dumps,
 * official.vec files): where a reader is, for error messages that point at
 * the place ("NAME:LINE: what: why"), lines cut out of a whole-file buffer,
 * and typed values taken out of JSON records with the checks every format
 * applies to them.  All errors are DS4_E_FORMAT (DS4_E_NOMEM for memory). */
#ifndef DS4_RECORD_H
#define DS4_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/text/json.h"

typedef struct ds4_rd {
    const char *name;    /* the file, for messages */
    uint32_t line;       /* 1-based line being read; 0: the format has no lines */
    ds4err *err;
} ds4_rd;

/* Fail with "NAME:LINE: message" ("NAME: message" when line is 0). */
int ds4_reader_fail(const ds4_rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ds4_reader_nomem(const ds4_rd *r);

/* The next line of buf[0..len) from *pos: *line and *n (without its
 * newline), *pos moves past it and r->line counts it.  *newline tells
 * whether the line ended with '\n' (the last line of a file may not).
 * Returns false at the end of the buffer. */
bool ds4_reader_next_line(ds4_rd *r, const char *buf, size_t len, size_t *pos, const char **line,
                      size_t *n, bool *newline);

/* Every member of obj is one of keys[] (each at most once) and every key
 * not marked optional ('?' prefix) is there.  At most 32 keys. */
int ds4_reader_keys(const ds4_rd *r, const ds4_json *obj, const char *what,
                const char *const *keys, size_t nk);

/* Plain decimal digits with a value <= max. */
int ds4_reader_uint(const ds4_rd *r, const ds4_json *v, const char *what, uint64_t max,
                uint64_t *out);
/* A finite f32, converted with strtof (not through a double), so it lands on
 * exactly the float it was printed from. */
int ds4_reader_f32(const ds4_rd *r, const ds4_json *v, const char *what, float *out);
/* A finite double. */
int ds4_reader_f64(const ds4_rd *r, const ds4_json *v, const char *what, double *out);
int ds4_reader_bool(const ds4_rd *r, const ds4_json *v, const char *what, bool *out);

#endif
