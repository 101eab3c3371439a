/* The public API a server builds continuous batching on (include/ds4ref.h,
 * "serving"): sessions evaluated together in shared forward passes, a token
 * drawn from logits as ds4ref_generate draws it, and a conversation of
 * several turns rendered with the official template.  Each only converts
 * arguments and errors over decode/ and text/. */
#include "ds4ref.h"

#include <stdlib.h>
#include <string.h>

#include "ref/api/apierr.h"
#include "ref/api/apimodel.h"
#include "ref/decode/rng.h"
#include "ref/decode/sample.h"
#include "ref/decode/session.h"
#include "ref/text/chat.h"

int ds4ref_session_eval_many(ds4ref_session *const *rows, const int32_t *const *ids,
                             const size_t *n, size_t n_rows, float *const *logits,
                             ds4ref_error *err) {
    if (!rows || !ids || !n || n_rows == 0 || n_rows > UINT32_MAX)
        return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_session_eval_many: no rows");
    ds4_session_req *reqs = calloc(n_rows, sizeof(*reqs));
    if (!reqs) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n_rows; i++) {
        if (!rows[i] || (n[i] && !ids[i]) || n[i] > UINT32_MAX) {
            free(reqs);
            ds4err e = {0};
            ds4_err_set(&e, DS4_E_ARG, "ds4ref_session_eval_many: row %zu has no session or "
                        "no tokens", i);
            return api_fail(err, &e);
        }
        reqs[i] = (ds4_session_req){&rows[i]->s, ids[i], (uint32_t)n[i],
                                    logits ? logits[i] : NULL, NULL, NULL};
    }
    ds4err e = {0};
    const int rc = ds4_session_eval_many(reqs, (uint32_t)n_rows, &e);
    free(reqs);
    return api_result(err, rc, &e);
}

void ds4ref_sampler_init(ds4ref_sampler *s, uint64_t seed) {
    ds4_rng r;
    ds4_rng_init(&r, seed, 0);
    s->state = r.s;
}

int ds4ref_sample(const ds4ref_model *m, ds4ref_sampler *s, const float *logits, double temp,
                  int32_t *id, ds4ref_error *err) {
    if (!(temp > 0)) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_sample: the temperature is not > 0");
    const uint32_t V = m->m.cfg.n_vocab;
    double *w = malloc(sizeof(double) * V);
    if (!w) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    ds4_rng r = {s->state};
    *id = ds4_rng_sample(&r, logits, V, temp, w);
    free(w);
    if (*id < 0) return api_fail_msg(err, DS4REF_E_RANGE, "ds4ref_sample: every logit is NaN");
    s->state = r.s;
    api_ok(err);
    return 0;
}

int ds4ref_token_logprob(const ds4ref_model *m, const float *logits, int32_t id, double *out,
                         ds4ref_error *err) {
    const uint32_t V = m->m.cfg.n_vocab;
    if (id < 0 || (uint32_t)id >= V)
        return api_fail_msg(err, DS4REF_E_RANGE, "ds4ref_token_logprob: the id is outside the vocabulary");
    *out = (double)logits[id] - ds4_sample_logsumexp(logits, V);
    api_ok(err);
    return 0;
}

int ds4ref_chat_messages(const ds4ref_model *m, const ds4ref_chat_message *msgs, size_t n,
                         const ds4ref_chat_options *o, int32_t **ids, size_t *n_ids,
                         ds4ref_error *err) {
    static const ds4_chat_role roles[] = {DS4_ROLE_SYSTEM, DS4_ROLE_USER, DS4_ROLE_ASSISTANT};
    ds4_chat_msg *cm = calloc(n ? n : 1, sizeof(*cm));
    if (!cm) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].role < DS4REF_CHAT_SYSTEM || msgs[i].role > DS4REF_CHAT_ASSISTANT ||
            (!msgs[i].content && msgs[i].len)) {
            free(cm);
            ds4err e = {0};
            ds4_err_set(&e, DS4_E_ARG, "ds4ref_chat_messages: message %zu has an unknown role "
                        "(%d) or no content", i, msgs[i].role);
            return api_fail(err, &e);
        }
        cm[i].role = roles[msgs[i].role];
        cm[i].content = msgs[i].content ? msgs[i].content : "";
        cm[i].content_len = msgs[i].len;
    }
    const ds4_tokenizer *tok;
    ds4err e = {0};
    ds4_tokens t = {0};
    ds4_chat_opts co;
    int rc = api_chat_opts(o, &co, &e) || ds4_model_tokenizer(&m->m, &tok, &e) ||
             ds4_chat_render_ids(tok, cm, n, &co, &t, &e);
    free(cm);
    if (rc) {
        ds4_tokens_free(&t);
        return api_fail(err, &e);
    }
    *ids = t.ids ? t.ids : malloc(sizeof(int32_t));
    *n_ids = t.n;
    if (!*ids) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    api_ok(err);
    return 0;
}
