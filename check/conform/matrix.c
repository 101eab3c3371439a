/* The settings matrix (matrix.h). */
#include "check/conform/matrix.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set(ds4_cf_dim *d, const uint32_t *v, uint32_t n) {
    memcpy(d->v, v, sizeof(uint32_t) * n);
    d->n = n;
}

void ds4chk_matrix_default(ds4_cf_matrix *m) {
    static const uint32_t draft[] = {0, 1, 2, 3, 4, 6, 8}, chunk[] = {1, 7, 64, DS4_CF_WHOLE},
                          batch[] = {1, 2, 4};
    set(&m->draft, draft, 7);
    set(&m->chunk, chunk, 4);
    set(&m->batch, batch, 3);
    set(&m->cache, (const uint32_t[]){DS4_CF_COLD}, 1);
    set(&m->conf, (const uint32_t[]){0}, 1);
}

/* "cold,warm" of s[0..len) into d. */
static int parse_cache(const char *s, size_t len, ds4_cf_dim *d, ds4err *err) {
    ds4_cf_dim out = {.n = 0, .given = true};
    for (size_t at = 0; at <= len;) {
        const char *comma = memchr(s + at, ',', len - at);
        size_t end = comma ? (size_t)(comma - s) : len;
        uint32_t v;
        if (end - at == 4 && !strncmp(s + at, "cold", 4)) v = DS4_CF_COLD;
        else if (end - at == 4 && !strncmp(s + at, "warm", 4)) v = DS4_CF_WARM;
        else
            return ds4_err_set(err, DS4_E_ARG, "--matrix cache: '%.*s' is not cold or warm",
                               (int)(end - at > 20 ? 20 : end - at), s + at);
        bool seen = false;
        for (uint32_t i = 0; i < out.n; i++) seen |= out.v[i] == v;
        if (!seen) out.v[out.n++] = v;
        at = end + 1;
    }
    *d = out;
    return 0;
}

const char *ds4chk_matrix_chunk_name(uint32_t chunk, char *buf, size_t cap) {
    if (chunk == DS4_CF_WHOLE) return "whole";
    snprintf(buf, cap, "%u", chunk);
    return buf;
}

/* One value of dimension `dim` from s[0..len). */
static int parse_value(const char *dim, const char *s, size_t len, uint32_t lo, uint32_t hi,
                       bool whole_ok, uint32_t *out, ds4err *err) {
    if (whole_ok && len == 5 && !strncmp(s, "whole", 5)) {
        *out = DS4_CF_WHOLE;
        return 0;
    }
    uint64_t v = 0;
    size_t i = 0;
    for (; i < len && s[i] >= '0' && s[i] <= '9' && v <= hi; i++) v = v * 10 + (uint64_t)(s[i] - '0');
    if (i == 0 || i != len || v < lo || v > hi)
        return ds4_err_set(err, DS4_E_ARG, "--matrix %s: '%.*s' is not a number in [%u, %u]%s",
                          dim, (int)(len > 20 ? 20 : len), s, lo, hi,
                          whole_ok ? " or 'whole'" : "");
    *out = (uint32_t)v;
    return 0;
}

/* "v,v,v" of s[0..len) into d. */
static int parse_list(const char *dim, const char *s, size_t len, uint32_t lo, uint32_t hi,
                      bool whole_ok, ds4_cf_dim *d, ds4err *err) {
    ds4_cf_dim out = {.n = 0, .given = true};
    for (size_t at = 0; at <= len;) {
        const char *comma = memchr(s + at, ',', len - at);
        size_t end = comma ? (size_t)(comma - s) : len;
        uint32_t v = 0;
        if (parse_value(dim, s + at, end - at, lo, hi, whole_ok, &v, err)) return -1;
        bool seen = false;
        for (uint32_t i = 0; i < out.n; i++) seen |= out.v[i] == v;
        if (!seen) {
            if (out.n == DS4_CF_MAX_VALUES)
                return ds4_err_set(err, DS4_E_ARG, "--matrix %s: more than %d values", dim,
                                  DS4_CF_MAX_VALUES);
            out.v[out.n++] = v;
        }
        at = end + 1;
    }
    *d = out;
    return 0;
}

int ds4chk_matrix_parse(ds4_cf_matrix *out, const char *spec, ds4err *err) {
    ds4_cf_matrix mm = *out, *m = &mm;   /* out changes only when all of spec is good */
    for (const char *p = spec; *p;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        size_t len = strcspn(p, " \t");
        const char *eq = memchr(p, '=', len);
        if (!eq || eq + 1 == p + len)
            return ds4_err_set(err, DS4_E_ARG, "--matrix: '%.*s' is not NAME=V,V,... (draft, chunk, "
                              "batch, cache or conf)", (int)(len > 40 ? 40 : len), p);
        size_t nlen = (size_t)(eq - p), vlen = len - nlen - 1;
        int rc;
        if (nlen == 5 && !strncmp(p, "draft", 5))
            rc = parse_list("draft", eq + 1, vlen, 0, 16, false, &m->draft, err);
        else if (nlen == 5 && !strncmp(p, "chunk", 5))
            rc = parse_list("chunk", eq + 1, vlen, 1, 65536, true, &m->chunk, err);
        else if (nlen == 5 && !strncmp(p, "batch", 5))
            rc = parse_list("batch", eq + 1, vlen, 1, DS4_CF_MAX_BATCH, false, &m->batch, err);
        else if (nlen == 5 && !strncmp(p, "cache", 5))
            rc = parse_cache(eq + 1, vlen, &m->cache, err);
        else if (nlen == 4 && !strncmp(p, "conf", 4))
            rc = parse_list("conf", eq + 1, vlen, 0, 100, false, &m->conf, err);
        else
            rc = ds4_err_set(err, DS4_E_ARG, "--matrix: unknown dimension '%.*s' (draft, chunk, "
                            "batch, cache or conf)", (int)(nlen > 20 ? 20 : nlen), p);
        if (rc) return -1;
        p += len;
    }
    *out = mm;
    return 0;
}
