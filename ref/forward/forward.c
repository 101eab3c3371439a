/* Driving the forward pass: embedding, the layer loop, the output head, and
 * the MTP block.  See forward.h for why the batch shape never changes a
 * token's numbers.
 *
 * One pass over a batch of T tokens (ds4_forward), layer-major: every layer
 * runs the whole batch before the next one.  Each token carries n_hc
 * streams of n_embd (the hyper-connections), x below.
 *
 *   embed                  x[h] = token_embd[id]         for every stream h
 *   for each layer (run_block):
 *     sublayer_in          hc_pre (Sinkhorn mix of the streams) -> a, RMSNorm
 *     ds4_attention        q/kv projections, RoPE, FP8 KV, window ring write;
 *                          the compressor pools completed windows into rows;
 *                          ratio-4 layers: the indexer picks top-k rows;
 *                          sink softmax over window + compressed rows -> out
 *     sublayer_out         hc_post: out spread back over the streams of x
 *     sublayer_in          hc_pre, RMSNorm
 *     ds4_moe              router (hash or top-k), routed experts grouped by
 *                          expert, shared expert -> out
 *     sublayer_out         hc_post
 *   outputs                HC head, RMSNorm, LM head -> logits (head.c)
 *
 * The MTP block (ds4_forward_mtp) is one more block: its input mixes the
 * next token's embedding with the trunk's last streams (mtp_input), then
 * run_block and the same head. */
#include "ref/forward/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "ref/forward/attention.h"
#include "ref/forward/head.h"
#include "ref/forward/hyperconn.h"
#include "ref/forward/moe.h"
#include "ref/forward/norm.h"
#include "quant/types.h"

/* ================================================================ blocks */

/* Every HC stream starts as the token's embedding. */
static void embed(const ds4_model *m, int32_t id, float *x) {
    const ds4_config *c = &m->cfg;
    const ds4_mat *E = &m->token_embd;
    ds4_types_dequant_row(E->type, E->data + (uint64_t)id * E->row_bytes, x, c->n_embd);
    for (uint32_t h = 1; h < c->n_hc; h++)
        memcpy(x + (uint64_t)h * c->n_embd, x, sizeof(float) * c->n_embd);
}

/* hc_pre + RMSNorm of batch token t: s->x -> s->a (and post/comb). */
static void sublayer_in_tok(const ds4_config *c, ds4_fwd_scratch *s, const ds4_mat *fn,
                            const ds4_vec *scale, const ds4_vec *base, const ds4_vec *norm,
                            uint32_t t) {
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
    float *y = s->y + (uint64_t)t * c->n_embd;
    ds4_hc_pre(c, fn, scale, base, s->x + t * hc_dim, y, s->post + (uint64_t)t * c->n_hc,
               s->comb + (uint64_t)t * c->n_hc * c->n_hc);
    ds4_norm_rms(y, norm->v, c->n_embd, c->rms_eps, s->a + (uint64_t)t * c->n_embd);
}

/* Every token of the batch.  A single token is evaluated outside any
 * parallel construct (not even an inactive one), so ds4_hc_pre can spread
 * its mixes over the threads with the persistent OpenMP team; a nested
 * region would start new threads every time. */
static void sublayer_in(const ds4_config *c, ds4_fwd_scratch *s, const ds4_mat *fn,
                        const ds4_vec *scale, const ds4_vec *base, const ds4_vec *norm,
                        uint32_t T) {
    if (T == 1) {
        sublayer_in_tok(c, s, fn, scale, base, norm, 0);
        return;
    }
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * fn->rows * fn->cols))
    for (uint32_t t = 0; t < T; t++) sublayer_in_tok(c, s, fn, scale, base, norm, t);
}

/* hc_post for every token: (s->out, s->x) -> s->x. */
static void sublayer_out(const ds4_config *c, ds4_fwd_scratch *s, uint32_t T) {
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * hc_dim * (c->n_hc + 1)))
    for (uint32_t t = 0; t < T; t++)
        ds4_hc_post(c, s->out + (uint64_t)t * c->n_embd, s->x + t * hc_dim,
                    s->post + (uint64_t)t * c->n_hc, s->comb + (uint64_t)t * c->n_hc * c->n_hc,
                    s->x2 + t * hc_dim);
    float *tmp = s->x;
    s->x = s->x2;
    s->x2 = tmp;
}

/* Report one f32 row per token of a [T][width] array. */
static void tap_rows(const ds4_engine *e, const char *name, const float *rows, uint64_t width,
                     uint32_t T) {
    for (uint32_t t = 0; e->tap && t < T; t++)
        ds4_engine_tap_emit(e, name, t, DS4_TAP_F32, rows + t * width, (uint32_t)width);
}

/* One block (trunk layer il, the MTP block with il = 0 of its state, or
 * DSpark stage il of its state with dspark set); tap_layer is the index
 * reported to taps. */
static int run_block(ds4_engine *e, const ds4_layer *L, uint32_t il, uint32_t tap_layer,
                     uint32_t T, bool dspark, ds4err *err) {
    const ds4_config *c = &e->m->cfg;
    ds4_fwd_scratch *s = e->scr;
    const ds4_rope *rope = L->ratio ? &e->rope_comp : &e->rope_dense;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
    e->tap_layer = tap_layer;
    sublayer_in(c, s, &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base, &L->attn_norm, T);
    if (dspark ? ds4_attention_dspark(e, L, il, T, err) : ds4_attention(e, L, il, rope, T, err))
        return -1;
    tap_rows(e, "attn_out", s->out, c->n_embd, T);
    sublayer_out(c, s, T);
    tap_rows(e, "hc_attn", s->x, hc_dim, T);
    sublayer_in(c, s, &L->hc_ffn_fn, &L->hc_ffn_scale, &L->hc_ffn_base, &L->ffn_norm, T);
    ds4_moe(e, L, T);
    tap_rows(e, "ffn_out", s->out, c->n_embd, T);
    sublayer_out(c, s, T);
    tap_rows(e, "hc_ffn", s->x, hc_dim, T);
    return 0;
}

/* ================================================================= trunk */

/* Checks that keep a bad request from touching any state. */
/* n more positions of state kv (sequence i) fit one pass and its context. */
static int check_room(const ds4_kv *kv, uint32_t n, uint32_t i, ds4err *err) {
    if (n > kv->chunk)
        return ds4_err_set(err, DS4_E_ARG, "sequence %u: %u tokens in one pass exceed its chunk size %u",
                          i, n, kv->chunk);
    if ((uint64_t)kv->pos + n > kv->ctx)
        return ds4_err_set(err, DS4_E_RANGE,
                          "sequence %u: positions %u..%u exceed the context of %u tokens",
                          i, kv->pos, kv->pos + n - 1, kv->ctx);
    return 0;
}

static int check_seq(const ds4_engine *e, const ds4_fwd_seq *q, uint32_t i, ds4err *err) {
    const ds4_config *c = &e->m->cfg;
    if (check_room(q->kv, q->n, i, err)) return -1;
    for (uint32_t j = 0; j < q->n; j++)
        if (q->tokens[j] < 0 || (uint32_t)q->tokens[j] >= c->n_vocab)
            return ds4_err_set(err, DS4_E_RANGE, "token id %d at index %u is outside the vocabulary [0, %u)",
                              q->tokens[j], j, c->n_vocab);
    return 0;
}

static int collect_tokens(ds4_engine *e, ds4_fwd_seq *seqs, uint32_t n_seqs, uint32_t *T_out,
                          ds4err *err) {
    uint32_t T = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        if (check_seq(e, &seqs[i], i, err)) return -1;
        for (uint32_t j = 0; j < i; j++)
            if (seqs[j].kv == seqs[i].kv)
                return ds4_err_set(err, DS4_E_ARG, "sequences %u and %u share one state", j, i);
        if ((uint64_t)T + seqs[i].n > e->cap)
            return ds4_err_set(err, DS4_E_ARG, "batch of more than %u tokens", e->cap);
        for (uint32_t j = 0; j < seqs[i].n; j++) {
            ds4_tok *tk = &e->scr->tok[T++];
            tk->kv = seqs[i].kv;
            tk->pos = seqs[i].kv->pos + j;
            tk->id = seqs[i].tokens[j];
        }
    }
    *T_out = T;
    return 0;
}

static void advance(ds4_kv *kv, uint32_t n) {
    kv->pos += n;
    if (kv->pos > kv->hi) kv->hi = kv->pos;
}

/* Logits and final HC states of the tokens each sequence asked for.  The
 * rows are gathered into x2 so the head runs as one matrix product. */
static void outputs(ds4_engine *e, ds4_fwd_seq *seqs, uint32_t n_seqs) {
    const ds4_model *m = e->m;
    const ds4_config *c = &m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
    uint32_t base = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        const ds4_fwd_seq *q = &seqs[i];
        uint32_t first = q->first_out < q->n ? q->first_out : q->n, n_out = q->n - first;
        const float *xs = s->x + (uint64_t)(base + first) * hc_dim;
        if (q->hc_out) memcpy(q->hc_out, s->x + (uint64_t)base * hc_dim, sizeof(float) * hc_dim * q->n);
        if (q->n && q->hc_last)
            memcpy(q->hc_last, s->x + (uint64_t)(base + q->n - 1) * hc_dim, sizeof(float) * hc_dim);
        if (n_out && q->logits)
            ds4_head_output(m, &m->output_hc_fn, &m->output_hc_scale, &m->output_hc_base,
                            &m->output_norm, xs, n_out, s->head_y, NULL, q->logits);
        base += q->n;
    }
}

/* After trunk layer il, the DSpark input of the sequences that want it,
 * if il is one of its target layers: the mean of each token's HC streams
 * (official Transformer.forward: h.mean(dim=2)). */
static void taps(ds4_engine *e, ds4_fwd_seq *seqs, uint32_t n_seqs, uint32_t il) {
    const ds4_config *c = &e->m->cfg;
    uint32_t k = 0, n = c->n_embd, hc = c->n_hc;
    while (k < c->n_dspark_target && c->dspark_target[k] != il) k++;
    if (k == c->n_dspark_target) return;
    uint64_t hc_dim = (uint64_t)hc * n, in_w = (uint64_t)c->n_dspark_target * n;
    uint32_t base = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        for (uint32_t j = 0; seqs[i].taps && j < seqs[i].n; j++) {
            const float *x = e->scr->x + (uint64_t)(base + j) * hc_dim;
            float *row = seqs[i].taps + j * in_w + (uint64_t)k * n;
            for (uint32_t d = 0; d < n; d++) {
                double sum = 0;
                for (uint32_t h = 0; h < hc; h++) sum += (double)x[(uint64_t)h * n + d];
                row[d] = (float)(sum / hc);
            }
        }
        base += seqs[i].n;
    }
}

static int forward_pass(ds4_engine *e, ds4_fwd_seq *seqs, uint32_t n_seqs, ds4err *err) {
    const ds4_model *m = e->m;
    const ds4_config *c = &m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t T;
    if (collect_tokens(e, seqs, n_seqs, &T, err)) return -1;
    for (uint32_t i = 0; i < n_seqs; i++)
        if (seqs[i].kv->n_layer != c->n_layer)
            return ds4_err_set(err, DS4_E_ARG, "sequence %u: state has %u layers, model %u", i,
                              seqs[i].kv->n_layer, c->n_layer);
    for (uint32_t i = 0; i < n_seqs; i++)
        if (seqs[i].taps && !c->n_dspark_target)
            return ds4_err_set(err, DS4_E_ARG, "sequence %u: DSpark input asked of a model without DSpark", i);
    if (!T) return 0;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * hc_dim))
    for (uint32_t t = 0; t < T; t++) embed(m, s->tok[t].id, s->x + t * hc_dim);
    for (uint32_t il = 0; il < c->n_layer; il++) {
        if (run_block(e, &m->layers[il], il, il, T, false, err)) return -1;
        taps(e, seqs, n_seqs, il);
    }
    for (uint32_t i = 0; i < n_seqs; i++) advance(seqs[i].kv, seqs[i].n);
    outputs(e, seqs, n_seqs);
    return 0;
}

/* The pass with the thread count the engine chose (threads.h), timed. */
int ds4_forward(ds4_engine *e, ds4_fwd_seq *seqs, uint32_t n_seqs, ds4err *err) {
    uint32_t T = 0;
    for (uint32_t i = 0; i < n_seqs; i++) T += seqs[i].n;
    int saved, k = ds4_threads_begin(&e->threads, T, &saved);
    double t0 = omp_get_wtime();
    int rc = forward_pass(e, seqs, n_seqs, err);
    ds4_threads_end(&e->threads, T, k, saved, rc == 0, omp_get_wtime() - t0);
    return rc;
}

/* =================================================================== MTP */

/* MTP input (official MTPBlock.forward): x[h] = e_proj(enorm(embed(id)))
 * + h_proj(hnorm(h[h])) for every stream h. */
static void mtp_input(ds4_engine *e, const float *const *h_in, uint32_t T) {
    const ds4_model *m = e->m;
    const ds4_config *c = &m->cfg;
    const ds4_mtp *mtp = m->mtp;
    ds4_fwd_scratch *s = e->scr;
    uint32_t n = c->n_embd, hc = c->n_hc;
    uint64_t hc_dim = (uint64_t)hc * n;
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * (hc_dim + n)))
    for (uint32_t t = 0; t < T; t++) {
        float *emb = s->y + (uint64_t)t * n;
        const ds4_mat *E = &m->token_embd;
        ds4_types_dequant_row(E->type, E->data + (uint64_t)s->tok[t].id * E->row_bytes, emb, n);
        ds4_norm_rms(emb, mtp->enorm.v, n, c->rms_eps, s->a + (uint64_t)t * n);
        for (uint32_t k = 0; k < hc; k++)
            ds4_norm_rms(h_in[t] + (uint64_t)k * n, mtp->hnorm.v, n, c->rms_eps,
                         s->x2 + t * hc_dim + (uint64_t)k * n);
    }
    ds4_dot_matmul(&mtp->e_proj, s->a, n, (int)T, s->out, n);
    ds4_dot_matmul(&mtp->h_proj, s->x2, n, (int)(T * hc), s->x, n);
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t k = 0; k < hc; k++) {
            float *xs = s->x + t * hc_dim + (uint64_t)k * n;
            const float *ep = s->out + (uint64_t)t * n;
            for (uint32_t d = 0; d < n; d++) xs[d] = ep[d] + xs[d];
        }
}

static int mtp_pass(ds4_engine *e, ds4_mtp_seq *seqs, uint32_t n_seqs, ds4err *err) {
    const ds4_model *m = e->m;
    const ds4_config *c = &m->cfg;
    ds4_fwd_scratch *s = e->scr;
    if (!m->mtp) return ds4_err_set(err, DS4_E_ARG, "no MTP head is loaded");
    uint32_t T = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        ds4_fwd_seq q = {.kv = seqs[i].kv, .tokens = seqs[i].tokens, .n = seqs[i].n};
        if (check_seq(e, &q, i, err)) return -1;
        if (seqs[i].kv->n_layer != 1)
            return ds4_err_set(err, DS4_E_ARG, "sequence %u: not an MTP state", i);
        if ((uint64_t)T + seqs[i].n > e->cap)
            return ds4_err_set(err, DS4_E_ARG, "batch of more than %u tokens", e->cap);
        T += seqs[i].n;
    }
    if (!T) return 0;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
    const float **h_in = malloc(sizeof(float *) * T);
    if (!h_in) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    T = 0;
    for (uint32_t i = 0; i < n_seqs; i++)
        for (uint32_t j = 0; j < seqs[i].n; j++) {
            ds4_tok *tk = &s->tok[T];
            tk->kv = seqs[i].kv;
            tk->pos = seqs[i].kv->pos + j;
            tk->id = seqs[i].tokens[j];
            h_in[T++] = seqs[i].h + j * hc_dim;
        }
    mtp_input(e, h_in, T);
    free(h_in);
    if (run_block(e, &m->mtp->block, 0, c->n_layer, T, false, err)) return -1;
    uint32_t base = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        ds4_mtp_seq *q = &seqs[i];
        const float *xs = s->x + (uint64_t)base * hc_dim;
        uint32_t first = q->first_out < q->n ? q->first_out : q->n;
        if (q->h_out) memcpy(q->h_out, xs, sizeof(float) * hc_dim * q->n);
        if (q->n && q->h_last)
            memcpy(q->h_last, xs + (uint64_t)(q->n - 1) * hc_dim, sizeof(float) * hc_dim);
        if (q->logits && first < q->n)
            ds4_head_output(m, &m->mtp->hc_head_fn, &m->mtp->hc_head_scale, &m->mtp->hc_head_base,
                            &m->mtp->norm, xs + (uint64_t)first * hc_dim, q->n - first, s->head_y,
                            NULL, q->logits);
        advance(q->kv, q->n);
        base += q->n;
    }
    return 0;
}

/* One block and the head: the MTP block takes the count the trunk's passes
 * of its size chose, and is not measured (its cost is not a trunk pass's). */
int ds4_forward_mtp(ds4_engine *e, ds4_mtp_seq *seqs, uint32_t n_seqs, ds4err *err) {
    uint32_t T = 0;
    for (uint32_t i = 0; i < n_seqs; i++) T += seqs[i].n;
    int saved, k = ds4_threads_begin(&e->threads, T, &saved);
    int rc = mtp_pass(e, seqs, n_seqs, err);
    ds4_threads_end(&e->threads, T, k, saved, false, 0);
    return rc;
}

/* ================================================================ DSpark */

int ds4_forward_dspark_kv_init(ds4_kv *kv, const ds4_model *m, uint32_t ctx, uint32_t chunk,
                       uint32_t rollback, ds4err *err) {
    uint32_t ratio0[DS4_MAX_DSPARK_STAGE] = {0};
    if (!m->dspark) return ds4_err_set(err, DS4_E_ARG, "the model has no DSpark drafter");
    return ds4_kv_init(kv, &m->cfg, ratio0, m->cfg.dspark_stages, ctx, chunk, rollback, err);
}

static int dspark_check_state(const ds4_engine *e, const ds4_kv *kv, uint32_t i, ds4err *err) {
    if (!e->m->dspark) return ds4_err_set(err, DS4_E_ARG, "the model has no DSpark drafter");
    if (kv->n_layer != e->m->cfg.dspark_stages)
        return ds4_err_set(err, DS4_E_ARG, "sequence %u: state has %u layers, the DSpark drafter %u stages",
                          i, kv->n_layer, e->m->cfg.dspark_stages);
    return 0;
}

/* Context rows: main_x of every token into a, then each stage's KV row. */
static int dspark_ctx_pass(ds4_engine *e, ds4_dspark_ctx *seqs, uint32_t n_seqs, ds4err *err) {
    const ds4_model *m = e->m;
    const ds4_config *c = &m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t T = 0, n = c->n_embd;
    for (uint32_t i = 0; i < n_seqs; i++) {
        const ds4_dspark_ctx *q = &seqs[i];
        if (dspark_check_state(e, q->kv, i, err) || check_room(q->kv, q->n, i, err)) return -1;
        for (uint32_t j = 0; j < i; j++)
            if (seqs[j].kv == q->kv)
                return ds4_err_set(err, DS4_E_ARG, "sequences %u and %u share one state", j, i);
        if ((uint64_t)T + q->n > e->cap)
            return ds4_err_set(err, DS4_E_ARG, "batch of more than %u tokens", e->cap);
        for (uint32_t j = 0; j < q->n; j++)
            s->tok[T++] = (ds4_tok){.kv = q->kv, .pos = q->kv->pos + j, .id = -1};
    }
    if (!T) return 0;
    uint64_t in_w = (uint64_t)c->n_dspark_target * n;
    T = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        ds4_dot_matmul(&m->dspark->main_proj, seqs[i].taps, in_w, (int)seqs[i].n,
                       s->a + (uint64_t)T * n, n);
        T += seqs[i].n;
    }
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * n))
    for (uint32_t t = 0; t < T; t++) {
        float *a = s->a + (uint64_t)t * n;
        ds4_norm_rms(a, m->dspark->main_norm.v, n, c->rms_eps, a);
    }
    for (uint32_t st = 0; st < c->dspark_stages; st++)
        ds4_attention_dspark_ctx(e, &m->dspark->stage[st], st, T);
    for (uint32_t i = 0; i < n_seqs; i++) advance(seqs[i].kv, seqs[i].n);
    return 0;
}

int ds4_forward_dspark_ctx(ds4_engine *e, ds4_dspark_ctx *seqs, uint32_t n_seqs, ds4err *err) {
    uint32_t T = 0;
    for (uint32_t i = 0; i < n_seqs; i++) T += seqs[i].n;
    int saved, k = ds4_threads_begin(&e->threads, T, &saved);
    int rc = dspark_ctx_pass(e, seqs, n_seqs, err);
    ds4_threads_end(&e->threads, T, k, saved, false, 0);
    return rc;
}

/* A draft block: the official forward_embed (every slot's embedding in
 * every stream: the anchor, then the noise token), the stages, and the last
 * stage's head. */
static int dspark_block_pass(ds4_engine *e, ds4_dspark_blk *reqs, uint32_t n_reqs, ds4err *err) {
    const ds4_model *m = e->m;
    const ds4_config *c = &m->cfg;
    ds4_fwd_scratch *s = e->scr;
    uint32_t B = c->dspark_block, T = 0;
    for (uint32_t i = 0; i < n_reqs; i++) {
        const ds4_dspark_blk *q = &reqs[i];
        if (dspark_check_state(e, q->kv, i, err)) return -1;
        if (!q->kv->pos || q->kv->pos > q->kv->ctx)
            return ds4_err_set(err, DS4_E_RANGE, "block %u: a block at position %u needs context rows "
                              "before it, within the context of %u", i, q->kv->pos, q->kv->ctx);
        if (q->anchor < 0 || (uint32_t)q->anchor >= c->n_vocab)
            return ds4_err_set(err, DS4_E_RANGE, "block %u: anchor token %d is outside the vocabulary [0, %u)",
                              i, q->anchor, c->n_vocab);
        if ((uint64_t)T + B > e->cap)
            return ds4_err_set(err, DS4_E_ARG, "blocks of %u tokens: more than the batch of %u", B, e->cap);
        for (uint32_t j = 0; j < B; j++)
            s->tok[T++] = (ds4_tok){.kv = q->kv, .pos = q->kv->pos + j,
                                    .id = j ? (int32_t)c->dspark_noise : q->anchor};
    }
    if (!T) return 0;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
#pragma omp parallel for schedule(static) if (ds4_worth_threads((double)T * hc_dim))
    for (uint32_t t = 0; t < T; t++) embed(m, s->tok[t].id, s->x + t * hc_dim);
    for (uint32_t st = 0; st < c->dspark_stages; st++)
        if (run_block(e, &m->dspark->stage[st], st, c->n_layer + st, T, true, err)) return -1;
    const ds4_dspark *d = m->dspark;
    for (uint32_t i = 0; i < n_reqs; i++)
        ds4_head_output(m, &d->hc_head_fn, &d->hc_head_scale, &d->hc_head_base, &d->norm,
                        s->x + (uint64_t)i * B * hc_dim, B, s->head_y, reqs[i].pre, reqs[i].logits);
    return 0;
}

int ds4_forward_dspark_block(ds4_engine *e, ds4_dspark_blk *reqs, uint32_t n_reqs, ds4err *err) {
    uint32_t T = n_reqs * e->m->cfg.dspark_block;
    int saved, k = ds4_threads_begin(&e->threads, T, &saved);
    int rc = dspark_block_pass(e, reqs, n_reqs, err);
    ds4_threads_end(&e->threads, T, k, saved, false, 0);
    return rc;
}
