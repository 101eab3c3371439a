/* Comparing two token streams with log-probabilities: the figures behind
 * ds4ref-diff, kept here so tests can check them in-process.
 *
 * A and B are ds4_golden values of any kind (a ds4ref golden, a ds4
 * --dump-logprobs file, an official.vec case); A is the reference.
 *
 * Per step i present on both sides:
 *   token_equal   the greedy tokens have the same bytes, and the same ids
 *                 where both sides carry ids (ds4 compares bytes only);
 *   top-N overlap for N = 1, 5, 20: how many of A's first N alternatives
 *                 are among B's first N; out of avail = min(N, |A|, |B|);
 *   common        tokens present in both full top lists, matched by id when
 *                 both sides carry ids, else by bytes;
 *   |dlogprob|    |lp_A(t) - lp_B(t)| over the common tokens: max and mean;
 *   KL            KL(P_A || P_B) over the common tokens renormalized:
 *                   p_t = exp(lp_A(t)) / sum_common exp(lp_A),  q_t likewise,
 *                   KL = sum_t p_t (log p_t - log q_t),
 *                 computed in double with ds4ref's deterministic exp/log,
 *                 clamped at 0 against rounding; defined when common >= 2;
 *   exact         every field both sides carry is bit-identical: token
 *                 bytes and ids, logits, logprobs (at f32 precision when
 *                 either side stores f32, as ds4 dumps and .vec files do),
 *                 the logits digest, the length of the top list.
 *
 * Divergence: once the greedy tokens differ, the two runs continue from
 * different prefixes and later steps say nothing about numerics.  By default
 * steps are compared up to and including the first divergence (its
 * distribution is still comparable: same prefix, different pick) and not
 * after; with all_steps every common step is compared (for an OTHER that was
 * teacher-forced on A's tokens).
 *
 * Summary:
 *   top1       = steps with equal tokens / steps compared (NAN when none
 *                was): the share of the compared steps where B chose A's
 *                token.  Steps only one side has (a 16-step official.vec
 *                against a longer golden) are noted, not counted;
 *   top5/top20 = mean over compared steps (with avail > 0) of overlap/avail;
 *   max/mean |dlogprob| over all common tokens of all compared steps;
 *   max/mean KL over compared steps where it is defined;
 *   exact      = same prompt, same step count, same stop reason and model
 *                where both sides record them, and every step exact. */
#ifndef DS4_DIFFMETRICS_H
#define DS4_DIFFMETRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "ref/format/golden.h"

enum { DS4_DIFF_TOP1, DS4_DIFF_TOP5, DS4_DIFF_TOP20, DS4_DIFF_NTOP };

typedef struct ds4_diff_opts {
    bool all_steps;
    /* Two goldens of different models are noted but not held against
     * exactness: a model and its unquantized twin, or the same model
     * written twice, whose numbers must still be the same bits. */
    bool ignore_model;
} ds4_diff_opts;

typedef struct ds4_diff_step {
    bool compared;
    bool token_equal;
    bool exact;
    uint32_t overlap[DS4_DIFF_NTOP];
    uint32_t avail[DS4_DIFF_NTOP];
    uint32_t n_common;
    double max_dlp, mean_dlp;     /* valid when n_common > 0 */
    bool has_kl;
    double kl;
    char inexact[80];             /* the first field that differs; "" when exact */
} ds4_diff_step;

typedef struct ds4_diff_report {
    uint32_t n_a, n_b;
    uint32_t n_steps;             /* min(n_a, n_b): entries of steps[] */
    ds4_diff_step *steps;
    int64_t first_divergence;     /* -1: none among the common steps */
    int64_t first_inexact;        /* -1: none */
    uint32_t n_compared, n_agree;
    double top1;
    double top5, top20;           /* NAN when nothing was measured */
    uint64_t n_pairs;
    double max_dlp, mean_dlp;     /* NAN when n_pairs == 0 */
    uint32_t n_kl;
    double max_kl, mean_kl;       /* NAN when n_kl == 0 */
    bool prompt_differs;
    bool model_differs;
    bool exact;
    ds4_buf notes;                /* lines "note: ...\n" */
} ds4_diff_report;

int ds4chk_diff_compute(const ds4_golden *a, const ds4_golden *b, const ds4_diff_opts *o,
                     ds4_diff_report *r, ds4err *err);
void ds4chk_diff_report_free(ds4_diff_report *r);

/* Thresholds; NAN (or false) leaves one unchecked. */
typedef struct ds4_diff_limits {
    double max_dlogprob;
    double min_top1;
    double min_top5;
    double min_top20;
    double max_kl;
    bool exact;
} ds4_diff_limits;

/* Number of violations, each appended to *why as one line "--flag X: got Y".
 * A prompt mismatch is always a violation (nothing else is comparable
 * then); a limit whose figure could not be measured is violated too.  With
 * no limit at all, min_top1 = 1 is checked (the line says it is the
 * default): a diff without thresholds still fails on a divergence. */
uint32_t ds4chk_diff_check(const ds4_diff_report *r, const ds4_diff_limits *l, ds4_buf *why);

/* Human-readable report: the two sources, notes, one line per step (none
 * when quiet), the divergence, the summary line, and the verdict: "result:
 * PASS", or "result: FAIL" and "  violated: " before each line of
 * violations (from ds4chk_diff_check; NULL: none). */
int ds4chk_diff_format_text(const ds4_diff_report *r, const ds4_golden *a, const ds4_golden *b,
                         const char *name_a, const char *name_b, bool quiet,
                         const ds4_buf *violations, ds4_buf *out, ds4err *err);

/* The same as one JSON object (docs/FORMATS.md), with the violation lines
 * from ds4chk_diff_check and the verdict. */
int ds4chk_diff_format_json(const ds4_diff_report *r, const ds4_golden *a, const ds4_golden *b,
                         const char *name_a, const char *name_b, const ds4_buf *violations,
                         ds4_buf *out, ds4err *err);

#endif
