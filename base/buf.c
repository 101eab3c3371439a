/* The growable byte buffer (buf.h). */
#include "base/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds4_buf_put(ds4_buf *b, const void *data, size_t n) {
    if (b->failed) return -1;
    if (n == 0) return 0;
    if (n >= SIZE_MAX - b->len) { b->failed = true; return -1; }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) { cap = b->len + n + 1; break; }
            cap *= 2;
        }
        char *np = realloc(b->p, cap);
        if (!np) { b->failed = true; return -1; }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int ds4_buf_puts(ds4_buf *b, const char *s) {
    return ds4_buf_put(b, s, strlen(s));
}

int ds4_buf_putc(ds4_buf *b, char c) {
    return ds4_buf_put(b, &c, 1);
}

int ds4_buf_printf(ds4_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return -1;
    }
    if ((size_t)n < sizeof(small)) return ds4_buf_put(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = ds4_buf_put(b, big, (size_t)n);
    free(big);
    return rc;
}

void ds4_buf_free(ds4_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}
