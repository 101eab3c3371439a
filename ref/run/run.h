/* Running a prompt to a golden: evaluate the prompt, generate greedily, and
 * record every step into a golden stream (and optionally a ds4
 * --dump-logprobs JSON and an official.vec case).  Shared by `ds4ref
 * --golden-out`, `make vectors` and `ds4_test --golden-vectors`, so the
 * committed goldens and a user's goldens come from the same code. */
#ifndef DS4_GOLDENRUN_H
#define DS4_GOLDENRUN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "ref/decode/generate.h"
#include "ref/decode/session.h"
#include "ref/decode/speculative.h"
#include "ref/decode/step.h"
#include "ref/format/golden.h"

typedef struct ds4_run_opts {
    uint32_t n_steps;
    uint32_t top_k;
    bool stop_at_eos;
    const char *golden_path;      /* NULL: keep the golden in memory only */
    const char *dump_path;        /* ds4 --dump-logprobs JSON, or NULL */
    /* official.vec to append a case to, or NULL.  The case must be new to
     * the file.  Its prompt path is vec_prompt_path, or (NULL) "prompts/
     * <id>.txt"; the prompt's text, when given, is written to the prompts
     * folder beside the .vec file under that base name, where ds4's test
     * looks (a file there with other bytes is an error). */
    const char *vec_path;
    const char *vec_id;           /* NULL: "ds4ref" */
    const char *vec_prompt_path;
    const uint8_t *prompt_text;   /* recorded in the golden when not NULL */
    size_t prompt_text_len;
    /* Called with each step's full record; non-zero stops generation (the
     * outputs are then finished as incomplete, stop "interrupted"). */
    ds4_gen_cb on_step;
    void *step_ud;
    /* Set asynchronously (SIGINT): generation stops and the outputs are
     * written, marked incomplete; the call returns DS4_E_INTERRUPTED. */
    volatile sig_atomic_t *stop;
    /* Speculative decoding (NULL: plain greedy).  It gives the same records
     * as plain greedy; goldens record greedy decoding only (temp 0). */
    const ds4_spec_cfg *spec;
    ds4_spec_stats *stats;        /* added to, when not NULL */
    /* The base model's identity when the caller has it (NULL: it is
     * computed here, which reads every tensor byte of the file). */
    const ds4_modelid *model_id;
} ds4_run_opts;

/* Resolves a token id to its bytes: appends them to *out (which arrives
 * empty).  The runner passes the tokenizer's decoder; tests pass their own. */
typedef int (*ds4_tok_bytes_fn)(void *ud, int32_t id, ds4_buf *out, ds4err *err);

/* The golden record of a generation step: every token's bytes through fn,
 * scores and digest copied.  Free *out with ds4_golden_step_free. */
int ds4_run_step_golden(const ds4_gen_step *gs, ds4_tok_bytes_fn fn, void *ud,
                       ds4_golden_step *out, ds4err *err);

/* Run the prompt on a fresh session (decode/generate.h) and record every
 * step.  tok may be NULL (token bytes are then empty).  Bad input is
 * refused, and every output opened (a .vec file checked), before the first
 * token.  On success *out (if not NULL) holds the golden (caller frees with
 * ds4_golden_free). */
int ds4_run_golden(ds4_session *s, const ds4_tokenizer *tok, const int32_t *prompt,
                   uint32_t n_prompt, const ds4_run_opts *o, ds4_golden *out, ds4err *err);

/* The same for several rows decoded together (each its own session and
 * prompt, every forward pass shared; each row's records are those it gets
 * alone).  o[r] names row r's outputs (official.vec cases are appended
 * by single runs only); the generation settings -- n_steps, top_k,
 * stop_at_eos, stop, spec, stats, model_id -- are o[0]'s, and o[r].on_step
 * gets row r's steps.  The model's identity is read once for all rows.  out: NULL or [n_rows] goldens. */
int ds4_run_goldens(ds4_session *const *rows, const ds4_tokenizer *tok,
                    const int32_t *const *prompts, const uint32_t *n_prompt, uint32_t n_rows,
                    const ds4_run_opts *o, ds4_golden *out, ds4err *err);

#endif
