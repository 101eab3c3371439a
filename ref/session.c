/* Sessions: chunked evaluation, token history and exact truncation. */
#include "session.h"

#include <stdlib.h>
#include <string.h>

int ds4_session_init(ds4_session *s, ds4_engine *e, const ds4_session_opts *o, ds4err *err) {
    memset(s, 0, sizeof(*s));
    const ds4_config *c = &e->m->cfg;
    uint32_t ctx = o->ctx ? o->ctx : c->context_length;
    uint32_t chunk = o->chunk ? o->chunk : e->cap;
    if (!ctx) return ds4err_set(err, DS4_E_ARG, "no context size given and the model declares none");
    if (chunk > e->cap)
        return ds4err_set(err, DS4_E_ARG, "chunk size %u exceeds the engine's batch capacity %u",
                          chunk, e->cap);
    s->e = e;
    if (ds4_kv_init(&s->kv, c, c->ratio, c->n_layer, ctx, chunk, o->rollback, err)) return -1;
    s->hist = malloc(sizeof(int32_t) * ctx);
    s->logits = malloc(sizeof(float) * c->n_vocab);
    s->hc_last = malloc(sizeof(float) * c->n_hc * c->n_embd);
    if (!s->hist || !s->logits || !s->hc_last) {
        ds4_session_free(s);
        return ds4err_set(err, DS4_E_NOMEM, "out of memory creating a session of %u tokens", ctx);
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

int ds4_session_eval(ds4_session *s, const int32_t *tokens, uint32_t n, float *logits_all,
                     float *hc_all, ds4err *err) {
    const ds4_config *c = &s->e->m->cfg;
    uint64_t hc_dim = (uint64_t)c->n_hc * c->n_embd;
    if ((uint64_t)s->kv.pos + n > s->kv.ctx)
        return ds4err_set(err, DS4_E_RANGE,
                          "%u more tokens at position %u exceed the context of %u tokens", n,
                          s->kv.pos, s->kv.ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= c->n_vocab)
            return ds4err_set(err, DS4_E_RANGE, "token id %d at index %u is outside the vocabulary [0, %u)",
                              tokens[i], i, c->n_vocab);
    for (uint32_t done = 0; done < n;) {
        uint32_t m = n - done < s->kv.chunk ? n - done : s->kv.chunk;
        bool last = done + m == n;
        /* The last token's logits and HC state are always kept in the
         * session; other rows only when the caller asked for every row. */
        ds4_fwd_seq q = {
            .kv = &s->kv,
            .tokens = tokens + done,
            .n = m,
            .logits = logits_all ? logits_all + (uint64_t)done * c->n_vocab : (last ? s->logits : NULL),
            .first_out = logits_all ? 0 : m - 1,
            .hc_out = hc_all ? hc_all + done * hc_dim : NULL,
            .hc_last = last ? s->hc_last : NULL,
        };
        uint32_t pos0 = s->kv.pos;
        if (ds4_forward(s->e, &q, 1, err)) {
            s->has_logits = false;
            return -1;
        }
        memcpy(s->hist + pos0, tokens + done, sizeof(int32_t) * m);
        done += m;
        if (s->progress) s->progress(s->progress_ud, done, n);
    }
    if (n) {
        if (logits_all) memcpy(s->logits, logits_all + (uint64_t)(n - 1) * c->n_vocab,
                               sizeof(float) * c->n_vocab);
        s->has_logits = true;
    }
    return 0;
}

/* Re-evaluate positions [0, pos) from the token history. */
static int replay(ds4_session *s, uint32_t pos, ds4err *err) {
    int32_t *toks = malloc(sizeof(int32_t) * (pos ? pos : 1));
    if (!toks) return ds4err_set(err, DS4_E_NOMEM, "out of memory");
    memcpy(toks, s->hist, sizeof(int32_t) * pos);
    ds4_session_reset(s);
    int rc = ds4_session_eval(s, toks, pos, NULL, NULL, err);
    free(toks);
    return rc;
}

int ds4_session_truncate(ds4_session *s, uint32_t pos, ds4err *err) {
    if (pos > s->kv.pos)
        return ds4err_set(err, DS4_E_RANGE, "cannot truncate to position %u: the session holds %u tokens",
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
