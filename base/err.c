#include "base/err.h"

#include <stdio.h>
#include <string.h>

int ds4_err_set(ds4err *e, int code, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    e->code = code;
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return -1;
}

int ds4_err_prefix(ds4err *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[DS4_ERR_MSG];
    char old[DS4_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof(old));
    /* Truncation is acceptable: the message stays one bounded line. */
    snprintf(e->msg, sizeof(e->msg), "%.200s: %.300s", prefix, old);
    return -1;
}
