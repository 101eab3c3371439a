/* Generation from a prompt (generate.h). */
#include "ref/decode/generate.h"

#include <stdlib.h>
#include <string.h>

#include "ref/decode/dspark_drafter.h"
#include "ref/decode/mtp_drafter.h"

/* A caller that names no context does not want the 1M-token state a model
 * may declare. */
enum { DEFAULT_CTX_CAP = 32768, DEFAULT_CTX_UNDECLARED = 4096 };

ds4_session_opts ds4_generate_session_opts(const ds4_engine *e, uint32_t ctx, uint32_t chunk) {
    uint32_t declared = e->m->cfg.context_length;
    if (!ctx) ctx = !declared ? DEFAULT_CTX_UNDECLARED
                  : declared < DEFAULT_CTX_CAP ? declared : DEFAULT_CTX_CAP;
    return (ds4_session_opts){.ctx = ctx, .chunk = chunk ? chunk : e->cap,
                              .rollback = DS4_SESSION_ROLLBACK};
}

int ds4_generate_spec_new(ds4_spec_cfg *sc, ds4_session *const *rows, uint32_t n_rows, double temp,
                     uint32_t mtp_draft, double dspark_conf, ds4err *err) {
    memset(sc, 0, sizeof(*sc));
    sc->temp = temp;
    if (!mtp_draft) return 0;
    ds4_engine *e = rows[0]->e;
    if (!e->m->mtp && !e->m->dspark)
        return ds4_err_set(err, DS4_E_ARG, "mtp_draft needs a model opened with an MTP head, or "
                          "one with a DSpark drafter");
    if (mtp_draft > DS4_SPEC_MAX_DRAFT)
        return ds4_err_set(err, DS4_E_ARG, "mtp_draft %u: at most %u", mtp_draft, DS4_SPEC_MAX_DRAFT);
    /* One drafter serves every row: it holds the longest context and the
     * largest pass of any of them. */
    uint32_t ctx = 0, chunk = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        if (rows[i]->kv.ctx > ctx) ctx = rows[i]->kv.ctx;
        if (rows[i]->kv.chunk > chunk) chunk = rows[i]->kv.chunk;
    }
    sc->n_draft = mtp_draft;
    if (!e->m->mtp)
        return ds4_dspark_drafter_new(&sc->drafter, e, n_rows, ctx, chunk, mtp_draft, dspark_conf, err);
    return ds4_mtp_drafter_new(&sc->drafter, e, n_rows, ctx, chunk, mtp_draft, err);
}

int ds4_generate_check_stop(volatile sig_atomic_t *stop, const char *what_was_done, ds4err *err) {
    if (!stop || !*stop) return 0;
    if (what_was_done) return ds4_err_set(err, DS4_E_INTERRUPTED, "interrupted: %s", what_was_done);
    return ds4_err_set(err, DS4_E_INTERRUPTED, "interrupted");
}

uint32_t ds4_generate_room(const ds4_session *s, uint32_t n_prompt, uint32_t want, bool *clamped) {
    if (n_prompt > s->kv.ctx) {   /* refused by ds4_generate_check_prompt */
        *clamped = want > 0;
        return 0;
    }
    uint64_t free_pos = s->kv.ctx - n_prompt;
    *clamped = (uint64_t)want > free_pos + 1;
    return *clamped ? (uint32_t)(free_pos + 1) : want;
}

int ds4_generate_check_prompt(const ds4_session *s, const int32_t *prompt, uint32_t n_prompt,
                         ds4err *err) {
    uint32_t V = s->e->m->cfg.n_vocab;
    if (!n_prompt) return ds4_err_set(err, DS4_E_ARG, "empty prompt: nothing to continue from");
    if (n_prompt > s->kv.ctx)
        return ds4_err_set(err, DS4_E_RANGE, "the prompt has %u tokens, more than the context of %u",
                          n_prompt, s->kv.ctx);
    for (uint32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= V)
            return ds4_err_set(err, DS4_E_RANGE, "prompt token %u is %d, outside the vocabulary [0, %u)",
                              i, prompt[i], V);
    return 0;
}

/* A row's progress through its prompt, whatever passes and windows the
 * prefill splits it into: the session's own hook sees each evaluation
 * alone, so it is swapped for this one while the prompt is evaluated, and
 * is silent while decoding, whose passes are a token or a verify batch. */
typedef struct prompt_progress {
    const ds4_session *s;
    ds4_progress_fn fn;
    void *ud;
    uint32_t n_prompt;
} prompt_progress;

static void on_prompt_pass(void *ud, uint32_t done, uint32_t total) {
    (void)done;
    (void)total;
    const prompt_progress *p = ud;
    p->fn(p->ud, ds4_session_pos(p->s), p->n_prompt);   /* the prompt starts at 0 */
}

/* The prompt's progress on rows that have a hook: 0 of n first, then after
 * every pass. */
static void progress_attach(ds4_session *const *rows, const uint32_t *n_prompt, uint32_t n_rows,
                            prompt_progress *pp) {
    for (uint32_t i = 0; i < n_rows; i++) {
        ds4_session *s = rows[i];
        pp[i] = (prompt_progress){s, s->progress, s->progress_ud, n_prompt[i]};
        if (!s->progress) continue;
        s->progress(s->progress_ud, 0, n_prompt[i]);
        s->progress = on_prompt_pass;
        s->progress_ud = &pp[i];
    }
}

/* No progress while decoding. */
static void progress_detach(ds4_session *const *rows, uint32_t n_rows) {
    for (uint32_t i = 0; i < n_rows; i++) rows[i]->progress = NULL;
}

/* The caller's hooks back, for its own later evaluations. */
static void progress_restore(ds4_session *const *rows, uint32_t n_rows,
                             const prompt_progress *pp) {
    for (uint32_t i = 0; i < n_rows; i++) {
        rows[i]->progress = pp[i].fn;
        rows[i]->progress_ud = pp[i].ud;
    }
}

/* One row's view of the run, for the per-step callback. */
typedef struct row_hook {
    const ds4_gen_run *o;
    uint32_t row;
    bool stopped;          /* the stop flag or the callback ended the row */
} row_hook;

static int on_step(void *ud, uint32_t step, const ds4_gen_step *st) {
    row_hook *h = ud;
    if (h->o->cb && h->o->cb(h->o->ud, h->row, step, st)) h->stopped = true;
    if (h->o->stop && *h->o->stop) h->stopped = true;
    return h->stopped;
}

/* Why row r ended, from its records: the tests ds4_spec_generate stops on,
 * in its order. */
static ds4_gen_end row_end(const ds4_gen_run *o, const ds4_spec_row *r, const row_hook *h,
                           bool clamped) {
    if (h->stopped) return DS4_GEN_STOPPED;
    if (r->n_done && o->stop_at_eos && r->steps[r->n_done - 1].token == o->eos) return DS4_GEN_EOS;
    return clamped ? DS4_GEN_CTX : DS4_GEN_LENGTH;
}

int ds4_generate_rows(ds4_session *const *rows, const int32_t *const *prompts,
                 const uint32_t *n_prompt, uint32_t n_rows, const ds4_gen_run *o,
                 uint32_t *done, ds4_gen_end *end, ds4err *err) {
    if (!n_rows) return 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        if (rows[i]->e != rows[0]->e)
            return ds4_err_set(err, DS4_E_ARG, "rows 0 and %u belong to different engines", i);
        if (ds4_generate_check_prompt(rows[i], prompts[i], n_prompt[i], err)) {
            if (n_rows > 1) ds4_err_prefix(err, "row %u", i);
            return -1;
        }
    }
    ds4_spec_cfg plain = {0};
    const ds4_spec_cfg *sc = o->spec ? o->spec : &plain;
    ds4_spec_row *sr = calloc(n_rows, sizeof(*sr));
    row_hook *hooks = calloc(n_rows, sizeof(*hooks));
    bool *clamped = calloc(n_rows, sizeof(*clamped));
    prompt_progress *pp = calloc(n_rows, sizeof(*pp));
    int rc = -1;
    if (!sr || !hooks || !clamped || !pp) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory generating %u rows", n_rows);
        goto out;
    }
    for (uint32_t i = 0; i < n_rows; i++) {
        ds4_session_reset(rows[i]);
        hooks[i] = (row_hook){o, i, false};
        uint32_t n = ds4_generate_room(rows[i], n_prompt[i], o->n_steps, &clamped[i]);
        sr[i] = (ds4_spec_row){.s = rows[i], .n_steps = n, .seed = o->seed + i,
                               .cb = on_step, .ud = &hooks[i]};
        sr[i].steps = calloc(n ? n : 1, sizeof(ds4_gen_step));
        if (!sr[i].steps) {
            ds4_err_set(err, DS4_E_NOMEM, "out of memory for %u steps", n);
            goto out;
        }
    }
    /* A row's n_steps of 0 would mean go.n_steps (speculative.h): it is 0 only
     * when go.n_steps is. */
    ds4_gen_opts go = {.n_steps = o->n_steps, .top_k = o->top_k, .eos = o->eos,
                       .stop_at_eos = o->stop_at_eos};
    progress_attach(rows, n_prompt, n_rows, pp);
    int failed = ds4_spec_prefill(sc->drafter, rows, prompts, n_prompt, n_rows, err);
    progress_detach(rows, n_rows);
    if (!failed) failed = ds4_spec_generate(sc, &go, sr, n_rows, o->stats, err);
    progress_restore(rows, n_rows, pp);
    if (failed) goto out;
    for (uint32_t i = 0; i < n_rows; i++) {
        if (done) done[i] = sr[i].n_done;
        if (end) end[i] = row_end(o, &sr[i], &hooks[i], clamped[i]);
    }
    rc = 0;
out:
    for (uint32_t i = 0; sr && i < n_rows; i++)
        if (sr[i].steps) {
            ds4_step_list_free(sr[i].steps, sr[i].n_done);
            free(sr[i].steps);
        }
    free(sr);
    free(hooks);
    free(clamped);
    free(pp);
    return rc;
}
