/* Per-sequence attention state: the raw sliding-window KV rows, the KV
 * compressors' recent inputs and the compressed rows they emitted.
 *
 * Everything is indexed by absolute position, so the state a token sees does
 * not depend on how tokens arrived (one prefill, chunks of any size, one at a
 * time, inside a speculative verify batch), and moving the position back
 * ("truncate") is just changing a counter as long as the rows the earlier
 * position needs have not been overwritten:
 *
 *  - raw rows: a ring of window + chunk + rollback slots, slot = pos % cap;
 *  - compressor inputs (projected kv and gate score + APE of each position): a
 *    ring of 2*ratio + chunk + rollback slots, so the pooling of any window
 *    (and, for ratio 4, the previous window it overlaps) finds its inputs;
 *  - compressed rows: append-only, entry j covers positions [j*ratio,
 *    (j+1)*ratio) and exists once position j*ratio + ratio - 1 was evaluated.
 *
 * The ring sizes are the whole cost of exact rollback: a truncation further
 * back than `rollback` positions cannot be served from the rings, and the
 * session re-evaluates its token history instead (bit-identical, slower). */
#ifndef DS4_KVSTATE_H
#define DS4_KVSTATE_H

#include <stdint.h>

#include "base/err.h"
#include "ref/model/model.h"

typedef struct ds4_comp_state {
    uint32_t ratio;       /* 0: no compressor */
    uint32_t width;       /* (ratio == 4 ? 2 : 1) * dim */
    uint32_t dim;         /* head dim of the emitted rows */
    uint32_t hist_cap;    /* ring slots of per-position inputs */
    float *hist_kv;       /* [hist_cap][width] */
    float *hist_sc;       /* [hist_cap][width] gate score + APE */
    uint32_t rows_cap;    /* max entries: ctx / ratio */
    float *rows;          /* [rows_cap][dim] emitted entries */
} ds4_comp_state;

typedef struct ds4_layer_state {
    uint32_t raw_cap;
    float *raw;           /* [raw_cap][head_dim] */
    ds4_comp_state comp;  /* attention compressor (ratio > 0) */
    ds4_comp_state idx;   /* indexer compressor (ratio == 4) */
} ds4_layer_state;

typedef struct ds4_kv {
    uint32_t n_layer;
    ds4_layer_state *L;
    uint32_t ctx;         /* positions [0, ctx) can be evaluated */
    uint32_t head_dim;
    uint32_t swa;
    uint32_t chunk;       /* max tokens of one sequence in one forward pass */
    uint32_t rollback;    /* positions a truncation may go back cheaply */
    uint32_t pos;         /* next position to evaluate */
    uint32_t hi;          /* highest position ever written + 1 since reset */
    uint64_t bytes;       /* memory held */
} ds4_kv;

/* Bytes a state for these sizes would take (for a clear error before
 * allocating; also reported by the bench). ratios: one per layer. */
uint64_t ds4_kv_bytes(const ds4_config *c, const uint32_t *ratios, uint32_t n_layer,
                      uint32_t ctx, uint32_t chunk, uint32_t rollback);

int ds4_kv_init(ds4_kv *kv, const ds4_config *c, const uint32_t *ratios, uint32_t n_layer,
                uint32_t ctx, uint32_t chunk, uint32_t rollback, ds4err *err);
void ds4_kv_free(ds4_kv *kv);

/* Start over at position 0 (contents become invisible, not cleared). */
void ds4_kv_reset(ds4_kv *kv);

/* Can the state move back to position p using the rings alone? */
int ds4_kv_can_truncate(const ds4_kv *kv, uint32_t p);

static inline float *ds4_kv_raw_row(const ds4_kv *kv, uint32_t layer, uint32_t pos) {
    const ds4_layer_state *s = &kv->L[layer];
    return s->raw + (uint64_t)(pos % s->raw_cap) * kv->head_dim;
}

static inline float *ds4_comp_hist_kv(const ds4_comp_state *c, uint32_t pos) {
    return c->hist_kv + (uint64_t)(pos % c->hist_cap) * c->width;
}

static inline float *ds4_comp_hist_sc(const ds4_comp_state *c, uint32_t pos) {
    return c->hist_sc + (uint64_t)(pos % c->hist_cap) * c->width;
}

static inline float *ds4_comp_row(const ds4_comp_state *c, uint32_t j) {
    return c->rows + (uint64_t)j * c->dim;
}

#endif
