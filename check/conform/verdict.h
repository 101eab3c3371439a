/* The verdicts of ds4ref-conform on one row of one cell (docs/CONFORM.md).
 *
 * Exact mode (a backend that claims ds4ref's numerics): the row's tokens,
 * logits and logprobs must be bit-identical to the reference golden for
 * the same prompt, in everything the output records.
 *
 * Tolerance mode (the default): the reference is teacher-forced on the
 * backend's own committed tokens, and at every step
 *   gap = logprob of the reference's argmax - logprob of the committed token
 * must stay within max_gap for a greedy backend: a verifier that commits a
 * wrong draft commits a token far below the argmax (ds4 #358: about 21
 * logits).  The backend's own top-k logprobs must also agree with the
 * reference's under the same prefix (max |dlogprob| over the tokens in both
 * lists, top-5 and top-20 overlap), as ds4ref-diff measures them.
 *
 * Across cells: a backend's stream for a prompt at any draft depth, chunk
 * and batch must equal its stream of the base cell (the lowest depth, the
 * whole prompt in one chunk, the smallest batch) unless a reference
 * near-tie (the two tokens' logprobs within tie_eps) explains the first
 * difference: then the cell is a "tie", neither pass nor fail. */
#ifndef DS4_CONFORM_VERDICT_H
#define DS4_CONFORM_VERDICT_H

#include <stdbool.h>
#include <stdint.h>

#include "check/conform/reference.h"
#include "ref/text/tokenizer.h"
#include "ref/format/golden.h"

/* From best to worst; a cell takes the worst of its rows. */
typedef enum ds4_cf_status {
    DS4_CF_PASS,
    DS4_CF_NOT_EXERCISED,  /* passed, but no draft deep enough was accepted */
    DS4_CF_TIE,            /* differs from the base cell only at a reference near-tie */
    DS4_CF_FAIL,
    DS4_CF_ERROR,          /* the backend did not run, or left no usable output */
    DS4_CF_NA,             /* not run: the backend cannot take this cell's settings */
    DS4_CF_NSTATUS
} ds4_cf_status;

/* "178 'ab\x0a'": a token's id and its bytes (printable ASCII as it is,
 * the rest as \xNN; tok may be NULL: the id alone), into out. */
const char *ds4chk_verdict_token_name(const ds4_tokenizer *tok, int32_t id, char *out, size_t cap);

/* "pass", "not exercised", "tie", "fail", "error", "n/a". */
const char *ds4chk_verdict_status_name(ds4_cf_status s);

typedef struct ds4_cf_limits {
    bool exact;
    bool greedy;           /* temp 0: the gap is checked */
    double max_gap;        /* nats */
    double tie_eps;        /* nats */
    double max_dlogprob;   /* NAN: unchecked */
    double min_top5;       /* mean overlap fraction; NAN: unchecked */
    double min_top20;
} ds4_cf_limits;

/* The first thing found wrong (or PASS). */
typedef struct ds4_cf_finding {
    ds4_cf_status status;
    int64_t step;          /* -1: not a step's (a missing file, the prompt) */
    int32_t token;         /* the backend's token at that step, or -1 */
    double gap;            /* at that step; NAN when not measured */
    double dlogprob;       /* the largest |dlogprob| at that step; NAN when none */
    bool own_tie;          /* a tie the backend's own margins explain, not the
                            * reference's (ds4chk_verdict_same) */
    double margin;         /* a cross-cell finding's: how far apart the reference
                            * puts the two tokens; NAN otherwise */
    char detail[400];
} ds4_cf_finding;

void ds4chk_verdict_finding_pass(ds4_cf_finding *f);

/* Every finding of a row, in the order found: each failing step of the row
 * check, its other checks, then the cross-cell check.  The report's JSON
 * lists them all. */
typedef struct ds4_cf_findings {
    ds4_cf_finding *v;
    uint32_t n;
    bool failed;           /* a push ran out of memory (the report says so) */
} ds4_cf_findings;

void ds4chk_verdict_findings_push(ds4_cf_findings *l, const ds4_cf_finding *f);
void ds4chk_verdict_findings_free(ds4_cf_findings *l);

/* The largest |dlogprob| of out's step i against tf's: over the tokens both
 * top lists hold, and the committed token's own logprob when out records
 * it; NAN when no token is common to both sides. */
double ds4chk_verdict_step_dlogprob(const ds4_golden *out, const ds4_cf_tf *tf, uint32_t i);

/* The backend's own margin at each step of its output: the logprob of its
 * best alternative subtracted from that of its first (its top list is by
 * logit); NAN where it recorded fewer than two.  malloc'd [out->n_steps],
 * NULL when out of memory or there is no step. */
double *ds4chk_verdict_margins(const ds4_golden *out);

/* Can out be checked at all: token ids, the cell's prompt, ids inside the
 * vocabulary, at most n_want steps?  FAIL or ERROR in f when not. */
bool ds4chk_verdict_usable(const ds4_golden *out, const int32_t *prompt, uint32_t n_prompt,
                         uint32_t n_want, uint32_t n_vocab, ds4_cf_finding *f);

/* One row: out (the backend's output for this prompt) against ref (the
 * reference golden) and tf (the reference teacher-forced on out's tokens).
 * n_want: the steps asked for; eos: the end token (-1 none), after which a
 * row may stop early.  tok renders tokens in details (may be NULL).  Every
 * step is checked: each failing one goes into all, and f is the first
 * finding (PASS when there is none). */
void ds4chk_verdict_row(const ds4_golden *ref, const ds4_golden *out, const ds4_cf_tf *tf,
                      uint32_t n_want, int32_t eos, const ds4_cf_limits *l,
                      const ds4_tokenizer *tok, ds4_cf_findings *all, ds4_cf_finding *f);

/* The two sides of a cross-cell comparison: a stream's teacher-forced
 * record and the backend's own margins on it (NULL: not recorded). */
typedef struct ds4_cf_stream {
    const ds4_cf_tf *tf;
    const double *margin;      /* [tf->n] */
} ds4_cf_stream;

/* A row's stream against the base cell's for the same prompt, named
 * base_name in the detail: PASS, TIE or FAIL.  Where they first differ it
 * is a tie when either side could have gone the other way: the reference
 * puts the two tokens within tie_eps, or the backend's own top two at that
 * step, in either stream, are within tie_eps. */
void ds4chk_verdict_same(const ds4_cf_stream *base, const ds4_cf_stream *row, const char *base_name,
                       const ds4_cf_limits *l, const ds4_tokenizer *tok, ds4_cf_finding *f);

#endif
