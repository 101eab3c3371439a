/* The reference side of ds4ref-conform (reference.h). */
#include "check/conform/reference.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/hex.h"
#include "base/sha256.h"
#include "ref/decode/sample.h"
#include "ref/format/golden_read.h"
#include "ref/model/numerics.h"
#include "ref/run/run.h"

#define TF_MAGIC "ds4ref-conform-tf 1"
#define TF_MAX_FILE ((size_t)256 << 20)

void ds4chk_reference_tf_free(ds4_cf_tf *tf) {
    free(tf->ids);
    free(tf->lp);
    free(tf->gap);
    free(tf->n_top);
    free(tf->top_ids);
    free(tf->top_lp);
    memset(tf, 0, sizeof(*tf));
}

static int tf_alloc(ds4_cf_tf *tf, uint32_t n, uint32_t k, ds4err *err) {
    memset(tf, 0, sizeof(*tf));
    tf->n = n;
    tf->k = k;
    size_t m = n ? n : 1, mk = m * (k ? k : 1);
    tf->ids = malloc(sizeof(int32_t) * m);
    tf->lp = malloc(sizeof(double) * m);
    tf->gap = malloc(sizeof(double) * m);
    tf->n_top = calloc(m, sizeof(uint32_t));
    tf->top_ids = malloc(sizeof(int32_t) * mk);
    tf->top_lp = malloc(sizeof(double) * mk);
    if (tf->ids && tf->lp && tf->gap && tf->n_top && tf->top_ids && tf->top_lp) return 0;
    ds4chk_reference_tf_free(tf);
    return ds4_err_set(err, DS4_E_NOMEM, "out of memory for %u teacher-forced steps", n);
}

int ds4chk_reference_init(ds4_cf_ref *r, ds4_engine *e, const ds4_tokenizer *tok, uint32_t ctx,
                    uint32_t top_k, uint32_t n_steps, bool stop_at_eos, const char *cache_dir,
                    ds4err *err) {
    memset(r, 0, sizeof(*r));
    r->e = e;
    r->tok = tok;
    r->ctx = ctx;
    r->top_k = top_k;
    r->n_steps = n_steps;
    r->stop_at_eos = stop_at_eos;
    r->cache_dir = cache_dir;
    if (cache_dir && ds4_file_make_dirs(cache_dir, err)) return -1;
    /* The model's identity names the cache entries and goes into every
     * reference golden's header: every tensor byte is read, once a run. */
    if (ds4_modelid_of_model(e->m, false, &r->id, err)) return -1;
    ds4_hex(r->id.metadata_sha256, 32, r->model_key);
    ds4_hex(r->id.tensor_data_sha256, 32, r->model_key + 64);
    ds4_session_opts so = {.ctx = ctx, .chunk = 0, .rollback = 0};
    if (ds4_session_init(&r->s, e, &so, err)) {
        ds4_modelid_free(&r->id);
        return -1;
    }
    return 0;
}

void ds4chk_reference_free(ds4_cf_ref *r) {
    ds4_session_free(&r->s);
    ds4_modelid_free(&r->id);
    memset(r, 0, sizeof(*r));
}

/* ---- cache entries ---- */

/* "<cache>/<kind>-<sha256 of what the entry depends on><ext>", malloc'd;
 * NULL without a cache (or out of memory, then *nomem). */
static char *entry_path(const ds4_cf_ref *r, const char *kind, const int32_t *prompt,
                        uint32_t n_prompt, const int32_t *ids, uint32_t n, const char *ext,
                        bool *nomem) {
    if (!r->cache_dir) return NULL;
    ds4_buf key = {0};
    ds4_buf_printf(&key, "ds4ref-conform %s\nmodel %s\nqat %d ctx %u top_k %u steps %u eos %d\n",
                   kind, r->model_key, r->e->opts.qat, r->ctx, r->top_k, r->n_steps,
                   r->stop_at_eos);
    /* A profile's references are its own (none: the keys they always had),
     * and a revision of what the profiles round makes new ones. */
    if (r->e->opts.numerics)
        ds4_buf_printf(&key, "numerics %u revision %d\n", r->e->opts.numerics, DS4_NUMERICS_REVISION);
    ds4_buf_puts(&key, "prompt");
    for (uint32_t i = 0; i < n_prompt; i++) ds4_buf_printf(&key, " %" PRId32, prompt[i]);
    ds4_buf_puts(&key, "\nstream");
    for (uint32_t i = 0; i < n; i++) ds4_buf_printf(&key, " %" PRId32, ids[i]);
    char hex[65];
    ds4_sha256_hex(key.p, key.len, hex);
    bool failed = key.failed;
    ds4_buf_free(&key);
    ds4_buf path = {0};
    ds4_buf_printf(&path, "%s/%s-%s%s", r->cache_dir, kind, hex, ext);
    if (failed || path.failed) {
        *nomem = true;
        ds4_buf_free(&path);
        return NULL;
    }
    return path.p;
}

/* A cached golden is used only when it is the one asked for: the same
 * model, prompt and settings (a stale or foreign file is recomputed). */
static bool golden_fits(const ds4_cf_ref *r, const ds4_golden *g, const int32_t *prompt,
                        uint32_t n_prompt) {
    char key[129];
    ds4_hex(g->h.model.metadata_sha256, 32, key);
    ds4_hex(g->h.model.tensor_data_sha256, 32, key + 64);
    const ds4_golden_settings *s = &g->h.settings;
    char numerics[sizeof(s->numerics)] = "";
    if (r->e->opts.numerics) ds4_numerics_name(r->e->opts.numerics, numerics, sizeof(numerics));
    return ds4_stop_complete(g->stop) && g->has_prompt_tokens && !strcmp(key, r->model_key) &&
           s->qat == r->e->opts.qat && !strcmp(s->numerics, numerics) &&
           s->top_k == r->top_k && s->max_steps == r->n_steps &&
           s->stop_at_eos == r->stop_at_eos && g->h.n_prompt == n_prompt &&
           !memcmp(g->h.prompt, prompt, sizeof(int32_t) * n_prompt);
}

int ds4chk_reference_golden(ds4_cf_ref *r, const int32_t *prompt, uint32_t n_prompt, ds4_golden *g,
                      bool *cached, ds4err *err) {
    bool nomem = false;
    char *path = entry_path(r, "ref", prompt, n_prompt, NULL, 0, ".jsonl", &nomem);
    if (nomem) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    *cached = false;
    if (path) {
        ds4err ignored = {0};
        if (ds4_golden_read(path, g, &ignored) == 0) {
            if (golden_fits(r, g, prompt, n_prompt)) {
                *cached = true;
                free(path);
                return 0;
            }
            ds4_golden_free(g);
        }
    }
    ds4_run_opts ro = {.n_steps = r->n_steps, .top_k = r->top_k, .stop_at_eos = r->stop_at_eos,
                       .golden_path = path, .model_id = &r->id};
    int rc = ds4_run_golden(&r->s, r->tok, prompt, n_prompt, &ro, g, err);
    free(path);
    return rc;
}

/* ---- teacher forcing ---- */

/* Step i of tf from the golden's step i (the stream follows it there). */
static void step_from_golden(ds4_cf_tf *tf, uint32_t i, const ds4_golden_step *st) {
    tf->lp[i] = st->tok.logprob;
    tf->gap[i] = 0;
    uint32_t k = st->n_top < tf->k ? st->n_top : tf->k;
    tf->n_top[i] = k;
    for (uint32_t j = 0; j < k; j++) {
        tf->top_ids[(size_t)i * tf->k + j] = st->top[j].id;
        tf->top_lp[(size_t)i * tf->k + j] = st->top[j].logprob;
    }
}

/* Step i of tf from the logits after ids[0..i). */
static void step_from_logits(ds4_cf_tf *tf, uint32_t i, const float *logits, uint32_t V) {
    int32_t *ids = tf->top_ids + (size_t)i * tf->k;
    double *lps = tf->top_lp + (size_t)i * tf->k;
    tf->n_top[i] = ds4_sample_top_k(logits, V, tf->k, ids, lps);
    double lse = ds4_sample_logsumexp(logits, V);
    tf->lp[i] = (double)logits[tf->ids[i]] - lse;
    /* The argmax's own logprob, computed as lp[i] is: 0 when ids[i] is it. */
    int32_t best = ds4_sample_argmax(logits, V);
    tf->gap[i] = best < 0 ? 0 : ((double)logits[best] - lse) - tf->lp[i];
}

/* Steps [from, n) by evaluating the prompt and the stream. */
static int force(ds4_cf_ref *r, const int32_t *prompt, uint32_t n_prompt, ds4_cf_tf *tf,
                 uint32_t from, ds4err *err) {
    uint32_t V = r->e->m->cfg.n_vocab, total = n_prompt + tf->n;
    int32_t *seq = malloc(sizeof(int32_t) * total);
    float *logits = malloc(sizeof(float) * V * (size_t)(tf->n - from));
    int rc = seq && logits ? 0 : ds4_err_set(err, DS4_E_NOMEM, "out of memory teacher-forcing "
                                            "%u steps", tf->n - from);
    if (rc == 0) {
        memcpy(seq, prompt, sizeof(int32_t) * n_prompt);
        memcpy(seq + n_prompt, tf->ids, sizeof(int32_t) * tf->n);
        /* Step i reads the logits after seq[n_prompt + i - 1]. */
        uint32_t first = n_prompt + from - 1, rows = tf->n - from;
        ds4_session_reset(&r->s);
        rc = ds4_session_eval(&r->s, seq, first, NULL, NULL, err);
        if (rc == 0) rc = ds4_session_eval(&r->s, seq + first, rows, logits, NULL, err);
        for (uint32_t j = 0; rc == 0 && j < rows; j++)
            step_from_logits(tf, from + j, logits + (size_t)j * V, V);
    }
    free(seq);
    free(logits);
    return rc;
}

/* The cache file: a header line, then per step "id lp gap n_top (id lp)*",
 * doubles in %.17g, which reads back to the same bits. */
static int tf_save(const ds4_cf_tf *tf, const char *path, ds4err *err) {
    ds4_buf b = {0};
    ds4_buf_printf(&b, TF_MAGIC " %u %u\n", tf->n, tf->k);
    for (uint32_t i = 0; i < tf->n; i++) {
        ds4_buf_printf(&b, "%" PRId32 " %.17g %.17g %u", tf->ids[i], tf->lp[i], tf->gap[i],
                       tf->n_top[i]);
        for (uint32_t j = 0; j < tf->n_top[i]; j++)
            ds4_buf_printf(&b, " %" PRId32 " %.17g", tf->top_ids[(size_t)i * tf->k + j],
                           tf->top_lp[(size_t)i * tf->k + j]);
        ds4_buf_putc(&b, '\n');
    }
    int rc = b.failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory")
                      : ds4_file_write_atomic(path, b.p, b.len, err);
    ds4_buf_free(&b);
    return rc;
}

/* Numbers of a cache file, in order; false at the first that is not one. */
typedef struct numbers {
    const char *p;
} numbers;

static bool next_long(numbers *s, long long *v) {
    char *end;
    *v = strtoll(s->p, &end, 10);
    if (end == s->p) return false;
    s->p = end;
    return true;
}

static bool next_double(numbers *s, double *v) {
    char *end;
    *v = strtod(s->p, &end);
    if (end == s->p) return false;
    s->p = end;
    return true;
}

/* The cached steps of the stream ids[0..n), when the file holds them. */
static bool tf_load(ds4_cf_tf *tf, const char *path, const int32_t *ids, uint32_t n, uint32_t k) {
    char *buf;
    size_t len;
    ds4err ignored = {0};
    memset(tf, 0, sizeof(*tf));
    if (ds4_file_read(path, TF_MAX_FILE, &buf, &len, &ignored)) return false;
    bool ok = !strncmp(buf, TF_MAGIC " ", strlen(TF_MAGIC " "));
    numbers s = {buf + strlen(TF_MAGIC)};
    long long fn = 0, fk = 0;
    ok = ok && next_long(&s, &fn) && next_long(&s, &fk) && fn == n && fk == k &&
         tf_alloc(tf, n, k, &ignored) == 0;
    for (uint32_t i = 0; ok && i < n; i++) {
        long long id, nt;
        ok = next_long(&s, &id) && id == ids[i] && next_double(&s, &tf->lp[i]) &&
             next_double(&s, &tf->gap[i]) && next_long(&s, &nt) && nt >= 0 && nt <= k;
        tf->ids[i] = ids[i];
        tf->n_top[i] = ok ? (uint32_t)nt : 0;
        for (uint32_t j = 0; ok && j < tf->n_top[i]; j++) {
            ok = next_long(&s, &id) && id >= 0 && id <= INT32_MAX &&
                 next_double(&s, &tf->top_lp[(size_t)i * k + j]);
            tf->top_ids[(size_t)i * k + j] = (int32_t)id;
        }
    }
    free(buf);
    if (!ok && tf->ids) ds4chk_reference_tf_free(tf);
    return ok;
}

int ds4chk_reference_force(ds4_cf_ref *r, const int32_t *prompt, uint32_t n_prompt,
                     const ds4_golden *ref, const int32_t *ids, uint32_t n, ds4_cf_tf *tf,
                     ds4err *err) {
    uint32_t V = r->e->m->cfg.n_vocab;
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= V)
            return ds4_err_set(err, DS4_E_RANGE, "step %u: token %" PRId32 " is outside the "
                              "vocabulary of %u", i, ids[i], V);
    if ((uint64_t)n_prompt + n > r->ctx + 1ull)
        return ds4_err_set(err, DS4_E_RANGE, "%u prompt tokens and %u steps do not fit a context "
                          "of %u", n_prompt, n, r->ctx);
    /* Where the stream leaves the reference's own. */
    uint32_t same = 0;
    while (same < n && same < ref->n_steps && ids[same] == ref->steps[same].tok.id) same++;
    bool nomem = false;
    char *path = same < n ? entry_path(r, "tf", prompt, n_prompt, ids, n, ".txt", &nomem) : NULL;
    if (nomem) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (path && tf_load(tf, path, ids, n, r->top_k)) {
        free(path);
        return 0;
    }
    int rc = tf_alloc(tf, n, r->top_k, err);
    if (rc == 0) {
        memcpy(tf->ids, ids, sizeof(int32_t) * n);
        for (uint32_t i = 0; i < same; i++) step_from_golden(tf, i, &ref->steps[i]);
        if (same < n) rc = force(r, prompt, n_prompt, tf, same, err);
        if (rc == 0 && path) rc = tf_save(tf, path, err);
        if (rc) ds4chk_reference_tf_free(tf);
    }
    free(path);
    return rc;
}
