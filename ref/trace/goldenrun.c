#include "trace/goldenrun.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/version.h"
#include "decode/generate.h"
#include "model/modelid.h"
#include "trace/ds4dump.h"
#include "trace/golden_write.h"
#include "trace/lpvec.h"

typedef struct run_ctx {
    const ds4_tokenizer *tok;
    const ds4_run_opts *o;
    ds4_golden_writer *w;
    ds4err *err;
    int failed;
    bool interrupted;      /* the stop flag was set (SIGINT) */
    bool caller_stopped;   /* on_step asked to stop */
} run_ctx;

/* Token bytes, at most DS4_GOLDEN_MAX_TOKEN_BYTES of them, into t. */
static int token_of(ds4_golden_tok *t, int32_t id, ds4_tok_bytes_fn fn, void *ud, ds4err *err) {
    ds4_buf b = {0};
    t->id = id;
    if (fn(ud, id, &b, err)) {
        ds4_buf_free(&b);
        return -1;
    }
    if (b.failed) {
        ds4_buf_free(&b);
        return ds4_golden_nomem(err);
    }
    if (b.len > DS4_GOLDEN_MAX_TOKEN_BYTES) {
        ds4_buf_free(&b);
        return ds4err_set(err, DS4_E_RANGE, "token %" PRId32 " has %zu bytes, more than %d",
                          id, b.len, DS4_GOLDEN_MAX_TOKEN_BYTES);
    }
    t->n_bytes = (uint32_t)b.len;
    t->bytes = b.len ? (uint8_t *)b.p : malloc(1);
    if (!t->bytes) return ds4_golden_nomem(err);
    return 0;
}

int ds4_golden_step_of(const ds4_gen_step *gs, ds4_tok_bytes_fn fn, void *ud,
                       ds4_golden_step *st, ds4err *err) {
    memset(st, 0, sizeof(*st));
    if (gs->n_top > DS4_GOLDEN_MAX_TOP)
        return ds4err_set(err, DS4_E_RANGE, "%u alternatives, more than %d", gs->n_top,
                          DS4_GOLDEN_MAX_TOP);
    st->top = calloc(gs->n_top ? gs->n_top : 1, sizeof(ds4_golden_tok));
    if (!st->top) return ds4_golden_nomem(err);
    int rc = token_of(&st->tok, gs->token, fn, ud, err);
    st->tok.logit = gs->logit;
    st->tok.logprob = gs->logprob;
    memcpy(st->logits_sha256, gs->digest, 32);
    for (uint32_t i = 0; rc == 0 && i < gs->n_top; i++) {
        rc = token_of(&st->top[i], gs->top_ids[i], fn, ud, err);
        st->top[i].logit = gs->top_logits[i];
        st->top[i].logprob = gs->top_logprobs[i];
        st->n_top = i + 1;
    }
    if (rc) ds4_golden_step_free(st);
    return rc;
}

static int token_bytes(void *ud, int32_t id, ds4_buf *out, ds4err *err) {
    const ds4_tokenizer *tok = ud;
    if (!tok) return 0;
    return ds4_tok_decode(tok, &id, 1, out, err);
}

/* The step into the golden being written. */
static int record_step(run_ctx *r, const ds4_gen_step *gs) {
    ds4_golden_step st;
    int rc = ds4_golden_step_of(gs, token_bytes, (void *)r->tok, &st, r->err);
    if (rc == 0) rc = ds4_golden_writer_step(r->w, &st, r->err);
    ds4_golden_step_free(&st);
    return rc;
}

static int on_step(void *ud, uint32_t step, const ds4_gen_step *st) {
    run_ctx *r = ud;
    if (r->w && record_step(r, st)) {
        r->failed = 1;
        return 1;
    }
    if (r->o->on_text && r->tok) {
        ds4_buf b = {0};
        ds4err e2 = {0};
        if (!ds4_tok_decode(r->tok, &st->token, 1, &b, &e2) && b.len)
            r->o->on_text(r->o->ud, (const uint8_t *)b.p, b.len);
        ds4_buf_free(&b);
    }
    if (r->o->stop && *r->o->stop) {
        r->interrupted = true;
        return 1;
    }
    if (r->o->on_step && r->o->on_step(r->o->step_ud, step, st)) {
        r->caller_stopped = true;
        return 1;
    }
    return 0;
}

static int fill_header(ds4_session *s, const int32_t *prompt, uint32_t n_prompt,
                       const ds4_run_opts *o, ds4_golden_header *h, ds4err *err) {
    const ds4_model *m = s->e->m;
    memset(h, 0, sizeof(*h));
    snprintf(h->version, sizeof(h->version), "%s", DS4REF_VERSION);
    if (ds4_modelid_of(&m->file, &h->model, err)) return -1;
    if (m->mtp) {
        h->has_mtp = true;
        if (ds4_modelid_of(&m->mtp->file, &h->mtp, err)) return -1;
    }
    h->settings.qat = s->e->opts.qat;
    h->settings.ctx = s->kv.ctx;
    h->settings.chunk = s->kv.chunk;
    h->settings.top_k = o->top_k;
    h->settings.max_steps = o->n_steps;
    h->settings.stop_at_eos = o->stop_at_eos;
    h->n_prompt = n_prompt;
    h->prompt = (int32_t *)prompt;
    if (o->prompt_text) {
        h->has_prompt_text = true;
        h->prompt_text = (uint8_t *)o->prompt_text;
        h->n_prompt_text = o->prompt_text_len;
    }
    return 0;
}

static void free_header_ids(ds4_golden_header *h) {
    ds4_modelid_free(&h->model);
    if (h->has_mtp) ds4_modelid_free(&h->mtp);
}

/* Steps the context leaves room for after the prompt: the last generated
 * token is never evaluated, so n_steps fit when prompt + n_steps - 1 <= ctx. */
static uint32_t room(const ds4_session *s, uint32_t n_prompt, uint32_t want, bool *clamped) {
    uint64_t free_pos = s->kv.ctx - n_prompt;
    *clamped = (uint64_t)want > free_pos + 1;
    return *clamped ? (uint32_t)(free_pos + 1) : want;
}

static int write_extras(const ds4_golden *g, const ds4_run_opts *o, ds4err *err) {
    if (o->dump_path && ds4_dump_write(g, o->dump_path, err)) return -1;
    if (o->vec_path) {
        ds4_lpv_append_opts vo = {.id = o->vec_id, .prompt_path = o->vec_prompt_path,
                                  .max_top = 5, .replace = true};
        if (ds4_lpv_append(o->vec_path, g, &vo, err)) return -1;
    }
    return 0;
}

int ds4_run_golden(ds4_session *s, const ds4_tokenizer *tok, const int32_t *prompt,
                   uint32_t n_prompt, const ds4_run_opts *o, ds4_golden *out, ds4err *err) {
    if (!n_prompt) return ds4err_set(err, DS4_E_ARG, "empty prompt: nothing to continue from");
    if (n_prompt > s->kv.ctx)
        return ds4err_set(err, DS4_E_RANGE, "the prompt has %u tokens, more than the context of %u",
                          n_prompt, s->kv.ctx);
    /* Bad input is refused before any output file is started. */
    for (uint32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= s->e->m->cfg.n_vocab)
            return ds4err_set(err, DS4_E_RANGE, "prompt token %u is %d, outside the vocabulary [0, %u)",
                              i, prompt[i], s->e->m->cfg.n_vocab);
    ds4_spec_cfg plain = {0};
    const ds4_spec_cfg *sc = o->spec ? o->spec : &plain;
    bool sampled = sc->temp > 0;
    if (sampled && (o->golden_path || o->dump_path || o->vec_path || out))
        return ds4err_set(err, DS4_E_ARG, "goldens, dumps and vec cases record greedy decoding: "
                                          "use --temp 0");
    ds4_golden_writer *w = NULL;
    int rc = 0;
    if (!sampled) {
        ds4_golden_header h;
        if (fill_header(s, prompt, n_prompt, o, &h, err)) {
            free_header_ids(&h);
            return -1;
        }
        h.settings.mtp_draft = sc->drafter ? sc->n_draft : 0;
        rc = ds4_golden_writer_open(&w, o->golden_path, &h, err);
        free_header_ids(&h);
        if (rc) return -1;
    }
    ds4_session_reset(s);
    ds4_stop stop = DS4_STOP_LENGTH;
    run_ctx r = {tok, o, w, err, 0, false, false};
    if (ds4_spec_prefill(sc->drafter, &s, &prompt, &n_prompt, 1, err)) {
        stop = DS4_STOP_ERROR;
    } else {
        bool clamped;
        ds4_gen_opts go = {.n_steps = room(s, n_prompt, o->n_steps, &clamped), .top_k = o->top_k,
                           .eos = tok ? ds4_tok_special(tok, DS4_SPECIAL_EOS) : -1,
                           .stop_at_eos = o->stop_at_eos};
        ds4_gen_step *steps = calloc(go.n_steps ? go.n_steps : 1, sizeof(ds4_gen_step));
        uint32_t done = 0;
        if (!steps) {
            ds4err_set(err, DS4_E_NOMEM, "out of memory");
            stop = DS4_STOP_ERROR;
        } else if (ds4_spec_generate1(s, sc, &go, o->seed, steps, &done, on_step, &r, o->stats,
                                      err) || r.failed) {
            stop = DS4_STOP_ERROR;
        } else if (r.interrupted || r.caller_stopped) {
            /* Fewer steps than asked: the golden says so (incomplete). */
            stop = DS4_STOP_INTERRUPTED;
        } else if (done && go.stop_at_eos && steps[done - 1].token == go.eos) {
            stop = DS4_STOP_EOS;
        } else if (clamped) {
            stop = DS4_STOP_CTX;
        }
        ds4_gen_steps_free(steps, done);
        free(steps);
    }
    if (!w) {
        if (stop == DS4_STOP_ERROR) return -1;
        return r.interrupted ? ds4err_set(err, DS4_E_INTERRUPTED, "interrupted") : 0;
    }
    /* The outputs are written whatever happened: an interrupted or failed run
     * leaves a golden marked incomplete, never a truncated file. */
    ds4err ferr = {0};
    rc = ds4_golden_writer_finish(w, stop, &ferr);
    if (!rc) rc = write_extras(ds4_golden_writer_golden(w), o, &ferr);
    if (rc && stop != DS4_STOP_ERROR) *err = ferr;
    if (!rc && out) {
        ds4_golden_init(out, DS4_TRACE_GOLDEN);
        const ds4_golden *g = ds4_golden_writer_golden(w);
        rc = ds4_golden_set_header(out, &g->h, err);
        for (uint32_t i = 0; !rc && i < g->n_steps; i++) rc = ds4_golden_push_step(out, &g->steps[i], err);
        if (!rc) ds4_golden_set_end(out, g->stop);
    }
    ds4_golden_writer_free(w);
    if (stop == DS4_STOP_ERROR) return -1;
    if (stop == DS4_STOP_INTERRUPTED && r.interrupted && !rc)
        return ds4err_set(err, DS4_E_INTERRUPTED, "interrupted: outputs written and marked incomplete");
    return rc;
}
