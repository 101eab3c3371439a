/* The MTP drafter: committed rows caught up lazily, drafts chained through
 * the MTP's own output state.  mtp_drafter.h states the policy. */
#include "ref/decode/mtp_drafter.h"

#include <stdlib.h>
#include <string.h>

#include "ref/decode/rng.h"
#include "ref/decode/sample.h"

/* Waiting rows per MTP pass at most: bounds the buffers (64 KiB of HC state
 * a row on the real model); the values do not depend on it. */
#define MTP_BUF_MAX 64

typedef struct mtp_row {
    ds4_kv kv;
    uint32_t seen;         /* trunk positions shown: [0, seen) */
    uint32_t done;         /* MTP rows [0, done) evaluated from committed inputs */
    uint32_t n_buf;        /* rows [done, done + n_buf) waiting in buf_h/buf_id */
    float *buf_h;          /* [cap][hc_dim]; slot n_buf holds h[seen-1] */
    int32_t *buf_id;       /* [cap] */
    int32_t drafted_after; /* the token the last proposal's first row used, or -1 */
    float *chain[2];       /* [hc_dim] output states of the draft chain */
    float *logits;         /* [n_vocab] greedy drafts' logits */
} mtp_row;

typedef struct mtp_drafter {
    ds4_drafter base;
    ds4_engine *e;
    uint32_t cap;          /* waiting rows + 1 per pass */
    uint32_t max_draft;
    uint64_t hc_dim;
    mtp_row *rows;
    double *w;             /* [n_vocab] sampling scratch */
    ds4_mtp_seq *seqs;     /* [n_rows] */
    uint32_t *who;         /* [n_rows] requests still drafting */
} mtp_drafter;

int ds4_mtp_drafter_kv_init(ds4_kv *kv, const ds4_model *m, uint32_t ctx, uint32_t chunk,
                    uint32_t rollback, ds4err *err) {
    static const uint32_t ratio0 = 0;
    return ds4_kv_init(kv, &m->cfg, &ratio0, 1, ctx, chunk, rollback, err);
}

/* Drop the speculative rows of the last proposal. */
static int back_to_done(mtp_row *r, uint32_t row, ds4err *err) {
    if (r->kv.pos == r->done) return 0;
    if (!ds4_kv_can_truncate(&r->kv, r->done))
        return ds4_err_set(err, DS4_E_INTERNAL,
                          "row %u: the MTP state cannot move back from %u to %u through its rings",
                          row, r->kv.pos, r->done);
    r->kv.pos = r->done;
    return 0;
}

/* Evaluate the waiting rows alone (their KV rows are all that is kept). */
static int flush(mtp_drafter *md, mtp_row *r, ds4err *err) {
    if (!r->n_buf) return 0;
    ds4_mtp_seq q = {.kv = &r->kv, .h = r->buf_h, .tokens = r->buf_id, .n = r->n_buf};
    if (ds4_forward_mtp(md->e, &q, 1, err)) return -1;
    r->done += r->n_buf;
    r->n_buf = 0;
    return 0;
}

static void row_reset(mtp_row *r) {
    ds4_kv_reset(&r->kv);
    r->seen = r->done = r->n_buf = 0;
    r->drafted_after = -1;
}

/* Token ids[j] at position pos+j completes the waiting row of position
 * pos+j-1, and its h becomes the new last state. */
static int mtp_commit(ds4_drafter *d, uint32_t row, uint32_t pos, const int32_t *ids,
                      const float *hc, uint32_t n, ds4err *err) {
    mtp_drafter *md = (mtp_drafter *)d;
    if (row >= d->n_rows)
        return ds4_err_set(err, DS4_E_ARG, "commit to row %u of a %u-row MTP drafter", row, d->n_rows);
    mtp_row *r = &md->rows[row];
    if (pos == 0) row_reset(r);
    if (pos != r->seen)
        return ds4_err_set(err, DS4_E_ARG,
                          "row %u: the MTP drafter has seen positions [0, %u), not %u: show it "
                          "every committed token (ds4_spec_prefill)", row, r->seen, pos);
    if (!hc) return ds4_err_set(err, DS4_E_ARG, "row %u: the MTP drafter needs the trunk's HC states", row);
    if (back_to_done(r, row, err)) return -1;
    for (uint32_t j = 0; j < n; j++) {
        if (r->seen && r->seen - 1 < r->done) {
            /* Row seen-1 was evaluated by the last proposal, with its token. */
            if (ids[j] != r->drafted_after)
                return ds4_err_set(err, DS4_E_ARG,
                                  "row %u: token %d committed at position %u, but the drafts were "
                                  "made after token %d", row, ids[j], pos + j, r->drafted_after);
        } else if (r->seen) {
            r->buf_id[r->n_buf++] = ids[j];
            if (r->n_buf == md->cap && flush(md, r, err)) return -1;
        }
        memcpy(r->buf_h + r->n_buf * md->hc_dim, hc + j * md->hc_dim, sizeof(float) * md->hc_dim);
        r->seen++;
    }
    return 0;
}

/* The draft token from a draft's logits: argmax, or a sample from the row's
 * draft stream. */
static int pick(mtp_drafter *md, const ds4_draft_mode *mode, uint32_t row, const float *logits,
                int32_t *out, ds4err *err) {
    uint32_t V = md->e->m->cfg.n_vocab;
    *out = mode->temp > 0 ? ds4_rng_sample(&mode->rng[row], logits, V, mode->temp, md->w)
                          : ds4_sample_argmax(logits, V);
    if (*out < 0) return ds4_err_set(err, DS4_E_INTERNAL, "row %u: every MTP logit is NaN", row);
    return 0;
}

/* Run the prepared seqs[0..n) in as few MTP passes as the engine holds. */
static int run_packed(mtp_drafter *md, uint32_t n, ds4err *err) {
    for (uint32_t a = 0; a < n;) {
        uint32_t b = a, tokens = 0;
        while (b < n && tokens + md->seqs[b].n <= md->e->cap) tokens += md->seqs[b++].n;
        if (ds4_forward_mtp(md->e, md->seqs + a, b - a, err)) return -1;
        a = b;
    }
    return 0;
}

static float *draft_logits(mtp_row *r, const ds4_draft_req *q, uint32_t k, uint32_t V) {
    return q->q_logits ? q->q_logits + (uint64_t)k * V : r->logits;
}

/* Depth 1 of every request: the waiting committed rows plus (h[P], next),
 * one pass per engine load. */
static int first_step(mtp_drafter *md, ds4_draft_req *reqs, uint32_t n_reqs, ds4err *err) {
    uint32_t V = md->e->m->cfg.n_vocab;
    for (uint32_t i = 0; i < n_reqs; i++) {
        ds4_draft_req *q = &reqs[i];
        mtp_row *r = &md->rows[q->row];
        if (back_to_done(r, q->row, err)) return -1;
        r->buf_id[r->n_buf] = q->next;
        md->seqs[i] = (ds4_mtp_seq){.kv = &r->kv, .h = r->buf_h, .tokens = r->buf_id,
                                    .n = r->n_buf + 1, .h_last = r->chain[0],
                                    .logits = draft_logits(r, q, 0, V), .first_out = r->n_buf};
    }
    if (run_packed(md, n_reqs, err)) return -1;
    for (uint32_t i = 0; i < n_reqs; i++) {
        mtp_row *r = &md->rows[reqs[i].row];
        r->done += r->n_buf + 1;
        r->n_buf = 0;
        r->drafted_after = reqs[i].next;
    }
    return 0;
}

static int mtp_propose(ds4_drafter *d, ds4_draft_req *reqs, uint32_t n_reqs,
                       const ds4_draft_mode *mode, ds4err *err) {
    mtp_drafter *md = (mtp_drafter *)d;
    uint32_t V = md->e->m->cfg.n_vocab;
    for (uint32_t i = 0; i < n_reqs; i++) {
        const ds4_draft_req *q = &reqs[i];
        if (q->row >= d->n_rows)
            return ds4_err_set(err, DS4_E_ARG, "draft request for row %u of a %u-row MTP drafter",
                              q->row, d->n_rows);
        const mtp_row *r = &md->rows[q->row];
        if (!q->n) return ds4_err_set(err, DS4_E_ARG, "row %u: no drafts asked", q->row);
        if (r->seen && r->done == r->seen)
            return ds4_err_set(err, DS4_E_ARG, "row %u: drafts asked twice without a commit", q->row);
        if (!r->seen || q->pos != r->seen)
            return ds4_err_set(err, DS4_E_ARG,
                              "row %u: drafts asked after position %u, but the MTP drafter has seen "
                              "positions [0, %u) (evaluate prompts with ds4_spec_prefill)", q->row,
                              q->pos, r->seen);
        for (uint32_t j = 0; j < i; j++)
            if (reqs[j].row == q->row) return ds4_err_set(err, DS4_E_ARG, "row %u asked twice", q->row);
    }
    if (first_step(md, reqs, n_reqs, err)) return -1;
    /* Draft k of every row still drafting (act[0..n_act)), then the next MTP
     * step for those that go on: (own output state, draft k) at the next
     * position, one token each. */
    uint32_t *act = md->who, n_act = n_reqs;
    for (uint32_t i = 0; i < n_reqs; i++) {
        act[i] = i;
        reqs[i].n_out = 0;
        reqs[i].q_onehot = false;
    }
    for (uint32_t k = 0;; k++) {
        uint32_t n_seqs = 0;
        for (uint32_t a = 0; a < n_act; a++) {
            ds4_draft_req *q = &reqs[act[a]];
            mtp_row *r = &md->rows[q->row];
            if (pick(md, mode, q->row, draft_logits(r, q, k, V), &q->drafts[k], err)) return -1;
            q->n_out = k + 1;
            uint32_t limit = q->n < md->max_draft ? q->n : md->max_draft;
            if (q->n_out == limit || q->drafts[k] == mode->eos) continue;
            md->seqs[n_seqs] = (ds4_mtp_seq){.kv = &r->kv, .h = r->chain[k & 1],
                                             .tokens = &q->drafts[k], .n = 1,
                                             .h_last = r->chain[(k + 1) & 1],
                                             .logits = draft_logits(r, q, k + 1, V)};
            act[n_seqs++] = act[a];
        }
        if (!n_seqs) return 0;
        if (run_packed(md, n_seqs, err)) return -1;
        n_act = n_seqs;
    }
}

static void mtp_destroy(ds4_drafter *d) {
    mtp_drafter *md = (mtp_drafter *)d;
    for (uint32_t i = 0; md->rows && i < d->n_rows; i++) {
        mtp_row *r = &md->rows[i];
        ds4_kv_free(&r->kv);
        free(r->buf_h);
        free(r->buf_id);
        free(r->chain[0]);
        free(r->chain[1]);
        free(r->logits);
    }
    free(md->rows);
    free(md->w);
    free(md->seqs);
    free(md->who);
    free(md);
}

int ds4_mtp_drafter_new(ds4_drafter **out, ds4_engine *e, uint32_t n_rows, uint32_t ctx,
                        uint32_t chunk, uint32_t max_draft, ds4err *err) {
    *out = NULL;
    const ds4_model *m = e->m;
    const ds4_config *c = &m->cfg;
    if (!m->mtp) return ds4_err_set(err, DS4_E_ARG, "no MTP head is loaded (--mtp FILE)");
    if (!n_rows || !chunk)
        return ds4_err_set(err, DS4_E_ARG, "MTP drafter: %u rows, chunk %u", n_rows, chunk);
    if (chunk > e->cap) chunk = e->cap;   /* passes of e->cap tokens: the same bits */
    if (max_draft < 1 || max_draft > DS4_SPEC_MAX_DRAFT)
        return ds4_err_set(err, DS4_E_ARG, "MTP drafter: depth %u is not in [1, %d]", max_draft,
                          DS4_SPEC_MAX_DRAFT);
    mtp_drafter *md = calloc(1, sizeof(*md));
    if (!md) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    md->base = (ds4_drafter){n_rows, "mtp", DS4_DRAFT_IN_HC, mtp_commit, mtp_propose, mtp_destroy};
    md->e = e;
    md->cap = chunk < MTP_BUF_MAX ? chunk : MTP_BUF_MAX;
    md->max_draft = max_draft;
    md->hc_dim = (uint64_t)c->n_hc * c->n_embd;
    md->rows = calloc(n_rows, sizeof(mtp_row));
    md->w = malloc(sizeof(double) * c->n_vocab);
    md->seqs = calloc(n_rows, sizeof(ds4_mtp_seq));
    md->who = calloc(n_rows, sizeof(uint32_t));
    if (!md->rows || !md->w || !md->seqs || !md->who) goto oom;
    for (uint32_t i = 0; i < n_rows; i++) {
        mtp_row *r = &md->rows[i];
        /* A pass writes at most cap rows; proposals go back max_draft - 1. */
        if (ds4_mtp_drafter_kv_init(&r->kv, m, ctx, md->cap, max_draft, err)) {
            mtp_destroy(&md->base);
            return -1;
        }
        r->buf_h = malloc(sizeof(float) * md->hc_dim * md->cap);
        r->buf_id = malloc(sizeof(int32_t) * md->cap);
        r->chain[0] = malloc(sizeof(float) * md->hc_dim);
        r->chain[1] = malloc(sizeof(float) * md->hc_dim);
        r->logits = malloc(sizeof(float) * c->n_vocab);
        if (!r->buf_h || !r->buf_id || !r->chain[0] || !r->chain[1] || !r->logits) goto oom;
        r->drafted_after = -1;
    }
    *out = &md->base;
    return 0;
oom:
    mtp_destroy(&md->base);
    return ds4_err_set(err, DS4_E_NOMEM, "out of memory for a %u-row MTP drafter", n_rows);
}

const ds4_kv *ds4_mtp_drafter_kv(const ds4_drafter *d, uint32_t row) {
    return &((const mtp_drafter *)d)->rows[row].kv;
}

uint32_t ds4_mtp_drafter_done(const ds4_drafter *d, uint32_t row) {
    return ((const mtp_drafter *)d)->rows[row].done;
}
