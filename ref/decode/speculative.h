/* Speculative decoding that is exactly plain decoding, only with fewer
 * forward passes.
 *
 * A cycle of one row (one sequence, one session):
 *   1. x is the next committed token: the argmax of the session's logits
 *      (greedy), or the token sampled at the end of the previous cycle;
 *   2. a drafter proposes up to N tokens d1..dN that might follow x;
 *   3. ONE forward pass (split only where it exceeds the chunk size) over
 *      [x, d1..dN] gives the logits L0..LN after each of them;
 *   4. greedy: d_k is accepted while d_k == argmax(L_{k-1}); sampled: by the
 *      rejection rule below.  x and the accepted drafts are committed, the
 *      session moves back to just after them through its rings
 *      (ds4_session_rewind) with L_a as its logits, and L_a gives the next x.
 * Because the forward pass gives every token the same bits whatever the
 * batch (forward.h), the committed tokens and every logits vector are
 * bit-identical to plain decoding, for any depth, chunk size and context, and
 * with several rows decoded together (each row its own session, positions and
 * drafter state: a row never sees another row's accept lengths).
 *
 * Sampling (temp > 0) uses the lossless rejection rule of Leviathan et al. /
 * Chen et al. 2023 with the generator of rng.h; docs/SPECULATIVE.md defines the
 * exact draw order.  It is lossless in distribution, not bit-identical to
 * plain sampling (the accept tests consume random numbers plain sampling
 * does not).
 *
 * Drafters are pluggable: the MTP head (mtp_drafter.h), and in the tests a
 * scripted drafter that replays a given token stream with errors injected
 * at chosen depths, so that they reach every accept/reject path
 * deterministically (tests/script_drafter.h). */
#ifndef DS4_SPEC_H
#define DS4_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/decode/rng.h"
#include "ref/decode/session.h"
#include "ref/decode/step.h"

#define DS4_SPEC_MAX_DRAFT 16

/* ---- drafters ---- */

/* A request for drafts after the committed token `next` of one row. */
typedef struct ds4_draft_req {
    uint32_t row;
    uint32_t pos;          /* position of `next` (its session's kv.pos) */
    int32_t next;          /* committed, not evaluated by the trunk yet */
    uint32_t n;            /* drafts wanted, >= 1 */
    int32_t *drafts;       /* out: [n] */
    uint32_t n_out;        /* out: drafts made, 0..n (fewer after an EOS draft) */
    float *q_logits;       /* NULL, or out: [n][n_vocab] logits each draft was drawn from */
    bool q_onehot;         /* out: the drafter is deterministic (q = one-hot at the draft) */
} ds4_draft_req;

/* How drafts are chosen from a drafter's own distribution. */
typedef struct ds4_draft_mode {
    double temp;           /* 0: argmax; > 0: sampled at this temperature */
    ds4_rng *rng;          /* temp > 0: one generator per row (the draft stream) */
    int32_t eos;           /* the chain stops after drafting this token; -1: never */
} ds4_draft_mode;

/* What a drafter reads of the trunk for every committed token. */
typedef enum ds4_draft_input {
    DS4_DRAFT_IN_NONE,     /* the tokens alone */
    DS4_DRAFT_IN_HC,       /* the final HC states (MTP) */
    DS4_DRAFT_IN_TAPS      /* the DSpark input (ds4_fwd_seq.taps) */
} ds4_draft_input;

typedef struct ds4_drafter ds4_drafter;
struct ds4_drafter {
    uint32_t n_rows;
    const char *name;      /* what goldens record: "mtp", "dspark" (tests: "script") */
    ds4_draft_input input;
    /* Tokens ids[0..n) at positions pos.. of a row were committed (evaluated
     * by the trunk); feat: what `input` names of them, n rows (NULL with
     * DS4_DRAFT_IN_NONE).  pos == 0 starts the row over. */
    int (*commit)(ds4_drafter *d, uint32_t row, uint32_t pos, const int32_t *ids,
                  const float *feat, uint32_t n, ds4err *err);
    /* Drafts for several rows at once (one request per row). */
    int (*propose)(ds4_drafter *d, ds4_draft_req *reqs, uint32_t n_reqs,
                   const ds4_draft_mode *mode, ds4err *err);
    void (*destroy)(ds4_drafter *d);
};

void ds4_spec_drafter_free(ds4_drafter *d);

/* Floats a drafter reads of the trunk per token (0 with DS4_DRAFT_IN_NONE). */
uint64_t ds4_spec_drafter_width(const ds4_drafter *d, const ds4_config *c);

/* ---- decoding ---- */

typedef struct ds4_spec_cfg {
    ds4_drafter *drafter;  /* NULL: plain decoding */
    uint32_t n_draft;      /* depth, 1..DS4_SPEC_MAX_DRAFT (ignored without a drafter) */
    double temp;           /* 0: greedy; > 0: sampling */
} ds4_spec_cfg;

typedef struct ds4_spec_row {
    ds4_session *s;        /* prompt already evaluated (ds4_spec_prefill) */
    uint32_t n_steps;      /* 0: the ds4_gen_opts' n_steps */
    uint64_t seed;         /* sampling: this row's generators (rng.h streams 0 and 1) */
    ds4_gen_step *steps;   /* [n_steps]; arrays allocated here, free with ds4_step_list_free */
    uint32_t n_done;       /* out */
    ds4_gen_cb cb;         /* NULL, or called after every step; non-zero stops the row */
    void *ud;
} ds4_spec_row;

typedef struct ds4_spec_stats {
    uint64_t passes;       /* trunk passes of the decode loop (one per cycle of every row) */
    uint64_t iters;        /* cycles that verified at least one draft */
    uint64_t proposed;     /* drafts verified */
    uint64_t accepted;     /* drafts accepted by the verifier */
    uint64_t deepest;      /* the most drafts one cycle of one row accepted */
    /* By draft position k (0: the first draft of a cycle): drafts verified
     * there, and accepted there (a DSpark block's slot k+1). */
    uint64_t proposed_at[DS4_SPEC_MAX_DRAFT];
    uint64_t accepted_at[DS4_SPEC_MAX_DRAFT];
} ds4_spec_stats;

/* Evaluate each row's prompt (appended to its session) and show it to the
 * drafter; rows of different lengths go through the same passes.  drafter
 * may be NULL. */
int ds4_spec_prefill(ds4_drafter *d, ds4_session *const *rows, const int32_t *const *prompts,
                     const uint32_t *n_prompt, uint32_t n_rows, ds4err *err);

/* Decode every row; the rows' sessions share one engine and go through
 * joint forward passes.  go: n_steps (per-row default), top_k, eos,
 * stop_at_eos.  Greedy, each row's records are those of plain decoding of
 * that row alone -- one token per forward pass, step i recording the argmax
 * of the logits, which is then evaluated, except after the last step and
 * after EOS when stop_at_eos is set; sampled (temp > 0), a sample from the
 * same distribution as plain sampling.  The depth is clamped per cycle
 * to the steps left, to the context left and to what the session's rings can
 * take back (chunk + rollback).  A row that runs out of context fails the
 * call, as plain decoding would.  stats may be NULL; it is added to. */
int ds4_spec_generate(const ds4_spec_cfg *sc, const ds4_gen_opts *go, ds4_spec_row *rows,
                      uint32_t n_rows, ds4_spec_stats *stats, ds4err *err);

/* "mtp accept: iters=N proposed=M accepted=K rate=X% per_iter=Y deepest=D",
 * Y being accepted drafts per iteration and D the most one cycle accepted. */
void ds4_spec_report(const ds4_spec_stats *st, char *buf, size_t size);

/* "accept by position: 1=A/P 2=A/P ...", A of P drafts at that position
 * accepted, up to the last position any cycle verified ("" when none). */
void ds4_spec_report_positions(const ds4_spec_stats *st, char *buf, size_t size);

/* The rejection rule for one draft d drawn from q: accept with probability
 * min(1, p[d]/q[d]) (test: u * q[d] < p[d], one uniform), else return a
 * token drawn from the residual max(0, p - q), normalised (one more
 * uniform).  p, q: probabilities [n]; q == NULL means one-hot at d.  resid:
 * scratch [n].  Returns the token committed at this position. */
int32_t ds4_spec_accept(ds4_rng *r, const double *p, const double *q, int32_t d, uint32_t n,
                        double *resid, bool *accepted);

#endif
