/* A session: one sequence being evaluated by an engine, with its attention
 * state, the tokens it holds and the logits after the last one.
 *
 * Evaluation is split into passes of at most `chunk` tokens; any chunking
 * gives the same bits (forward.h).  Truncation moves the sequence back to an
 * earlier position: cheaply through the state's rings when they still hold
 * what that position needs, otherwise by re-evaluating the kept token
 * history from position 0.  Either way the state afterwards is exactly the
 * state a fresh evaluation of those tokens would have produced. */
#ifndef DS4_SESSION_H
#define DS4_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/forward/forward.h"
#include "ref/forward/kvstate.h"

typedef struct ds4_session_opts {
    uint32_t ctx;        /* positions available (0: the model's context_length) */
    uint32_t chunk;      /* max tokens per forward pass (0, or more than the engine's
                            capacity: the engine's capacity) */
    uint32_t rollback;   /* positions a truncation may go back through the rings;
                            speculation at depth d needs d */
} ds4_session_opts;

typedef void (*ds4_progress_fn)(void *ud, uint32_t done, uint32_t total);

typedef struct ds4_session {
    ds4_engine *e;
    ds4_kv kv;
    int32_t *hist;       /* [ctx] tokens at positions [0, kv.pos) */
    float *logits;       /* [n_vocab] after the last evaluated token */
    bool has_logits;
    float *hc_last;      /* [n_hc*n_embd] final HC state of the last token */
    ds4_progress_fn progress;
    void *progress_ud;
} ds4_session;

int ds4_session_init(ds4_session *s, ds4_engine *e, const ds4_session_opts *o, ds4err *err);
void ds4_session_free(ds4_session *s);

static inline uint32_t ds4_session_pos(const ds4_session *s) { return s->kv.pos; }

/* Append n tokens.  logits_all / hc_all: NULL, or room for n rows of
 * n_vocab / n_hc*n_embd values (teacher-forced outputs of every token). */
int ds4_session_eval(ds4_session *s, const int32_t *tokens, uint32_t n, float *logits_all,
                     float *hc_all, ds4err *err);

/* One session's part of a joint evaluation (ds4_session_eval_many). */
typedef struct ds4_session_req {
    ds4_session *s;
    const int32_t *tokens;
    uint32_t n;
    float *logits_all;   /* NULL, or room for n rows of n_vocab logits */
    float *hc_all;       /* NULL, or room for n rows of n_hc*n_embd values */
    float *taps_all;     /* NULL, or room for n rows of the DSpark input (forward.h) */
} ds4_session_req;

/* Append tokens to several sessions of one engine at once: each forward pass
 * carries up to `chunk` tokens of every session (its own chunk size), as
 * many as the engine's capacity holds, sessions in order.  Every value is
 * the same bits as evaluating each session alone (forward.h).  Nothing is
 * touched when a request is bad (context room, token ids, a session listed
 * twice, sessions of different engines). */
int ds4_session_eval_many(ds4_session_req *reqs, uint32_t n_reqs, ds4err *err);

/* Move back to position pos (<= current).  Afterwards logits/hc_last are the
 * ones after token pos-1 (none at pos 0). */
int ds4_session_truncate(ds4_session *s, uint32_t pos, ds4err *err);

/* Keep the first pos positions (1 <= pos <= current) of what was evaluated,
 * moving back through the state's rings only, and install the logits and
 * final HC state after token pos-1, which the caller kept from the forward
 * pass that evaluated it (a speculative verify batch).  Nothing is
 * re-evaluated, so the rings must still hold what position pos needs
 * (ds4_kv_can_truncate): an error (DS4_E_RANGE) otherwise. */
int ds4_session_rewind(ds4_session *s, uint32_t pos, const float *logits, const float *hc_last,
                       ds4err *err);

/* The logits after the token at position pos (< current) into out
 * [n_vocab]: the session moves back and forward again over its own history,
 * which leaves it exactly as it was. */
int ds4_session_logits_at(ds4_session *s, uint32_t pos, float *out, ds4err *err);

/* Forget everything (position 0). */
void ds4_session_reset(ds4_session *s);

#endif
