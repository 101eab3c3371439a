/* The lightning indexer of ratio-4 layers (indexer.c). */
#ifndef DS4_INDEXER_H
#define DS4_INDEXER_H

#include <stdint.h>

#include "ref/forward/kvstate.h"
#include "ref/model/model.h"

/* The compressed entries a token at pos attends, ascending, into sel
 * (room for idx_topk); returns their count.  q: the token's indexer query
 * heads [idx_head*idx_dim], w: its head weights [idx_head].  When more
 * entries are visible than idx_topk, their scores go to score_tmp and
 * *n_scored is their count; otherwise every entry is kept and *n_scored
 * is 0. */
uint32_t ds4_indexer_select(const ds4_config *c, const ds4_comp_state *idx, const float *q,
                            const float *w, uint32_t pos, uint32_t *sel, double *score_tmp,
                            uint32_t *n_scored);

/* The same in three steps, so that one token's rows can be scored by many
 * threads (each row's score is its own: who computes it never matters).
 * ds4_indexer_visible: the entries a token at pos sees, and in *n_scored
 * that count when they must be scored (more than idx_topk), else 0;
 * ds4_indexer_score: the scores of entries [r0, r1) into score[r0..r1);
 * ds4_indexer_pick: the kept entries, ascending, from all n_vis scores
 * (score is not read when every entry is kept). */
uint32_t ds4_indexer_visible(const ds4_config *c, const ds4_comp_state *idx, uint32_t pos,
                             uint32_t *n_scored);
void ds4_indexer_score(const ds4_config *c, const ds4_comp_state *idx, const float *q,
                       const float *w, uint32_t r0, uint32_t r1, double *score);
uint32_t ds4_indexer_pick(const ds4_config *c, uint32_t n_vis, const double *score,
                          uint32_t *sel);

#endif
