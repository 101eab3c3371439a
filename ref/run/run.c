#include "ref/run/run.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/version.h"
#include "ref/model/modelid.h"
#include "ref/model/numerics.h"
#include "ref/format/dump.h"
#include "ref/format/golden_write.h"
#include "ref/format/lpvec.h"

typedef struct run_ctx {
    const ds4_tokenizer *tok;
    const ds4_run_opts *o;
    ds4_golden_writer *w;
    ds4err *err;
    bool failed;           /* recording a step failed (err says why) */
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
        return ds4_err_set(err, DS4_E_RANGE, "token %" PRId32 " has %zu bytes, more than %d",
                          id, b.len, DS4_GOLDEN_MAX_TOKEN_BYTES);
    }
    t->n_bytes = (uint32_t)b.len;
    t->bytes = b.len ? (uint8_t *)b.p : malloc(1);
    if (!t->bytes) return ds4_golden_nomem(err);
    return 0;
}

int ds4_run_step_golden(const ds4_gen_step *gs, ds4_tok_bytes_fn fn, void *ud,
                       ds4_golden_step *st, ds4err *err) {
    memset(st, 0, sizeof(*st));
    if (gs->n_top > DS4_GOLDEN_MAX_TOP)
        return ds4_err_set(err, DS4_E_RANGE, "%u alternatives, more than %d", gs->n_top,
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
    int rc = ds4_run_step_golden(gs, token_bytes, (void *)r->tok, &st, r->err);
    if (rc == 0) rc = ds4_golden_writer_step(r->w, &st, r->err);
    ds4_golden_step_free(&st);
    return rc;
}

static int on_step(void *ud, uint32_t row, uint32_t step, const ds4_gen_step *st) {
    run_ctx *r = (run_ctx *)ud + row;
    if (record_step(r, st)) {
        r->failed = true;
        return 1;
    }
    return r->o->on_step && r->o->on_step(r->o->step_ud, step, st);
}

/* The header of a row's golden.  The identities are borrowed: the writer
 * copies what it keeps. */
static void fill_header(ds4_session *s, const int32_t *prompt, uint32_t n_prompt,
                        const ds4_run_opts *o, const ds4_modelid *model, const ds4_modelid *mtp,
                        ds4_golden_header *h) {
    memset(h, 0, sizeof(*h));
    snprintf(h->version, sizeof(h->version), "%s", DS4REF_VERSION);
    h->model = *model;
    if (mtp) {
        h->has_mtp = true;
        h->mtp = *mtp;
    }
    h->settings.qat = s->e->opts.qat;
    if (s->e->opts.numerics)
        ds4_numerics_name(s->e->opts.numerics, h->settings.numerics, sizeof(h->settings.numerics));
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
}

/* The identities every row's header records, read once: each reads every
 * tensor byte of its file.  *model is the caller's when it gave one. */
typedef struct run_ids {
    ds4_modelid own, mtp;
    const ds4_modelid *model;
    bool has_mtp;
} run_ids;

static int ids_read(const ds4_model *m, const ds4_modelid *known, run_ids *ids, ds4err *err) {
    memset(ids, 0, sizeof(*ids));
    ids->model = known ? known : &ids->own;
    if (!known && ds4_modelid_of_model(m, false, &ids->own, err)) return -1;
    ids->has_mtp = m->mtp != NULL;
    return ids->has_mtp ? ds4_modelid_of_model(m, true, &ids->mtp, err) : 0;
}

static void ids_free(run_ids *ids) {
    ds4_modelid_free(&ids->own);
    ds4_modelid_free(&ids->mtp);
}

/* The outputs besides the golden: the ds4 dump, the official.vec case and
 * the prompt file beside it.  They are opened (and the .vec file checked)
 * before the first token, so that a path that cannot be written, or a case
 * that is already there, fails at once rather than after hours of
 * generation; they are written when the run ends. */
typedef struct extras {
    ds4_afile dump, vec, prompt;   /* zeroed when not written */
    bool write_prompt;
    ds4_lpv_append_opts vo;
    char *recorded;                /* the case's prompt path, when made here */
} extras;

static void extras_abort(extras *x) {
    ds4_file_atomic_abort(&x->dump);
    ds4_file_atomic_abort(&x->vec);
    ds4_file_atomic_abort(&x->prompt);
    free(x->recorded);
    x->recorded = NULL;
}

/* "<the vec file's folder>/prompts/<name>", malloc'd. */
static char *beside_vec(const char *vec_path, const char *name) {
    const char *slash = strrchr(vec_path, '/');
    int dir = slash ? (int)(slash - vec_path) : 1;
    const char *at = slash ? vec_path : ".";
    size_t n = (size_t)dir + strlen(name) + sizeof("/prompts/");
    char *p = malloc(n);
    if (p) snprintf(p, n, "%.*s/prompts/%s", dir, at, name);
    return p;
}

/* ds4's test reads a case's prompt from the prompts folder beside the .vec
 * file (by the recorded path's base name): the prompt's text goes there,
 * unless that file already holds it. */
static int prompt_open(const ds4_run_opts *o, extras *x, ds4err *err) {
    const char *name = strrchr(x->vo.prompt_path, '/');
    char *target = beside_vec(o->vec_path, name ? name + 1 : x->vo.prompt_path);
    if (!target) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    char *have = NULL;
    size_t have_len;
    int rc = 0;
    if (access(target, F_OK) == 0) {
        rc = ds4_file_read(target, DS4_GOLDEN_MAX_FILE, &have, &have_len, err);
        if (rc == 0 && (have_len != o->prompt_text_len ||
                        memcmp(have, o->prompt_text, have_len)))
            rc = ds4_err_set(err, DS4_E_ARG, "%s: holds another prompt; the case's prompt goes "
                            "there (ds4's test reads it beside the .vec file): choose another "
                            "case id or folder", target);
    } else {
        char *dir = beside_vec(o->vec_path, "");
        if (!dir || (mkdir(dir, 0755) && errno != EEXIST))
            rc = ds4_err_set(err, dir ? DS4_E_IO : DS4_E_NOMEM, "%s: %s", dir ? dir : target,
                            dir ? strerror(errno) : "out of memory");
        free(dir);
        if (rc == 0) rc = ds4_file_atomic_open(&x->prompt, target, err);
        x->write_prompt = rc == 0;
    }
    free(have);
    free(target);
    return rc;
}

/* The case's settings, the file's checks, its writer, then the prompt's. */
static int vec_open(const ds4_run_opts *o, extras *x, ds4err *err) {
    const char *id = o->vec_id ? o->vec_id : "ds4ref";
    const char *recorded = o->vec_prompt_path;
    if (!recorded && !o->prompt_text)
        return ds4_err_set(err, DS4_E_ARG, "%s: an official.vec case names its prompt's file, "
                          "and this run has neither the file nor the prompt's text",
                          o->vec_path);
    if (!recorded) {
        size_t n = strlen(id) + sizeof("prompts/.txt");
        if (!(x->recorded = malloc(n))) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        snprintf(x->recorded, n, "prompts/%s.txt", id);
        recorded = x->recorded;
    }
    x->vo = (ds4_lpv_append_opts){.id = id, .prompt_path = recorded, .max_top = 5};
    if (ds4_lpvec_append_check(o->vec_path, &x->vo, err) ||
        ds4_file_atomic_open(&x->vec, o->vec_path, err))
        return -1;
    return o->prompt_text ? prompt_open(o, x, err) : 0;
}

static int extras_open(const ds4_run_opts *o, extras *x, ds4err *err) {
    memset(x, 0, sizeof(*x));
    int rc = o->dump_path ? ds4_file_atomic_open(&x->dump, o->dump_path, err) : 0;
    if (rc == 0 && o->vec_path) rc = vec_open(o, x, err);
    if (rc) extras_abort(x);
    return rc;
}

/* Write them from the golden; the prompt file before the case that names it. */
static int extras_write(extras *x, const ds4_golden *g, const ds4_run_opts *o, ds4err *err) {
    int rc = o->dump_path ? ds4_dump_write(g, &x->dump, err) : 0;
    if (rc == 0 && x->write_prompt) {
        rc = ds4_file_atomic_write(&x->prompt, o->prompt_text, o->prompt_text_len, err);
        if (rc == 0) rc = ds4_file_atomic_commit(&x->prompt, err);
    }
    if (rc == 0 && o->vec_path) rc = ds4_lpvec_append_to(&x->vec, o->vec_path, g, &x->vo, err);
    extras_abort(x);   /* what is left after a failure */
    return rc;
}

/* The golden's stop reason for how the run ended. */
static ds4_stop stop_of(ds4_gen_end end) {
    switch (end) {
    case DS4_GEN_LENGTH: return DS4_STOP_LENGTH;
    case DS4_GEN_EOS: return DS4_STOP_EOS;
    case DS4_GEN_CTX: return DS4_STOP_CTX;
    case DS4_GEN_STOPPED: break;
    }
    return DS4_STOP_INTERRUPTED;
}

/* A golden copied out of the writer. */
static int copy_golden(const ds4_golden *g, ds4_golden *out, ds4err *err) {
    ds4_golden_init(out, DS4_TRACE_GOLDEN);
    int rc = ds4_golden_set_header(out, &g->h, err);
    for (uint32_t i = 0; !rc && i < g->n_steps; i++) rc = ds4_golden_push_step(out, &g->steps[i], err);
    if (!rc) ds4_golden_set_end(out, g->stop);
    return rc;
}

/* One row's golden writer and extra outputs, opened before the first token. */
static int row_open(ds4_session *s, const ds4_tokenizer *tok, const int32_t *prompt,
                    uint32_t n_prompt, const ds4_run_opts *o, const ds4_run_opts *first,
                    const run_ids *ids, run_ctx *r, extras *x, ds4err *err) {
    if (ds4_generate_check_prompt(s, prompt, n_prompt, err) || extras_open(o, x, err)) return -1;
    ds4_golden_header h;
    fill_header(s, prompt, n_prompt, o, ids->model, ids->has_mtp ? &ids->mtp : NULL, &h);
    const ds4_drafter *d = first->spec ? first->spec->drafter : NULL;
    h.settings.mtp_draft = d ? first->spec->n_draft : 0;
    if (d && !strcmp(d->name, "dspark")) memcpy(h.settings.drafter, "dspark", 7);
    int rc = ds4_golden_writer_open(&r->w, o->golden_path, &h, err);
    if (rc) extras_abort(x);
    *r = (run_ctx){tok, o, r->w, err, false};
    return rc;
}

/* One row's outputs written (or abandoned) the way the row ended. */
static int row_finish(run_ctx *r, extras *x, ds4_stop stop, ds4_golden *out, ds4err *err) {
    ds4err ferr = {0};
    int rc = ds4_golden_writer_finish(r->w, stop, &ferr);
    if (!rc) rc = extras_write(x, ds4_golden_writer_golden(r->w), r->o, &ferr);
    else extras_abort(x);
    if (rc && stop != DS4_STOP_ERROR) *err = ferr;
    if (!rc && out) rc = copy_golden(ds4_golden_writer_golden(r->w), out, err);
    ds4_golden_writer_free(r->w);
    return rc;
}

int ds4_run_goldens(ds4_session *const *rows, const ds4_tokenizer *tok,
                    const int32_t *const *prompts, const uint32_t *n_prompt, uint32_t n_rows,
                    const ds4_run_opts *o, ds4_golden *out, ds4err *err) {
    const ds4_run_opts *first = &o[0];
    if (first->spec && first->spec->temp > 0)
        return ds4_err_set(err, DS4_E_ARG, "goldens, dumps and vec cases record greedy decoding: "
                                          "use --temp 0");
    for (uint32_t i = 0; n_rows > 1 && i < n_rows; i++)
        if (o[i].vec_path)
            return ds4_err_set(err, DS4_E_ARG, "official.vec cases are written one prompt at a time");
    run_ctx *r = calloc(n_rows, sizeof(*r));
    extras *x = calloc(n_rows, sizeof(*x));
    ds4_gen_end *end = calloc(n_rows, sizeof(*end));
    uint32_t opened = 0;
    run_ids ids = {0};
    int rc = r && x && end ? 0 : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (rc == 0) rc = ids_read(rows[0]->e->m, first->model_id, &ids, err);
    while (rc == 0 && opened < n_rows) {
        rc = row_open(rows[opened], tok, prompts[opened], n_prompt[opened], &o[opened], first,
                      &ids, &r[opened], &x[opened], err);
        if (rc == 0) opened++;
    }
    ids_free(&ids);
    if (rc) {
        for (uint32_t i = 0; i < opened; i++) {
            extras_abort(&x[i]);
            ds4_golden_writer_free(r[i].w);
        }
        free(r);
        free(x);
        free(end);
        return -1;
    }
    ds4_gen_run gr = {.n_steps = first->n_steps, .top_k = first->top_k,
                      .eos = tok ? ds4_tok_special(tok, DS4_SPECIAL_EOS) : -1,
                      .stop_at_eos = first->stop_at_eos, .spec = first->spec,
                      .stop = first->stop, .cb = on_step, .ud = r, .stats = first->stats};
    bool ran = ds4_generate_rows(rows, prompts, n_prompt, n_rows, &gr, NULL, end, err) == 0;
    /* The outputs are written whatever happened: an interrupted or failed
     * run leaves goldens marked incomplete, never a truncated file. */
    bool failed = !ran;
    for (uint32_t i = 0; i < n_rows; i++) {
        ds4_stop stop = ran && !r[i].failed ? stop_of(end[i]) : DS4_STOP_ERROR;
        failed |= stop == DS4_STOP_ERROR;
        if (row_finish(&r[i], &x[i], stop, out ? &out[i] : NULL, err) && !failed) rc = -1;
    }
    free(r);
    free(x);
    free(end);
    if (failed) return -1;
    if (!rc) rc = ds4_generate_check_stop(first->stop, "outputs written and marked incomplete", err);
    return rc;
}

int ds4_run_golden(ds4_session *s, const ds4_tokenizer *tok, const int32_t *prompt,
                   uint32_t n_prompt, const ds4_run_opts *o, ds4_golden *out, ds4err *err) {
    return ds4_run_goldens(&s, tok, &prompt, &n_prompt, 1, o, out, err);
}
