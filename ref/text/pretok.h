/* DeepSeek pre-tokenizer: splits text into the pieces that BPE encodes
 * independently.
 *
 * This is the pre_tokenizer of the official DeepSeek V3/V4 tokenizer.json: a
 * Sequence of three Split steps with behavior "Isolated" (every match and
 * every gap between matches becomes a piece; each step re-splits the pieces of
 * the previous one), then ByteLevel without regex and without prefix space
 * (the byte mapping is done by the tokenizer, not here).  The regexes run on
 * PCRE2 with full Unicode properties; see docs/TOKENIZER.md for how they
 * relate to the Oniguruma engine the official Rust tokenizer uses.
 *
 * Input is arbitrary bytes.  Maximal runs of well-formed UTF-8 are split as
 * above, each as a separate subject (lookarounds do not see past it); every
 * maximal run of bytes that are not well-formed UTF-8 becomes one piece of its
 * own.  Concatenating the pieces gives back the input exactly. */
#ifndef DS4_PRETOK_H
#define DS4_PRETOK_H

#include <stddef.h>

#include "base/err.h"

/* The three Split regexes exactly as tokenizer.json writes them (UTF-8). */
extern const char *const ds4_pretok_official[3];

typedef struct ds4_pretok {
    void *re[3];        /* compiled pcre2_code_8*, read-only once built */
} ds4_pretok;

typedef struct ds4_span {
    size_t off, len;
} ds4_span;

typedef struct ds4_spans {
    ds4_span *v;
    size_t n, cap;
} ds4_spans;

/* Compile the regexes.  The compiled patterns are only read afterwards, so
 * one ds4_pretok may be used by several threads at once. */
int ds4_pretok_init(ds4_pretok *p, ds4err *err);
void ds4_pretok_free(ds4_pretok *p);

/* Append the pieces of text[0..len) to *out (offsets relative to text). */
int ds4_pretok_split(const ds4_pretok *p, const char *text, size_t len, ds4_spans *out,
                     ds4err *err);

void ds4_pretok_spans_free(ds4_spans *s);

/* The Unicode version of the linked PCRE2's character tables ("14.0.0" for
 * Debian 12's PCRE2 10.42): characters assigned after it have no category
 * here and may split differently from the official tokenizer.  Writes a
 * NUL-terminated string into buf[0..cap); returns its length, or -1 if it
 * does not fit. */
int ds4_pretok_unicode_version(char *buf, size_t cap);

#endif
