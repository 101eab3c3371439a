/* The lightning indexer of ratio-4 layers (indexer.c). */
#ifndef DS4_INDEXER_H
#define DS4_INDEXER_H

#include <stdint.h>

#include "forward/kvstate.h"
#include "model/model.h"

/* The compressed entries a token at pos attends, ascending, into sel
 * (room for idx_topk); returns their count.  q: the token's indexer query
 * heads [idx_head*idx_dim], w: its head weights [idx_head].  When more
 * entries are visible than idx_topk, their scores go to score_tmp and
 * *n_scored is their count; otherwise every entry is kept and *n_scored
 * is 0. */
uint32_t ds4_indexer_select(const ds4_config *c, const ds4_comp_state *idx, const float *q,
                            const float *w, uint32_t pos, uint32_t *sel, double *score_tmp,
                            uint32_t *n_scored);

#endif
