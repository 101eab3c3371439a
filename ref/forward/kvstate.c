/* Allocation and bookkeeping of the per-sequence attention state; see
 * kvstate.h for the layout and why it is indexed by absolute position. */
#include "ref/forward/kvstate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/reslimit.h"

/* Slots of the compressor input ring: the inputs of the window being pooled
 * and, for the overlapping ratio-4 compressor, of the window before it, plus
 * every position one forward pass may add and every position a truncation may
 * go back over. */
static uint64_t hist_cap(uint32_t ratio, uint32_t chunk, uint32_t rollback) {
    uint64_t coff = ratio == 4 ? 2 : 1;
    return coff * ratio + chunk + rollback;
}

static uint64_t comp_bytes(uint32_t ratio, uint32_t dim, uint32_t ctx, uint32_t chunk,
                           uint32_t rollback) {
    if (!ratio) return 0;
    uint64_t width = (ratio == 4 ? 2ull : 1ull) * dim;
    uint64_t hist = hist_cap(ratio, chunk, rollback) * width * 2 * sizeof(float);
    uint64_t rows = (uint64_t)(ctx / ratio + 1) * dim * sizeof(float);
    return hist + rows;
}

static uint64_t raw_cap(const ds4_config *c, uint32_t chunk, uint32_t rollback) {
    return (uint64_t)c->swa + chunk + rollback;
}

uint64_t ds4_kv_bytes(const ds4_config *c, const uint32_t *ratios, uint32_t n_layer,
                      uint32_t ctx, uint32_t chunk, uint32_t rollback) {
    uint64_t total = 0;
    for (uint32_t l = 0; l < n_layer; l++) {
        total += raw_cap(c, chunk, rollback) * c->head_dim * sizeof(float);
        total += comp_bytes(ratios[l], c->head_dim, ctx, chunk, rollback);
        if (ratios[l] == 4) total += comp_bytes(4, c->idx_dim, ctx, chunk, rollback);
    }
    return total;
}

static int comp_init(ds4_comp_state *s, uint32_t ratio, uint32_t dim, uint32_t ctx,
                     uint32_t chunk, uint32_t rollback) {
    memset(s, 0, sizeof(*s));
    if (!ratio) return 0;
    s->ratio = ratio;
    s->dim = dim;
    s->width = (ratio == 4 ? 2 : 1) * dim;
    s->hist_cap = (uint32_t)hist_cap(ratio, chunk, rollback);
    s->rows_cap = ctx / ratio + 1;
    s->hist_kv = calloc((size_t)s->hist_cap * s->width, sizeof(float));
    s->hist_sc = calloc((size_t)s->hist_cap * s->width, sizeof(float));
    s->rows = calloc((size_t)s->rows_cap * dim, sizeof(float));
    return s->hist_kv && s->hist_sc && s->rows ? 0 : -1;
}

static void comp_free(ds4_comp_state *s) {
    free(s->hist_kv);
    free(s->hist_sc);
    free(s->rows);
    memset(s, 0, sizeof(*s));
}

/* Refuse sizes the state cannot have, before allocating anything: ring
 * capacities must fit their 32-bit counters, and the whole state must fit
 * in the memory this process can get (reslimit.h).  calloc of a too-large
 * state could succeed (pages are only committed when rows are written) and
 * the process would then be killed deep inside a long prefill; an error
 * naming the numbers now is kinder. */
static int check_size(const ds4_config *c, uint64_t bytes, uint32_t ctx, uint32_t chunk,
                      uint32_t rollback, ds4err *err) {
    if (raw_cap(c, chunk, rollback) > UINT32_MAX || hist_cap(4, chunk, rollback) > UINT32_MAX)
        return ds4_err_set(err, DS4_E_ARG, "chunk %u + rollback %u positions overflow the state's rings",
                          chunk, rollback);
    char what[80];
    snprintf(what, sizeof(what), "the attention state for --ctx %u", ctx);
    return ds4_reslimit_check(bytes, what, err);
}

int ds4_kv_init(ds4_kv *kv, const ds4_config *c, const uint32_t *ratios, uint32_t n_layer,
                uint32_t ctx, uint32_t chunk, uint32_t rollback, ds4err *err) {
    memset(kv, 0, sizeof(*kv));
    if (ctx < 1 || chunk < 1)
        return ds4_err_set(err, DS4_E_ARG, "context and chunk size must be at least 1");
    uint64_t need = ds4_kv_bytes(c, ratios, n_layer, ctx, chunk, rollback);
    if (check_size(c, need, ctx, chunk, rollback, err)) return -1;
    kv->n_layer = n_layer;
    kv->ctx = ctx;
    kv->head_dim = c->head_dim;
    kv->swa = c->swa;
    kv->chunk = chunk;
    kv->rollback = rollback;
    kv->bytes = need;
    kv->L = calloc(n_layer, sizeof(ds4_layer_state));
    if (!kv->L) goto oom;
    for (uint32_t l = 0; l < n_layer; l++) {
        ds4_layer_state *s = &kv->L[l];
        s->raw_cap = (uint32_t)raw_cap(c, chunk, rollback);
        s->raw = calloc((size_t)s->raw_cap * c->head_dim, sizeof(float));
        if (!s->raw) goto oom;
        if (comp_init(&s->comp, ratios[l], c->head_dim, ctx, chunk, rollback)) goto oom;
        if (comp_init(&s->idx, ratios[l] == 4 ? 4 : 0, c->idx_dim, ctx, chunk, rollback)) goto oom;
    }
    return 0;
oom:
    ds4_kv_free(kv);
    return ds4_err_set(err, DS4_E_NOMEM,
                      "cannot allocate the attention state for a context of %u tokens (%.2f GiB): "
                      "use a smaller context (--ctx)",
                      ctx, (double)need / (1024.0 * 1024.0 * 1024.0));
}

void ds4_kv_free(ds4_kv *kv) {
    if (kv->L) {
        for (uint32_t l = 0; l < kv->n_layer; l++) {
            free(kv->L[l].raw);
            comp_free(&kv->L[l].comp);
            comp_free(&kv->L[l].idx);
        }
        free(kv->L);
    }
    memset(kv, 0, sizeof(*kv));
}

void ds4_kv_reset(ds4_kv *kv) {
    kv->pos = 0;
    kv->hi = 0;
}

/* Moving back to p needs, still in the rings, the raw rows of p's window and
 * the compressor inputs of the window p will complete (and the one before it
 * for ratio 4).  A slot of position q is gone once q + cap was written. */
int ds4_kv_can_truncate(const ds4_kv *kv, uint32_t p) {
    if (p > kv->pos) return 0;
    for (uint32_t l = 0; l < kv->n_layer; l++) {
        const ds4_layer_state *s = &kv->L[l];
        uint64_t need_raw = p >= kv->swa ? p - kv->swa : 0;
        if (kv->hi > need_raw + s->raw_cap) return 0;
        const ds4_comp_state *cs[2] = {&s->comp, &s->idx};
        for (int i = 0; i < 2; i++) {
            const ds4_comp_state *c = cs[i];
            if (!c->ratio) continue;
            uint64_t span = (uint64_t)(c->width / c->dim) * c->ratio;
            uint64_t need = p >= span ? p - span : 0;
            if (kv->hi > need + c->hist_cap) return 0;
        }
    }
    return 1;
}
