/* The growable byte buffer (buf.h). */
#include "base/buf.h"

#include <stdint.h>
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

void ds4_buf_free(ds4_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}
