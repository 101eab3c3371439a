/* The engine: what every part of the forward pass shares while it runs.
 *
 * An engine binds a model to the options that change its numbers (QAT), the
 * two RoPE tables, a scratch for batches of up to `cap` tokens, and an
 * optional debug tap.  The forward driver (forward.h) and the components
 * (attention.h, moe.h, ...) all work on it, so it sits below all of them:
 * the components read the batch from the scratch and report taps here,
 * never through the driver. */
#ifndef DS4_ENGINE_H
#define DS4_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/forward/kvstate.h"
#include "ref/forward/rope.h"
#include "ref/forward/threads.h"
#include "ref/model/model.h"

/* Options that change the numbers.  qat: the official FP8 KV / FP4 indexer
 * round trips.  numerics: a profile's set (model/numerics.h); the engine
 * does its KV rounding, the model's matrices their input rounding. */
typedef struct ds4_fwd_opts {
    bool qat;
    uint32_t numerics;
} ds4_fwd_opts;

/* One token of the batch being evaluated: its sequence, position and id. */
typedef struct ds4_tok {
    ds4_kv *kv;
    uint32_t pos;
    int32_t id;
} ds4_tok;

/* Scratch for a batch of up to `cap` tokens, reused across calls.  Sizes
 * are per token of the batch. */
typedef struct ds4_fwd_scratch {
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
    float *q;              /* [cap][n_head*head_dim]: the query heads, then each
                              head's attention output in its place */
    float *kvrow;          /* [cap][head_dim] */
    float *rope_cs;        /* [cap][n_rot]: cos and sin of each rotary pair at the
                              token's position, for the current layer's rope */
    float *low;            /* [cap][o_groups*o_lora] */
    float *ckv, *csc;      /* compressor projections [2][cap][2*max(head_dim, idx_dim)]:
                              the attention compressor's, then the indexer's */
    float *iq;             /* indexer q [cap][idx_head*idx_dim] */
    float *iw;             /* indexer head weights [cap][idx_head] */
    uint32_t *isel;        /* indexer selection [cap][idx_topk] */
    uint32_t *nsel;        /* [cap] */
    uint32_t *nrows;       /* [cap] rows each token attends */
    /* MoE */
    float *rlog;           /* router logits [cap][n_expert] */
    int32_t *sel;          /* [cap][n_used] */
    double *selw;          /* [cap][n_used] routing weights */
    uint32_t *epos;        /* [cap*n_used] the gathered row of each (token, slot) */
    float *ex;             /* gathered expert inputs [cap*n_used][n_embd] */
    float *eg, *eu;        /* [cap*(n_used+1)][n_ff]: routed rows, then the shared expert's */
    float *eo;             /* [cap*n_used][n_embd] */
    uint32_t *elist;       /* [cap*n_used] (token, slot) of each gathered row */
    float *sh;             /* shared expert output [cap][n_embd] */
    /* head */
    float *head_y;         /* [cap][n_embd] */
    /* Per-thread doubles (attention probabilities, indexer scores), grown on
     * demand: attn_p_stride entries for each of attn_p_threads threads. */
    double *attn_p;
    uint32_t attn_p_stride, attn_p_threads;
} ds4_fwd_scratch;

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
    ds4_threads threads;   /* thread counts of its passes (threads.h) */
} ds4_engine;

/* An engine for passes of up to max_batch tokens, or fewer when the
 * scratch for that many would be large next to the model (engine.c says
 * how much): e->cap is what it settled on, and callers split longer
 * batches into passes of e->cap.  A scratch too large for this machine is
 * refused (DS4_E_NOMEM, naming its size) before anything is allocated. */
int ds4_engine_init(ds4_engine *e, const ds4_model *m, const ds4_fwd_opts *opts,
                    uint32_t max_batch, ds4err *err);
void ds4_engine_free(ds4_engine *e);

/* Per-thread doubles: at least n per OpenMP thread in e->scr->attn_p. */
int ds4_engine_thread_doubles(ds4_engine *e, uint32_t n, ds4err *err);

/* Report data of batch token t to the tap (no-op without one). */
void ds4_engine_tap_emit(const ds4_engine *e, const char *name, uint32_t t, uint32_t kind,
                  const void *data, uint32_t n);

#endif
