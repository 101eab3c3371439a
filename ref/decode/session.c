/* Sessions: chunked evaluation, token history and exact truncation. */
#include "ref/decode/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/reslimit.h"

int ds4_session_init(ds4_session *s, ds4_engine *e, const ds4_session_opts *o, ds4err *err) {
    memset(s, 0, sizeof(*s));
    const ds4_config *c = &e->m->cfg;
    uint32_t ctx = o->ctx ? o->ctx : c->context_length;
    /* A chunk longer than the engine's passes is evaluated in passes of
     * e->cap tokens: the same bits, in less memory. */
    uint32_t chunk = o->chunk && o->chunk < e->cap ? o->chunk : e->cap;
    if (!ctx) return ds4_err_set(err, DS4_E_ARG, "no context size given and the model declares none");
    /* A context too large for this machine is refused before anything is
     * allocated: an overcommitted calloc would "succeed" and the process
     * would be killed later, without a word. */
    char what[96];
    snprintf(what, sizeof(what), "a context of %u tokens (attention state and token history)", ctx);
    uint64_t need = ds4_kv_bytes(c, c->ratio, c->n_layer, ctx, chunk, o->rollback) +
                    (uint64_t)ctx * sizeof(int32_t);
    if (ds4_reslimit_check(need, what, err)) return -1;
    s->e = e;
    if (ds4_kv_init(&s->kv, c, c->ratio, c->n_layer, ctx, chunk, o->rollback, err)) return -1;
    s->hist = malloc(sizeof(int32_t) * ctx);
    s->logits = malloc(sizeof(float) * c->n_vocab);
    s->hc_last = malloc(sizeof(float) * c->n_hc * c->n_embd);
    if (!s->hist || !s->logits || !s->hc_last) {
        ds4_session_free(s);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory creating a session of %u tokens", ctx);
    }
    return 0;
}

void ds4_session_free(ds4_session *s) {
    ds4_kv_free(&s->kv);
    free(s->hist);
    free(s->logits);
    free(s->hc_last);
    memset(s, 0, sizeof(*s));
}

void ds4_session_reset(ds4_session *s) {
    ds4_kv_reset(&s->kv);
    s->has_logits = false;
}

/* Bad requests are refused before any state changes. */
static int check_reqs(const ds4_session_req *reqs, uint32_t n_reqs, ds4err *err) {
    for (uint32_t i = 0; i < n_reqs; i++) {
        const ds4_session *s = reqs[i].s;
        const ds4_config *c = &s->e->m->cfg;
        if (s->e != reqs[0].s->e)
            return ds4_err_set(err, DS4_E_ARG, "sessions 0 and %u belong to different engines", i);
        for (uint32_t j = 0; j < i; j++)
            if (reqs[j].s == s) return ds4_err_set(err, DS4_E_ARG, "session %u is listed twice (%u)", j, i);
        if ((uint64_t)s->kv.pos + reqs[i].n > s->kv.ctx)
            return ds4_err_set(err, DS4_E_RANGE,
                              "%u more tokens at position %u exceed the context of %u tokens",
                              reqs[i].n, s->kv.pos, s->kv.ctx);
        for (uint32_t k = 0; k < reqs[i].n; k++)
            if (reqs[i].tokens[k] < 0 || (uint32_t)reqs[i].tokens[k] >= c->n_vocab)
                return ds4_err_set(err, DS4_E_RANGE,
                                  "token id %d at index %u is outside the vocabulary [0, %u)",
                                  reqs[i].tokens[k], k, c->n_vocab);
    }
    return 0;
}

/* The forward-pass request for the next m tokens of a session, done of
 * them already evaluated.  The last token's logits and HC state are always
 * kept in the session; other rows only when the caller asked for every row. */
static ds4_fwd_seq pass_seq(const ds4_session_req *r, uint32_t done, uint32_t m) {
    const ds4_config *c = &r->s->e->m->cfg;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
    bool last = done + m == r->n;
    ds4_fwd_seq q = {
        .kv = &r->s->kv,
        .tokens = r->tokens + done,
        .n = m,
        .logits = r->logits_all ? r->logits_all + (uint64_t)done * c->n_vocab
                                : (last ? r->s->logits : NULL),
        .first_out = r->logits_all ? 0 : m - 1,
        .hc_out = r->hc_all ? r->hc_all + done * hc_dim : NULL,
        .hc_last = last ? r->s->hc_last : NULL,
        .taps = r->taps_all ? r->taps_all + (uint64_t)done * c->n_dspark_target * c->n_embd : NULL,
    };
    return q;
}

int ds4_session_eval_many(ds4_session_req *reqs, uint32_t n_reqs, ds4err *err) {
    if (!n_reqs) return 0;
    if (check_reqs(reqs, n_reqs, err)) return -1;
    ds4_engine *e = reqs[0].s->e;
    uint32_t V = e->m->cfg.n_vocab;
    uint32_t *done = calloc(n_reqs, sizeof(uint32_t));
    ds4_fwd_seq *seqs = malloc(sizeof(ds4_fwd_seq) * n_reqs);
    uint32_t *who = malloc(sizeof(uint32_t) * n_reqs);
    int rc = 0;
    if (!done || !seqs || !who) {
        rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory evaluating %u sessions", n_reqs);
        goto out;
    }
    for (;;) {
        uint32_t n_seqs = 0, room = e->cap;
        for (uint32_t i = 0; i < n_reqs && room; i++) {
            uint32_t left = reqs[i].n - done[i];
            uint32_t m = left < reqs[i].s->kv.chunk ? left : reqs[i].s->kv.chunk;
            if (m > room) m = room;
            if (!m) continue;
            seqs[n_seqs] = pass_seq(&reqs[i], done[i], m);
            who[n_seqs++] = i;
            room -= m;
        }
        if (!n_seqs) break;
        if (ds4_forward(e, seqs, n_seqs, err)) {
            for (uint32_t i = 0; i < n_reqs; i++) reqs[i].s->has_logits = false;
            rc = -1;
            goto out;
        }
        for (uint32_t k = 0; k < n_seqs; k++) {
            const ds4_session_req *r = &reqs[who[k]];
            uint32_t m = seqs[k].n;
            /* The pass advanced the state by m: those are its positions. */
            memcpy(r->s->hist + r->s->kv.pos - m, seqs[k].tokens, sizeof(int32_t) * m);
            done[who[k]] += m;
            if (r->s->progress) r->s->progress(r->s->progress_ud, done[who[k]], r->n);
        }
    }
    for (uint32_t i = 0; i < n_reqs; i++) {
        ds4_session *s = reqs[i].s;
        if (!reqs[i].n) continue;
        if (reqs[i].logits_all)
            memcpy(s->logits, reqs[i].logits_all + (uint64_t)(reqs[i].n - 1) * V, sizeof(float) * V);
        s->has_logits = true;
    }
out:
    free(done);
    free(seqs);
    free(who);
    return rc;
}

int ds4_session_eval(ds4_session *s, const int32_t *tokens, uint32_t n, float *logits_all,
                     float *hc_all, ds4err *err) {
    ds4_session_req r = {s, tokens, n, logits_all, hc_all, NULL};
    return ds4_session_eval_many(&r, 1, err);
}

/* Re-evaluate positions [0, pos) from the token history. */
static int replay(ds4_session *s, uint32_t pos, ds4err *err) {
    int32_t *toks = malloc(sizeof(int32_t) * (pos ? pos : 1));
    if (!toks) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    memcpy(toks, s->hist, sizeof(int32_t) * pos);
    ds4_session_reset(s);
    int rc = ds4_session_eval(s, toks, pos, NULL, NULL, err);
    free(toks);
    return rc;
}

int ds4_session_truncate(ds4_session *s, uint32_t pos, ds4err *err) {
    if (pos > s->kv.pos)
        return ds4_err_set(err, DS4_E_RANGE, "cannot truncate to position %u: the session holds %u tokens",
                          pos, s->kv.pos);
    if (pos == s->kv.pos) return 0;
    if (pos == 0) {
        ds4_session_reset(s);
        return 0;
    }
    /* Step back to pos-1 and evaluate that token again: that restores the
     * state at pos and the logits after token pos-1, bit for bit. */
    uint32_t back = pos - 1;
    int32_t last = s->hist[back];
    if (ds4_kv_can_truncate(&s->kv, back)) {
        s->kv.pos = back;
        s->has_logits = false;
    } else if (replay(s, back, err)) {
        return -1;
    }
    return ds4_session_eval(s, &last, 1, NULL, NULL, err);
}

int ds4_session_rewind(ds4_session *s, uint32_t pos, const float *logits, const float *hc_last,
                       ds4err *err) {
    const ds4_config *c = &s->e->m->cfg;
    if (pos == 0 || pos > s->kv.pos)
        return ds4_err_set(err, DS4_E_RANGE, "cannot rewind to position %u: the session holds %u tokens",
                          pos, s->kv.pos);
    if (!ds4_kv_can_truncate(&s->kv, pos))
        return ds4_err_set(err, DS4_E_RANGE,
                          "cannot rewind from position %u to %u through the state's rings (window "
                          "%u + chunk %u + rollback %u positions)", s->kv.pos, pos, s->kv.swa,
                          s->kv.chunk, s->kv.rollback);
    s->kv.pos = pos;
    if (logits != s->logits) memcpy(s->logits, logits, sizeof(float) * c->n_vocab);
    if (hc_last != s->hc_last) memcpy(s->hc_last, hc_last, sizeof(float) * c->n_hc * c->n_embd);
    s->has_logits = true;
    return 0;
}

int ds4_session_logits_at(ds4_session *s, uint32_t pos, float *out, ds4err *err) {
    uint32_t cur = s->kv.pos, V = s->e->m->cfg.n_vocab;
    if (pos >= cur)
        return ds4_err_set(err, DS4_E_RANGE,
                          "position %u has not been evaluated (the session holds %u tokens)", pos,
                          cur);
    if (pos + 1 == cur && s->has_logits) {
        memcpy(out, s->logits, sizeof(float) * V);
        return 0;
    }
    /* Back to pos+1 (which re-evaluates token pos), copy, and forward again
     * over the same tokens: both moves reproduce the state exactly. */
    uint32_t n_tail = cur - pos - 1;
    int32_t *tail = malloc(sizeof(int32_t) * (n_tail ? n_tail : 1));
    if (!tail) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    memcpy(tail, s->hist + pos + 1, sizeof(int32_t) * n_tail);
    int rc = ds4_session_truncate(s, pos + 1, err);
    if (!rc) memcpy(out, s->logits, sizeof(float) * V);
    if (!rc) rc = ds4_session_eval(s, tail, n_tail, NULL, NULL, err);
    free(tail);
    return rc;
}
