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
    float *taps;           /* NULL, or the DSpark drafter's input of all n tokens:
                              [n][n_dspark_target*n_embd], the mean of the HC streams
                              after each target layer, in the order of the list */
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

/* The DSpark drafter (official DSparkBlock / forward_spec of
 * DeepSeek-V4-Flash-0731).  Its state kv has one ratio-0 layer per stage
 * (ds4_forward_dspark_kv_init); row p of stage s is the context KV that stage makes
 * of the trunk's taps at position p: main_x = main_norm(main_proj(taps)),
 * then the stage's wkv, kv_norm, RoPE at p (no YaRN), FP8 with QAT.
 *
 * Context rows: taps[n][n_dspark_target*n_embd] of positions kv->pos..,
 * which then advances by n. */
typedef struct ds4_dspark_ctx {
    ds4_kv *kv;
    const float *taps;
    uint32_t n;
} ds4_dspark_ctx;

int ds4_forward_dspark_kv_init(ds4_kv *kv, const ds4_model *m, uint32_t ctx, uint32_t chunk,
                       uint32_t rollback, ds4err *err);

int ds4_forward_dspark_ctx(ds4_engine *e, ds4_dspark_ctx *seqs, uint32_t n_seqs, ds4err *err);

/* One draft block: [anchor, noise x (block-1)] at positions kv->pos..
 * kv->pos+block-1 (kv->pos >= 1: the context rows [0, kv->pos) exist, and
 * the state does not move).  Every stage's attention sees the window of
 * context rows before the block (the last swa of them) and all the block's
 * own rows, in both directions.  Out: the base logits of every slot
 * [block][n_vocab] (the last stage's HC head, norm, the trunk's LM head;
 * the Markov term is the drafter's, ds4_dspark_markov) and the HC head's
 * output before the norm [block][n_embd], the confidence head's input. */
typedef struct ds4_dspark_blk {
    ds4_kv *kv;
    int32_t anchor;
    float *logits;
    float *pre;
} ds4_dspark_blk;

int ds4_forward_dspark_block(ds4_engine *e, ds4_dspark_blk *reqs, uint32_t n_reqs, ds4err *err);

#endif
