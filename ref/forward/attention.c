/* The attention sublayer (official Attention.forward): low-rank query, one
 * shared KV head, sliding window plus compressed rows, attention sinks and a
 * grouped low-rank output projection.
 *
 * For a batch of T tokens the order is:
 *   1. projections for the whole batch (matrix products: those of the
 *      sublayer input, the compressors' and the indexer's included, in one
 *      parallel region, then those of the normed low-rank query in another);
 *   2. per token: the rotary cos and sin at its position; the KV row normed,
 *      RoPE'd, FP8-rounded (QAT) and written into the sequence's window ring;
 *   3. compressors: every token's inputs are stored, then the windows the
 *      batch completes are pooled into compressed rows;
 *   4. ratio-4 layers: the indexer picks compressed rows per token;
 *   5. per (token, head): the query head RMS-normed and RoPE'd, then
 *      softmax attention over the window rows (oldest
 *      first) and the compressed rows (ascending), with the head's sink in
 *      the denominator; output de-rotated at the query position;
 *   6. grouped output projection.
 * A token reads only rows of positions it may see, all of which exist by step
 * 5, so the result does not depend on which other tokens share the batch.
 *
 * A DSpark stage (official DSparkAttention, window-only) takes the same
 * steps with two differences: its context rows come from the trunk through
 * ds4_attention_dspark_ctx, and a draft block's own KV rows stay in the
 * scratch (step 2 writes no ring), attended after the context window by
 * every slot of the block, before and after it. */
#include "ref/forward/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "base/detmath.h"
#include "ref/forward/compressor.h"
#include "ref/forward/indexer.h"
#include "ref/forward/norm.h"
#include "quant/qat.h"
#include "ref/model/numerics.h"
#include "quant/actround.h"

static uint32_t window_start(uint32_t pos, uint32_t swa) {
    return pos + 1 >= swa ? pos + 1 - swa : 0;
}

/* Entry index of the k-th compressed row a token attends: the indexer's
 * choice on ratio-4 layers, every visible row otherwise. */
static uint32_t comp_entry(const ds4_layer *L, const ds4_fwd_scratch *s, uint32_t t,
                           uint32_t idx_topk, uint32_t k) {
    return L->ratio == 4 ? s->isel[(uint64_t)t * idx_topk + k] : k;
}

/* The r-th row token t attends in layer il: the window's rows, oldest
 * first, then the compressed rows in ascending entry order. */
static const float *attended_row(const ds4_config *c, const ds4_layer *L,
                                 const ds4_fwd_scratch *s, uint32_t t, uint32_t il, uint32_t r) {
    const ds4_tok *tk = &s->tok[t];
    uint32_t w0 = window_start(tk->pos, c->swa), n_raw = tk->pos - w0 + 1;
    if (r < n_raw) return ds4_kv_raw_row(tk->kv, il, w0 + r);
    return ds4_comp_row(&tk->kv->L[il].comp, comp_entry(L, s, t, c->idx_topk, r - n_raw));
}

/* The r-th row a token of a DSpark draft block attends in stage il: the
 * context rows before the block (the last swa of them, oldest first), then
 * every row of its own block, before and after it (official
 * get_dspark_topk_idxs).  The block's rows are step 2's, in kvrow; the
 * block starts at the state's position, which the block does not move. */
static const float *dspark_row(const ds4_config *c, const ds4_layer *L,
                               const ds4_fwd_scratch *s, uint32_t t, uint32_t il, uint32_t r) {
    (void)L;
    const ds4_tok *tk = &s->tok[t];
    const ds4_kv *kv = tk->kv;
    uint32_t n_ctx = kv->pos < c->swa ? kv->pos : c->swa;
    if (r < n_ctx) return ds4_kv_raw_row(kv, il, kv->pos - n_ctx + r);
    uint32_t first = t - (tk->pos - kv->pos);
    return s->kvrow + (uint64_t)(first + r - n_ctx) * c->head_dim;
}

typedef const float *(*row_fn)(const ds4_config *c, const ds4_layer *L,
                               const ds4_fwd_scratch *s, uint32_t t, uint32_t il, uint32_t r);

/* One head of one token over its n_rows rows.  q: [head_dim]; o:
 * [head_dim], which may be q (every read of q comes before the first write
 * of o); p: scratch. */
static void attend_head(const ds4_config *c, const ds4_layer *L, const ds4_fwd_scratch *s,
                        uint32_t t, uint32_t il, uint32_t h, row_fn row, uint32_t n_rows,
                        const float *q, float *o, double *p) {
    uint32_t hd = c->head_dim;
    double scale = 1.0 / sqrt((double)hd);
    double mx = -INFINITY;
    for (uint32_t r = 0; r < n_rows; r++) {
        p[r] = ds4_dot_f32(q, row(c, L, s, t, il, r), hd) * scale;
        if (p[r] > mx) mx = p[r];
    }
    double den = ds4_det_exp((double)L->sinks.v[h] - mx);
    double acc[DS4_MAX_HEAD_DIM];
    memset(acc, 0, sizeof(double) * hd);
    for (uint32_t r = 0; r < n_rows; r++) {
        const float *rw = row(c, L, s, t, il, r);
        double e = ds4_det_exp(p[r] - mx);
        den += e;
        for (uint32_t d = 0; d < hd; d++) acc[d] += e * (double)rw[d];
    }
    for (uint32_t d = 0; d < hd; d++) o[d] = (float)(acc[d] / den);
}

/* Where compressor `which` (0: attention's, 1: the indexer's) has its
 * projections: kv and gate rows of `width` for every token. */
static float *comp_rows(const ds4_engine *e, float *base, int which) {
    const ds4_config *c = &e->m->cfg;
    uint64_t cw = 2ull * (c->head_dim > c->idx_dim ? c->head_dim : c->idx_dim);
    return base + (uint64_t)which * e->scr->cap * cw;
}

/* Step 1: every product of the layer's attention that reads the sublayer
 * input (queries' low rank, the KV row, the compressors, the indexer's head
 * weights) in one parallel region, the q_a RMSNorm, then the two that read
 * its result (the query heads and the indexer's queries) in another: a
 * decode step's attention has two fork/joins of products where it had one
 * for each stage. */
static void project(const ds4_engine *e, const ds4_layer *L, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    ds4_matmul_op ops[7];
    int n = 0;
    ops[n++] = (ds4_matmul_op){&L->q_a, s->a, c->n_embd, (int)T, s->qr, c->q_lora};
    ops[n++] = (ds4_matmul_op){&L->kv, s->a, c->n_embd, (int)T, s->kvrow, c->head_dim};
    if (L->ratio) {
        uint64_t w = L->comp_kv.rows;
        ops[n++] = (ds4_matmul_op){&L->comp_kv, s->a, c->n_embd, (int)T, comp_rows(e, s->ckv, 0), w};
        ops[n++] = (ds4_matmul_op){&L->comp_gate, s->a, c->n_embd, (int)T, comp_rows(e, s->csc, 0), w};
    }
    if (L->ratio == 4) {
        uint64_t w = L->idx_comp_kv.rows;
        ops[n++] = (ds4_matmul_op){&L->idx_comp_kv, s->a, c->n_embd, (int)T, comp_rows(e, s->ckv, 1), w};
        ops[n++] = (ds4_matmul_op){&L->idx_comp_gate, s->a, c->n_embd, (int)T, comp_rows(e, s->csc, 1), w};
        ops[n++] = (ds4_matmul_op){&L->idx_proj, s->a, c->n_embd, (int)T, s->iw, c->idx_head};
    }
    ds4_dot_matmul_many(ops, n);
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * c->q_lora))
    for (uint32_t t = 0; t < T; t++) {
        float *qr = s->qr + (uint64_t)t * c->q_lora;
        ds4_norm_rms(qr, L->q_a_norm.v, c->q_lora, c->rms_eps, qr);
    }
    n = 0;
    ops[n++] = (ds4_matmul_op){&L->q_b, s->qr, c->q_lora, (int)T, s->q, (uint64_t)c->n_head * c->head_dim};
    if (L->ratio == 4)
        ops[n++] = (ds4_matmul_op){&L->idx_q_b, s->qr, c->q_lora, (int)T, s->iq,
                                   (uint64_t)c->idx_head * c->idx_dim};
    ds4_dot_matmul_many(ops, n);
}

/* The cos and sin of token t's rotary pairs, step 2's, for the layer's rope. */
static const float *rope_cs(const ds4_engine *e, uint32_t t) {
    return e->scr->rope_cs + (uint64_t)t * e->m->cfg.n_rot;
}

/* Step 2: each token's cos and sin (ds4_det_sincos is exact and slow, so
 * they are made once a token and layer, for the query heads, the output's
 * de-rotation and the indexer's queries), and its KV row, which goes into
 * the window ring.  The query heads are normed and rotated in step 5,
 * each by the thread that attends with it. */
static void prepare_kv(const ds4_engine *e, const ds4_layer *L, uint32_t il,
                       const ds4_rope *rope, uint32_t T, bool to_ring) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t hd = c->head_dim, nope = hd - c->n_rot;
    /* A sincos is about 300 ns, 3000 of ds4_worth_threads's units. */
#pragma omp parallel for schedule(static) \
    if (ds4_worth_threads((double)T * (8.0 * hd + 3000.0 * c->n_rot / 2)))
    for (uint32_t t = 0; t < T; t++) {
        const ds4_tok *tk = &s->tok[t];
        float *cs = s->rope_cs + (uint64_t)t * c->n_rot;
        ds4_rope_cos_sin(rope, tk->pos, cs);
        float *kvr = s->kvrow + (uint64_t)t * hd;
        ds4_norm_rms(kvr, L->kv_norm.v, hd, c->rms_eps, kvr);
        ds4_rope_rotate(kvr + nope, cs, c->n_rot / 2, false);
        /* nope is a multiple of 64 (ds4_engine_init checks it with QAT on). */
        if (e->opts.qat) ds4_qat_fp8_e4m3(kvr, nope, NULL);
        /* f16-kv: stored as binary16, as ds4.c's cache holds it. */
        if (e->opts.numerics & DS4_NUMERICS_F16_KV) ds4_actround_row(DS4_ACT_F16, kvr, kvr, hd);
        if (to_ring) memcpy(ds4_kv_raw_row(tk->kv, il, tk->pos), kvr, sizeof(float) * hd);
    }
}

/* Step 3 for one compressor (attention or indexer) of layer il, its
 * projections made in step 1. */
static void compress(const ds4_engine *e, uint32_t il, bool indexer, const ds4_mat *wkv,
                     const ds4_mat *ape, const ds4_vec *norm, const ds4_rope *rope, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t width = (uint32_t)wkv->rows;
    const float *ckv = comp_rows(e, s->ckv, indexer), *csc = comp_rows(e, s->csc, indexer);
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * width))
    for (uint32_t t = 0; t < T; t++) {
        ds4_layer_state *ls = &s->tok[t].kv->L[il];
        ds4_compressor_store(indexer ? &ls->idx : &ls->comp, ape, s->tok[t].pos,
                       ckv + (uint64_t)t * width, csc + (uint64_t)t * width);
    }
#pragma omp parallel for schedule(dynamic, 1) \
    if (!e->tap && ds4_worth_threads(8.0 * T * width))
    for (uint32_t t = 0; t < T; t++) {
        ds4_layer_state *ls = &s->tok[t].kv->L[il];
        ds4_comp_state *cs = indexer ? &ls->idx : &ls->comp;
        uint32_t pos = s->tok[t].pos;
        if ((pos + 1) % cs->ratio) continue;
        ds4_compressor_emit(cs, norm, c->rms_eps, rope, c->n_rot, pos, indexer, e->opts.qat,
                            e->opts.numerics & DS4_NUMERICS_F16_KV);
        ds4_engine_tap_emit(e, indexer ? "idx_row" : "comp_row", t, DS4_TAP_F32,
                     ds4_comp_row(cs, pos / cs->ratio), cs->dim);
    }
}

/* The indexer query heads of batch token t, in place: RoPE, Hadamard
 * rotation, FP4 with QAT. */
static void index_query(const ds4_engine *e, uint32_t t) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    float *q = s->iq + (uint64_t)t * c->idx_head * c->idx_dim;
    const float *cs = rope_cs(e, t);
    for (uint32_t h = 0; h < c->idx_head; h++) {
        float *qh = q + (uint64_t)h * c->idx_dim;
        ds4_rope_rotate(qh + c->idx_dim - c->n_rot, cs, c->n_rot / 2, false);
        /* idx_dim is a power of two >= 32 and <= DS4_HADAMARD_MAX
         * (checked at load), so neither call can fail. */
        ds4_qat_hadamard_f32(qh, c->idx_dim, NULL);
        if (e->opts.qat) ds4_qat_fp4_e2m1(qh, c->idx_dim, NULL);
    }
}

/* Token t's selection, its scores in `score` (its rows' scores computed
 * here unless `scored`), and its taps. */
static void index_pick(ds4_engine *e, uint32_t il, uint32_t t, double *score, bool scored) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    const ds4_tok *tk = &s->tok[t];
    const ds4_comp_state *idx = &tk->kv->L[il].idx;
    uint32_t n_scored, n_vis = ds4_indexer_visible(c, idx, tk->pos, &n_scored);
    if (n_scored && !scored)
        ds4_indexer_score(c, idx, s->iq + (uint64_t)t * c->idx_head * c->idx_dim,
                          s->iw + (uint64_t)t * c->idx_head, 0, n_vis, score);
    uint32_t *sel = s->isel + (uint64_t)t * c->idx_topk;
    s->nsel[t] = ds4_indexer_pick(c, n_vis, score, sel);
    if (n_scored) ds4_engine_tap_emit(e, "indexer_scores", t, DS4_TAP_F64, score, n_scored);
    ds4_engine_tap_emit(e, "indexer_sel", t, DS4_TAP_I32, sel, s->nsel[t]);
}

/* Step 4: each token's indexer queries and selection (the products were
 * step 1's).  A
 * batch of fewer tokens than threads (decode) shares each token's rows
 * among the threads, which at a long context are thousands; a larger one
 * shares its tokens. */
static int run_indexer(ds4_engine *e, uint32_t il, uint32_t T, ds4err *err) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t iq_w = c->idx_head * c->idx_dim;
    uint32_t max_vis = 0;
    for (uint32_t t = 0; t < T; t++) {
        uint32_t v = (s->tok[t].pos + 1) / 4;
        if (v > max_vis) max_vis = v;
    }
    if (ds4_engine_thread_doubles(e, max_vis + 1, err)) return -1;
    if (T < (uint32_t)omp_get_max_threads()) {
        for (uint32_t t = 0; t < T; t++) {
            const ds4_tok *tk = &s->tok[t];
            const ds4_comp_state *idx = &tk->kv->L[il].idx;
            uint32_t n_scored, n_vis = ds4_indexer_visible(c, idx, tk->pos, &n_scored);
            const float *q = s->iq + (uint64_t)t * iq_w, *w = s->iw + (uint64_t)t * c->idx_head;
            index_query(e, t);
            enum { ROWS = 16 };
#pragma omp parallel for schedule(dynamic, 1) \
    if (n_scored && ds4_worth_threads((double)n_scored * iq_w))
            for (uint32_t r0 = 0; r0 < n_scored; r0 += ROWS)
                ds4_indexer_score(c, idx, q, w, r0, r0 + ROWS < n_vis ? r0 + ROWS : n_vis,
                                  s->attn_p);
            index_pick(e, il, t, s->attn_p, true);
        }
        return 0;
    }
#pragma omp parallel for schedule(dynamic, 1) \
    if (!e->tap && ds4_worth_threads((double)T * (max_vis + 8) * iq_w))
    for (uint32_t t = 0; t < T; t++) {
        index_query(e, t);
        index_pick(e, il, t, s->attn_p + (size_t)omp_get_thread_num() * s->attn_p_stride, false);
    }
    return 0;
}

/* Step 5 for every (token, head), token t attending n_rows(t) rows of
 * row(); the largest count is max_rows. */
static int attend_heads(ds4_engine *e, const ds4_layer *L, uint32_t il, uint32_t T, row_fn row,
                        const uint32_t *n_rows, uint32_t max_rows, ds4err *err) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t hd = c->head_dim;
    if (ds4_engine_thread_doubles(e, max_rows, err)) return -1;
    uint64_t qdim = (uint64_t)c->n_head * hd;
    uint32_t nope = hd - c->n_rot;
    /* A head's work is its rows' two passes plus what does not depend on
     * them (the query's norm and rotation, the output's division and
     * de-rotation), about 32 multiply-adds an element. */
#pragma omp parallel for schedule(dynamic, 1) \
    if (ds4_worth_threads((2.0 * max_rows + 32) * T * c->n_head * hd))
    for (uint64_t th = 0; th < (uint64_t)T * c->n_head; th++) {
        uint32_t t = (uint32_t)(th / c->n_head), h = (uint32_t)(th % c->n_head);
        double *p = s->attn_p + (size_t)omp_get_thread_num() * s->attn_p_stride;
        /* The output replaces the query it was computed from. */
        float *o = s->q + t * qdim + (uint64_t)h * hd;
        ds4_norm_rms(o, NULL, hd, c->rms_eps, o);
        ds4_rope_rotate(o + nope, rope_cs(e, t), c->n_rot / 2, false);
        attend_head(c, L, s, t, il, h, row, n_rows[t], o, o, p);
        ds4_rope_rotate(o + nope, rope_cs(e, t), c->n_rot / 2, true);
    }
    return 0;
}

/* Step 6: the grouped output projection. */
static void project_out(ds4_engine *e, const ds4_layer *L, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint64_t qdim = (uint64_t)c->n_head * c->head_dim;
    /* Group g reads heads [g*H/G, (g+1)*H/G), i.e. a contiguous slice of o;
     * the groups are independent products, computed in one region. */
    uint64_t gin = qdim / c->o_groups, low_w = (uint64_t)c->o_groups * c->o_lora;
    enum { BATCH = 64 };
    ds4_mat sub[BATCH];
    ds4_matmul_op ops[BATCH];
    for (uint32_t g0 = 0; g0 < c->o_groups; g0 += BATCH) {
        uint32_t ng = c->o_groups - g0 < BATCH ? c->o_groups - g0 : BATCH;
        for (uint32_t k = 0; k < ng; k++) {
            uint32_t g = g0 + k;
            sub[k] = L->out_a;
            sub[k].rows = c->o_lora;
            sub[k].data = L->out_a.data + (uint64_t)g * c->o_lora * L->out_a.row_bytes;
            ops[k] = (ds4_matmul_op){&sub[k], s->q + g * gin, qdim, (int)T,
                                     s->low + (uint64_t)g * c->o_lora, low_w};
        }
        ds4_dot_matmul_many(ops, (int)ng);
    }
    ds4_dot_matmul(&L->out_b, s->low, low_w, (int)T, s->out, c->n_embd);
}

/* Steps 5-6 of the trunk.  The row counts go in nsel's place: each token's
 * compressed rows are counted first. */
static int attend(ds4_engine *e, const ds4_layer *L, uint32_t il, uint32_t T, ds4err *err) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t max_rows = 0;
    for (uint32_t t = 0; t < T; t++) {
        uint32_t pos = s->tok[t].pos;
        if (L->ratio && L->ratio != 4) s->nsel[t] = (pos + 1) / L->ratio;
        uint32_t n = pos - window_start(pos, c->swa) + 1 + (L->ratio ? s->nsel[t] : 0);
        s->nrows[t] = n;
        if (n > max_rows) max_rows = n;
    }
    if (attend_heads(e, L, il, T, attended_row, s->nrows, max_rows, err)) return -1;
    project_out(e, L, T);
    return 0;
}

int ds4_attention(ds4_engine *e, const ds4_layer *L, uint32_t il, const ds4_rope *rope,
                  uint32_t T, ds4err *err) {
    project(e, L, T);
    prepare_kv(e, L, il, rope, T, true);
    if (L->ratio) {
        compress(e, il, false, &L->comp_kv, &L->comp_ape, &L->comp_norm, rope, T);
        if (L->ratio == 4) {
            compress(e, il, true, &L->idx_comp_kv, &L->idx_comp_ape, &L->idx_comp_norm, rope, T);
            if (run_indexer(e, il, T, err)) return -1;
        }
    }
    return attend(e, L, il, T, err);
}

void ds4_attention_dspark_ctx(ds4_engine *e, const ds4_layer *L, uint32_t il, uint32_t T) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    ds4_dot_matmul(&L->kv, s->a, c->n_embd, (int)T, s->kvrow, c->head_dim);
    prepare_kv(e, L, il, &e->rope_dense, T, true);
}

int ds4_attention_dspark(ds4_engine *e, const ds4_layer *L, uint32_t il, uint32_t T,
                         ds4err *err) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    project(e, L, T);
    prepare_kv(e, L, il, &e->rope_dense, T, false);
    uint32_t max_rows = 0;
    for (uint32_t t = 0; t < T; t++) {
        uint32_t at = s->tok[t].kv->pos;
        s->nrows[t] = (at < c->swa ? at : c->swa) + c->dspark_block;
        if (s->nrows[t] > max_rows) max_rows = s->nrows[t];
    }
    if (attend_heads(e, L, il, T, dspark_row, s->nrows, max_rows, err)) return -1;
    project_out(e, L, T);
    return 0;
}
