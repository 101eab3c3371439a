/* The settings matrix ds4ref-conform runs a backend over: MTP draft depths,
 * prefill chunk sizes and batch sizes, each crossed with every prompt.  The
 * defaults cover the bug classes that motivated it (docs/CONFORM.md):
 * depths 0,1,2,3,4,6,8 (a verifier wrong only past depth 2), chunks 1, 7, 64
 * and the whole prompt (verify batches larger than a prefill chunk), and
 * batches of 1, 2 and 4 rows whose prompts differ in length (rows whose
 * accepts diverge).  Two more are asked for by name: a server's prefix
 * cache, and a DSpark drafter's confidence threshold. */
#ifndef DS4_CONFORM_MATRIX_H
#define DS4_CONFORM_MATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DS4_CF_MAX_VALUES 16
#define DS4_CF_MAX_BATCH 16
#define DS4_CF_WHOLE 0   /* the chunk that holds the whole prompt */

typedef struct ds4_cf_dim {
    uint32_t v[DS4_CF_MAX_VALUES];
    uint32_t n;
    bool given;            /* named in --matrix (else the default's) */
} ds4_cf_dim;

typedef struct ds4_cf_matrix {
    ds4_cf_dim draft;      /* 0 .. 16; 0 = no speculation */
    ds4_cf_dim chunk;      /* >= 1, or DS4_CF_WHOLE */
    ds4_cf_dim batch;      /* 1 .. DS4_CF_MAX_BATCH */
    ds4_cf_dim cache;      /* DS4_CF_COLD, DS4_CF_WARM: a server's prefix cache */
    ds4_cf_dim conf;       /* a DSpark drafter's confidence threshold in hundredths,
                              0 .. 100 ({conf}: 0 to 1); 0 drafts every block whole */
} ds4_cf_matrix;

/* A cell's prefix cache: cold (the default), or warm: each row's prompt
 * sent once, alone, before the cell's requests (servers only). */
enum { DS4_CF_COLD = 0, DS4_CF_WARM = 1 };

void ds4chk_matrix_default(ds4_cf_matrix *m);

/* Narrow (or widen) it: "draft=0,2,4 chunk=64,whole batch=1 cache=cold,warm conf=0,50"; a dimension
 * not named keeps its values.  Values are kept in the order given, without
 * repeats; a dimension named is marked given. */
int ds4chk_matrix_parse(ds4_cf_matrix *m, const char *spec, ds4err *err);

/* "whole" for DS4_CF_WHOLE, else the number (buf of 12 bytes at least). */
const char *ds4chk_matrix_chunk_name(uint32_t chunk, char *buf, size_t cap);

#endif
