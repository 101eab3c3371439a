/* The MTP draft head as a drafter (speculative.h).
 *
 * Pairing (DeepSeek-V3 / the official oracle): MTP row i combines the trunk's
 * final HC state h[i] with the embedding of the NEXT token ids[i+1], at
 * position i, and predicts ids[i+2].  ds4's runtime pairs h[i] with ids[i]
 * instead (docs/SPECULATIVE.md).
 *
 * State policy.  Each row has its own one-layer window state (ratio 0,
 * positions = trunk positions).  Its rows [0, done) always come from the
 * committed sequence: row i from (h[i], ids[i+1]) as the trunk evaluated them,
 * the same values a teacher-forced MTP prefill of the committed tokens gives.
 * Rows are caught up lazily: committed (h, next id) pairs wait in a buffer and
 * are evaluated in the same MTP pass as the next first draft, which is itself
 * row P = (h[P], x) with x the committed token after the last evaluated
 * position P, so it is a committed row too.  Deeper drafts chain the MTP's
 * own output state with the previous draft's embedding at positions P+1..;
 * those rows are speculative and are dropped (the state moves back to `done`)
 * before anything else is written. */
#ifndef DS4_MTP_H
#define DS4_MTP_H

#include <stdint.h>

#include "base/err.h"
#include "ref/decode/speculative.h"
#include "ref/forward/forward.h"
#include "ref/forward/kvstate.h"

/* A window state for the MTP block (one layer, ratio 0). */
int ds4_mtp_drafter_kv_init(ds4_kv *kv, const ds4_model *m, uint32_t ctx, uint32_t chunk,
                    uint32_t rollback, ds4err *err);

/* An MTP drafter for n_rows rows on engine e (whose model has the MTP head
 * loaded), for sessions of up to ctx positions, drafting up to max_draft
 * tokens per proposal.  chunk: the most tokens of one row in one MTP pass
 * (<= the engine's capacity; does not change any value). */
int ds4_mtp_drafter_new(ds4_drafter **out, ds4_engine *e, uint32_t n_rows, uint32_t ctx,
                        uint32_t chunk, uint32_t max_draft, ds4err *err);

/* A row's MTP state: rows [0, ds4_mtp_drafter_done()) are the committed
 * ones.  Nothing in the library reads them, and they stay here all the
 * same: the drafter's state is private to mtp_drafter.c, and these two
 * are how test_mtp holds it, row by row, to a teacher-forced MTP prefill
 * of the committed tokens (a drafter whose drafts were right by luck
 * would pass a test of its drafts alone). */
const ds4_kv *ds4_mtp_drafter_kv(const ds4_drafter *d, uint32_t row);
uint32_t ds4_mtp_drafter_done(const ds4_drafter *d, uint32_t row);

#endif
