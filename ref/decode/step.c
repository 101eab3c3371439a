#include "ref/decode/step.h"

#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "ref/decode/sample.h"

/* SHA-256 of the logits as little-endian f32 bytes, independent of the host
 * byte order. */
static void digest_logits(const float *logits, uint32_t n, uint8_t out[32]) {
    ds4_sha256 h;
    ds4_sha256_init(&h);
    uint8_t buf[4096];
    uint32_t fill = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &logits[i], 4);
        buf[fill++] = (uint8_t)b;
        buf[fill++] = (uint8_t)(b >> 8);
        buf[fill++] = (uint8_t)(b >> 16);
        buf[fill++] = (uint8_t)(b >> 24);
        if (fill == sizeof(buf)) {
            ds4_sha256_update(&h, buf, fill);
            fill = 0;
        }
    }
    ds4_sha256_update(&h, buf, fill);
    ds4_sha256_final(&h, out);
}

int ds4_step_from_logits(const float *logits, uint32_t n_vocab, uint32_t top_k,
                             ds4_gen_step *st, ds4err *err) {
    uint32_t k = top_k ? top_k : 1;
    st->top_ids = malloc(sizeof(int32_t) * k);
    st->top_logits = malloc(sizeof(float) * k);
    st->top_logprobs = malloc(sizeof(double) * k);
    if (!st->top_ids || !st->top_logits || !st->top_logprobs)
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    st->token = ds4_sample_argmax(logits, n_vocab);
    if (st->token < 0) return ds4_err_set(err, DS4_E_INTERNAL, "every logit is NaN");
    st->n_top = ds4_sample_top_k(logits, n_vocab, top_k, st->top_ids, st->top_logprobs);
    for (uint32_t i = 0; i < st->n_top; i++) st->top_logits[i] = logits[st->top_ids[i]];
    st->logit = logits[st->token];
    st->logprob = (double)st->logit - ds4_sample_logsumexp(logits, n_vocab);
    digest_logits(logits, n_vocab, st->digest);
    return 0;
}

void ds4_step_list_free(ds4_gen_step *steps, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        free(steps[i].top_ids);
        free(steps[i].top_logits);
        free(steps[i].top_logprobs);
        steps[i].top_ids = NULL;
        steps[i].top_logits = NULL;
        steps[i].top_logprobs = NULL;
    }
}
