/* The official-model oracle that ships in vectors/official (its README says
 * what it is and how it was made), as the build decompressed it: readers
 * shared by test_oracle and test_mtp.  The oracle is part of the
 * repository, so every reader fails the running test when a file is missing,
 * has the wrong size or does not parse; nothing here skips. */
#ifndef DS4_TEST_OFFICIAL_H
#define DS4_TEST_OFFICIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { OFF_N_POS = 347 };   /* positions of tokens.txt */

/* malloc'd path of a file of the oracle. */
char *off_path(const char *name);

/* The whole file, which must be exactly `bytes` long (malloc'd). */
void *off_read(const char *name, size_t bytes);

/* tokens.txt: OFF_N_POS token ids (malloc'd). */
int32_t *off_tokens(void);

/* selections.qat_{off,on}.txt: the expert and indexer selections of the
 * official debug dumps (scripts/make_official.sh).  Layer OFF_SEL_MTP is the
 * MTP block, whose rows are MTP positions. */
enum { OFF_SEL_MAX = 16, OFF_SEL_LAYERS = 8, OFF_SEL_MTP = OFF_SEL_LAYERS - 1 };

typedef struct off_sel_row {
    bool present;
    uint32_t n;
    int32_t id[OFF_SEL_MAX];   /* experts in the official order, or blocks ascending */
    double w[OFF_SEL_MAX];     /* the experts' routing weights (route_scale included) */
} off_sel_row;

typedef struct off_sel {
    off_sel_row *routing[OFF_SEL_LAYERS];   /* [OFF_N_POS] each; NULL: no rows */
    off_sel_row *indexer[OFF_SEL_LAYERS];
} off_sel;

void off_sel_read(bool qat, off_sel *s);
void off_sel_free(off_sel *s);

/* Is `id` among the n values of v? */
bool off_contains(const int32_t *v, uint32_t n, int32_t id);

#endif
