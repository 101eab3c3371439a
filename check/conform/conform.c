/* The ds4ref-conform driver (conform.h). */
#include "check/conform/conform.h"

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/file.h"
#include "base/utf8.h"
#include "check/conform/backend.h"
#include "check/conform/http.h"
#include "check/conform/client.h"
#include "check/conform/shard.h"
#include "check/conform/template.h"
#include "quant/gguf_twin.h"
#include "ref/decode/generate.h"
#include "ref/text/chat.h"
#include "check/diff/diff.h"
#include "ref/format/trace.h"

#define LOG_LIMIT ((size_t)64 << 20)

void ds4chk_conform_result_free(ds4_cf_result *r) {
    for (uint32_t i = 0; r->prompts && i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        ds4_buf_free(&r->prompts[i].rendered);
        ds4_golden_free(&r->prompts[i].ref);
        ds4_golden_free(&r->prompts[i].base_out);
    }
    for (uint32_t i = 0; r->forced && i < r->n_forced; i++) ds4chk_reference_tf_free(&r->forced[i].tf);
    for (uint32_t i = 0; r->cells && i < r->n_cells; i++)
        for (uint32_t j = 0; j < r->cells[i].batch; j++) {
            ds4chk_verdict_findings_free(&r->cells[i].rows[j].all);
            free(r->cells[i].rows[j].margin);
        }
    free(r->prompts);
    free(r->cells);
    free(r->forced);
    ds4chk_identity_free(&r->identity);
    memset(r, 0, sizeof(*r));
}

/* ---- prompts ---- */

/* Each corpus text as ds4's tests render a prompt (no system prompt,
 * thinking off), its rendered bytes, and its reference golden. */
static int prepare_prompts(ds4_cf_ref *ref, const ds4_tokenizer *tok, const ds4_cf_opts *o,
                           ds4_cf_result *res, ds4err *err) {
    const ds4_cf_corpus *c = o->corpus;
    res->prompts = calloc(c->n, sizeof(ds4_cf_prompt));
    if (!res->prompts) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    res->n_prompts = c->n;
    ds4_chat_opts co = {.thinking = false};
    for (uint32_t i = 0; i < c->n; i++) {
        ds4_cf_prompt *p = &res->prompts[i];
        ds4_tokens t = {0};
        p->name = c->p[i].name;
        ds4_golden_init(&p->ref, DS4_TRACE_GOLDEN);
        ds4_golden_init(&p->base_out, DS4_TRACE_DUMP);
        p->base_cell = -1;
        if (ds4_chat_prompt_ids(tok, NULL, 0, (const char *)c->p[i].bytes, c->p[i].len, &co, &t,
                                err)) {
            ds4_tokens_free(&t);
            return -1;
        }
        p->ids = t.ids;
        p->n = (uint32_t)t.n;
        if (ds4_tok_decode(tok, p->ids, p->n, &p->rendered, err)) return -1;
        if (p->rendered.failed) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        ds4_buf bos = {0};
        if (p->n && p->ids[0] == ds4_tok_special(tok, DS4_SPECIAL_BOS) &&
            ds4_tok_decode(tok, p->ids, 1, &bos, err)) {
            ds4_buf_free(&bos);
            return -1;
        }
        p->bos_len = bos.len;
        ds4_buf_free(&bos);
        if ((uint64_t)p->n + o->n_tokens - 1 > res->ctx)
            return ds4_err_set(err, DS4_E_RANGE, "prompt %s: %u tokens and %u steps do not fit a "
                              "context of %u: give --ctx %u or more", p->name, p->n, o->n_tokens,
                              res->ctx, p->n + o->n_tokens - 1);
        char what[160];
        snprintf(what, sizeof(what), "reference for %s (%u tokens)", p->name, p->n);
        if (o->progress) o->progress(o->progress_ud, i, c->n, what);
        if (ds4chk_reference_golden(ref, p->ids, p->n, &p->ref, &p->cached, err)) return -1;
    }
    return 0;
}

/* ---- cells ---- */

/* Why this template cannot run cell c (NULL: it can).  Without a
 * placeholder a dimension keeps one value: depth 0, the whole prompt (or
 * the last chunk listed), one row. */
static const char *cell_na(const ds4_cf_opts *o, uint32_t uses, const ds4_cf_cell *c) {
    if (c->conf && !(uses & 1u << DS4_CF_CONF)) return "the backend template has no {conf}";
    if (c->conf && !c->draft) return "a confidence threshold without drafts";
    if (c->draft && !(uses & 1u << DS4_CF_DRAFT)) return "the backend template has no {draft}";
    /* A template that drafts with {mtp} drops its drafting without one. */
    if (c->draft && !o->mtp_path && (!o->own_drafter || uses & 1u << DS4_CF_MTP))
        return o->own_drafter ? "no MTP model (--mtp): the model's own DSpark drafter is for a "
                                "template without {mtp}"
                              : "no MTP model (--mtp), and the model has no DSpark drafter";
    const ds4_cf_dim *ch = &o->matrix.chunk;
    bool has_whole = false;
    for (uint32_t i = 0; i < ch->n; i++) has_whole |= ch->v[i] == DS4_CF_WHOLE;
    uint32_t keep = has_whole ? DS4_CF_WHOLE : ch->v[ch->n - 1];
    if (c->chunk_spec != keep && !(uses & (1u << DS4_CF_CHUNK | 1u << DS4_CF_CHUNK_TOTAL)))
        return "the backend template has no {chunk}";
    if (c->batch > 1 && !(uses & (1u << DS4_CF_BATCH | 1u << DS4_CF_BATCH_TOKENS)))
        return "the backend template has no {batch} or {batch_tokens}";
    if (c->cache == DS4_CF_WARM && !o->server_url && !o->server_cmd)
        return "a warm prefix cache is a server's (--server, --server-cmd)";
    return NULL;
}

/* A dimension the backend cannot set and the user did not name keeps the
 * one value the backend runs, so that the default matrix holds no n/a cell
 * nobody asked for (a server's 324 of them); values named in --matrix that
 * it cannot run stay, and are n/a.  A server's default is its batch
 * dimension alone: a running one keeps its own depth and chunk, and one
 * started for each cell would otherwise be started for 48 or 84 of them. */
static void fit_matrix(ds4_cf_matrix *m, const ds4_cf_opts *o, uint32_t uses) {
    const bool server = o->server_url || o->server_cmd;
    const bool drafts = o->mtp_path || (o->own_drafter && !(uses & 1u << DS4_CF_MTP));
    if (!m->draft.given && (server || !(uses & 1u << DS4_CF_DRAFT) || !drafts))
        m->draft = (ds4_cf_dim){.v = {0}, .n = 1};
    if (!m->chunk.given && (server || !(uses & (1u << DS4_CF_CHUNK | 1u << DS4_CF_CHUNK_TOTAL))))
        m->chunk = (ds4_cf_dim){.v = {DS4_CF_WHOLE}, .n = 1};
    if (!m->batch.given && !(uses & (1u << DS4_CF_BATCH | 1u << DS4_CF_BATCH_TOKENS)))
        m->batch = (ds4_cf_dim){.v = {1}, .n = 1};
}

static int make_cells(const ds4_cf_opts *o, ds4_cf_result *res, ds4err *err) {
    const ds4_cf_matrix *m = &o->matrix;
    uint64_t n = (uint64_t)m->draft.n * m->chunk.n * m->batch.n * m->cache.n * m->conf.n *
                 res->n_prompts;
    if (!n) return ds4_err_set(err, DS4_E_ARG, "the matrix has no cell");
    res->cells = calloc(n, sizeof(ds4_cf_cell));
    if (!res->cells) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    for (uint32_t d = 0; d < m->draft.n; d++)
        for (uint32_t c = 0; c < m->chunk.n; c++)
            for (uint32_t b = 0; b < m->batch.n; b++)
                for (uint32_t k = 0; k < m->cache.n; k++)
                for (uint32_t t = 0; t < m->conf.n; t++)
                for (uint32_t p = 0; p < res->n_prompts; p++) {
                    ds4_cf_cell *cell = &res->cells[res->n_cells++];
                    cell->cache = m->cache.v[k];
                    cell->conf = m->conf.v[t];
                    cell->draft = m->draft.v[d];
                    cell->chunk_spec = m->chunk.v[c];
                    cell->batch = m->batch.v[b];
                    cell->prompt = p;
                    cell->row = -1;
                    cell->exit_status = -1;
                    ds4chk_verdict_finding_pass(&cell->f);
                    uint32_t longest = 1;
                    for (uint32_t r = 0; r < cell->batch; r++) {
                        cell->rows[r].prompt = (p + r) % res->n_prompts;
                        cell->rows[r].tf = -1;
                        cell->rows[r].cut = -1;
                        ds4chk_verdict_finding_pass(&cell->rows[r].f);
                        uint32_t np = res->prompts[cell->rows[r].prompt].n;
                        if (np > longest) longest = np;
                    }
                    cell->chunk = cell->chunk_spec == DS4_CF_WHOLE ? longest : cell->chunk_spec;
                }
    return 0;
}

void ds4chk_conform_cell_name(const ds4_cf_result *r, const ds4_cf_cell *c, bool with_prompt, char *out,
                      size_t cap) {
    char ch[16];
    char conf[24] = "";
    if (c->conf) snprintf(conf, sizeof(conf), " conf=%u", c->conf);
    snprintf(out, cap, "draft=%u chunk=%s batch=%u%s%s%s%s", c->draft,
             ds4chk_matrix_chunk_name(c->chunk_spec, ch, sizeof(ch)), c->batch,
             c->cache == DS4_CF_WARM ? " cache=warm" : "", conf, with_prompt ? " " : "",
             with_prompt ? r->prompts[c->prompt].name : "");
}

/* ---- the work folder ---- */

static int write_small(const char *path, const void *data, size_t n, ds4err *err) {
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(data, 1, n, f) == n;
    if (f && fclose(f)) ok = false;
    return ok ? 0 : ds4_err_set(err, DS4_E_IO, "%s: cannot write: %s", path, strerror(errno));
}

/* "DIR/NAME" or "DIR/NAME.ROW" (row >= 0) into a ds4_buf. */
static char *path_in(const char *dir, const char *name, int row) {
    ds4_buf b = {0};
    if (row >= 0) ds4_buf_printf(&b, "%s/%s.%d", dir, name, row);
    else ds4_buf_printf(&b, "%s/%s", dir, name);
    if (b.failed) {
        ds4_buf_free(&b);
        return NULL;
    }
    return b.p;
}

/* ids[0..n), each followed by sep. */
static void put_ids(ds4_buf *b, const int32_t *ids, uint32_t n, char sep) {
    for (uint32_t i = 0; i < n; i++) ds4_buf_printf(b, "%" PRId32 "%c", ids[i], sep);
}

/* b into DIR/NAME (row < 0) or DIR/NAME.ROW. */
static int write_buf(const char *dir, const char *name, int row, const ds4_buf *b, ds4err *err) {
    char *path = path_in(dir, name, row);
    int rc = !path || b->failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory")
                                : write_small(path, b->p ? b->p : "", b->len, err);
    free(path);
    return rc;
}

/* A row's tokens and prompt files, under .ROW (row >= 0) or not. */
static int write_row(const ds4_cf_prompt *p, const char *dir, int row, ds4err *err) {
    ds4_buf ids = {0};
    put_ids(&ids, p->ids, p->n, '\n');
    int rc = write_buf(dir, "tokens", row, &ids, err);
    if (rc == 0) rc = write_buf(dir, "prompt", row, &p->rendered, err);
    ds4_buf_free(&ids);
    return rc;
}

/* The cell's inputs: row 0's files without a suffix, every row's with one
 * when there are several, and the batch_tokens file (a row per line). */
static int write_inputs(const ds4_cf_result *res, const ds4_cf_cell *c, const char *dir,
                        ds4err *err) {
    int rc = write_row(&res->prompts[c->rows[0].prompt], dir, -1, err);
    for (uint32_t r = 0; rc == 0 && c->batch > 1 && r < c->batch; r++)
        rc = write_row(&res->prompts[c->rows[r].prompt], dir, (int)r, err);
    ds4_buf batch = {0};
    for (uint32_t r = 0; r < c->batch; r++) {
        const ds4_cf_prompt *p = &res->prompts[c->rows[r].prompt];
        put_ids(&batch, p->ids, p->n - 1, ' ');
        ds4_buf_printf(&batch, "%" PRId32 "\n", p->ids[p->n - 1]);
    }
    if (rc == 0) rc = write_buf(dir, "batch_tokens", -1, &batch, err);
    ds4_buf_free(&batch);
    return rc;
}

/* ---- running a cell ---- */

/* The teacher-forced record of a row's stream: one already made for the
 * same prompt and tokens, or a new one.  -1 on error. */
static int32_t tf_of(ds4_cf_ref *ref, ds4_cf_result *res, uint32_t prompt, const ds4_golden *out,
                     ds4err *err) {
    uint32_t n = out->n_steps;
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!ids) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) ids[i] = out->steps[i].tok.id;
    for (uint32_t t = 0; t < res->n_forced; t++) {
        const ds4_cf_forced *f = &res->forced[t];
        if (f->prompt == prompt && f->tf.n == n && !memcmp(f->tf.ids, ids, sizeof(int32_t) * n)) {
            free(ids);
            return (int32_t)t;
        }
    }
    ds4_cf_forced *grown = realloc(res->forced, sizeof(*grown) * (res->n_forced + 1));
    int32_t at = -1;
    if (!grown) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    } else {
        res->forced = grown;
        ds4_cf_forced *f = &grown[res->n_forced];
        const ds4_cf_prompt *p = &res->prompts[prompt];
        f->prompt = prompt;
        if (ds4chk_reference_force(ref, p->ids, p->n, &p->ref, ids, n, &f->tf, err) == 0)
            at = (int32_t)res->n_forced++;
    }
    free(ids);
    return at;
}

/* An output that names its model (a ds4ref golden, a dump's model_sha256)
 * must name the reference's: a backend run on another file is a wrong
 * setup, not a failing cell (identity.h).  count: add it to the run's
 * tally (once per output). */
static int same_model(ds4_golden *out, const ds4_cf_prompt *p, const ds4_cf_opts *o,
                      const char *path, bool count, ds4err *err) {
    ds4_cf_identity *id = o->identity;
    if (out->model_sha256[0]) {
        if (ds4chk_identity_check_sha256(id, out->model_sha256, path, err)) return -1;
        id->by_sha256 += count;
        return 0;
    }
    if (!out->has_header || !p->ref.has_header) {
        /* A server's outputs are the harness's: the server's own answer
         * to /v1/models is its identity. */
        id->unnamed += count && !o->server_url && !o->server_cmd;
        return 0;
    }
    id->by_header += count;
    if (ds4_modelid_same(&out->h.model, &p->ref.h.model)) return 0;
    /* The twin holds the model's own values: it stands for the model, so an
     * exact comparison compares the numbers. */
    if (o->model_f32_id && ds4_modelid_same(&out->h.model, o->model_f32_id)) {
        ds4_modelid_free(&out->h.model);
        return ds4_modelid_copy(&out->h.model, &p->ref.h.model, err);
    }
    char d[DS4_ERR_MSG];
    ds4_modelid_describe_diff(&p->ref.h.model, &out->h.model, d, sizeof(d));
    return ds4_err_set(err, DS4_E_ARG, "%s: the backend ran another model (%s, the reference %s): "
                      "%.200s; check the template's {model}", path, out->h.model.file,
                      p->ref.h.model.file, d);
}

/* A dump's tokens given by id alone (a server's): their bytes from the
 * tokenizer, so that the checks compare them as the reference's. */
static int fill_bytes(ds4_golden *g, const ds4_tokenizer *tok, ds4err *err) {
    for (uint32_t i = 0; i < g->n_steps; i++)
        for (int32_t k = -1; k < (int32_t)g->steps[i].n_top; k++) {
            ds4_golden_tok *t = k < 0 ? &g->steps[i].tok : &g->steps[i].top[k];
            if (t->n_bytes) continue;
            ds4_buf b = {0};
            if (ds4_tok_decode(tok, &t->id, 1, &b, err)) return -1;
            free(t->bytes);
            t->bytes = malloc(b.len ? b.len : 1);
            if (!t->bytes) {
                ds4_buf_free(&b);
                return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
            }
            memcpy(t->bytes, b.p, b.len);
            t->n_bytes = (uint32_t)b.len;
            ds4_buf_free(&b);
        }
    return 0;
}

/* Row r of cell c, whose output is out, against its prompt's base row, in
 * the backend's own logprobs: the spread (conform.h).  Errors: out of
 * memory. */
static int spread_add(ds4_cf_result *res, const ds4_cf_cell *c, uint32_t r, const ds4_golden *out,
                      ds4err *err) {
    const ds4_cf_prompt *p = &res->prompts[c->rows[r].prompt];
    const int32_t ci = (int32_t)(c - res->cells);
    if (!res->greedy || p->base_cell < 0 || (ci == p->base_cell && r == 0)) return 0;
    ds4_diff_opts d = {.all_steps = false};
    ds4_diff_report rep;
    if (ds4chk_diff_compute(&p->base_out, out, &d, &rep, err)) return -1;
    ds4_cf_spread *s = &res->spread;
    s->rows++;
    if (!isnan(rep.max_dlp) && !(rep.max_dlp <= s->dlogprob)) {
        s->dlogprob = rep.max_dlp;
        s->cell = ci;
        s->row = (int32_t)r;
    }
    ds4chk_diff_report_free(&rep);
    return 0;
}

/* Row r of a cell whose backend ran: its output read and checked.  Errors
 * returned are the run's (another model); the row's own are its findings. */
static int check_output(ds4_cf_ref *ref, ds4_cf_result *res, const ds4_cf_opts *o,
                        const ds4_tokenizer *tok, ds4_cf_cell *c, uint32_t r, const char *dir,
                        ds4err *err) {
    int rc = 0;
    ds4_cf_row *row = &c->rows[r];
    const ds4_cf_prompt *p = &res->prompts[row->prompt];
    const uint32_t want = row->cut >= 0 && (uint32_t)row->cut < o->n_tokens ? (uint32_t)row->cut
                                                                            : o->n_tokens;
    char *path = path_in(dir, "out", c->batch > 1 ? (int)r : -1);
    ds4_golden out;
    ds4err e = {0};
    ds4_golden_init(&out, DS4_TRACE_DUMP);
    if (!path) {
        snprintf(row->f.detail, sizeof(row->f.detail), "out of memory");
        row->f.status = DS4_CF_ERROR;
        ds4chk_verdict_findings_push(&row->all, &row->f);
    } else if (ds4_trace_load(path, NULL, &out, &e)) {
        row->f.status = DS4_CF_ERROR;
        snprintf(row->f.detail, sizeof(row->f.detail), "no usable output: %.300s", e.msg);
        ds4chk_verdict_findings_push(&row->all, &row->f);
    } else if (!out.has_header && fill_bytes(&out, tok, &e)) {
        row->f.status = DS4_CF_ERROR;
        snprintf(row->f.detail, sizeof(row->f.detail), "its token ids: %.300s", e.msg);
        ds4chk_verdict_findings_push(&row->all, &row->f);
    } else if ((rc = same_model(&out, p, o, path, true, err))) {
        row->f.status = DS4_CF_ERROR;
        snprintf(row->f.detail, sizeof(row->f.detail), "%.390s", err->msg);
    } else if (!ds4chk_verdict_usable(&out, p->ids, p->n, want, ref->e->m->cfg.n_vocab, &row->f)) {
        ds4chk_verdict_findings_push(&row->all, &row->f);
    } else {
        row->tf = tf_of(ref, res, row->prompt, &out, &e);
        if (row->tf < 0) {
            row->f.status = DS4_CF_ERROR;
            snprintf(row->f.detail, sizeof(row->f.detail), "teacher forcing: %.300s", e.msg);
            ds4chk_verdict_findings_push(&row->all, &row->f);
        } else {
            int32_t eos = ds4_tok_special(tok, DS4_SPECIAL_EOS);
            row->margin = ds4chk_verdict_margins(&out);
            ds4chk_verdict_row(&p->ref, &out, &res->forced[row->tf].tf, want, eos,
                               &o->limits, tok, &row->all, &row->f);
            rc = spread_add(res, c, r, &out, err);
        }
    }
    ds4_golden_free(&out);
    free(path);
    return rc;
}

/* The worst row decides the cell. */
static void cell_from_rows(ds4_cf_cell *c) {
    for (uint32_t r = 0; r < c->batch; r++)
        if (c->rows[r].f.status > c->status) {
            c->status = c->rows[r].f.status;
            c->f = c->rows[r].f;
            c->row = (int32_t)r;
        }
}

/* The cell failed to run: why, and the end of the backend's log. */
static void cell_error(ds4_cf_cell *c, const char *why, const char *last) {
    c->status = DS4_CF_ERROR;
    c->f.status = DS4_CF_ERROR;
    int n = snprintf(c->f.detail, sizeof(c->f.detail), "%s; its log ends: ", why);
    if (n > 0 && (size_t)n < sizeof(c->f.detail))
        snprintf(c->f.detail + n, sizeof(c->f.detail) - (size_t)n, "%.*s",
                 (int)(sizeof(c->f.detail) - (size_t)n - 1), last);
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Is the engine at url on this machine (a loopback address), so that the
 * paths it names are this machine's? */
static bool loopback(const char *url) {
    static const char *const local[] = {"http://127.", "http://localhost:", "http://localhost/",
                                        "http://[::1]"};
    for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
        if (!strncmp(url, local[i], strlen(local[i]))) return true;
    return !strcmp(url, "http://localhost");
}

static int server_alive(void *ud) {
    return ds4chk_backend_alive(*(pid_t *)ud);
}

/* The reference's stream g as ids, and each step's alternatives, k a step
 * (-1 past the last): what a server's ambiguous token names are weighed
 * against (client.h). */
static int reference_ids(const ds4_golden *g, uint32_t k, int32_t **ids, int32_t **top,
                         ds4err *why) {
    const size_t n = g->n_steps ? g->n_steps : 1;
    *ids = malloc(sizeof(int32_t) * n);
    *top = malloc(sizeof(int32_t) * n * k);
    if (!*ids || !*top) return ds4_err_set(why, DS4_E_NOMEM, "out of memory");
    for (uint32_t i = 0; i < g->n_steps; i++) {
        (*ids)[i] = g->steps[i].tok.id;
        for (uint32_t j = 0; j < k; j++)
            (*top)[(size_t)i * k + j] = j < g->steps[i].n_top ? g->steps[i].top[j].id : -1;
    }
    return 0;
}

/* Cell c on an engine behind HTTP: started for it from o->server_cmd (and
 * stopped after), or the one at o->server_url; its model checked
 * (identity.h), then its rows sent together.  Returns 0; -1 with why, the
 * cell's error; or -2 with err, the run's (the engine serves another
 * model). */
static int server_cell(const ds4_cf_result *res, const ds4_cf_opts *o, ds4_cf_vars *v,
                       ds4_cf_cell *c, const char *out, const char *log, ds4err *why,
                       ds4err *err) {
    char url[96];
    pid_t pid = 0;
    ds4_buf cmd = {0};
    int rc = 0;
    const ds4_cf_dialect_info *dialect = ds4chk_client_dialect((uint32_t)o->server_dialect);
    if (o->server_cmd) {
        v->port = ds4chk_http_free_port();
        snprintf(url, sizeof(url), "http://127.0.0.1:%u", v->port);
        rc = v->port ? ds4chk_template_expand(o->server_cmd, v, &cmd, why)
                     : ds4_err_set(why, DS4_E_IO, "no free port for the server");
        if (rc == 0) rc = ds4chk_backend_start(cmd.p, log, &pid, why);
        if (rc == 0)
            rc = ds4chk_client_wait_ready(url, o->timeout > 0 ? 10 * o->timeout : 600,
                                          server_alive, &pid, why);
    } else {
        snprintf(url, sizeof(url), "%.95s", o->server_url);
    }
    bool wrong_model = rc == 0 && ds4chk_identity_check_server(o->identity, url,
                                                               o->server_cmd || loopback(url), err);
    if (wrong_model) rc = -1;
    const int32_t *ids[DS4_CF_MAX_BATCH];
    uint32_t n[DS4_CF_MAX_BATCH];
    const char *text[DS4_CF_MAX_BATCH];
    size_t text_len[DS4_CF_MAX_BATCH];
    int32_t *ref_ids[DS4_CF_MAX_BATCH] = {0}, *ref_top[DS4_CF_MAX_BATCH] = {0};
    uint32_t ref_n[DS4_CF_MAX_BATCH] = {0};
    int32_t cut[DS4_CF_MAX_BATCH];
    for (uint32_t r = 0; r < c->batch; r++) {
        const ds4_cf_prompt *p = &res->prompts[c->rows[r].prompt];
        ids[r] = p->ids;
        n[r] = p->n;
        if (rc == 0) rc = reference_ids(&p->ref, o->top_k, &ref_ids[r], &ref_top[r], why);
        ref_n[r] = p->ref.n_steps;
        const bool chat = dialect->chat_text;
        const ds4_cf_text *raw = &o->corpus->p[c->rows[r].prompt];
        text[r] = chat ? (const char *)raw->bytes : p->rendered.p + p->bos_len;
        text_len[r] = chat ? raw->len : p->rendered.len - p->bos_len;
        if (rc == 0 && (chat || o->server_text_prompt) &&
            !ds4_utf8_valid((const unsigned char *)text[r], text_len[r]))
            rc = ds4_err_set(why, DS4_E_ARG, "prompt %s is not UTF-8 text, which a text prompt "
                             "must be: use --server-prompt ids", p->name);
    }
    const bool as_text = o->server_text_prompt || dialect->chat_text;
    ds4_cf_server_cell sc = {
        .url = url, .ids = ids, .n = n, .text = as_text ? text : NULL, .text_len = text_len,
        .ref_ids = (const int32_t *const *)ref_ids, .ref_n = ref_n,
        .ref_top = (const int32_t *const *)ref_top, .ref_k = o->top_k, .cut = cut,
        .rows = c->batch, .n_tokens = o->n_tokens, .top_k = o->top_k, .ctx = res->ctx,
        .temp = o->temp, .seed = o->seed, .out = out, .log = log,
        .timeout = o->timeout > 0 ? 10 * o->timeout : 0, .warm = c->cache == DS4_CF_WARM,
        .dialect = o->server_dialect, .vocab = o->vocab, .tok = o->tok};
    if (rc == 0) rc = ds4chk_client_cell(&sc, why);
    for (uint32_t r = 0; r < c->batch; r++) {
        free(ref_ids[r]);
        free(ref_top[r]);
        if (rc == 0) c->rows[r].cut = cut[r];
    }
    if (pid > 0) ds4chk_backend_stop(pid, 10);
    ds4_buf_free(&cmd);
    return wrong_model ? -2 : rc;
}

/* Run cell c's command: its folder and inputs, the command, its log (the
 * accept counts, and why it failed when it did).  No model is used here, so
 * several cells may launch at once (--jobs).  Errors returned are the
 * run's own (the work folder, a stop request); the backend's failures are
 * the cell's. */
static int launch_cell(const ds4_cf_result *res, const ds4_cf_opts *o, ds4_cf_cell *c,
                       uint32_t index, const char *work, ds4err *err) {
    ds4_buf dir = {0};
    ds4chk_shard_cell_dir(res, c, index, work, &dir);
    char *tokens = path_in(dir.p, "tokens", -1), *prompt = path_in(dir.p, "prompt", -1),
         *batch = path_in(dir.p, "batch_tokens", -1), *out = path_in(dir.p, "out", -1),
         *log = path_in(dir.p, "log", -1);
    int rc = dir.failed || !tokens || !prompt || !batch || !out || !log
                 ? ds4_err_set(err, DS4_E_NOMEM, "out of memory") : 0;
    if (rc == 0 && mkdir(dir.p, 0755) && errno != EEXIST)
        rc = ds4_err_set(err, DS4_E_IO, "%s: %s", dir.p, strerror(errno));
    if (rc == 0) rc = write_inputs(res, c, dir.p, err);
    ds4_buf cmd = {0};
    ds4_cf_vars v = {0};
    if (rc == 0) {
        v = (ds4_cf_vars){.model = o->model_path, .mtp = c->draft ? o->mtp_path : NULL,
                         .tokens_file = tokens, .prompt_file = prompt, .batch_tokens = batch,
                         .out = out, .ds4ref = o->ds4ref_path, .n = o->n_tokens,
                         .model_f32 = o->model_f32, .mtp_f32 = c->draft ? o->mtp_f32 : NULL,
                         .model_sha256 = o->model_sha256,
                         .draft = c->draft, .chunk = c->chunk, .batch = c->batch,
                         .conf = c->conf / 100.0,
                         .ctx = res->ctx, .top_k = o->top_k, .temp = o->temp, .seed = o->seed};
    }
    ds4_cf_exit x;
    if (rc == 0 && (o->server_url || o->server_cmd)) {
        /* An engine behind HTTP: its failure is the cell's error, another
         * model the run's. */
        ds4err why = {0};
        const double t0 = now_seconds();
        FILE *lf = fopen(log, "w");
        if (lf) fclose(lf);
        const int s = server_cell(res, o, &v, c, out, log, &why, err);
        if (s == -2) {
            rc = -1;
        } else if (s) {
            snprintf(c->log, sizeof(c->log), "%s", log);
            cell_error(c, why.msg, "");
        } else {
            snprintf(c->log, sizeof(c->log), "%s", log);
            c->dir = dir.p;
            dir.p = NULL;
        }
        c->seconds = now_seconds() - t0;
    } else if (rc == 0) {
        rc = ds4chk_template_expand(o->backend, &v, &cmd, err);
    }
    if (rc == 0 && !o->server_url && !o->server_cmd)
        rc = ds4chk_backend_spawn(cmd.p, log, o->timeout, o->stop, &x, err);
    if (rc == 0 && !o->server_url && !o->server_cmd) {
        snprintf(c->log, sizeof(c->log), "%s", log);
        c->seconds = x.seconds;
        c->exit_status = x.timed_out ? -1 : x.status;
        char *text = NULL, last[200] = "";
        size_t len = 0;
        ds4err ignored = {0};
        if (ds4_file_read(log, LOG_LIMIT, &text, &len, &ignored) == 0) {
            ds4chk_backend_read_accept(text, len, &c->accept);
            ds4chk_backend_last_line(text, len, last, sizeof(last));
        }
        free(text);
        char why[96];
        if (x.timed_out) {
            snprintf(why, sizeof(why), "the backend ran past the %g s timeout", o->timeout);
            cell_error(c, why, last);
        } else if (x.status) {
            snprintf(why, sizeof(why), "the backend exited with status %d", x.status);
            cell_error(c, why, last);
        } else {
            c->dir = dir.p;      /* the check reads its outputs there */
            dir.p = NULL;
        }
    }
    ds4_buf_free(&cmd);
    free(tokens);
    free(prompt);
    free(batch);
    free(out);
    free(log);
    ds4_buf_free(&dir);
    return rc;
}

/* Check the outputs of a cell whose backend ran: every row, then the cell. */
static int check_cell(ds4_cf_ref *ref, ds4_cf_result *res, const ds4_cf_opts *o,
                      const ds4_tokenizer *tok, ds4_cf_cell *c, ds4err *err) {
    int rc = 0;
    if (!c->dir) return 0;
    for (uint32_t r = 0; rc == 0 && r < c->batch; r++)
        rc = check_output(ref, res, o, tok, c, r, c->dir, err);
    cell_from_rows(c);
    bool some = false;
    for (uint32_t r = 0; r < c->batch; r++) some |= c->rows[r].tf >= 0;
    res->n_ran += some;
    free(c->dir);
    c->dir = NULL;
    return rc;
}

/* The cells' commands, `jobs` at a time: workers take the next cell until
 * none is left, an error, or a stop request. */
typedef struct launcher {
    ds4_cf_result *res;
    const ds4_cf_opts *o;
    const char *work;
    pthread_mutex_t mu;
    uint32_t next, end;    /* the cells [next, end) left to launch */
    uint32_t ran;          /* cells whose command left its outputs */
    int rc;
    ds4err err;
} launcher;

/* After cell c: a command that was not found (sh's 127) before any cell
 * ran stops the launching, so that a wrong template says so once rather
 * than once a cell.  Under L->mu. */
static void after_cell(launcher *L, const ds4_cf_cell *c) {
    if (c->dir) L->ran++;
    /* A shard runs all of its slice: whether the command was found before
     * any cell ran is the whole run's to say, and the merge says it. */
    if (L->ran || c->exit_status != 127 || L->res->not_found || L->o->shards) return;
    ds4chk_shard_not_found(L->res, c);
}

static void *launch_worker(void *arg) {
    launcher *L = arg;
    for (;;) {
        pthread_mutex_lock(&L->mu);
        uint32_t i = L->next;
        while (i < L->end && L->res->cells[i].status == DS4_CF_NA) i++;
        L->next = i + 1;
        bool done = L->rc || L->res->not_found || i >= L->end;
        if (!done && L->o->stop && *L->o->stop) {
            L->rc = ds4_err_set(&L->err, DS4_E_INTERRUPTED, "interrupted after %u of %u cells",
                                i, L->res->n_cells);
            done = true;
        }
        if (!done && L->o->progress) {
            char what[160];
            ds4chk_conform_cell_name(L->res, &L->res->cells[i], true, what, sizeof(what));
            L->o->progress(L->o->progress_ud, i, L->res->n_cells, what);
        }
        pthread_mutex_unlock(&L->mu);
        if (done) return NULL;
        ds4err e = {0};
        const int rc = launch_cell(L->res, L->o, &L->res->cells[i], i, L->work, &e);
        pthread_mutex_lock(&L->mu);
        after_cell(L, &L->res->cells[i]);
        if (rc == 0) {
            pthread_mutex_unlock(&L->mu);
            continue;
        }
        if (!L->rc) {
            L->rc = e.code ? e.code : -1;
            L->err = e;
            if (e.code == DS4_E_INTERRUPTED)
                ds4_err_set(&L->err, DS4_E_INTERRUPTED, "interrupted in cell %u of %u", i + 1,
                            L->res->n_cells);
        }
        pthread_mutex_unlock(&L->mu);
    }
}

/* Every cell of [lo, hi) that is not n/a, jobs at a time (threads of this
 * process, each waiting for one backend). */
static int launch_all(ds4_cf_result *res, const ds4_cf_opts *o, const char *work, uint32_t lo,
                      uint32_t hi, ds4err *err) {
    launcher L = {.res = res, .o = o, .work = work, .next = lo, .end = hi};
    pthread_mutex_init(&L.mu, NULL);
    uint32_t jobs = o->jobs ? o->jobs : 1, started = 0;
    pthread_t th[DS4_CF_MAX_JOBS];
    for (uint32_t t = 1; t < jobs && t < DS4_CF_MAX_JOBS; t++)
        if (pthread_create(&th[started], NULL, launch_worker, &L) == 0) started++;
    launch_worker(&L);
    for (uint32_t t = 0; t < started; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&L.mu);
    if (L.rc) *err = L.err;
    return L.rc ? -1 : 0;
}

/* Has a stop request come after the cells' commands ran, when only
 * ds4ref's own work is left?  The run is then interrupted: what was
 * checked is reported, the rest n/a.  One that came while they ran has
 * stopped them already, and what finished is checked all the same. */
static bool stopping(const ds4_cf_opts *o, ds4_cf_result *res) {
    if (!o->stop || !*o->stop || (res->interrupted && !res->checks_stopped)) return false;
    if (!res->interrupted)
        snprintf(res->stopped, sizeof(res->stopped), "interrupted after the cells ran, while "
                 "their outputs were checked");
    res->interrupted = res->checks_stopped = true;
    return true;
}

/* Cells the run stopped before (or during): n/a, saying why. */
static void mark_not_run(ds4_cf_result *res) {
    for (uint32_t i = 0; i < res->n_cells; i++) {
        ds4_cf_cell *c = &res->cells[i];
        if (c->dir || c->status != DS4_CF_PASS) continue;
        c->status = c->f.status = DS4_CF_NA;
        snprintf(c->f.detail, sizeof(c->f.detail), "not run: %s",
                 res->interrupted ? "interrupted" : "the backend's command was not found");
    }
}

/* ---- across cells ---- */

/* Is a a better base cell than b: a cold cache, a lower depth, no confidence
 * threshold, then a smaller batch, then the whole prompt in one chunk, else a
 * larger chunk? */
static bool better_base(const ds4_cf_cell *a, const ds4_cf_cell *b) {
    if (a->cache != b->cache) return a->cache == DS4_CF_COLD;
    if (a->conf != b->conf) return a->conf < b->conf;
    if (a->draft != b->draft) return a->draft < b->draft;
    if (a->batch != b->batch) return a->batch < b->batch;
    if ((a->chunk_spec == DS4_CF_WHOLE) != (b->chunk_spec == DS4_CF_WHOLE))
        return a->chunk_spec == DS4_CF_WHOLE;
    return a->chunk > b->chunk;
}

/* The base cell of prompt p (better_base), NULL when it left no record. */
static const ds4_cf_cell *base_cell(const ds4_cf_result *res, uint32_t p) {
    const ds4_cf_cell *best = NULL;
    for (uint32_t i = 0; i < res->n_cells; i++) {
        const ds4_cf_cell *c = &res->cells[i];
        if (c->prompt == p && c->status != DS4_CF_NA && (!best || better_base(c, best))) best = c;
    }
    return best && best->rows[0].tf >= 0 ? best : NULL;
}

/* Every row with a stream, failed ones included, against the base cell's
 * stream of its prompt: what it found is added to the row's findings. */
static void check_consistency(ds4_cf_result *res, const ds4_cf_opts *o, const ds4_tokenizer *tok) {
    for (uint32_t p = 0; p < res->n_prompts; p++) {
        const ds4_cf_cell *base = base_cell(res, p);
        if (!base) continue;
        char name[96];
        ds4chk_conform_cell_name(res, base, false, name, sizeof(name));
        ds4_cf_stream bs = {&res->forced[base->rows[0].tf].tf, base->rows[0].margin};
        for (uint32_t i = 0; i < res->n_cells; i++) {
            ds4_cf_cell *c = &res->cells[i];
            if (c == base || c->status == DS4_CF_ERROR || c->status == DS4_CF_NA) continue;
            for (uint32_t r = 0; r < c->batch; r++) {
                ds4_cf_row *row = &c->rows[r];
                if (row->prompt != p || row->tf < 0) continue;
                ds4_cf_stream rs = {&res->forced[row->tf].tf, row->margin};
                ds4_cf_finding f;
                ds4chk_verdict_same(&bs, &rs, name, &o->limits, tok, &f);
                if (f.status == DS4_CF_PASS) continue;
                ds4chk_verdict_findings_push(&row->all, &f);
                if (f.status > row->f.status) row->f = f;
            }
            cell_from_rows(c);
        }
    }
}

/* ---- ties ---- */

enum { DIM_DRAFT, DIM_CHUNK, DIM_BATCH, DIM_CACHE, DIM_CONF, N_DIMS };

static uint32_t dim_value(const ds4_cf_cell *c, int d) {
    switch (d) {
    case DIM_DRAFT: return c->draft;
    case DIM_CHUNK: return c->chunk_spec;
    case DIM_BATCH: return c->batch;
    case DIM_CONF: return c->conf;
    default: return c->cache;
    }
}

/* The value of dimension d the base cells take: the lowest depth and batch,
 * the whole prompt (else the largest chunk), a cold cache. */
static bool base_value(uint32_t a, uint32_t b, int d) {
    if (d == DIM_CHUNK) return a == DS4_CF_WHOLE || (b != DS4_CF_WHOLE && a > b);
    return a < b;
}

/* Can cell i tie: it ran, was checked, and is not its prompt's base cell? */
static bool may_tie(const ds4_cf_result *res, uint32_t i) {
    const ds4_cf_cell *c = &res->cells[i];
    return c->status != DS4_CF_NA && c->status != DS4_CF_ERROR &&
           res->prompts[c->prompt].base_cell != (int32_t)i;
}

static bool tie_or_fail(const ds4_cf_cell *c) {
    return c->status == DS4_CF_TIE || c->status == DS4_CF_FAIL;
}

/* Value v of dimension d against the dimension's base value b: does every
 * cell of v tie or fail (one tie at least) while at most a quarter of b's
 * do, each side with 4 cells or more? */
static bool tie_pattern(const ds4_cf_result *res, int d, uint32_t v, uint32_t b, ds4_cf_ties *t) {
    uint32_t n = 0, bad = 0, ties = 0, nb = 0, badb = 0;
    for (uint32_t i = 0; i < res->n_cells; i++) {
        const ds4_cf_cell *c = &res->cells[i];
        if (!may_tie(res, i)) continue;
        uint32_t x = dim_value(c, d);
        n += x == v;
        bad += x == v && tie_or_fail(c);
        ties += x == v && c->status == DS4_CF_TIE;
        nb += x == b;
        badb += x == b && tie_or_fail(c);
    }
    if (n < 4 || bad < n || !ties || nb < 4 || 4 * badb > nb) return false;
    static const char *const names[N_DIMS] = {"draft", "chunk", "batch", "cache", "conf"};
    snprintf(t->dim, sizeof(t->dim), "%s", names[d]);
    if (d == DIM_CHUNK) ds4chk_matrix_chunk_name(v, t->value, sizeof(t->value));
    else if (d == DIM_CACHE)
        snprintf(t->value, sizeof(t->value), "%s", v == DS4_CF_WARM ? "warm" : "cold");
    else snprintf(t->value, sizeof(t->value), "%u", v);
    t->pattern_cells = n;
    t->base_ties = badb;
    t->base_cells = nb;
    return true;
}

/* The run's ties counted by why, then the first pattern (ds4_cf_ties). */
static void check_ties(ds4_cf_result *res) {
    ds4_cf_ties *t = &res->ties;
    memset(t, 0, sizeof(*t));
    t->median = t->widest = NAN;
    double *margins = malloc(sizeof(double) * (res->n_cells ? res->n_cells : 1));
    uint32_t n_margins = 0;
    for (uint32_t i = 0; i < res->n_cells; i++) {
        const ds4_cf_cell *c = &res->cells[i];
        if (c->status != DS4_CF_TIE) continue;
        if (margins && !isnan(c->f.margin)) margins[n_margins++] = c->f.margin;
        t->cells++;
        if (c->f.own_tie) t->by_own++;
        else t->by_reference++;
    }
    if (n_margins) {
        ds4chk_calibrate_sort(margins, n_margins);
        t->median = margins[(n_margins - 1) / 2];
        t->widest = margins[n_margins - 1];
    }
    free(margins);
    if (!t->cells) return;
    for (int d = 0; d < N_DIMS && !t->pattern; d++) {
        bool have = false;
        uint32_t b = 0;
        for (uint32_t i = 0; i < res->n_cells; i++) {
            if (res->cells[i].status == DS4_CF_NA) continue;
            uint32_t x = dim_value(&res->cells[i], d);
            if (!have || base_value(x, b, d)) b = x;
            have = true;
        }
        for (uint32_t i = 0; have && i < res->n_cells && !t->pattern; i++) {
            uint32_t v = dim_value(&res->cells[i], d);
            if (v != b && res->cells[i].status != DS4_CF_NA)
                t->pattern = tie_pattern(res, d, v, b, t);
        }
    }
}

/* A speculative cell that passed must have accepted a deep draft; one
 * whose backend says it proposed no draft at all failed: its drafter is
 * silently off (ds4 #468: BF16 Markov tensors disabled the DSpark drafter),
 * and its output, plain decoding's, proves nothing about speculation.
 * With one token a row there is nothing to draft after it. */
static void check_exercised(ds4_cf_result *res, uint32_t n_tokens) {
    for (uint32_t i = 0; i < res->n_cells; i++) {
        ds4_cf_cell *c = &res->cells[i];
        if (c->status != DS4_CF_PASS || !c->draft) continue;
        uint64_t need = c->draft < 3 ? c->draft : 3;
        const ds4_cf_accept *a = &c->accept;
        if (a->known && a->proposed == 0 && n_tokens > 1) {
            c->status = DS4_CF_FAIL;
            snprintf(c->f.detail, sizeof(c->f.detail), "the backend drafted nothing at depth %u: "
                     "its accept counts say 0 drafts proposed (a drafter silently off)", c->draft);
        } else if (!a->known || !a->has_deepest) {
            c->status = DS4_CF_NOT_EXERCISED;
            snprintf(c->f.detail, sizeof(c->f.detail), "the backend reported no acceptance counts "
                     "(docs/CONFORM.md: the accept lines it may print)");
        } else if (a->deepest < need) {
            c->status = DS4_CF_NOT_EXERCISED;
            snprintf(c->f.detail, sizeof(c->f.detail), "no cycle accepted %" PRIu64 " drafts (the "
                     "most: %" PRIu64 ", of %" PRIu64 " accepted in all)", need, a->deepest,
                     a->accepted);
        }
        c->f.status = c->status;
    }
}

/* ---- calibration ---- */

/* The base cell of prompt p among the cells whose backend ran (before any
 * check: base_cell needs the checked rows). */
static const ds4_cf_cell *base_ran(const ds4_cf_result *res, uint32_t p) {
    const ds4_cf_cell *best = NULL;
    for (uint32_t i = 0; i < res->n_cells; i++) {
        const ds4_cf_cell *c = &res->cells[i];
        if (c->prompt == p && c->dir && (!best || better_base(c, best))) best = c;
    }
    return best;
}

/* Each prompt's base row as the backend wrote it, read from its cell's
 * output into the prompt (base_cell, base_out); a row that cannot be read or
 * used is left out: its cell's check will say why.  Errors: out of memory. */
static int read_bases(ds4_cf_result *res, const ds4_cf_opts *o, const ds4_tokenizer *tok,
                      uint32_t n_vocab, ds4err *err) {
    for (uint32_t p = 0; p < res->n_prompts; p++) {
        const ds4_cf_cell *c = base_ran(res, p);
        ds4_cf_prompt *pr = &res->prompts[p];
        if (!c) continue;
        char *path = path_in(c->dir, "out", c->batch > 1 ? 0 : -1);
        if (!path) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        ds4_cf_finding f;
        ds4err e = {0};
        if (ds4_trace_load(path, NULL, &pr->base_out, &e) == 0 &&
            (pr->base_out.has_header || fill_bytes(&pr->base_out, tok, &e) == 0) &&
            ds4chk_verdict_usable(&pr->base_out, pr->ids, pr->n, o->n_tokens, n_vocab, &f))
            pr->base_cell = (int32_t)(c - res->cells);
        else
            ds4_golden_free(&pr->base_out);
        /* Another model is a setup error before any calibration runs. */
        int rc = pr->base_cell >= 0 ? same_model(&pr->base_out, pr, o, path, false, err) : 0;
        free(path);
        if (rc) return -1;
        if (e.code == DS4_E_NOMEM) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    return 0;
}

/* The base rows measured under every candidate numerics; then the engine
 * keeps the best, and the prompts' goldens are made again under it when it
 * is not the one they were made under. */
static int calibrate(ds4_cf_ref *ref, ds4_model *m, ds4_cf_result *res, const ds4_cf_opts *o,
                     ds4err *err) {
    ds4_cf_base_row *rows = calloc(res->n_prompts ? res->n_prompts : 1, sizeof(ds4_cf_base_row));
    int rc = rows ? 0 : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    uint32_t n = 0;
    for (uint32_t p = 0; rc == 0 && p < res->n_prompts; p++) {
        const ds4_cf_prompt *pr = &res->prompts[p];
        if (pr->base_cell >= 0) rows[n++] = (ds4_cf_base_row){pr->ids, pr->n, &pr->base_out, p};
    }
    if (rc == 0 && o->progress) o->progress(o->progress_ud, 0, res->n_cells, "calibrating");
    ds4_fwd_opts was = ref->e->opts;
    if (rc == 0) rc = ds4chk_calibrate(ref, m, rows, n, res->greedy, &res->calib, err);
    /* The goldens already made are the chosen numerics' unless it moved. */
    bool moved = ref->e->opts.qat != was.qat || ref->e->opts.numerics != was.numerics;
    for (uint32_t p = 0; rc == 0 && moved && p < res->n_prompts; p++) {
        ds4_cf_prompt *pr = &res->prompts[p];
        ds4_golden_free(&pr->ref);
        ds4_golden_init(&pr->ref, DS4_TRACE_GOLDEN);
        rc = ds4chk_reference_golden(ref, pr->ids, pr->n, &pr->ref, &pr->cached, err);
    }
    free(rows);
    return rc;
}

/* ---- the run ---- */

/* The limits the verdicts use, l's own where given and the calibration's
 * otherwise, into l and res->limits; which were the user's; and whether
 * the run fails for a backend no numerics explains: it does unless the
 * user set the limits a floor would have, which then judge it (the report
 * says so). */
static void settle_limits(ds4_cf_result *res, ds4_cf_limits *l) {
    res->user_limits = (l->max_gap >= 0 ? DS4_CF_USER_GAP : 0) |
                       (l->max_dlogprob >= 0 ? DS4_CF_USER_DLOGPROB : 0) |
                       (l->tie_eps >= 0 ? DS4_CF_USER_TIE : 0);
    const uint32_t own = DS4_CF_USER_DLOGPROB | (res->greedy ? DS4_CF_USER_GAP : 0);
    res->unexplained = res->calib.done && !res->calib.explained &&
                       (res->user_limits & own) != own;
    ds4chk_calibrate_limits(&res->calib, l);
    res->limits = *l;
}

/* The unquantized twins the template names, written once into the work
 * folder (each a copy of its model with every float tensor in F32, which a
 * tiny model affords): "WORK/model-f32.gguf", "WORK/mtp-f32.gguf". */
static int write_twins(ds4_cf_opts *run, uint32_t uses, const char *work, ds4_buf *paths,
                       ds4_modelid *id, ds4err *err) {
    if (uses & 1u << DS4_CF_MODEL_F32) {
        ds4_buf_printf(&paths[0], "%s/model-f32.gguf", work);
        if (paths[0].failed) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        if (ds4_gguf_twin_write(run->model_path, paths[0].p, err))
            return ds4_err_prefix(err, "{model_f32}");
        run->model_f32 = paths[0].p;
        /* An output made from the twin names the twin. */
        ds4_gguf_file g;
        if (ds4_gguf_open(&g, paths[0].p, err)) return -1;
        int rc = ds4_modelid_of(&g, id, err);
        ds4_gguf_close(&g);
        if (rc) return -1;
        run->model_f32_id = id;
    }
    if ((uses & 1u << DS4_CF_MTP_F32) && run->mtp_path) {
        ds4_buf_printf(&paths[1], "%s/mtp-f32.gguf", work);
        if (paths[1].failed) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        if (ds4_gguf_twin_write(run->mtp_path, paths[1].p, err))
            return ds4_err_prefix(err, "{mtp_f32}");
        run->mtp_f32 = paths[1].p;
    }
    return 0;
}

/* The folder the cells run in: the one given, or a new temporary one. */
static int open_work(const ds4_cf_opts *o, char *work, size_t cap, bool *temporary,
                     ds4err *err) {
    *temporary = !o->work_dir;
    if (o->work_dir) {
        snprintf(work, cap, "%s", o->work_dir);
        return ds4_file_make_dirs(work, err);
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(work, cap, "%s/ds4ref-conform-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(work)) return ds4_err_set(err, DS4_E_IO, "%s: %s", work, strerror(errno));
    return 0;
}

static void tally(ds4_cf_result *res) {
    memset(res->count, 0, sizeof(res->count));
    for (uint32_t i = 0; i < res->n_cells; i++) res->count[res->cells[i].status]++;
}

int ds4chk_conform_run(ds4_engine *e, ds4_model *m, const ds4_tokenizer *tok,
                       const ds4_cf_opts *o, ds4_cf_result *res, ds4err *err) {
    memset(res, 0, sizeof(*res));
    ds4chk_identity_init(&res->identity, o->model_path, NULL);
    uint32_t uses = 1u << DS4_CF_TEMP;   /* a server takes the temperature */
    if (o->server_cmd ? ds4chk_template_check_server(o->server_cmd, &uses, err)
                      : !o->server_url && ds4chk_template_check(o->backend, &uses, err))
        return -1;
    /* A server takes the temperature, and a batch is requests in flight. */
    uses |= o->server_url || o->server_cmd ? 1u << DS4_CF_TEMP | 1u << DS4_CF_BATCH : 0;
    if (o->temp > 0 && !(uses & 1u << DS4_CF_TEMP))
        return ds4_err_set(err, DS4_E_ARG, "--temp %g: the backend template has no {temp}", o->temp);
    if (o->temp > 0 && o->limits.exact)
        return ds4_err_set(err, DS4_E_ARG, "--exact compares greedy runs: use --temp 0");
    if (!o->corpus || !o->corpus->n) return ds4_err_set(err, DS4_E_ARG, "no prompts");
    if (!o->n_tokens) return ds4_err_set(err, DS4_E_ARG, "no tokens to generate (-n)");
    res->ctx = ds4_generate_session_opts(e, o->ctx, 0).ctx;   /* ds4ref's own default */
    res->greedy = o->temp == 0;
    res->spread = (ds4_cf_spread){.dlogprob = NAN, .cell = -1, .row = -1};
    ds4_cf_opts run = *o;
    run.limits.greedy = res->greedy;
    run.own_drafter = e->m->dspark != NULL;
    ds4_cf_ref ref;
    if (ds4chk_reference_init(&ref, e, tok, res->ctx, o->top_k, o->n_tokens, true, o->cache_dir, err))
        return -1;
    char work[4096];
    bool temporary = false;
    int rc = prepare_prompts(&ref, tok, &run, res, err);
    fit_matrix(&run.matrix, &run, uses);
    if (rc == 0) rc = make_cells(&run, res, err);
    if (rc == 0) rc = open_work(&run, work, sizeof(work), &temporary, err);
    ds4_buf twins[2] = {{0}};
    ds4_modelid twin_id = {0};
    if (rc == 0) rc = write_twins(&run, uses, work, twins, &twin_id, err);
    res->identity.twin = run.model_f32;
    run.identity = &res->identity;
    if (rc == 0 && uses & 1u << DS4_CF_MODEL_SHA256)
        rc = ds4chk_identity_model_sha256(&res->identity, &run.model_sha256, err);
    for (uint32_t i = 0; rc == 0 && i < res->n_cells; i++) {
        ds4_cf_cell *c = &res->cells[i];
        const char *na = cell_na(&run, uses, c);
        if (!na) continue;
        c->status = c->f.status = DS4_CF_NA;
        snprintf(c->f.detail, sizeof(c->f.detail), "%s", na);
    }
    ds4_cf_vocab_index *vocab = NULL;
    const ds4_cf_dialect_info *dialect = ds4chk_client_dialect((uint32_t)run.server_dialect);
    if (rc == 0 && dialect->by_text &&
        (rc = ds4chk_client_index_new(tok, dialect->lossy, &vocab, err)) == 0)
        run.vocab = vocab;
    run.tok = tok;
    /* A shard runs its slice; a merge runs nothing, its shards having run
     * every slice (shard.h). */
    uint32_t lo = 0, hi = res->n_cells;
    if (run.shards) ds4chk_shard_slice(res->n_cells, run.shard, run.shards, &lo, &hi);
    ds4_buf desc = {0};
    if (rc == 0 && (run.shards || run.n_merge))
        rc = ds4chk_shard_describe(res, &run, ref.model_key, &desc, err);
    if (rc == 0 && run.n_merge) rc = ds4chk_shard_merge(res, desc.p, run.merge, run.n_merge, work, err);
    else if (rc == 0) rc = launch_all(res, &run, work, lo, hi, err);
    /* Interrupted: what finished is checked and reported all the same. */
    if (rc && err->code == DS4_E_INTERRUPTED) {
        res->interrupted = true;
        snprintf(res->stopped, sizeof(res->stopped), "%.299s", err->msg);
        rc = 0;
    }
    if (rc == 0 && run.shards) {
        rc = desc.p ? ds4chk_shard_write(res, desc.p, run.shard, run.shards, run.shard_path, err)
                    : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        res->shard_only = true;
        res->shard_lo = lo;
        res->shard_hi = hi;
        for (uint32_t i = lo; i < hi; i++) {
            const ds4_cf_cell *c = &res->cells[i];
            res->shard_ran += c->dir != NULL;
            res->shard_errors += c->status == DS4_CF_ERROR;
            res->shard_na += c->status == DS4_CF_NA;
        }
    }
    ds4_buf_free(&desc);
    if (rc == 0 && (res->interrupted || res->not_found)) mark_not_run(res);
    ds4chk_client_index_free(vocab);
    if (rc == 0 && !res->shard_only) rc = read_bases(res, &run, tok, m->cfg.n_vocab, err);
    if (rc == 0 && !res->shard_only && run.calibrate && !run.limits.exact && !stopping(&run, res))
        rc = calibrate(&ref, m, res, &run, err);
    settle_limits(res, &run.limits);
    /* The outputs, one cell after another: teacher forcing runs on the one
     * engine. */
    for (uint32_t i = 0; rc == 0 && !res->shard_only && i < res->n_cells; i++) {
        ds4_cf_cell *c = &res->cells[i];
        if (!c->dir) continue;
        if (stopping(&run, res)) {
            c->status = c->f.status = DS4_CF_NA;
            snprintf(c->f.detail, sizeof(c->f.detail), "not checked: interrupted");
            continue;
        }
        if (o->progress) {
            char what[180] = "checking ";
            ds4chk_conform_cell_name(res, c, true, what + 9, sizeof(what) - 9);
            o->progress(o->progress_ud, i, res->n_cells, what);
        }
        rc = check_cell(&ref, res, &run, tok, c, err);
    }
    if (rc == 0 && !res->shard_only) {
        if (res->greedy) check_consistency(res, &run, tok);
        check_exercised(res, o->n_tokens);
        check_ties(res);
        tally(res);
        if (o->progress) o->progress(o->progress_ud, res->n_cells, res->n_cells, "done");
    }
    for (uint32_t i = 0; res->cells && i < res->n_cells; i++) {
        free(res->cells[i].dir);
        res->cells[i].dir = NULL;
    }
    if (temporary) {
        ds4_file_remove_tree(work);
        for (uint32_t i = 0; res->cells && i < res->n_cells; i++) res->cells[i].log[0] = '\0';
    }
    ds4_buf_free(&twins[0]);
    ds4_buf_free(&twins[1]);
    res->identity.twin = NULL;   /* it was in the work folder */
    ds4_modelid_free(&twin_id);
    ds4chk_reference_free(&ref);
    if (rc) ds4chk_conform_result_free(res);
    return rc;
}
