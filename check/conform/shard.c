/* ds4ref-conform's shards (shard.h). */
#include "check/conform/shard.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "base/hex.h"
#include "base/sha256.h"
#include "base/version.h"
#include "check/conform/verdict.h"
#include "ref/text/json.h"

/* The format of a shard file; a merge refuses another. */
#define SHARD_FORMAT 1

/* A shard file holds a cell's log from its end, at most this much: the
 * accept counts and the last line were read from it already. */
#define LOG_KEEP ((size_t)64 << 10)

/* A shard file is read whole, at most this much. */
#define SHARD_LIMIT ((size_t)1 << 30)

void ds4chk_shard_cell_dir(const ds4_cf_result *res, const ds4_cf_cell *c, uint32_t index,
                           const char *work, ds4_buf *out) {
    char ch[16], conf[24] = "";
    if (c->conf) snprintf(conf, sizeof(conf), "-conf%u", c->conf);
    ds4_buf_printf(out, "%s/%03u-d%u-c%s-b%u%s%s-%s", work, index, c->draft,
                   ds4chk_matrix_chunk_name(c->chunk_spec, ch, sizeof(ch)), c->batch,
                   c->cache == DS4_CF_WARM ? "-warm" : "", conf, res->prompts[c->prompt].name);
}

void ds4chk_shard_not_found(ds4_cf_result *res, const ds4_cf_cell *c) {
    res->not_found = true;
    snprintf(res->stopped, sizeof(res->stopped), "the backend's command was not found (exit "
             "status 127) before any cell ran, so no other cell started: %.190s", c->f.detail);
}

void ds4chk_shard_slice(uint32_t n_cells, uint32_t k, uint32_t n, uint32_t *lo, uint32_t *hi) {
    *lo = (uint32_t)((uint64_t)n_cells * k / n);
    *hi = (uint32_t)((uint64_t)n_cells * (k + 1) / n);
}

/* ---- the run's description ---- */

/* s on one line: a newline or a backslash escaped. */
static void put_line_text(ds4_buf *b, const char *s) {
    for (; s && *s; s++) {
        if (*s == '\n') ds4_buf_printf(b, "\\n");
        else if (*s == '\\') ds4_buf_printf(b, "\\\\");
        else ds4_buf_printf(b, "%c", *s);
    }
}

static void put_keyed(ds4_buf *b, const char *key, const char *value) {
    ds4_buf_printf(b, "%s ", key);
    put_line_text(b, value ? value : "(none)");
    ds4_buf_printf(b, "\n");
}

/* A side file (the MTP head) by its name and size: its bytes are the
 * backend's to read, and a copy elsewhere is the same file. */
static void put_file(ds4_buf *b, const char *key, const char *path) {
    struct stat st;
    if (!path) {
        put_keyed(b, key, NULL);
        return;
    }
    const char *base = strrchr(path, '/');
    ds4_buf_printf(b, "%s ", key);
    put_line_text(b, base ? base + 1 : path);
    ds4_buf_printf(b, " %lld\n", stat(path, &st) ? -1LL : (long long)st.st_size);
}

/* A cell's settings and prompt, "d3 c7 b2 cold conf0 chat" (the report's
 * own names are the driver's, which sits above this file). */
static void cell_text(const ds4_cf_result *res, const ds4_cf_cell *c, char *out, size_t cap) {
    char ch[16];
    snprintf(out, cap, "d%u c%s b%u %s conf%u %s", c->draft,
             ds4chk_matrix_chunk_name(c->chunk_spec, ch, sizeof(ch)), c->batch,
             c->cache == DS4_CF_WARM ? "warm" : "cold", c->conf, res->prompts[c->prompt].name);
}

int ds4chk_shard_describe(const ds4_cf_result *res, const ds4_cf_opts *o, const char *model_key,
                          ds4_buf *b, ds4err *err) {
    ds4_buf_printf(b, "ds4ref-conform run, shard format %d\n", SHARD_FORMAT);
    put_keyed(b, "version", DS4REF_VERSION);
    put_keyed(b, "model", model_key);
    put_file(b, "mtp", o->mtp_path);
    put_keyed(b, "backend", o->server_url || o->server_cmd ? NULL : o->backend);
    put_keyed(b, "server-cmd", o->server_cmd);
    put_keyed(b, "server-url", o->server_url);
    ds4_buf_printf(b, "server-dialect %d prompt %s\n", o->server_dialect,
                   o->server_text_prompt ? "text" : "ids");
    put_keyed(b, "numerics", o->numerics_key);
    ds4_buf_printf(b, "steps %u top-k %u ctx %u temp %.17g seed %" PRIu64 " timeout %.17g\n",
                   o->n_tokens, o->top_k, res->ctx, o->temp, o->seed, o->timeout);
    const ds4_cf_limits *l = &o->limits;
    ds4_buf_printf(b, "limits exact %d max-gap %.17g tie-eps %.17g max-dlogprob %.17g "
                   "min-top5 %.17g min-top20 %.17g calibrate %d automatic %d\n", l->exact,
                   l->max_gap, l->tie_eps, l->max_dlogprob, l->min_top5, l->min_top20,
                   o->calibrate, o->automatic);
    for (uint32_t i = 0; i < res->n_prompts; i++) {
        const ds4_cf_prompt *p = &res->prompts[i];
        char hex[65];
        ds4_sha256_hex(p->ids, sizeof(int32_t) * p->n, hex);
        ds4_buf_printf(b, "prompt %u ", i);
        put_line_text(b, p->name);
        ds4_buf_printf(b, " %u tokens, ids %s\n", p->n, hex);
    }
    for (uint32_t i = 0; i < res->n_cells; i++) {
        const ds4_cf_cell *c = &res->cells[i];
        char name[256];
        cell_text(res, c, name, sizeof(name));
        ds4_buf_printf(b, "cell %u ", i);
        put_line_text(b, name);
        if (c->status == DS4_CF_NA) {
            ds4_buf_printf(b, ": n/a, ");
            put_line_text(b, c->f.detail);
        }
        ds4_buf_printf(b, "\n");
    }
    return b->failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory") : 0;
}

/* ---- writing ---- */

static void put_json_str(ds4_buf *b, const char *s) {
    ds4_json_put_str(b, s, strlen(s));
}

/* Every regular file of a cell's folder (a link is not followed), {"NAME": "HEX", ...};
 * a log only from its last LOG_KEEP bytes. */
static int put_files(ds4_buf *b, const char *dir, ds4err *err) {
    DIR *d = opendir(dir);
    if (!d) return ds4_err_set(err, DS4_E_IO, "%s: cannot read: %s", dir, strerror(errno));
    /* In name order, so that a shard file's bytes depend on nothing else. */
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char **grown = realloc(names, sizeof(*names) * (n + 1));
        if (!grown || !(grown[n] = strdup(e->d_name)))
            rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        if (grown) names = grown;
        if (rc == 0) n++;
    }
    closedir(d);
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    ds4_buf_printf(b, "{");
    for (size_t i = 0, put = 0; rc == 0 && i < n; i++) {
        ds4_buf path = {0};
        ds4_buf_printf(&path, "%s/%s", dir, names[i]);
        struct stat st;
        char *data = NULL;
        size_t len = 0;
        if (path.failed) rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        else if (lstat(path.p, &st) || !S_ISREG(st.st_mode)) {
            ds4_buf_free(&path);
            continue;
        }
        if (rc == 0) rc = ds4_file_read(path.p, SHARD_LIMIT, &data, &len, err);
        if (rc == 0) {
            const size_t from = !strcmp(names[i], "log") && len > LOG_KEEP ? len - LOG_KEEP : 0;
            char *hex = malloc(2 * (len - from) + 1);
            if (!hex) {
                rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
            } else {
                ds4_hex((const uint8_t *)data + from, len - from, hex);
                ds4_buf_printf(b, "%s", put++ ? ", " : "");
                put_json_str(b, names[i]);
                ds4_buf_printf(b, ": \"%s\"", hex);
                free(hex);
            }
        }
        free(data);
        ds4_buf_free(&path);
    }
    ds4_buf_printf(b, "}");
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* What launching left of a cell: "na" (the backend cannot run it), "ran"
 * (outputs in its folder), "error" (it failed), "not-run" (the run stopped
 * before it). */
static const char *cell_state(const ds4_cf_cell *c) {
    if (c->status == DS4_CF_NA) return "na";
    if (c->dir) return "ran";
    return c->status == DS4_CF_ERROR ? "error" : "not-run";
}

/* A cell's folder: its own (ran), or the one its log is in (an error). */
static char *cell_folder(const ds4_cf_cell *c) {
    if (c->dir) return strdup(c->dir);
    if (!c->log[0]) return NULL;
    char *d = strdup(c->log);
    char *slash = d ? strrchr(d, '/') : NULL;
    if (slash) *slash = '\0';
    return d;
}

static void put_cell(ds4_buf *b, const ds4_cf_cell *c, uint32_t index, const char *folder_json) {
    ds4_buf_printf(b, "    {\"index\": %u, \"state\": \"%s\", \"exit_status\": %d, "
                   "\"seconds\": %.17g, \"detail\": ", index, cell_state(c), c->exit_status,
                   c->seconds);
    put_json_str(b, c->status == DS4_CF_ERROR ? c->f.detail : "");
    ds4_buf_printf(b, ", \"accept\": {\"known\": %s, \"has_deepest\": %s, \"proposed\": %" PRIu64
                   ", \"accepted\": %" PRIu64 ", \"deepest\": %" PRIu64 "}, \"cuts\": [",
                   c->accept.known ? "true" : "false", c->accept.has_deepest ? "true" : "false",
                   c->accept.proposed, c->accept.accepted, c->accept.deepest);
    /* A server cell's rows are judged up to where their text stopped. */
    for (uint32_t r = 0; r < c->batch; r++)
        ds4_buf_printf(b, "%s%" PRId64, r ? ", " : "", (int64_t)c->rows[r].cut);
    ds4_buf_printf(b, "], \"files\": %s}", folder_json);
}

int ds4chk_shard_write(const ds4_cf_result *res, const char *desc, uint32_t k, uint32_t n,
                       const char *path, ds4err *err) {
    uint32_t lo, hi;
    ds4chk_shard_slice(res->n_cells, k, n, &lo, &hi);
    char key[65];
    ds4_sha256_hex(desc, strlen(desc), key);
    ds4_buf b = {0};
    ds4_buf_printf(&b, "{\"ds4ref_conform_shard\": %d, \"key\": \"%s\", \"shard\": %u, "
                   "\"shards\": %u, \"cells\": [%u, %u], \"n_cells\": %u,\n", SHARD_FORMAT, key,
                   k, n, lo, hi, res->n_cells);
    const ds4_cf_identity *id = &res->identity;
    ds4_buf_printf(&b, "  \"identity\": {\"by_server\": %u, \"server_unnamed\": %u, "
                   "\"server_names\": ", id->by_server, id->server_unnamed);
    put_json_str(&b, id->server_names);
    ds4_buf_printf(&b, "},\n  \"run\": [");
    /* The description's lines, each a string. */
    for (const char *p = desc, *q; *p; p = q + 1) {
        q = strchr(p, '\n');
        if (!q) break;
        ds4_buf_printf(&b, "%s\n    ", p == desc ? "" : ",");
        ds4_json_put_str(&b, p, (size_t)(q - p));
    }
    ds4_buf_printf(&b, "],\n  \"cell_results\": [\n");
    int rc = 0;
    for (uint32_t i = lo; rc == 0 && i < hi; i++) {
        const ds4_cf_cell *c = &res->cells[i];
        ds4_buf files = {0};
        char *folder = c->status == DS4_CF_NA ? NULL : cell_folder(c);
        if (folder) rc = put_files(&files, folder, err);
        else ds4_buf_printf(&files, "{}");
        free(folder);
        if (rc == 0 && files.failed) rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        if (rc == 0) {
            put_cell(&b, c, i, files.p);
            ds4_buf_printf(&b, "%s\n", i + 1 < hi ? "," : "");
        }
        ds4_buf_free(&files);
    }
    ds4_buf_printf(&b, "  ]\n}\n");
    if (rc == 0 && b.failed) rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (rc == 0) rc = ds4_file_write_atomic(path, b.p, b.len, err);
    ds4_buf_free(&b);
    return rc;
}

/* ---- merging ---- */

/* One shard file, parsed, with the slice it says it holds. */
typedef struct shard_file {
    const char *path;
    ds4_json_doc *doc;
    uint32_t k, n;
} shard_file;

static bool get_u32(const ds4_json *o, const char *key, uint32_t *out) {
    uint64_t v;
    if (!ds4_json_uint(ds4_json_get(o, key), UINT32_MAX, &v)) return false;
    *out = (uint32_t)v;
    return true;
}

/* The first line of a shard's run that differs from ours, for the refusal. */
static void first_difference(const ds4_json *run, const char *desc, char *out, size_t cap) {
    const char *p = desc;
    for (size_t i = 0; run && run->type == DS4_JSON_ARRAY && i < run->n; i++) {
        const char *q = strchr(p, '\n');
        const ds4_json *line = &run->elems[i];
        const size_t mine = q ? (size_t)(q - p) : strlen(p);
        if (line->type != DS4_JSON_STRING || line->len != mine || memcmp(line->str, p, mine)) {
            snprintf(out, cap, "its '%.*s' is '%.*s' here", line->type == DS4_JSON_STRING ?
                     (int)(line->len < 160 ? line->len : 160) : 0, line->str ? line->str : "",
                     (int)(mine < 160 ? mine : 160), p);
            return;
        }
        if (!q) break;
        p = q + 1;
    }
    snprintf(out, cap, "its run's description is %s than this run's",
             *p ? "shorter" : "longer");
}

static int read_shard(shard_file *s, const char *desc, const char *key, uint32_t n_cells,
                      ds4err *err) {
    char *text = NULL;
    size_t len = 0;
    if (ds4_file_read(s->path, SHARD_LIMIT, &text, &len, err)) return -1;
    int rc = ds4_json_parse(text, len, s->path, &s->doc, err);
    free(text);
    if (rc) return -1;
    const ds4_json *root = ds4_json_root(s->doc);
    uint32_t format = 0, cells = 0;
    if (!get_u32(root, "ds4ref_conform_shard", &format))
        return ds4_err_set(err, DS4_E_FORMAT, "%s: not a shard file of ds4ref-conform (no "
                           "\"ds4ref_conform_shard\"); give the files --shard K/N --json wrote",
                           s->path);
    if (format != SHARD_FORMAT)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: shard format %u, this ds4ref-conform reads %d",
                           s->path, format, SHARD_FORMAT);
    if (!ds4_json_is_str(ds4_json_get(root, "key"), key)) {
        char why[400];
        first_difference(ds4_json_get(root, "run"), desc, why, sizeof(why));
        return ds4_err_set(err, DS4_E_ARG, "%s: a shard of another run: %s (merge with the "
                           "options, backend, model and prompts the shards ran with)", s->path,
                           why);
    }
    if (!get_u32(root, "shard", &s->k) || !get_u32(root, "shards", &s->n) || s->n == 0 ||
        s->k >= s->n || !get_u32(root, "n_cells", &cells) || cells != n_cells)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: \"shard\", \"shards\" or \"n_cells\" is "
                           "missing or out of range", s->path);
    return 0;
}

/* A cell's files into its folder under work. */
static int restore_files(const ds4_json *files, const char *dir, const char *path, ds4err *err) {
    if (!files || files->type != DS4_JSON_OBJECT)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: a cell's \"files\" is not an object", path);
    if (mkdir(dir, 0755) && errno != EEXIST)
        return ds4_err_set(err, DS4_E_IO, "%s: %s", dir, strerror(errno));
    for (size_t i = 0; i < files->n; i++) {
        const ds4_json *name = &files->keys[i], *hex = &files->elems[i];
        if (hex->type != DS4_JSON_STRING || hex->len % 2 || !name->len ||
            strlen(name->str) != name->len || strchr(name->str, '/') || name->str[0] == '.')
            return ds4_err_set(err, DS4_E_FORMAT, "%s: a cell's file '%.60s' is not a plain name "
                               "with hex bytes", path, name->str);
        uint8_t *data = malloc(hex->len / 2 + 1);
        ds4_buf file = {0};
        ds4_buf_printf(&file, "%s/%s", dir, name->str);
        int rc = !data || file.failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory")
                 : ds4_hex_decode(hex->str, hex->len, data)
                     ? ds4_err_set(err, DS4_E_FORMAT, "%s: a cell's file '%s' is not hex", path,
                                   name->str)
                     : ds4_file_write_atomic(file.p, data, hex->len / 2, err);
        free(data);
        ds4_buf_free(&file);
        if (rc) return -1;
    }
    return 0;
}

/* One cell's record back into the cell. */
static int restore_cell(const ds4_cf_result *res, ds4_cf_cell *c, const ds4_json *rec,
                        uint32_t index, const char *work, const shard_file *s, ds4err *err) {
    const ds4_json *state = ds4_json_get(rec, "state"), *detail = ds4_json_get(rec, "detail"),
                   *acc = ds4_json_get(rec, "accept"), *secs = ds4_json_get(rec, "seconds"),
                   *exit_status = ds4_json_get(rec, "exit_status");
    if (!state || state->type != DS4_JSON_STRING || !detail || detail->type != DS4_JSON_STRING ||
        !secs || secs->type != DS4_JSON_NUMBER || !exit_status ||
        exit_status->type != DS4_JSON_NUMBER ||
        !(exit_status->num >= -1 && exit_status->num <= 255) ||
        exit_status->num != (double)(int)exit_status->num || !(secs->num >= 0) ||
        !acc || acc->type != DS4_JSON_OBJECT)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: cell %u's record is incomplete", s->path, index);
    /* Which cells are n/a follows from the run's description: the shard
     * must agree. */
    if (ds4_json_is_str(state, "na") != (c->status == DS4_CF_NA))
        return ds4_err_set(err, DS4_E_FORMAT, "%s: cell %u is %sn/a there and %sn/a here",
                           s->path, index, c->status == DS4_CF_NA ? "not " : "",
                           c->status == DS4_CF_NA ? "" : "not ");
    if (c->status == DS4_CF_NA) return 0;
    const bool ran = ds4_json_is_str(state, "ran");
    const ds4_json *cuts = ds4_json_get(rec, "cuts");
    if (!cuts || cuts->type != DS4_JSON_ARRAY || cuts->n != c->batch)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: cell %u's \"cuts\" must hold a number a row",
                           s->path, index);
    for (uint32_t r = 0; r < c->batch; r++) {
        const double cut = cuts->elems[r].num;
        if (cuts->elems[r].type != DS4_JSON_NUMBER || cut != (double)(int64_t)cut || cut < -1 ||
            cut > (double)UINT32_MAX)
            return ds4_err_set(err, DS4_E_FORMAT, "%s: cell %u's cut %u is not a step", s->path,
                               index, r);
        c->rows[r].cut = (int32_t)cut;
    }
    if (!ran && !ds4_json_is_str(state, "error"))
        return ds4_err_set(err, DS4_E_FORMAT, "%s: cell %u's state is not na, ran, error or "
                           "not-run", s->path, index);
    ds4_buf dir = {0};
    ds4chk_shard_cell_dir(res, c, index, work, &dir);
    if (dir.failed) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    int rc = restore_files(ds4_json_get(rec, "files"), dir.p, s->path, err);
    if (rc == 0) {
        c->seconds = secs->num;
        c->exit_status = (int)exit_status->num;
        const ds4_json *known = ds4_json_get(acc, "known"),
                       *deep = ds4_json_get(acc, "has_deepest");
        c->accept.known = known && known->type == DS4_JSON_TRUE;
        c->accept.has_deepest = deep && deep->type == DS4_JSON_TRUE;
        uint64_t v;
        if (ds4_json_uint(ds4_json_get(acc, "proposed"), UINT64_MAX, &v)) c->accept.proposed = v;
        if (ds4_json_uint(ds4_json_get(acc, "accepted"), UINT64_MAX, &v)) c->accept.accepted = v;
        if (ds4_json_uint(ds4_json_get(acc, "deepest"), UINT64_MAX, &v)) c->accept.deepest = v;
        snprintf(c->log, sizeof(c->log), "%s/log", dir.p);
        if (ran) {
            c->dir = dir.p;
            dir.p = NULL;
        } else {
            c->status = c->f.status = DS4_CF_ERROR;
            snprintf(c->f.detail, sizeof(c->f.detail), "%.*s",
                     (int)(detail->len < sizeof(c->f.detail) - 1 ? detail->len
                                                                   : sizeof(c->f.detail) - 1),
                     detail->str);
        }
    }
    ds4_buf_free(&dir);
    return rc;
}

/* Slice s's cells back; a slice that stopped before some of its cells ran
 * (SIGINT, SIGTERM) is refused. */
static int restore_slice(ds4_cf_result *res, const shard_file *s, const char *work, ds4err *err) {
    const ds4_json *root = ds4_json_root(s->doc), *cells = ds4_json_get(root, "cell_results");
    uint32_t lo, hi;
    ds4chk_shard_slice(res->n_cells, s->k, s->n, &lo, &hi);
    if (!cells || cells->type != DS4_JSON_ARRAY || cells->n != hi - lo)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: shard %u/%u must hold cells %u to %u", s->path,
                           s->k, s->n, lo, hi - 1);
    for (uint32_t i = lo; i < hi; i++) {
        const ds4_json *rec = &cells->elems[i - lo];
        uint32_t index;
        if (!get_u32(rec, "index", &index) || index != i)
            return ds4_err_set(err, DS4_E_FORMAT, "%s: its cells are not %u to %u in order",
                               s->path, lo, hi - 1);
        if (ds4_json_is_str(ds4_json_get(rec, "state"), "not-run")) {
            char name[256];
            cell_text(res, &res->cells[i], name, sizeof(name));
            return ds4_err_set(err, DS4_E_ARG, "%s: shard %u/%u did not finish: cell %u (%s) did "
                               "not run; run that shard again", s->path, s->k, s->n, i, name);
        }
        if (restore_cell(res, &res->cells[i], rec, i, work, s, err)) return -1;
    }
    /* What the slice's servers said of their model (counted as they ran). */
    const ds4_json *id = ds4_json_get(root, "identity");
    uint32_t v;
    if (get_u32(id, "by_server", &v)) res->identity.by_server += v;
    if (get_u32(id, "server_unnamed", &v)) res->identity.server_unnamed += v;
    const ds4_json *names = ds4_json_get(id, "server_names");
    if (names && names->type == DS4_JSON_STRING && names->len && !res->identity.server_names[0])
        snprintf(res->identity.server_names, sizeof(res->identity.server_names), "%s", names->str);
    return 0;
}

/* The run's "command not found" rule over every slice, as one run meets its
 * cells in order: a cell that exited 127 before any cell ran stops the run,
 * and the cells after it count as not started (n/a, as the driver marks
 * them), whatever their shards did. */
static void replay_not_found(ds4_cf_result *res) {
    uint32_t i = 0;
    while (i < res->n_cells && !res->cells[i].dir && res->cells[i].exit_status != 127) i++;
    if (i == res->n_cells || res->cells[i].dir) return;
    ds4chk_shard_not_found(res, &res->cells[i]);
    for (uint32_t j = i + 1; j < res->n_cells; j++) {
        ds4_cf_cell *c = &res->cells[j];
        if (c->status == DS4_CF_NA) continue;
        free(c->dir);
        c->dir = NULL;
        c->status = c->f.status = DS4_CF_PASS;
        c->f.detail[0] = '\0';
        c->exit_status = -1;
        c->seconds = 0;
        c->log[0] = '\0';
        c->accept = (ds4_cf_accept){0};
        for (uint32_t r = 0; r < c->batch; r++) c->rows[r].cut = -1;
    }
}

int ds4chk_shard_merge(ds4_cf_result *res, const char *desc, const char *const *paths,
                       uint32_t n_paths, const char *work, ds4err *err) {
    char key[65];
    ds4_sha256_hex(desc, strlen(desc), key);
    shard_file *s = calloc(n_paths ? n_paths : 1, sizeof(*s));
    if (!s) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    int rc = n_paths ? 0 : ds4_err_set(err, DS4_E_ARG, "--merge: no shard file");
    for (uint32_t i = 0; rc == 0 && i < n_paths; i++) {
        s[i].path = paths[i];
        rc = read_shard(&s[i], desc, key, res->n_cells, err);
        if (rc == 0 && s[i].n != s[0].n)
            rc = ds4_err_set(err, DS4_E_ARG, "%s is a shard of %u, %s of %u: shards of one split "
                             "only", s[i].path, s[i].n, s[0].path, s[0].n);
        for (uint32_t j = 0; rc == 0 && j < i; j++)
            if (s[j].k == s[i].k)
                rc = ds4_err_set(err, DS4_E_ARG, "%s and %s are both shard %u/%u", s[j].path,
                                 s[i].path, s[i].k, s[i].n);
    }
    /* Every slice once. */
    for (uint32_t k = 0; rc == 0 && k < s[0].n; k++) {
        bool found = false;
        for (uint32_t i = 0; i < n_paths; i++) found |= s[i].k == k;
        if (found) continue;
        uint32_t lo, hi;
        ds4chk_shard_slice(res->n_cells, k, s[0].n, &lo, &hi);
        rc = ds4_err_set(err, DS4_E_ARG, "shard %u/%u (cells %u to %u) is missing: run it "
                         "(--shard %u/%u) and merge again", k, s[0].n, lo, hi ? hi - 1 : 0, k,
                         s[0].n);
    }
    /* In the slices' order, as one run meets its cells. */
    for (uint32_t k = 0; rc == 0 && k < s[0].n; k++)
        for (uint32_t i = 0; rc == 0 && i < n_paths; i++)
            if (s[i].k == k) rc = restore_slice(res, &s[i], work, err);
    if (rc == 0) replay_not_found(res);
    for (uint32_t i = 0; i < n_paths; i++) ds4_json_free(s[i].doc);
    free(s);
    return rc;
}
