/* The DSpark drafter: context rows caught up lazily, one block a proposal,
 * the Markov term and the confidence cut token by token.
 * dspark_drafter.h states the policy. */
#include "ref/decode/dspark_drafter.h"

#include <stdlib.h>
#include <string.h>

#include "base/detmath.h"
#include "ref/decode/rng.h"
#include "ref/decode/sample.h"
#include "ref/forward/head.h"

/* Waiting context rows per pass at most: bounds the buffers (48 KiB of
 * DSpark input a row on the real model); the values do not depend on it. */
#define DSPARK_BUF_MAX 64

typedef struct dspark_row {
    ds4_kv kv;             /* context rows [0, kv.pos) */
    uint32_t seen;         /* trunk positions shown: [0, seen) */
    uint32_t n_buf;        /* inputs of positions [kv.pos, kv.pos + n_buf) waiting */
    float *buf;            /* [cap][in_w] */
    float *logits;         /* [block][n_vocab] base logits of the last block */
    float *pre;            /* [block][n_embd] its HC head outputs before the norm */
} dspark_row;

typedef struct dspark_drafter {
    ds4_drafter base;
    ds4_engine *e;
    uint32_t cap, max_draft;
    uint64_t in_w;
    double tau;
    dspark_row *rows;
    float *emb, *bias, *tmp, *cur;   /* [rank], [n_vocab], [n_embd + rank], [n_vocab] */
    double *w;                       /* [n_vocab] sampling scratch */
    ds4_dspark_blk *blk;             /* [n_rows] */
} dspark_drafter;

/* Evaluate the waiting context rows of one row. */
static int flush(dspark_drafter *dd, dspark_row *r, ds4err *err) {
    if (!r->n_buf) return 0;
    ds4_dspark_ctx q = {.kv = &r->kv, .taps = r->buf, .n = r->n_buf};
    if (ds4_forward_dspark_ctx(dd->e, &q, 1, err)) return -1;
    r->n_buf = 0;
    return 0;
}

static dspark_row *row_of(dspark_drafter *dd, uint32_t row, ds4err *err) {
    if (row < dd->base.n_rows) return &dd->rows[row];
    ds4_err_set(err, DS4_E_ARG, "row %u of a %u-row DSpark drafter", row, dd->base.n_rows);
    return NULL;
}

static int dspark_commit(ds4_drafter *d, uint32_t row, uint32_t pos, const int32_t *ids,
                         const float *feat, uint32_t n, ds4err *err) {
    dspark_drafter *dd = (dspark_drafter *)d;
    dspark_row *r = row_of(dd, row, err);
    if (!r) return -1;
    if (pos == 0) {
        ds4_kv_reset(&r->kv);
        r->seen = r->n_buf = 0;
    }
    if (pos != r->seen)
        return ds4_err_set(err, DS4_E_ARG,
                          "row %u: the DSpark drafter has seen positions [0, %u), not %u: show it "
                          "every committed token (ds4_spec_prefill)", row, r->seen, pos);
    if (!feat)
        return ds4_err_set(err, DS4_E_ARG, "row %u: the DSpark drafter needs the trunk's DSpark input", row);
    for (uint32_t j = 0; j < n; j++) {
        memcpy(r->buf + r->n_buf * dd->in_w, feat + j * dd->in_w, sizeof(float) * dd->in_w);
        r->n_buf++;
        r->seen++;
        if (r->n_buf == dd->cap && flush(dd, r, err)) return -1;
    }
    return 0;
}

/* The blocks of reqs[0..n), as many a pass as the engine holds. */
static int run_blocks(dspark_drafter *dd, uint32_t n, ds4err *err) {
    uint32_t per = dd->e->cap / dd->e->m->cfg.dspark_block;
    if (!per) return ds4_err_set(err, DS4_E_ARG, "a DSpark block of %u tokens exceeds the batch of %u",
                                dd->e->m->cfg.dspark_block, dd->e->cap);
    for (uint32_t a = 0; a < n; a += per)
        if (ds4_forward_dspark_block(dd->e, dd->blk + a, n - a < per ? n - a : per, err)) return -1;
    return 0;
}

static double sigmoid(double x) {
    return 1.0 / (1.0 + ds4_det_exp(-x));
}

/* The drafts of one request from its block's base logits. */
static int chain(dspark_drafter *dd, dspark_row *r, ds4_draft_req *q, const ds4_draft_mode *mode,
                 ds4err *err) {
    const ds4_model *m = dd->e->m;
    uint32_t V = m->cfg.n_vocab, B = m->cfg.dspark_block;
    uint32_t limit = q->n < dd->max_draft ? q->n : dd->max_draft;
    if (limit > B) limit = B;
    int32_t prev = q->next;
    q->n_out = 0;
    q->q_onehot = false;
    for (uint32_t k = 0; k < limit; k++) {
        ds4_head_markov(m, prev, dd->emb, dd->bias);
        if (dd->tau > 0) {
            float c = ds4_head_confidence(m, r->pre + (uint64_t)k * m->cfg.n_embd, dd->emb, dd->tmp);
            if (sigmoid((double)c) < dd->tau) return 0;
        }
        float *cur = q->q_logits ? q->q_logits + (uint64_t)k * V : dd->cur;
        const float *base = r->logits + (uint64_t)k * V;
        for (uint32_t v = 0; v < V; v++) cur[v] = base[v] + dd->bias[v];
        int32_t t = mode->temp > 0 ? ds4_rng_sample(&mode->rng[q->row], cur, V, mode->temp, dd->w)
                                   : ds4_sample_argmax(cur, V);
        if (t < 0) return ds4_err_set(err, DS4_E_INTERNAL, "row %u: every DSpark logit is NaN", q->row);
        q->drafts[k] = t;
        q->n_out = k + 1;
        if (t == mode->eos) return 0;
        prev = t;
    }
    return 0;
}

static int dspark_propose(ds4_drafter *d, ds4_draft_req *reqs, uint32_t n_reqs,
                          const ds4_draft_mode *mode, ds4err *err) {
    dspark_drafter *dd = (dspark_drafter *)d;
    for (uint32_t i = 0; i < n_reqs; i++) {
        ds4_draft_req *q = &reqs[i];
        dspark_row *r = row_of(dd, q->row, err);
        if (!r) return -1;
        if (!q->n) return ds4_err_set(err, DS4_E_ARG, "row %u: no drafts asked", q->row);
        if (!r->seen || q->pos != r->seen)
            return ds4_err_set(err, DS4_E_ARG,
                              "row %u: drafts asked after position %u, but the DSpark drafter has "
                              "seen positions [0, %u) (evaluate prompts with ds4_spec_prefill)",
                              q->row, q->pos, r->seen);
        for (uint32_t j = 0; j < i; j++)
            if (reqs[j].row == q->row) return ds4_err_set(err, DS4_E_ARG, "row %u asked twice", q->row);
        if (flush(dd, r, err)) return -1;
        dd->blk[i] = (ds4_dspark_blk){.kv = &r->kv, .anchor = q->next, .logits = r->logits,
                                      .pre = r->pre};
    }
    if (run_blocks(dd, n_reqs, err)) return -1;
    for (uint32_t i = 0; i < n_reqs; i++)
        if (chain(dd, &dd->rows[reqs[i].row], &reqs[i], mode, err)) return -1;
    return 0;
}

static void dspark_destroy(ds4_drafter *d) {
    dspark_drafter *dd = (dspark_drafter *)d;
    for (uint32_t i = 0; dd->rows && i < d->n_rows; i++) {
        ds4_kv_free(&dd->rows[i].kv);
        free(dd->rows[i].buf);
        free(dd->rows[i].logits);
        free(dd->rows[i].pre);
    }
    free(dd->rows);
    free(dd->emb);
    free(dd->bias);
    free(dd->tmp);
    free(dd->cur);
    free(dd->w);
    free(dd->blk);
    free(dd);
}

int ds4_dspark_drafter_new(ds4_drafter **out, ds4_engine *e, uint32_t n_rows, uint32_t ctx,
                           uint32_t chunk, uint32_t max_draft, double tau, ds4err *err) {
    *out = NULL;
    const ds4_model *m = e->m;
    const ds4_config *c = &m->cfg;
    if (!m->dspark) return ds4_err_set(err, DS4_E_ARG, "the model has no DSpark drafter");
    if (!n_rows || !chunk)
        return ds4_err_set(err, DS4_E_ARG, "DSpark drafter: %u rows, chunk %u", n_rows, chunk);
    if (max_draft < 1 || max_draft > DS4_SPEC_MAX_DRAFT)
        return ds4_err_set(err, DS4_E_ARG, "DSpark drafter: depth %u is not in [1, %d]", max_draft,
                          DS4_SPEC_MAX_DRAFT);
    if (!(tau >= 0 && tau <= 1))
        return ds4_err_set(err, DS4_E_ARG, "DSpark confidence threshold %g is not in [0, 1]", tau);
    if (chunk > e->cap) chunk = e->cap;
    dspark_drafter *dd = calloc(1, sizeof(*dd));
    if (!dd) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    dd->base = (ds4_drafter){n_rows, "dspark", DS4_DRAFT_IN_TAPS, dspark_commit, dspark_propose, dspark_destroy};
    dd->e = e;
    dd->cap = chunk < DSPARK_BUF_MAX ? chunk : DSPARK_BUF_MAX;
    dd->max_draft = max_draft;
    dd->tau = tau;
    dd->in_w = (uint64_t)c->n_dspark_target * c->n_embd;
    dd->rows = calloc(n_rows, sizeof(dspark_row));
    dd->emb = malloc(sizeof(float) * c->dspark_rank);
    dd->bias = malloc(sizeof(float) * c->n_vocab);
    dd->tmp = malloc(sizeof(float) * ((uint64_t)c->n_embd + c->dspark_rank));
    dd->cur = malloc(sizeof(float) * c->n_vocab);
    dd->w = malloc(sizeof(double) * c->n_vocab);
    dd->blk = calloc(n_rows, sizeof(ds4_dspark_blk));
    if (!dd->rows || !dd->emb || !dd->bias || !dd->tmp || !dd->cur || !dd->w || !dd->blk) goto oom;
    for (uint32_t i = 0; i < n_rows; i++) {
        dspark_row *r = &dd->rows[i];
        if (ds4_forward_dspark_kv_init(&r->kv, m, ctx, dd->cap, 0, err)) {
            dspark_destroy(&dd->base);
            return -1;
        }
        r->buf = malloc(sizeof(float) * dd->in_w * dd->cap);
        r->logits = malloc(sizeof(float) * c->dspark_block * c->n_vocab);
        r->pre = malloc(sizeof(float) * c->dspark_block * c->n_embd);
        if (!r->buf || !r->logits || !r->pre) goto oom;
    }
    *out = &dd->base;
    return 0;
oom:
    dspark_destroy(&dd->base);
    return ds4_err_set(err, DS4_E_NOMEM, "out of memory for a %u-row DSpark drafter", n_rows);
}

const ds4_kv *ds4_dspark_drafter_kv(ds4_drafter *d, uint32_t row, ds4err *err) {
    dspark_drafter *dd = (dspark_drafter *)d;
    dspark_row *r = row_of(dd, row, err);
    if (!r || flush(dd, r, err)) return NULL;
    return &r->kv;
}
