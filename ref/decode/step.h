/* The record of a generation step, with per-step log-probabilities: what
 * golden streams, logprob vectors and plain decoding are made of.
 *
 * Step i reads the session's logits (the distribution after the last token),
 * records the greedy token, its logprob, the top-k alternatives and a SHA-256
 * of the whole logits vector (its f32 little-endian bytes), then feeds the
 * chosen token back (except after the last step, and never after EOS when
 * stop_at_eos is set). */
#ifndef DS4_GENERATE_H
#define DS4_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/decode/session.h"

typedef struct ds4_gen_step {
    int32_t token;          /* greedy choice: argmax, lowest id on ties */
    float logit;
    double logprob;
    uint32_t n_top;
    int32_t *top_ids;       /* [top_k], by logit desc then id asc */
    float *top_logits;
    double *top_logprobs;
    uint8_t digest[32];     /* sha256 of the n_vocab f32 logits, little-endian */
} ds4_gen_step;

typedef struct ds4_gen_opts {
    uint32_t n_steps;
    uint32_t top_k;
    int32_t eos;            /* token that ends generation, or -1 */
    bool stop_at_eos;
} ds4_gen_opts;

/* Called after every step (e.g. to print text as it is produced); return
 * non-zero to stop early. */
typedef int (*ds4_gen_cb)(void *ud, uint32_t step, const ds4_gen_step *st);

void ds4_step_list_free(ds4_gen_step *steps, uint32_t n);

/* Fill one step record from a logits vector (used by the verifiers too). */
int ds4_step_from_logits(const float *logits, uint32_t n_vocab, uint32_t top_k,
                             ds4_gen_step *st, ds4err *err);

#endif
