/* Choosing tokens from logits: greedy argmax, log-probabilities and top-k,
 * all defined so that every implementation gets the same answer: ties go to
 * the lowest token id, NaN never wins, log-softmax is computed in double with
 * ds4ref's own exp/log. */
#ifndef DS4_SAMPLE_H
#define DS4_SAMPLE_H

#include <stdint.h>

/* Index of the largest value; the lowest index among equal maxima; -1 if
 * every value is NaN (or n == 0). */
int32_t ds4_sample_argmax(const float *logits, uint32_t n);

/* log(sum_i exp(logits[i])) in double, over the non-NaN values. */
double ds4_sample_logsumexp(const float *logits, uint32_t n);

/* The k largest logits, by value descending then id ascending: ids[] and
 * their log-probabilities (logit - logsumexp, in double).  Returns the
 * number written (min(k, number of non-NaN values)). */
uint32_t ds4_sample_top_k(const float *logits, uint32_t n, uint32_t k, int32_t *ids, double *logprobs);

#endif
