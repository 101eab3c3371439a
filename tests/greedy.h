/* Plain greedy decoding, one token per forward pass: the reference that
 * speculative decoding (decode/speculative.h) must reproduce record for record,
 * and a one-row form of the speculative loop to compare it with.
 * It lives with the tests because only they decode this way: the library
 * always goes through ds4_spec_generate, whose depth-0 case is this loop
 * written another way. */
#ifndef DS4_TEST_GREEDY_H
#define DS4_TEST_GREEDY_H

#include <stdint.h>

#include "base/err.h"
#include "ref/decode/session.h"
#include "ref/decode/speculative.h"
#include "ref/decode/step.h"

/* Runs from the session's current logits (evaluate the prompt first).
 * Step i records the argmax of the logits, then feeds it back (except
 * after the last step, and never after EOS when stop_at_eos is set).
 * steps: n_steps entries whose arrays this function allocates; free them
 * with ds4_step_list_free.  *n_done = steps produced.  cb (may be NULL) is
 * called after each step; non-zero stops. */
int ds4_generate_greedy(ds4_session *s, const ds4_gen_opts *o, ds4_gen_step *steps,
                        uint32_t *n_done, ds4_gen_cb cb, void *ud, ds4err *err);

/* Speculative decoding of one row with the interface of ds4_generate_greedy:
 * a thin wrapper of ds4_spec_generate, so the two can be compared call for
 * call. */
int ds4_spec_generate1(ds4_session *s, const ds4_spec_cfg *sc, const ds4_gen_opts *go,
                       uint64_t seed, ds4_gen_step *steps, uint32_t *n_done, ds4_gen_cb cb,
                       void *ud, ds4_spec_stats *stats, ds4err *err);

#endif
