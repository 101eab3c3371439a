/* The public API (include/ds4ref.h) over the internal modules.  Each public
 * handle owns the internal objects it needs; every function converts the
 * internal ds4err into the caller's ds4ref_error (apierr.h).  The tools'
 * entry points are in api_synth.c, api_gguf.c, api_golden.c, api_file.c and
 * api_serve.c. */
#include "ds4ref.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/api/apierr.h"
#include "ref/api/apimodel.h"
#include "base/reslimit.h"
#include "base/utf8.h"
#include "base/version.h"
#include "ref/decode/generate.h"
#include "ref/decode/sample.h"
#include "ref/decode/session.h"
#include "ref/decode/speculative.h"
#include "ref/forward/forward.h"
#include "ref/model/model.h"
#include "ref/model/modelopen.h"
#include "ref/model/numerics.h"
#include "quant/dot.h"
#include "quant/types.h"
#include "ref/text/chat.h"
#include "ref/run/run.h"


/* ------------------------------------------------------------------ errors */

const char *ds4ref_status_name(int code) {
    switch (code) {
    case DS4REF_OK: return "DS4REF_OK";
    case DS4REF_E_ARG: return "DS4REF_E_ARG";
    case DS4REF_E_IO: return "DS4REF_E_IO";
    case DS4REF_E_FORMAT: return "DS4REF_E_FORMAT";
    case DS4REF_E_MODEL: return "DS4REF_E_MODEL";
    case DS4REF_E_NOMEM: return "DS4REF_E_NOMEM";
    case DS4REF_E_RANGE: return "DS4REF_E_RANGE";
    case DS4REF_E_UNSUPPORTED: return "DS4REF_E_UNSUPPORTED";
    case DS4REF_E_MISMATCH: return "DS4REF_E_MISMATCH";
    case DS4REF_E_INTERRUPTED: return "DS4REF_E_INTERRUPTED";
    case DS4REF_E_INTERNAL: return "DS4REF_E_INTERNAL";
    }
    return "DS4REF_E_UNKNOWN";
}

const char *ds4ref_version(void) { return DS4REF_VERSION; }

const char *ds4ref_kernels(void) { return ds4_dot_kernels(); }

const char *ds4ref_kernels_available(void) { return ds4_dot_available(); }

void ds4ref_free(void *p) { free(p); }

void ds4ref_set_threads(int n) { ds4_threads_fix(n); }

void ds4ref_model_threads(const ds4ref_model *model, int *decode, int *prefill) {
    bool chosen = model && ds4_threads_tuning(&model->e.threads);
    if (decode) *decode = chosen ? ds4_threads_best(&model->e.threads, 0) : 0;
    if (prefill) *prefill = chosen ? ds4_threads_best(&model->e.threads, 2) : 0;
}

_Static_assert((int)DS4REF_EXIT_SIGBUS == (int)DS4_EXIT_SIGBUS, "one SIGBUS exit status");

int ds4ref_report_sigbus(const char *program, ds4ref_error *err) {
    ds4err e = {0};
    return api_result(err, ds4_reslimit_sigbus_install(program ? program : "ds4ref", &e), &e);
}

/* ------------------------------------------------------------------ models */

void ds4ref_model_options_init(ds4ref_model_options *o) {
    memset(o, 0, sizeof(*o));
    o->qat = 1;
    o->max_batch = 256;
}

/* Forwards the engine's internal taps to the public callback. */
static void tap_bridge(void *ud, const ds4_tap *t) {
    ds4ref_model *m = ud;
    ds4ref_tap pub = {t->name, t->layer, t->pos, (int)t->kind, t->data, t->n};
    m->tap(m->tap_ud, &pub);
}

int ds4ref_model_open(const ds4ref_model_options *o, ds4ref_model **out, ds4ref_error *err) {
    *out = NULL;
    if (!o || !o->path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_model_open: no model path");
    ds4ref_model *m = calloc(1, sizeof(*m));
    if (!m) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    ds4err e = {0};
    ds4_fwd_opts fo = {.qat = o->qat != 0};
    if (ds4_numerics_parse(o->numerics, &fo.numerics, &e) || ds4_dot_check(&e) ||
        ds4_modelopen(&m->m, o->path, o->mtp_path, o->dspark_path, fo.numerics, fo.qat, &e)) {
        free(m);
        return api_fail(err, &e);
    }
    /* A DSpark block is one pass: the engine holds one at least, whatever
     * the chunk the caller sized it for (the chunk never changes a value). */
    uint32_t cap = o->max_batch ? o->max_batch : 256;
    if (m->m.dspark && cap < m->m.cfg.dspark_block) cap = m->m.cfg.dspark_block;
    int rc = ds4_engine_init(&m->e, &m->m, &fo, cap, &e);
    if (rc) {
        ds4_model_close(&m->m);
        free(m);
        return api_fail(err, &e);
    }
    *out = m;
    api_ok(err);
    return 0;
}

void ds4ref_model_close(ds4ref_model *m) {
    if (!m) return;
    ds4_engine_free(&m->e);
    ds4_model_close(&m->m);
    free(m);
}

void ds4ref_model_get_info(const ds4ref_model *m, ds4ref_model_info *info) {
    const ds4_config *c = &m->m.cfg;
    memset(info, 0, sizeof(*info));
    info->n_layer = c->n_layer;
    info->n_embd = c->n_embd;
    info->n_vocab = c->n_vocab;
    info->n_head = c->n_head;
    info->head_dim = c->head_dim;
    info->n_hc = c->n_hc;
    info->n_expert = c->n_expert;
    info->n_expert_used = c->n_expert_used;
    info->context_length = c->context_length;
    info->has_mtp = m->m.mtp != NULL;
    info->has_tokenizer = m->m.has_tok;
    info->bos = m->m.has_tok ? ds4_tok_special(&m->m.tok, DS4_SPECIAL_BOS) : -1;
    info->eos = m->m.has_tok ? ds4_tok_special(&m->m.tok, DS4_SPECIAL_EOS) : -1;
}

void ds4ref_set_tap(ds4ref_model *m, ds4ref_tap_fn fn, void *ud) {
    m->tap = fn;
    m->tap_ud = ud;
    m->e.tap = fn ? tap_bridge : NULL;
    m->e.tap_ud = fn ? m : NULL;
}

int ds4ref_tensor_f32(const ds4ref_model *m, const char *name, float **data, uint64_t ne[4],
                      ds4ref_error *err) {
    const ds4_gguf_tensor *t = ds4_gguf_find_tensor(&m->m.file, name);
    if (!t && m->m.mtp) t = ds4_gguf_find_tensor(&m->m.mtp->file, name);
    if (!t) {
        ds4err e;
        ds4_err_set(&e, DS4_E_ARG, "no tensor named '%s' in %s", name, m->m.file.path);
        return api_fail(err, &e);
    }
    float *v = malloc(sizeof(float) * (t->n_elem ? t->n_elem : 1));
    if (!v) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    ds4_types_dequant_row(t->type, t->data, v, t->n_elem);
    for (int i = 0; i < 4; i++) ne[i] = t->ne[i];
    *data = v;
    api_ok(err);
    return 0;
}

/* --------------------------------------------------------------- tokenizer */

static int take_tokens(ds4_tokens *t, int32_t **ids, size_t *n) {
    *ids = t->ids ? t->ids : malloc(sizeof(int32_t));
    *n = t->n;
    return *ids ? 0 : -1;
}

int ds4ref_tokenize(const ds4ref_model *m, const char *text, size_t len, unsigned flags,
                    int32_t **ids, size_t *n, ds4ref_error *err) {
    const ds4_tokenizer *tok;
    ds4err e = {0};
    ds4_tokens t = {0};
    if (ds4_model_tokenizer(&m->m, &tok, &e) ||
        ds4_tok_encode(tok, text, len, flags & DS4REF_TOKENIZE_SPECIAL ? DS4_TOK_ADDED : 0, &t, &e)) {
        ds4_tokens_free(&t);
        return api_fail(err, &e);
    }
    if (take_tokens(&t, ids, n)) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    api_ok(err);
    return 0;
}

int ds4ref_detokenize(const ds4ref_model *m, const int32_t *ids, size_t n, char **bytes,
                      size_t *len, ds4ref_error *err) {
    const ds4_tokenizer *tok;
    ds4err e = {0};
    ds4_buf b = {0};
    if (ds4_model_tokenizer(&m->m, &tok, &e) || ds4_tok_decode(tok, ids, n, &b, &e)) {
        ds4_buf_free(&b);
        return api_fail(err, &e);
    }
    if (!b.p && !(b.p = calloc(1, 1))) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    *bytes = b.p;
    *len = b.len;
    api_ok(err);
    return 0;
}

int ds4ref_token_string(const ds4ref_model *m, int32_t id, const char **s, size_t *len,
                        ds4ref_error *err) {
    const ds4_tokenizer *tok;
    ds4err e = {0};
    ds4_strref r;
    if (ds4_model_tokenizer(&m->m, &tok, &e) || ds4_tok_text(tok, id, &r, &e)) return api_fail(err, &e);
    *s = r.ptr;
    *len = r.len;
    api_ok(err);
    return 0;
}

size_t ds4ref_utf8_char(const uint8_t *p, size_t n) {
    uint32_t cp;
    return p ? ds4_utf8_next(p, n, &cp) : 0;
}

int ds4ref_chat_prompt(const ds4ref_model *m, const char *prompt, size_t len,
                       const ds4ref_chat_options *o, int32_t **ids, size_t *n,
                       ds4ref_error *err) {
    const ds4_tokenizer *tok;
    ds4err e = {0};
    ds4_tokens t = {0};
    ds4_chat_opts co;
    const char *sys = o ? o->system : NULL;
    size_t sys_len = o && o->system ? o->system_len : 0;
    if (api_chat_opts(o, &co, &e) || ds4_model_tokenizer(&m->m, &tok, &e) ||
        ds4_chat_prompt_ids(tok, sys, sys_len, prompt, len, &co, &t, &e)) {
        ds4_tokens_free(&t);
        return api_fail(err, &e);
    }
    if (take_tokens(&t, ids, n)) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    api_ok(err);
    return 0;
}

/* ---------------------------------------------------------------- sessions */

int ds4ref_session_new(ds4ref_model *m, const ds4ref_session_options *o, ds4ref_session **out,
                       ds4ref_error *err) {
    *out = NULL;
    ds4ref_session *s = calloc(1, sizeof(*s));
    if (!s) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    ds4_session_opts so = ds4_generate_session_opts(&m->e, o ? o->ctx : 0, o ? o->chunk : 0);
    ds4err e = {0};
    if (ds4_session_init(&s->s, &m->e, &so, &e)) {
        free(s);
        return api_fail(err, &e);
    }
    s->model = m;
    if (o && o->progress) {
        s->s.progress = o->progress;
        s->s.progress_ud = o->progress_ud;
    }
    *out = s;
    api_ok(err);
    return 0;
}

void ds4ref_session_free(ds4ref_session *s) {
    if (!s) return;
    ds4_session_free(&s->s);
    free(s);
}

uint32_t ds4ref_session_pos(const ds4ref_session *s) { return ds4_session_pos(&s->s); }

uint32_t ds4ref_session_ctx(const ds4ref_session *s) { return s->s.kv.ctx; }

int ds4ref_session_eval(ds4ref_session *s, const int32_t *ids, size_t n, float *logits,
                        ds4ref_error *err) {
    ds4err e = {0};
    if (n > UINT32_MAX) return api_fail_msg(err, DS4REF_E_RANGE, "too many tokens");
    return api_result(err, ds4_session_eval(&s->s, ids, (uint32_t)n, logits, NULL, &e), &e);
}

int ds4ref_session_truncate(ds4ref_session *s, uint32_t pos, ds4ref_error *err) {
    ds4err e = {0};
    return api_result(err, ds4_session_truncate(&s->s, pos, &e), &e);
}

int ds4ref_session_logits(ds4ref_session *s, uint32_t pos, float *out, ds4ref_error *err) {
    ds4err e = {0};
    return api_result(err, ds4_session_logits_at(&s->s, pos, out, &e), &e);
}

int ds4ref_session_top_logprobs(ds4ref_session *s, uint32_t pos, uint32_t k,
                                ds4ref_logprob *out, uint32_t *n, ds4ref_error *err) {
    uint32_t V = s->model->m.cfg.n_vocab;
    float *lg = malloc(sizeof(float) * V);
    int32_t *ids = malloc(sizeof(int32_t) * (k ? k : 1));
    double *lp = malloc(sizeof(double) * (k ? k : 1));
    if (!lg || !ids || !lp) {
        free(lg);
        free(ids);
        free(lp);
        return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    }
    int rc = ds4ref_session_logits(s, pos, lg, err);
    if (!rc) {
        *n = ds4_sample_top_k(lg, V, k, ids, lp);
        for (uint32_t i = 0; i < *n; i++) out[i] = (ds4ref_logprob){ids[i], lg[ids[i]], lp[i]};
    }
    free(lg);
    free(ids);
    free(lp);
    return rc;
}

int ds4ref_top_logprobs(const ds4ref_model *m, const float *logits, uint32_t k,
                        ds4ref_logprob *out, uint32_t *n, ds4ref_error *err) {
    uint32_t V = m->m.cfg.n_vocab;
    if (k > V) k = V;
    int32_t *ids = malloc(sizeof(int32_t) * (k ? k : 1));
    double *lp = malloc(sizeof(double) * (k ? k : 1));
    if (!ids || !lp) {
        free(ids);
        free(lp);
        return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    }
    *n = ds4_sample_top_k(logits, V, k, ids, lp);
    for (uint32_t i = 0; i < *n; i++) out[i] = (ds4ref_logprob){ids[i], logits[ids[i]], lp[i]};
    free(ids);
    free(lp);
    api_ok(err);
    return 0;
}

/* -------------------------------------------------------------- generation */

void ds4ref_generate_options_init(ds4ref_generate_options *o) {
    memset(o, 0, sizeof(*o));
    o->n_tokens = 128;
    o->top_k = 20;
    o->stop_at_eos = 1;
    o->seed = 1;
}

uint32_t ds4ref_generate_room(const ds4ref_session *s, size_t n_prompt, uint32_t n_tokens) {
    bool clamped;
    if (n_prompt > UINT32_MAX) return 0;
    return ds4_generate_room(&s->s, (uint32_t)n_prompt, n_tokens, &clamped);
}

_Static_assert(sizeof(((ds4ref_spec_stats *)0)->proposed_at) ==
               sizeof(((ds4_spec_stats *)0)->proposed_at), "positions of the public stats");

static ds4_spec_stats stats_in(const ds4ref_spec_stats *st) {
    ds4_spec_stats in = {st->passes, st->iters, st->proposed, st->accepted, st->deepest, {0}, {0}};
    memcpy(in.proposed_at, st->proposed_at, sizeof(in.proposed_at));
    memcpy(in.accepted_at, st->accepted_at, sizeof(in.accepted_at));
    return in;
}

void ds4ref_spec_report(const ds4ref_spec_stats *st, char *buf, size_t size) {
    ds4_spec_stats in = stats_in(st);
    ds4_spec_report(&in, buf, size);
}

void ds4ref_spec_report_positions(const ds4ref_spec_stats *st, char *buf, size_t size) {
    ds4_spec_stats in = stats_in(st);
    ds4_spec_report_positions(&in, buf, size);
}

/* Turns internal step records into the public ds4ref_step for a callback. */
typedef struct step_bridge {
    const ds4ref_model *m;
    ds4ref_step_fn fn;          /* one row */
    ds4ref_row_step_fn row_fn;  /* rows */
    void *ud;
    uint32_t row;               /* the row a golden runner's steps belong to */
} step_bridge;

static int bridge_row_step(void *ud, uint32_t row, uint32_t index, const ds4_gen_step *st) {
    step_bridge *b = ud;
    if (!b->fn && !b->row_fn) return 0;
    ds4_buf bytes = {0};
    ds4err e = {0};
    if (b->m->m.has_tok) ds4_tok_decode(&b->m->m.tok, &st->token, 1, &bytes, &e);
    ds4ref_logprob small[64], *top = small;
    if (st->n_top > 64 && !(top = malloc(sizeof(*top) * st->n_top))) {
        ds4_buf_free(&bytes);
        return 1;   /* out of memory: stop rather than report a cut list */
    }
    for (uint32_t i = 0; i < st->n_top; i++)
        top[i] = (ds4ref_logprob){st->top_ids[i], st->top_logits[i], st->top_logprobs[i]};
    ds4ref_step pub = {index, st->token, (const uint8_t *)bytes.p, bytes.len, st->logit,
                       st->logprob, st->n_top, top, st->digest};
    int rc = b->fn ? b->fn(b->ud, &pub) : b->row_fn(b->ud, row, &pub);
    if (top != small) free(top);
    ds4_buf_free(&bytes);
    return rc;
}

static int bridge_step(void *ud, uint32_t index, const ds4_gen_step *st) {
    return bridge_row_step(ud, ((step_bridge *)ud)->row, index, st);
}

static void stats_out(const ds4_spec_stats *in, ds4ref_spec_stats *out) {
    if (!out) return;
    out->passes += in->passes;
    out->iters += in->iters;
    out->proposed += in->proposed;
    out->accepted += in->accepted;
    if (in->deepest > out->deepest) out->deepest = in->deepest;
    for (uint32_t k = 0; k < DS4_SPEC_MAX_DRAFT; k++) {
        out->proposed_at[k] += in->proposed_at[k];
        out->accepted_at[k] += in->accepted_at[k];
    }
}

/* The run a call asks for, in the internal terms (sc holds its speculation,
 * ds4_generate_spec_new). */
static ds4_gen_run gen_run(const ds4ref_model *m, const ds4ref_generate_options *o,
                           const ds4_spec_cfg *sc) {
    return (ds4_gen_run){.n_steps = o->n_tokens, .top_k = o->top_k ? o->top_k : 1,
                         .eos = m->m.has_tok ? ds4_tok_special(&m->m.tok, DS4_SPECIAL_EOS) : -1,
                         .stop_at_eos = o->stop_at_eos != 0, .spec = sc, .seed = o->seed,
                         .stop = o->stop};
}

/* o, or the defaults (ds4ref_generate_options_init) in *def when o is
 * NULL. */
static const ds4ref_generate_options *options_or_default(const ds4ref_generate_options *o,
                                                         ds4ref_generate_options *def) {
    if (o) return o;
    ds4ref_generate_options_init(def);
    return def;
}

/* "path.ROW", malloc'd (NULL path: NULL, and *ok stays as it was). */
static char *row_path(const char *path, uint32_t row, bool *ok) {
    if (!path) return NULL;
    size_t n = strlen(path) + 12;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s.%u", path, row);
    else *ok = false;
    return p;
}

/* A run recorded as goldens (and dumps, a vec case) by the golden runner,
 * each row into its own outputs: PATH.ROW for every row of more than one.
 * bridge: the caller's callback, given to every row with its index. */
static int generate_recorded(ds4_session *const *ss, const int32_t *const *prompts,
                             const uint32_t *lens, uint32_t n, const ds4ref_model *m,
                             const ds4ref_generate_options *o, const ds4_gen_run *gr,
                             const step_bridge *bridge, ds4_spec_stats *st, ds4err *e) {
    if (n > 1 && o->vec_path)
        return ds4_err_set(e, DS4_E_ARG, "official.vec cases are written one prompt at a time");
    ds4_run_opts *ro = calloc(n, sizeof(*ro));
    step_bridge *b = calloc(n, sizeof(*b));
    char **paths = calloc(2 * (size_t)n, sizeof(char *));
    bool ok = ro && b && paths;
    for (uint32_t i = 0; ok && i < n; i++) {
        b[i] = *bridge;
        b[i].row = i;
        paths[2 * i] = n > 1 ? row_path(o->golden_path, i, &ok) : NULL;
        paths[2 * i + 1] = n > 1 ? row_path(o->dump_path, i, &ok) : NULL;
        ro[i] = (ds4_run_opts){
            .n_steps = gr->n_steps, .top_k = gr->top_k, .stop_at_eos = gr->stop_at_eos,
            .golden_path = n > 1 ? paths[2 * i] : o->golden_path,
            .dump_path = n > 1 ? paths[2 * i + 1] : o->dump_path,
            .vec_path = o->vec_path, .vec_id = o->vec_id, .vec_prompt_path = o->vec_prompt_path,
            .prompt_text = o->prompt_text, .prompt_text_len = o->prompt_text_len,
            .on_step = bridge_step, .step_ud = &b[i], .stop = o->stop, .spec = gr->spec,
            .stats = st};
    }
    const ds4_tokenizer *tok = m->m.has_tok ? &m->m.tok : NULL;
    int rc = ok ? ds4_run_goldens(ss, tok, prompts, lens, n, ro, NULL, e)
                : ds4_err_set(e, DS4_E_NOMEM, "out of memory");
    for (uint32_t i = 0; paths && i < 2 * n; i++) free(paths[i]);
    free(paths);
    free(b);
    free(ro);
    return rc;
}

int ds4ref_generate(ds4ref_session *s, const int32_t *prompt, size_t n_prompt,
                    const ds4ref_generate_options *o, ds4ref_step_fn fn, void *ud,
                    ds4ref_error *err) {
    ds4ref_generate_options def;
    o = options_or_default(o, &def);
    ds4err e = {0};
    if (n_prompt > UINT32_MAX) return api_fail_msg(err, DS4REF_E_RANGE, "prompt too long");
    uint32_t np = (uint32_t)n_prompt;
    ds4_session *ss = &s->s;
    ds4_spec_cfg sc;
    if (ds4_generate_spec_new(&sc, &ss, 1, o->temperature, o->mtp_draft, o->dspark_confidence, &e))
        return api_fail(err, &e);
    ds4_gen_run gr = gen_run(s->model, o, &sc);
    step_bridge b = {s->model, fn, NULL, ud, 0};
    ds4_spec_stats st = {0};
    gr.cb = bridge_row_step;
    gr.ud = &b;
    gr.stats = &st;
    int rc;
    if (o->golden_path || o->dump_path || o->vec_path) {
        rc = generate_recorded(&ss, &prompt, &np, 1, s->model, o, &gr, &b, &st, &e);
    } else {
        rc = ds4_generate_rows(&ss, &prompt, &np, 1, &gr, NULL, NULL, &e);
        if (!rc) rc = ds4_generate_check_stop(o->stop, NULL, &e);
    }
    if (sc.drafter) ds4_spec_drafter_free(sc.drafter);
    stats_out(&st, o->stats);
    return api_result(err, rc, &e);
}

int ds4ref_generate_batch(ds4ref_session *const *rows, const int32_t *const *prompts,
                          const size_t *n_prompt, size_t n_rows,
                          const ds4ref_generate_options *o, ds4ref_row_step_fn fn, void *ud,
                          ds4ref_error *err) {
    ds4ref_generate_options def;
    o = options_or_default(o, &def);
    if (!n_rows) return 0;
    if (n_rows > UINT32_MAX) return api_fail_msg(err, DS4REF_E_ARG, "too many rows");
    ds4ref_model *m = rows[0]->model;
    uint32_t n = (uint32_t)n_rows;
    for (uint32_t i = 0; i < n; i++) {
        if (rows[i]->model != m) return api_fail_msg(err, DS4REF_E_ARG, "the rows' sessions belong to different models");
        if (n_prompt[i] > UINT32_MAX) return api_fail_msg(err, DS4REF_E_RANGE, "prompt too long");
    }
    ds4err e = {0};
    ds4_session **ss = calloc(n, sizeof(*ss));
    uint32_t *lens = calloc(n, sizeof(*lens));
    if (!ss || !lens) {
        free(ss);
        free(lens);
        return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < n; i++) {
        ss[i] = &rows[i]->s;
        lens[i] = (uint32_t)n_prompt[i];
    }
    ds4_spec_cfg sc;
    int rc = ds4_generate_spec_new(&sc, ss, n, o->temperature, o->mtp_draft, o->dspark_confidence, &e);
    if (!rc) {
        ds4_gen_run gr = gen_run(m, o, &sc);
        step_bridge b = {m, NULL, fn, ud, 0};
        ds4_spec_stats st = {0};
        gr.cb = bridge_row_step;
        gr.ud = &b;
        gr.stats = &st;
        if (o->golden_path || o->dump_path || o->vec_path)
            rc = generate_recorded(ss, prompts, lens, n, m, o, &gr, &b, &st, &e);
        else
            rc = ds4_generate_rows(ss, prompts, lens, n, &gr, NULL, NULL, &e);
        if (!rc) rc = ds4_generate_check_stop(o->stop, NULL, &e);
        stats_out(&st, o->stats);
    }
    if (sc.drafter) ds4_spec_drafter_free(sc.drafter);
    free(ss);
    free(lens);
    return api_result(err, rc, &e);
}
