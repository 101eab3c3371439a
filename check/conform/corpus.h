/* The prompts ds4ref-conform runs: the corpus that ships in the repo
 * (the .txt files of vectors/conform, compiled into the library), or a folder of the
 * user's own.  A prompt is a user message, rendered with the official chat
 * template without a system prompt and with thinking off, as ds4's tests
 * render theirs; a text that starts with the BOS string is taken as already
 * rendered. */
#ifndef DS4_CONFORM_CORPUS_H
#define DS4_CONFORM_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct ds4_cf_text {
    const char *name;
    const uint8_t *bytes;
    size_t len;
} ds4_cf_text;

/* The built-in corpus (generated from vectors/conform/ by the build). */
extern const ds4_cf_text ds4chk_corpus_data[];
extern const uint32_t ds4chk_corpus_data_n;

typedef struct ds4_cf_corpus {
    uint32_t n;
    ds4_cf_text *p;        /* names and bytes owned by the corpus */
} ds4_cf_corpus;

/* A copy of the built-in corpus. */
int ds4chk_corpus_builtin(ds4_cf_corpus *c, ds4err *err);

/* Every NAME.txt of dir, by name (at most 64 files, 1 MiB each; none is an
 * error). */
int ds4chk_corpus_dir(ds4_cf_corpus *c, const char *dir, ds4err *err);

void ds4chk_corpus_free(ds4_cf_corpus *c);

#endif
