/* A growable byte buffer.  An allocation failure sets `failed`; later
 * appends are ignored, so a writer can append freely and check once at the
 * end.  A zeroed ds4_buf is empty and ready. */
#ifndef DS4_BUF_H
#define DS4_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ds4_buf {
    char *p;            /* NUL-terminated whenever len > 0 */
    size_t len;
    size_t cap;
    bool failed;
} ds4_buf;

int ds4_buf_put(ds4_buf *b, const void *data, size_t n);
int ds4_buf_puts(ds4_buf *b, const char *s);
int ds4_buf_putc(ds4_buf *b, char c);
/* printf-style append, of any length. */
int ds4_buf_printf(ds4_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ds4_buf_free(ds4_buf *b);

#endif
