/* The forward pass.
 *
 * One call evaluates a batch of tokens that may belong to several sequences
 * (prefill chunks, speculative verify batches, batched decode rows).  It runs
 * layer-major: every layer processes all tokens of the batch before the next
 * layer starts.  Inside a layer, projections run as matrix products over the
 * batch, and everything that touches a sequence's state reads only rows of
 * positions the token may see.  Every value a token produces is computed with
 * the canonical reductions of dot.h by one thread, so it is bit-identical
 * whatever the batch looks like: that is what makes chunked prefill, plain
 * decode and speculative verification give the same logits.
 *
 * This is the engine's API: the sessions above use it.  The engine's state
 * (engine.h) and the components (norm, hyperconn, attention, compressor,
 * indexer, moe, head) sit below this driver, one file each. */
#ifndef DS4_FORWARD_H
#define DS4_FORWARD_H

#include <stdint.h>

#include "base/err.h"
#include "ref/forward/engine.h"
#include "ref/forward/kvstate.h"

/* What the caller wants back for one sequence of the batch. */
typedef struct ds4_fwd_seq {
    ds4_kv *kv;            /* the sequence's state; tokens go at kv->pos.. */
    const int32_t *tokens;
    uint32_t n;
    float *logits;         /* NULL, or logits rows for tokens [first_out, n) */
    uint32_t first_out;
    float *hc_out;         /* NULL, or final HC state rows of all n tokens */
    float *hc_last;        /* NULL, or the final HC state of the last token */
} ds4_fwd_seq;

/* Evaluate the trunk for a batch of sequences (total tokens <= max_batch).
 * Advances each kv->pos by its n.  Fails (without touching any state) on a
 * bad token id or a context overflow. */
int ds4_forward(ds4_engine *e, ds4_fwd_seq *seqs, uint32_t n_seqs, ds4err *err);

/* One MTP step batch: for each token t, input HC state h[t] (n_hc*n_embd) and
 * token id ids[t] at positions kv->pos.. of the MTP state kv.  Writes the
 * block's output HC state (for chaining) and, if logits != NULL, the draft
 * logits of tokens [first_out, n) (catch-up rows only need their KV rows, so
 * they skip the LM head). */
typedef struct ds4_mtp_seq {
    ds4_kv *kv;            /* MTP block state */
    const float *h;        /* [n][n_hc*n_embd] */
    const int32_t *tokens; /* [n] */
    uint32_t n;
    float *h_out;          /* NULL or [n][n_hc*n_embd] */
    float *h_last;         /* NULL or the output HC state of the last token */
    float *logits;         /* NULL or rows for tokens [first_out, n) */
    uint32_t first_out;
} ds4_mtp_seq;

int ds4_forward_mtp(ds4_engine *e, ds4_mtp_seq *seqs, uint32_t n_seqs, ds4err *err);

#endif
