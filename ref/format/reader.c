/* The trace readers' scaffold (reader.h). */
#include "ref/format/reader.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds4_reader_fail(const ds4_rd *r, const char *fmt, ...) {
    char msg[DS4_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->line) return ds4_err_set(r->err, DS4_E_FORMAT, "%s:%u: %s", r->name, r->line, msg);
    return ds4_err_set(r->err, DS4_E_FORMAT, "%s: %s", r->name, msg);
}

int ds4_reader_nomem(const ds4_rd *r) {
    return ds4_err_set(r->err, DS4_E_NOMEM, "%s: out of memory", r->name);
}

bool ds4_reader_next_line(ds4_rd *r, const char *buf, size_t len, size_t *pos, const char **line,
                      size_t *n, bool *newline) {
    if (*pos >= len) return false;
    const char *nl = memchr(buf + *pos, '\n', len - *pos);
    *line = buf + *pos;
    *n = nl ? (size_t)(nl - *line) : len - *pos;
    *newline = nl != NULL;
    *pos += *n + (nl ? 1 : 0);
    r->line++;
    return true;
}

int ds4_reader_keys(const ds4_rd *r, const ds4_json *obj, const char *what,
                const char *const *keys, size_t nk) {
    if (!obj || obj->type != DS4_JSON_OBJECT) return ds4_reader_fail(r, "%s: expected an object", what);
    uint32_t seen = 0;
    for (size_t m = 0; m < obj->n; m++) {
        const ds4_json *k = &obj->keys[m];
        size_t j = 0;
        for (; j < nk; j++) {
            const char *name = keys[j][0] == '?' ? keys[j] + 1 : keys[j];
            if (k->len == strlen(name) && !memcmp(k->str, name, k->len)) break;
        }
        if (j == nk) return ds4_reader_fail(r, "%s: unexpected key \"%.60s\"", what, k->str);
        if (seen & (1u << j)) return ds4_reader_fail(r, "%s: key \"%s\" appears twice", what, k->str);
        seen |= 1u << j;
    }
    for (size_t j = 0; j < nk; j++)
        if (keys[j][0] != '?' && !(seen & (1u << j)))
            return ds4_reader_fail(r, "%s: missing key \"%s\"", what, keys[j]);
    return 0;
}

int ds4_reader_uint(const ds4_rd *r, const ds4_json *v, const char *what, uint64_t max,
                uint64_t *out) {
    if (!v || v->type != DS4_JSON_NUMBER)
        return ds4_reader_fail(r, "%s: expected a non-negative integer", what);
    for (size_t i = 0; i < v->len; i++)
        if (v->str[i] < '0' || v->str[i] > '9')
            return ds4_reader_fail(r, "%s: expected a non-negative integer, got %.40s", what, v->str);
    errno = 0;
    unsigned long long x = strtoull(v->str, NULL, 10);
    if (errno || x > max)
        return ds4_reader_fail(r, "%s: %.40s is out of range (at most %" PRIu64 ")", what, v->str,
                           max);
    *out = x;
    return 0;
}

/* Not ds4_reader_f64 rounded to float: strtof rounds the decimal once, where
 * strtod then (float) would round it twice and could miss the float it
 * was printed from. */
int ds4_reader_f32(const ds4_rd *r, const ds4_json *v, const char *what, float *out) {
    if (!v || v->type != DS4_JSON_NUMBER) return ds4_reader_fail(r, "%s: expected a number", what);
    char *end;
    float x = strtof(v->str, &end);
    if (end != v->str + v->len || !isfinite(x))
        return ds4_reader_fail(r, "%s: %.40s is not a finite f32 value", what, v->str);
    *out = x;
    return 0;
}

int ds4_reader_f64(const ds4_rd *r, const ds4_json *v, const char *what, double *out) {
    if (!v || v->type != DS4_JSON_NUMBER) return ds4_reader_fail(r, "%s: expected a number", what);
    char *end;
    double x = strtod(v->str, &end);
    if (end != v->str + v->len || !isfinite(x))
        return ds4_reader_fail(r, "%s: %.40s is not a finite double", what, v->str);
    *out = x;
    return 0;
}

int ds4_reader_bool(const ds4_rd *r, const ds4_json *v, const char *what, bool *out) {
    if (!v || (v->type != DS4_JSON_TRUE && v->type != DS4_JSON_FALSE))
        return ds4_reader_fail(r, "%s: expected true or false", what);
    *out = v->type == DS4_JSON_TRUE;
    return 0;
}
