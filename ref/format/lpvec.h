/* ds4's logprob vector files (its tests/test-vectors/official.vec;
 * docs/FORMATS.md §3), read and appended to, so ds4's own
 * `ds4_test --logprob-vectors` can run against a ds4ref golden and
 * ds4ref-diff can compare a golden against the official vectors.
 *
 * Grammar (ASCII, one record a line):
 *
 *   # comment                                   (anywhere; skipped)
 *   case <id> <ctx> <nsteps> <prompt-path>
 *   step <index> <selected-hex> <top-count>
 *   top <token-hex> <logprob>                    (top-count of them)
 *   ...
 *   end
 *
 * Lines are trimmed of white space; blank lines are skipped.  Limits are
 * ds4's: a line holds at most 2047 bytes before its newline (ds4 reads with
 * fgets into 2048 bytes), id <= 95 chars, prompt path <= 511 chars,
 * 1 <= nsteps <= 16, top-count 0..32, a token <= 128 bytes (256 hex digits,
 * either case).  Logprobs are f32 (ds4 reads them with %f into a float).
 *
 * The reader accepts a subset of what ds4's sscanf-based parser accepts, so
 * any file it takes is read identically by ds4.  Where ds4 is lax it is
 * strict: fields are exactly the ones listed (ds4 ignores trailing text),
 * numbers are plain decimal digits, every step 0..nsteps-1 appears once and
 * in order with exactly top-count top lines (ds4 leaves missing ones
 * zeroed), and case ids are unique.  Errors name the file and line. */
#ifndef DS4_LPVEC_H
#define DS4_LPVEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "ref/format/golden.h"

#define DS4_LPV_MAX_LINE 2047
#define DS4_LPV_MAX_ID 95
#define DS4_LPV_MAX_PATH 511
#define DS4_LPV_MAX_STEPS 16
#define DS4_LPV_MAX_TOP 32
#define DS4_LPV_MAX_TOKEN_BYTES 128
#define DS4_LPV_MAX_FILE ((size_t)64 << 20)
#define DS4_LPV_HEADER "# ds4-official-logprob-vectors-v1"

typedef struct ds4_lpv_tok {
    uint8_t bytes[DS4_LPV_MAX_TOKEN_BYTES];
    uint32_t n_bytes;
    float logprob;           /* top entries only */
} ds4_lpv_tok;

typedef struct ds4_lpv_step {
    ds4_lpv_tok selected;
    uint32_t n_top;
    ds4_lpv_tok top[DS4_LPV_MAX_TOP];
} ds4_lpv_step;

typedef struct ds4_lpv_case {
    char id[DS4_LPV_MAX_ID + 1];
    char prompt[DS4_LPV_MAX_PATH + 1];
    uint32_t ctx;
    uint32_t n_steps;
    ds4_lpv_step steps[DS4_LPV_MAX_STEPS];
    uint32_t line;           /* line of its "case" record */
    size_t begin, end;       /* byte range from "case" to the end of "end\n" */
} ds4_lpv_case;

typedef struct ds4_lpv_file {
    uint32_t n_cases;
    ds4_lpv_case *cases;
} ds4_lpv_file;

int ds4_lpvec_parse(const char *buf, size_t len, const char *name, ds4_lpv_file *f,
                  ds4err *err);
int ds4_lpvec_read(const char *path, ds4_lpv_file *f, ds4err *err);
void ds4_lpvec_free(ds4_lpv_file *f);

/* The case with this id, or NULL. */
const ds4_lpv_case *ds4_lpvec_find(const ds4_lpv_file *f, const char *id);

/* A case as a DS4_TRACE_VEC golden: token bytes, f32 logprobs of the top
 * entries, ctx; no ids, logits or digests. */
int ds4_lpvec_to_golden(const ds4_lpv_case *c, ds4_golden *g, ds4err *err);

typedef struct ds4_lpv_append_opts {
    const char *id;          /* case id: 1..95 printable ASCII chars, no spaces */
    const char *prompt_path; /* as ds4 will open it, relative to its repo root */
    uint32_t max_top;        /* top lines per step: min(max_top, 32, golden's) */
    bool replace;            /* replace a case of the same id instead of failing */
} ds4_lpv_append_opts;

/* One case from a golden: ctx from its settings, the first min(16, n_steps)
 * steps, each with its greedy token's bytes and the first top entries with
 * their logprobs rounded to f32 ("%.9g").  ds4 fails a step when one of the
 * listed tokens is missing from its own top 20 or its logprob is more than
 * 4.0 away, so max_top <= 20; a few (the first 5, say) keep near-ties at the
 * tail of the list from failing the test. */
int ds4_lpvec_format_case(const ds4_golden *g, const ds4_lpv_append_opts *o, ds4_buf *out,
                        ds4err *err);

/* Append that case to the file at path (created with the official header
 * comments when missing), atomically.  The existing file must parse; a case
 * with the same id is an error unless o->replace, which swaps it in place. */
int ds4_lpvec_append(const char *path, const ds4_golden *g, const ds4_lpv_append_opts *o,
                   ds4err *err);

/* The checks ds4_lpvec_append makes before it writes, for a caller that will
 * append after hours of generation and wants to fail first: the id and
 * prompt path are valid, the file at path (if any) parses, and it holds no
 * case of that id (unless o->replace). */
int ds4_lpvec_append_check(const char *path, const ds4_lpv_append_opts *o, ds4err *err);

/* ds4_lpvec_append through a writer the caller opened on path beforehand (so
 * that a path that cannot be written failed then); the file is read again
 * now, and dst is committed, or aborted on failure. */
int ds4_lpvec_append_to(ds4_afile *dst, const char *path, const ds4_golden *g,
                      const ds4_lpv_append_opts *o, ds4err *err);

#endif
