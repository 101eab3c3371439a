/* Generation from a prompt: what every caller that turns prompts into
 * tokens does, in one place (the public API, the golden runner, the
 * command line through the API).
 *
 * A run starts each session over, evaluates its prompt (shown to the
 * drafter, if any), and generates at most n_steps tokens -- fewer when the
 * context leaves less room (ds4_generate_room), at EOS, or when asked to stop --
 * greedy, speculative or sampled as the spec settings say.  A session's
 * progress hook reports the prompt only: 0 of n_prompt before its first
 * pass, then the prompt tokens done after every pass (across the windows
 * the prefill may split it into); it is silent while decoding and back in
 * place afterwards.  Several rows
 * run together share every forward pass (each row its own session, prompt
 * and positions), with the same records each would get alone. */
#ifndef DS4_RUN_H
#define DS4_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/decode/session.h"
#include "ref/decode/speculative.h"
#include "ref/decode/step.h"

/* Positions a session can move back through its rings without evaluating
 * anything again.  Speculation at depth d needs d (a rejected draft is
 * undone by moving back at most d positions); the default leaves room for a
 * caller's own small truncations on top of the deepest draft. */
#define DS4_SESSION_ROLLBACK 32
_Static_assert(DS4_SESSION_ROLLBACK >= DS4_SPEC_MAX_DRAFT, "rollback below the deepest draft");

/* The options of a session made for a caller that generates (the public
 * API): ctx 0 is the model's declared context capped at 32768 (4096 when
 * it declares none), chunk 0 the engine's capacity, and the rollback is
 * DS4_SESSION_ROLLBACK. */
ds4_session_opts ds4_generate_session_opts(const ds4_engine *e, uint32_t ctx, uint32_t chunk);

/* The speculation of a generation over rows[0..n_rows) (sessions of one
 * engine): sampling at temp (0: greedy), and with mtp_draft > 0 drafts of
 * that depth from the model's MTP head when one is loaded, else from its
 * DSpark drafter with confidence threshold dspark_conf (depth at most
 * DS4_SPEC_MAX_DRAFT), by one drafter sized for the largest context and
 * chunk of the rows.  sc->drafter (NULL without drafts) is the caller's to
 * free with ds4_spec_drafter_free. */
int ds4_generate_spec_new(ds4_spec_cfg *sc, ds4_session *const *rows, uint32_t n_rows, double temp,
                     uint32_t mtp_draft, double dspark_conf, ds4err *err);

/* Why a run ended. */
typedef enum ds4_gen_end {
    DS4_GEN_LENGTH,      /* n_steps tokens were generated */
    DS4_GEN_EOS,         /* the end-of-sequence token was generated */
    DS4_GEN_CTX,         /* the context left no room for more */
    DS4_GEN_STOPPED      /* the stop flag was set, or a callback asked to stop */
} ds4_gen_end;

/* Called after every generated step of a row; non-zero stops that row. */
typedef int (*ds4_gen_row_cb)(void *ud, uint32_t row, uint32_t step, const ds4_gen_step *st);

typedef struct ds4_gen_run {
    uint32_t n_steps;            /* tokens wanted per row */
    uint32_t top_k;              /* alternatives recorded per step */
    int32_t eos;                 /* the end-of-sequence token, or -1 */
    bool stop_at_eos;
    const ds4_spec_cfg *spec;    /* NULL: plain greedy */
    uint64_t seed;               /* sampling: row r uses seed + r */
    volatile sig_atomic_t *stop; /* NULL, or set asynchronously (SIGINT) to stop every row */
    ds4_gen_row_cb cb;           /* NULL, or called with each step */
    void *ud;
    ds4_spec_stats *stats;       /* NULL, or added to */
} ds4_gen_run;

/* How many of `want` steps fit after a prompt of n_prompt tokens: the last
 * generated token is never evaluated, so want steps fit when
 * n_prompt + want - 1 <= ctx; none when the prompt itself does not fit.
 * *clamped says whether room cut want. */
uint32_t ds4_generate_room(const ds4_session *s, uint32_t n_prompt, uint32_t want, bool *clamped);

/* The checks a prompt must pass before anything is started: not empty,
 * within the context, every id in the vocabulary. */
int ds4_generate_check_prompt(const ds4_session *s, const int32_t *prompt, uint32_t n_prompt,
                         ds4err *err);

/* A run that ended because its stop flag was set fails for the caller that
 * set it: DS4_E_INTERRUPTED, "interrupted", and ": " + what_was_done when
 * that is not NULL.  0 when stop is NULL or not set. */
int ds4_generate_check_stop(volatile sig_atomic_t *stop, const char *what_was_done, ds4err *err);

/* Run rows[0..n_rows) on their prompts.  done[r] (may be NULL) gets the
 * steps row r made, end[r] (may be NULL) why it ended. */
int ds4_generate_rows(ds4_session *const *rows, const int32_t *const *prompts,
                 const uint32_t *n_prompt, uint32_t n_rows, const ds4_gen_run *o,
                 uint32_t *done, ds4_gen_end *end, ds4err *err);

#endif
