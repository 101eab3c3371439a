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
 * The components live in one file each (hc.c, attention.c, compressor.c,
 * indexer.c, moe.c, head.c, forward.c); this header is their shared internal
 * interface. */
#ifndef DS4_FORWARD_H
#define DS4_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "forward/kvstate.h"
#include "model/model.h"
#include "forward/rope.h"

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

/* Options that change the numbers.  qat: the official FP8 KV / FP4 indexer
 * round trips. */
typedef struct ds4_fwd_opts {
    bool qat;
} ds4_fwd_opts;

/* Scratch for a batch of up to `cap` tokens; reused across calls. */
typedef struct ds4_fwd_scratch ds4_fwd_scratch;

/* Debug taps: named intermediate values of every token, so another backend
 * can find the first layer where it diverges.  The callback runs on one
 * thread, in batch order, right after the step that produced the value (with
 * a tap installed, steps that would call it from parallel loops run
 * serially; the values are the same either way).  Names:
 *   hc_attn, hc_ffn     f32 [n_hc*n_embd]  HC state after the attention /
 *                                          FFN sublayer (hc_ffn = block output)
 *   attn_out, ffn_out   f32 [n_embd]       sublayer output before hc_post
 *   experts             i32 [n_used]       selected experts, slot order
 *   expert_weights      f64 [n_used]       their routing weights
 *   expert_scores       f64 [n_expert]     biased selection scores (score layers)
 *   indexer_scores      f64 [n_visible]    (only when the indexer must choose)
 *   indexer_sel         i32 [n]            compressed entries attended, ascending
 *   comp_row, idx_row   f32 [dim]          compressed row emitted at this position
 * layer is the block index, n_layer for the MTP block. */
enum ds4_tap_kind { DS4_TAP_F32, DS4_TAP_I32, DS4_TAP_F64 };

typedef struct ds4_tap {
    const char *name;
    uint32_t layer;
    const struct ds4_kv *seq;
    uint32_t pos;
    uint32_t kind;
    const void *data;
    uint32_t n;
} ds4_tap;

typedef void (*ds4_tap_fn)(void *ud, const ds4_tap *t);

typedef struct ds4_engine {
    const ds4_model *m;
    ds4_fwd_opts opts;
    ds4_rope rope_dense;   /* ratio-0 layers and MTP: rope.freq_base, no YaRN */
    ds4_rope rope_comp;    /* ratio>0 layers: compress_rope_freq_base + YaRN */
    ds4_fwd_scratch *scr;
    uint32_t cap;
    ds4_tap_fn tap;        /* NULL: no taps */
    void *tap_ud;
    uint32_t tap_layer;    /* block index the current step reports */
} ds4_engine;

int ds4_engine_init(ds4_engine *e, const ds4_model *m, const ds4_fwd_opts *opts,
                    uint32_t max_batch, ds4err *err);
void ds4_engine_free(ds4_engine *e);

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

/* ---- internal: per-batch token bookkeeping and component entry points ---- */

typedef struct ds4_tok {
    ds4_kv *kv;
    uint32_t pos;
    int32_t id;
} ds4_tok;

struct ds4_fwd_scratch {
    uint32_t cap;
    ds4_tok *tok;          /* [cap] */
    float *x;              /* HC state [cap][n_hc*n_embd] */
    float *x2;             /* HC state after a sublayer */
    float *y;              /* HC-collapsed input of a sublayer [cap][n_embd] */
    float *a;              /* normed sublayer input [cap][n_embd] */
    float *post;           /* [cap][n_hc] */
    float *comb;           /* [cap][n_hc*n_hc] */
    float *out;            /* sublayer output [cap][n_embd] */
    /* attention */
    float *qr;             /* [cap][q_lora] */
    float *q;              /* [cap][n_head*head_dim], reused for the output heads */
    float *o;              /* [cap][n_head*head_dim] */
    float *kvrow;          /* [cap][head_dim] */
    float *low;            /* [cap][o_groups*o_lora] */
    float *ckv, *csc;      /* compressor projections [cap][max width] */
    float *iq;             /* indexer q [cap][idx_head*idx_dim] */
    float *iw;             /* indexer head weights [cap][idx_head] */
    uint32_t *isel;        /* indexer selection [cap][idx_topk] */
    uint32_t *nsel;        /* [cap] */
    /* MoE */
    float *rlog;           /* router logits [cap][n_expert] */
    int32_t *sel;          /* [cap][n_used] */
    double *selw;          /* [cap][n_used] routing weights */
    float *eout;           /* [cap][n_used][n_embd] expert outputs */
    float *ex;             /* gathered expert inputs [cap][n_embd] */
    float *eg, *eu;        /* [cap][n_ff] */
    float *eo;             /* [cap][n_embd] */
    uint32_t *elist;       /* [cap*n_used] (token, slot) pairs for one expert */
    float *sh;             /* shared expert output [cap][n_embd] */
    /* head */
    float *head_y;         /* [cap][n_embd] */
    double *attn_p;        /* per-thread attention probabilities */
    uint32_t attn_p_stride;
};

/* forward.c: report data of batch token t to the tap (no-op without one). */
void ds4_tap_emit(const ds4_engine *e, const char *name, uint32_t t, uint32_t kind,
                  const void *data, uint32_t n);

/* hc.c */
void ds4_hc_pre(const ds4_config *c, const ds4_mat *fn, const ds4_vec *scale,
                const ds4_vec *base, const float *x, float *y, float *post, float *comb);
void ds4_hc_post(const ds4_config *c, const float *f, const float *x, const float *post,
                 const float *comb, float *out);
void ds4_hc_head(const ds4_config *c, const ds4_mat *fn, const ds4_vec *scale,
                 const ds4_vec *base, const float *x, float *y);

/* RMSNorm with weight (w may be NULL for no weight), out may alias x. */
void ds4_rms_norm(const float *x, const float *w, uint32_t n, float eps, float *out);

/* attention.c: the whole attention sublayer for the batch, a[] -> out[]. */
int ds4_attention(ds4_engine *e, const ds4_layer *L, uint32_t il, const ds4_rope *rope,
                  uint32_t T, ds4err *err);

/* compressor.c */
void ds4_comp_store(ds4_comp_state *cs, const ds4_mat *ape, uint32_t pos,
                    const float *kv, const float *sc);
void ds4_comp_emit(ds4_comp_state *cs, const ds4_vec *norm, float eps, const ds4_rope *rope,
                   uint32_t n_rot, uint32_t pos, bool indexer, bool qat);

/* indexer.c: selected compressed entries for one token, ascending. */
uint32_t ds4_indexer_select(const ds4_config *c, const ds4_comp_state *idx, const float *q,
                            const float *w, uint32_t pos, uint32_t *sel, double *score_tmp,
                            uint32_t *n_scored);

/* moe.c: the FFN sublayer's MoE + shared expert for the batch, a[] -> out[]. */
void ds4_moe(ds4_engine *e, const ds4_layer *L, uint32_t T);

/* head.c: logits of the HC states x[T] (rows [n_vocab]). */
void ds4_output_head(const ds4_model *m, const ds4_mat *hc_fn, const ds4_vec *hc_scale,
                     const ds4_vec *hc_base, const ds4_vec *norm, const float *x, uint32_t T,
                     float *head_y, float *logits);

#endif
