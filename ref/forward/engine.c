/* The engine's state: the scratch of a batch, the per-thread buffers and
 * the debug tap (engine.h). */
#include "ref/forward/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "base/reslimit.h"

static void scratch_free(ds4_fwd_scratch *s) {
    if (!s) return;
    void *ptrs[] = {s->tok, s->x, s->x2, s->y, s->a, s->post, s->comb, s->out, s->qr, s->q,
                    s->kvrow, s->rope_cs, s->low, s->ckv, s->csc, s->iq, s->iw, s->isel, s->nsel,
                    s->nrows, s->rlog, s->sel, s->selw, s->epos, s->ex, s->eg, s->eu, s->eo,
                    s->elist, s->sh, s->head_y, s->attn_p};
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) free(ptrs[i]);
    free(s);
}

/* The scratch is listed once, in scratch_new; a sizing pass over the same
 * list (alloc.count_only) gives its size before anything is allocated. */
typedef struct scratch_alloc {
    bool count_only;
    uint64_t bytes;
    int fail;
} scratch_alloc;

static void *alloc_n(scratch_alloc *a, uint64_t n, size_t elem) {
    a->bytes += n * elem;
    if (a->count_only || !n) return NULL;
    void *p = calloc((size_t)n, elem);
    if (!p) a->fail = 1;
    return p;
}

/* NULL when out of memory, and always NULL when a->count_only. */
static ds4_fwd_scratch *scratch_new(const ds4_config *c, uint32_t cap, scratch_alloc *a) {
    ds4_fwd_scratch *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    uint64_t T = cap, k = c->n_expert_used;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd, qdim = (uint64_t)c->n_head * c->head_dim;
    uint64_t cw = 2ull * (c->head_dim > c->idx_dim ? c->head_dim : c->idx_dim);
    s->cap = cap;
    s->tok = alloc_n(a, T, sizeof(ds4_tok));
    s->x = alloc_n(a, T * hc_dim, sizeof(float));
    s->x2 = alloc_n(a, T * hc_dim, sizeof(float));
    s->y = alloc_n(a, T * c->n_embd, sizeof(float));
    s->a = alloc_n(a, T * c->n_embd, sizeof(float));
    s->post = alloc_n(a, T * c->n_hc, sizeof(float));
    s->comb = alloc_n(a, T * c->n_hc * c->n_hc, sizeof(float));
    s->out = alloc_n(a, T * c->n_embd, sizeof(float));
    s->qr = alloc_n(a, T * c->q_lora, sizeof(float));
    s->q = alloc_n(a, T * qdim, sizeof(float));
    s->kvrow = alloc_n(a, T * c->head_dim, sizeof(float));
    s->rope_cs = alloc_n(a, T * c->n_rot, sizeof(float));
    s->low = alloc_n(a, T * c->o_groups * c->o_lora, sizeof(float));
    /* Both compressors' projections at once (attention.c computes them in
     * one parallel region). */
    s->ckv = alloc_n(a, 2 * T * cw, sizeof(float));
    s->csc = alloc_n(a, 2 * T * cw, sizeof(float));
    s->iq = alloc_n(a, T * c->idx_head * c->idx_dim, sizeof(float));
    s->iw = alloc_n(a, T * c->idx_head, sizeof(float));
    s->isel = alloc_n(a, T * c->idx_topk, sizeof(uint32_t));
    s->nsel = alloc_n(a, T, sizeof(uint32_t));
    s->nrows = alloc_n(a, T, sizeof(uint32_t));
    s->rlog = alloc_n(a, T * c->n_expert, sizeof(float));
    s->sel = alloc_n(a, T * k, sizeof(int32_t));
    s->selw = alloc_n(a, T * k, sizeof(double));
    s->epos = alloc_n(a, T * k, sizeof(uint32_t));
    s->ex = alloc_n(a, T * k * c->n_embd, sizeof(float));
    /* Routed rows, then the shared expert's T rows (moe.c). */
    s->eg = alloc_n(a, T * (k + 1) * c->n_ff, sizeof(float));
    s->eu = alloc_n(a, T * (k + 1) * c->n_ff, sizeof(float));
    s->eo = alloc_n(a, T * k * c->n_embd, sizeof(float));
    s->elist = alloc_n(a, T * k, sizeof(uint32_t));
    s->sh = alloc_n(a, T * c->n_embd, sizeof(float));
    s->head_y = alloc_n(a, T * c->n_embd, sizeof(float));
    if (a->count_only || a->fail) {
        scratch_free(s);
        return NULL;
    }
    return s;
}

/* Bytes of scratch for a batch of `tokens`. */
static uint64_t scratch_bytes(const ds4_config *c, uint32_t tokens) {
    scratch_alloc sizing = {.count_only = true};
    scratch_new(c, tokens, &sizing);
    return sizing.bytes;
}

/* The most tokens one pass may carry: what was asked for, unless the
 * scratch for it would exceed SCRATCH_SHARE of the model's size or
 * SCRATCH_FLOOR, whichever is more.  The scratch grows by about 1 MB a
 * token on the real model's dimensions; a pass of fewer tokens gives the
 * same bits (forward.h), so a long chunk is evaluated in passes that keep
 * the process's memory within a few percent of the weights it touches. */
enum { SCRATCH_SHARE_PCT = 3 };
#define SCRATCH_FLOOR ((uint64_t)64 << 20)

static uint32_t pass_tokens(const ds4_model *m, uint32_t want) {
    const ds4_config *c = &m->cfg;
    uint64_t model = ds4_model_file_bytes(m);
    uint64_t budget = model / 100 * SCRATCH_SHARE_PCT;
    if (budget < SCRATCH_FLOOR) budget = SCRATCH_FLOOR;
    uint64_t one = scratch_bytes(c, 1), per_token = scratch_bytes(c, 2) - one;
    uint64_t fit = budget > one ? 1 + (budget - one) / per_token : 1;
    return fit < want ? (uint32_t)fit : want;
}

int ds4_engine_init(ds4_engine *e, const ds4_model *m, const ds4_fwd_opts *opts,
                    uint32_t max_batch, ds4err *err) {
    memset(e, 0, sizeof(*e));
    const ds4_config *c = &m->cfg;
    e->m = m;
    e->opts = *opts;
    e->cap = max_batch ? max_batch : 1;
    if (opts->qat && ds4_model_config_check_qat(c, m->file.path, err)) return -1;
    ds4_yarn yarn = {c->yarn_factor, c->yarn_orig_ctx, c->yarn_beta_fast, c->yarn_beta_slow};
    if (ds4_rope_init(&e->rope_dense, c->n_rot, c->rope_base, NULL, err) ||
        ds4_rope_init(&e->rope_comp, c->n_rot, c->compress_rope_base, c->yarn ? &yarn : NULL, err))
        return -1;
    e->cap = pass_tokens(m, e->cap);
    /* The machine's count, not the opening thread's: passes may run on
     * another thread (a server's scheduler), whose count is its own. */
    ds4_threads_init(&e->threads, ds4_threads_default());
    /* A batch too large for this machine is refused before allocating
     * (base/reslimit.h says why). */
    scratch_alloc sizing = {.count_only = true};
    scratch_new(c, e->cap, &sizing);
    char what[96];
    snprintf(what, sizeof(what), "the forward scratch for a batch of %u tokens", e->cap);
    if (ds4_reslimit_check(sizing.bytes, what, err)) return -1;
    scratch_alloc alloc = {.count_only = false};
    e->scr = scratch_new(c, e->cap, &alloc);
    if (!e->scr)
        return ds4_err_set(err, DS4_E_NOMEM, "cannot allocate forward scratch for %u tokens",
                          e->cap);
    return 0;
}

void ds4_engine_free(ds4_engine *e) {
    scratch_free(e->scr);
    memset(e, 0, sizeof(*e));
}

void ds4_engine_tap_emit(const ds4_engine *e, const char *name, uint32_t t, uint32_t kind,
                  const void *data, uint32_t n) {
    if (!e->tap) return;
    const ds4_tok *tk = &e->scr->tok[t];
    ds4_tap ev = {name, e->tap_layer, tk->kv, tk->pos, kind, data, n};
    e->tap(e->tap_ud, &ev);
}


int ds4_engine_thread_doubles(ds4_engine *e, uint32_t n, ds4err *err) {
    ds4_fwd_scratch *s = e->scr;
    /* The thread count can grow between calls (ds4ref_set_threads, another
     * caller's setting): the buffer must cover both. */
    uint32_t threads = (uint32_t)omp_get_max_threads();
    if (s->attn_p && n <= s->attn_p_stride && threads <= s->attn_p_threads) return 0;
    if (n < s->attn_p_stride) n = s->attn_p_stride;
    if (threads < s->attn_p_threads) threads = s->attn_p_threads;
    free(s->attn_p);
    s->attn_p = malloc(sizeof(double) * (size_t)n * threads);
    s->attn_p_stride = s->attn_p ? n : 0;
    s->attn_p_threads = s->attn_p ? threads : 0;
    if (!s->attn_p) return ds4_err_set(err, DS4_E_NOMEM, "out of memory for per-thread scratch");
    return 0;
}
