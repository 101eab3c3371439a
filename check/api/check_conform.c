/* ds4ref-conform in the public API (ds4ref.h) over check/conform/. */
#include "ds4check.h"

#include <math.h>
#include <string.h>

#include "ref/api/apierr.h"
#include "ref/api/apimodel.h"
#include "base/file.h"
#include "check/conform/conform.h"
#include "check/conform/client.h"
#include "check/conform/template.h"

void ds4check_conform_options_init(ds4check_conform_options *o) {
    memset(o, 0, sizeof(*o));
    o->n_tokens = 32;
    o->top_k = 20;
    o->qat = 1;
    o->numerics = "auto";
    o->seed = 1;
    o->max_gap = -1;
    o->tie_eps = -1;
    o->max_dlogprob = -1;
    o->min_top5_overlap = NAN;
    o->min_top20_overlap = NAN;
}

int ds4check_conform_preset(uint32_t i, const char **name, const char **tmpl, const char **about) {
    return ds4chk_template_preset_at(i, name, tmpl, about);
}

int ds4check_conform_placeholder(uint32_t i, const char **name, const char **about) {
    return ds4chk_template_var_at(i, name, about);
}

int ds4check_conform_dialect(uint32_t i, const char **name, const char **about) {
    const ds4_cf_dialect_info *d = ds4chk_client_dialect(i);
    if (!d) return 0;
    *name = d->name;
    *about = d->about;
    return 1;
}

int ds4check_conform_server_preset(uint32_t i, const char **name, const char **tmpl,
                                   const char **about) {
    return ds4chk_template_server_preset_at(i, name, tmpl, about);
}

enum { NUMERICS_KEY = 128 };

/* The internal options of o, over the corpus and matrix made from it
 * (numerics_key: NUMERICS_KEY bytes that live as long as in). */
static int to_internal(const ds4check_conform_options *o, ds4_cf_corpus *corpus, ds4_cf_opts *in,
                       char *numerics_key, ds4err *e) {
    memset(in, 0, sizeof(*in));
    const char *preset = o->backend ? ds4chk_template_preset(o->backend) : NULL;
    const char *server_preset = o->server_cmd ? ds4chk_template_server_preset(o->server_cmd) : NULL;
    if (!o->backend && !o->server_url && !o->server_cmd)
        return ds4_err_set(e, DS4_E_ARG, "no backend: give a preset, a template or a server");
    if ((o->backend != NULL) + (o->server_url != NULL) + (o->server_cmd != NULL) > 1)
        return ds4_err_set(e, DS4_E_ARG, "one backend: a command, a server URL or a server command");
    in->backend = preset ? preset : o->backend;
    in->backend_name = preset ? o->backend : o->backend ? "(template)" : o->server_url ? o->server_url
                       : server_preset ? o->server_cmd : "(server command)";
    in->server_url = o->server_url;
    in->server_cmd = server_preset ? server_preset : o->server_cmd;
    const char *dialect = o->server_dialect ? o->server_dialect
                          : server_preset ? ds4chk_template_server_dialect(o->server_cmd) : "ids";
    const int d = ds4chk_client_dialect_find(dialect);
    if (d < 0) {
        ds4_buf names = {0};
        for (uint32_t i = 0; ds4chk_client_dialect(i); i++)
            ds4_buf_printf(&names, "%s%s", i ? ", " : "", ds4chk_client_dialect(i)->name);
        ds4_err_set(e, DS4_E_ARG, "the server dialect is one of %s, not '%s'",
                    names.p ? names.p : "", dialect);
        ds4_buf_free(&names);
        return -1;
    }
    in->server_dialect = d;
    /* The preset's prompt form goes with its dialect: a dialect given
     * instead takes ids unless told. */
    const char *prompt = o->server_prompt                       ? o->server_prompt
                         : server_preset && !o->server_dialect ? ds4chk_template_server_prompt(o->server_cmd)
                                                                : "ids";
    if (strcmp(prompt, "ids") && strcmp(prompt, "text"))
        return ds4_err_set(e, DS4_E_ARG, "the server prompt form is ids or text, not '%s'", prompt);
    if (o->server_prompt && !ds4chk_client_dialect((uint32_t)d)->openai)
        return ds4_err_set(e, DS4_E_ARG, "--server-prompt is for the OpenAI dialects (ids, text, "
                           "lossy-text); '%s' has its own (ds4's is always the chat's text)",
                           dialect);
    in->server_text_prompt = !strcmp(prompt, "text");
    in->model_path = o->model_path;
    in->mtp_path = o->mtp_path;
    in->ds4ref_path = o->ds4ref_path ? o->ds4ref_path : "ds4ref";
    ds4chk_matrix_default(&in->matrix);
    if (o->matrix && ds4chk_matrix_parse(&in->matrix, o->matrix, e)) return -1;
    if (o->prompts_dir ? ds4chk_corpus_dir(corpus, o->prompts_dir, e)
                       : ds4chk_corpus_builtin(corpus, e))
        return -1;
    in->corpus = corpus;
    in->n_tokens = o->n_tokens;
    in->top_k = o->top_k ? o->top_k : 20;
    in->ctx = o->ctx;
    in->temp = o->temperature;
    in->seed = o->seed;
    in->limits = (ds4_cf_limits){.exact = o->exact != 0, .max_gap = o->max_gap,
                                 .tie_eps = o->tie_eps, .max_dlogprob = o->max_dlogprob,
                                 .min_top5 = o->min_top5_overlap,
                                 .min_top20 = o->min_top20_overlap};
    /* Exact mode compares with ds4ref's own numbers: nothing to choose. */
    in->automatic = o->numerics && !strcmp(o->numerics, "auto");
    in->calibrate = in->automatic && !o->exact;
    in->cache_dir = o->cache_dir;
    in->work_dir = o->work_dir;
    in->timeout = o->timeout;
    in->jobs = o->jobs;
    in->stop = o->stop;
    in->progress = o->progress;
    in->progress_ud = o->progress_ud;
    if (o->shards && (o->shard >= o->shards || o->n_merge))
        return ds4_err_set(e, DS4_E_ARG, o->n_merge ? "--shard and --merge: one or the other"
                                                    : "--shard K/N: K must be below N");
    if (o->shards && !o->json_path)
        return ds4_err_set(e, DS4_E_ARG, "--shard K/N writes its shard file to --json FILE: "
                           "give one");
    in->shard = o->shard;
    in->shards = o->shards;
    in->shard_path = o->json_path;
    in->merge = o->merge;
    in->n_merge = o->n_merge;
    /* The reference's numerics as asked for: a merge must ask the same. */
    snprintf(numerics_key, NUMERICS_KEY, "%s qat %d", o->numerics ? o->numerics : "official",
             o->qat);
    in->numerics_key = numerics_key;
    return 0;
}

/* A shard's report: which cells ran, and where they went. */
static void shard_report(const ds4_cf_result *r, const ds4check_conform_options *o, FILE *f) {
    if (f)
        fprintf(f, "shard %u/%u: cells %u to %u of %u: %u ran, %u failed to run, %u n/a; written "
                "to %s (no verdict: merge every shard with --merge)\n", o->shard, o->shards,
                r->shard_lo, r->shard_hi ? r->shard_hi - 1 : 0, r->n_cells, r->shard_ran,
                r->shard_errors, r->shard_na, o->json_path);
}

static void to_public(const ds4_cf_result *r, ds4check_conform_result *out) {
    if (!out) return;
    *out = (ds4check_conform_result){r->n_cells, r->count[DS4_CF_PASS], r->count[DS4_CF_FAIL],
                                   r->count[DS4_CF_ERROR], r->count[DS4_CF_TIE],
                                   r->count[DS4_CF_NOT_EXERCISED], r->count[DS4_CF_NA], r->n_ran,
                                   r->unexplained, r->ties.pattern, r->interrupted};
}

int ds4check_conform_run(const ds4check_conform_options *o, FILE *report,
                       ds4check_conform_result *res, ds4ref_error *err) {
    ds4err e = {0};
    ds4_cf_corpus corpus = {0};
    ds4_cf_opts in;
    ds4_afile json = {0};
    ds4ref_model *m = NULL;
    ds4_cf_result r = {0};
    if (res) memset(res, 0, sizeof(*res));
    if (!o || !o->model_path) return api_fail_msg(err, DS4REF_E_ARG, "ds4check_conform_run: no model");
    char numerics_key[NUMERICS_KEY];
    int rc = to_internal(o, &corpus, &in, numerics_key, &e);
    /* A shard writes its own file when its cells have run. */
    if (rc == 0 && o->json_path && !o->shards) rc = ds4_file_atomic_open(&json, o->json_path, &e);
    if (rc == 0) {
        ds4ref_model_options mo;
        ds4ref_model_options_init(&mo);
        mo.path = o->model_path;
        /* Calibrating starts from the official numerics without the FP8/FP4
         * simulation, which every model can run, and chooses. */
        mo.qat = in.calibrate ? 0 : o->qat;
        mo.numerics = in.automatic ? NULL : o->numerics;
        ds4ref_error me;
        if (ds4ref_model_open(&mo, &m, &me)) rc = ds4_err_set(&e, me.code, "%s", me.message);
    }
    const ds4_tokenizer *tok = NULL;
    if (rc == 0) rc = ds4_model_tokenizer(&m->m, &tok, &e);
    if (rc == 0) rc = ds4chk_conform_run(&m->e, &m->m, tok, &in, &r, &e);
    if (rc == 0 && r.shard_only) shard_report(&r, o, report);
    else if (rc == 0) rc = ds4chk_report_write(&r, &in, report, &json, &e);
    if (rc == 0) to_public(&r, res);
    ds4_file_atomic_abort(&json);
    ds4chk_conform_result_free(&r);
    ds4chk_corpus_free(&corpus);
    ds4ref_model_close(m);
    if (rc) return api_fail(err, &e);
    api_ok(err);
    return 0;
}
