/* The DSpark drafter of DeepSeek-V4-Flash-0731 as a drafter (speculative.h).
 *
 * A proposal after the committed token x at position P is one draft block
 * (forward.h): [x, noise, ...] at positions P.., every stage attending the
 * context rows [0, P) and the whole block.  Its base logits then take the
 * Markov term token by token (official forward_head): draft 1 from slot 0
 * and markov(x), draft k+1 from slot k and markov(draft k); greedy drafts
 * are argmaxes, sampled ones draws at the decode's temperature.  A block
 * drafts at most its size; fewer when asked for fewer, after an EOS draft,
 * or when the confidence head says stop: with a threshold tau > 0, the
 * draft of slot k is made only while sigmoid(confidence of slot k) >= tau
 * (the first slot below it ends the block: DeepSpec's
 * _confident_prefix_length).
 *
 * State policy.  Context row p of every stage comes from the trunk's DSpark
 * input at position p as the trunk committed it (commit(), DS4_DRAFT_IN_TAPS),
 * never from a draft: the rows are caught up lazily, in passes of up to
 * `chunk` rows, before the next block needs them.  A block writes nothing,
 * so a rejected draft leaves nothing to undo. */
#ifndef DS4_DSPARK_DRAFTER_H
#define DS4_DSPARK_DRAFTER_H

#include <stdint.h>

#include "base/err.h"
#include "ref/decode/speculative.h"
#include "ref/forward/forward.h"

/* A DSpark drafter for n_rows rows on engine e (whose model has the DSpark
 * drafter), for sessions of up to ctx positions, drafting up to max_draft
 * tokens per proposal (at most a block), with confidence threshold tau
 * in [0, 1] (0: never cut).  chunk: context rows per pass at
 * most (<= the engine's capacity; does not change any value). */
int ds4_dspark_drafter_new(ds4_drafter **out, ds4_engine *e, uint32_t n_rows, uint32_t ctx,
                           uint32_t chunk, uint32_t max_draft, double tau, ds4err *err);

/* A row's DSpark state, its context rows [0, pos) caught up to what was
 * committed (test_dspark holds them to a teacher-forced computation). */
const ds4_kv *ds4_dspark_drafter_kv(ds4_drafter *d, uint32_t row, ds4err *err);

#endif
