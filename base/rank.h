/* The one order of every top-k selection in ds4ref (the indexer's entries,
 * the router's experts, the logits' top tokens): a higher score first;
 * among equal scores, the lower index; NaN after everything.  With a total
 * order like this, which entries are kept never depends on the order they
 * were looked at, the batch shape or the thread count. */
#ifndef DS4_RANK_H
#define DS4_RANK_H

#include <stdbool.h>
#include <stdint.h>

/* Does (score sa, index ia) rank before (sb, ib)? */
static inline bool ds4_ranks_before(double sa, uint64_t ia, double sb, uint64_t ib) {
    if (sa != sa) return false;
    if (sb != sb) return true;
    if (sa != sb) return sa > sb;
    return ia < ib;
}

#endif
