/* A scripted drafter, for the tests: it replays a given token stream with
 * errors injected at chosen depths, so that the tests of speculative
 * decoding (decode/speculative.h) reach every accept/reject path
 * deterministically, with or without a model's MTP head.
 *
 * Row r proposes stream[pos+1], stream[pos+2], ... after the token at
 * position pos (positions count from the row's first prompt token), and
 * nothing past the end of the stream.  Its c-th proposal for the row (c = 0,
 * 1, ...) replaces the draft at depth err_depth[c % n_err] (1-based; 0 = no
 * error) with (token + 1) % n_vocab. */
#ifndef DS4_TEST_SCRIPT_DRAFTER_H
#define DS4_TEST_SCRIPT_DRAFTER_H

#include <stdint.h>

#include "base/err.h"
#include "ref/decode/speculative.h"

typedef struct drafter_script {
    const int32_t *stream;
    uint32_t n;
    const uint8_t *err_depth;  /* NULL: never wrong */
    uint32_t n_err;
} drafter_script;

/* A drafter for rows[0..n_rows) (copied); free it with ds4_spec_drafter_free. */
int script_drafter_new(ds4_drafter **out, const drafter_script *rows, uint32_t n_rows,
                       uint32_t n_vocab, ds4err *err);

#endif
