/* Errors returned upward.
 *
 * Library code never prints and never exits: a function that can fail takes a
 * ds4err* as its last argument, fills it and returns -1 (0 on success).  The
 * message is one line that names the file, key or tensor involved and what was
 * expected, so a CLI can print it as-is.  The code is a category the CLIs map
 * to distinct exit statuses. */
#ifndef DS4_ERR_H
#define DS4_ERR_H

#include <stdarg.h>

enum ds4_errcode {
    DS4_OK = 0,
    DS4_E_ARG = 2,         /* bad argument / usage */
    DS4_E_IO = 3,          /* open/read/write/mmap failure */
    DS4_E_FORMAT = 4,      /* malformed file content (GGUF, vectors, JSON) */
    DS4_E_MODEL = 5,       /* well-formed file, but not a valid DS4 model */
    DS4_E_NOMEM = 6,       /* allocation failure or a size that cannot fit */
    DS4_E_RANGE = 7,       /* token id, position or context out of range */
    DS4_E_UNSUPPORTED = 8, /* valid input this build cannot handle */
    DS4_E_MISMATCH = 9,    /* a comparison failed (diff/test tools) */
    DS4_E_INTERRUPTED = 10,/* stopped by a signal */
    DS4_E_INTERNAL = 11
};

#define DS4_ERR_MSG 512

typedef struct ds4err {
    int code;
    char msg[DS4_ERR_MSG];
} ds4err;

/* Fill *e (if not NULL) and return -1. */
int ds4_err_set(ds4err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the existing message with more context ("loading X: <old msg>"). */
int ds4_err_prefix(ds4err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
