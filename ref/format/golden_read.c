/* The strict golden reader (golden_read.h). */
#include "ref/format/golden_read.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/hex.h"
#include "ref/model/modelid.h"
#include "ref/text/json.h"
#include "ref/format/golden_write.h"
#include "ref/format/reader.h"

static int get_u32(const ds4_rd *r, const ds4_json *v, const char *what, uint32_t *out) {
    uint64_t x;
    if (ds4_reader_uint(r, v, what, UINT32_MAX, &x)) return -1;
    *out = (uint32_t)x;
    return 0;
}

static int get_id(const ds4_rd *r, const ds4_json *v, const char *what, int32_t *out) {
    uint64_t x;
    if (ds4_reader_uint(r, v, what, INT32_MAX, &x)) return -1;
    *out = (int32_t)x;
    return 0;
}

/* Lowercase hex string of at most max_bytes bytes, decoded into a malloc'd
 * buffer (at least 1 byte allocated). */
static int get_hex(const ds4_rd *r, const ds4_json *v, const char *what, size_t max_bytes,
                   uint8_t **out, size_t *n) {
    if (!v || v->type != DS4_JSON_STRING) return ds4_reader_fail(r, "%s: expected a hex string", what);
    if (v->len % 2) return ds4_reader_fail(r, "%s: odd number of hex digits (%zu)", what, v->len);
    if (v->len / 2 > max_bytes)
        return ds4_reader_fail(r, "%s: %zu bytes, more than %zu", what, v->len / 2, max_bytes);
    for (size_t i = 0; i < v->len; i++) {
        char c = v->str[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return ds4_reader_fail(r, "%s: byte %zu of the hex string is not a lowercase hex digit", what,
                       i);
    }
    *out = malloc(v->len / 2 ? v->len / 2 : 1);
    if (!*out) return ds4_reader_nomem(r);
    ds4_hex_decode(v->str, v->len, *out);
    *n = v->len / 2;
    return 0;
}

static int get_digest(const ds4_rd *r, const ds4_json *v, const char *what, uint8_t out[32]) {
    uint8_t *p;
    size_t n;
    if (get_hex(r, v, what, 32, &p, &n)) return -1;
    if (n != 32) {
        free(p);
        return ds4_reader_fail(r, "%s: expected 64 hex digits, got %zu", what, 2 * n);
    }
    memcpy(out, p, 32);
    free(p);
    return 0;
}

/* A string without NUL bytes, copied. */
static int get_cstr(const ds4_rd *r, const ds4_json *v, const char *what, char **out) {
    if (!v || v->type != DS4_JSON_STRING) return ds4_reader_fail(r, "%s: expected a string", what);
    if (memchr(v->str, '\0', v->len)) return ds4_reader_fail(r, "%s: contains a NUL character", what);
    *out = strdup(v->str);
    return *out ? 0 : ds4_reader_nomem(r);
}

static int read_model(const ds4_rd *r, const ds4_json *v, const char *what, bool nested,
                      ds4_modelid *m) {
    static const char *const keys[] = {"file", "size", "metadata_sha256",
                                       "tensor_data_sha256", "tensors", "mtp"};
    if (ds4_reader_keys(r, v, what, keys, nested ? 5 : 6)) return -1;
    char w[80];
    snprintf(w, sizeof(w), "%s.file", what);
    if (get_cstr(r, ds4_json_get(v, "file"), w, &m->file)) return -1;
    snprintf(w, sizeof(w), "%s.size", what);
    if (ds4_reader_uint(r, ds4_json_get(v, "size"), w, UINT64_MAX, &m->size)) return -1;
    snprintf(w, sizeof(w), "%s.metadata_sha256", what);
    if (get_digest(r, ds4_json_get(v, "metadata_sha256"), w, m->metadata_sha256)) return -1;
    snprintf(w, sizeof(w), "%s.tensor_data_sha256", what);
    if (get_digest(r, ds4_json_get(v, "tensor_data_sha256"), w, m->tensor_data_sha256))
        return -1;
    const ds4_json *ts = ds4_json_get(v, "tensors");
    if (ts->type != DS4_JSON_ARRAY) return ds4_reader_fail(r, "%s.tensors: expected an array", what);
    m->tensors = calloc(ts->n ? ts->n : 1, sizeof(ds4_tensor_hash));
    if (!m->tensors) return ds4_reader_nomem(r);
    for (size_t i = 0; i < ts->n; i++) {
        static const char *const tkeys[] = {"name", "sha256"};
        snprintf(w, sizeof(w), "%s.tensors[%zu]", what, i);
        if (ds4_reader_keys(r, &ts->elems[i], w, tkeys, 2)) return -1;
        m->n_tensors = i + 1;
        if (get_cstr(r, ds4_json_get(&ts->elems[i], "name"), w, &m->tensors[i].name) ||
            get_digest(r, ds4_json_get(&ts->elems[i], "sha256"), w, m->tensors[i].sha256))
            return -1;
    }
    uint8_t d[32];
    ds4_modelid_combine(m->tensors, m->n_tensors, d);
    if (memcmp(d, m->tensor_data_sha256, 32))
        return ds4_reader_fail(r, "%s.tensor_data_sha256 does not match the digest of its tensor list",
                   what);
    return 0;
}

static int read_settings(const ds4_rd *r, const ds4_json *v, ds4_golden_settings *s) {
    static const char *const keys[] = {"qat", "?numerics", "ctx", "chunk", "top_k",
                                       "max_steps", "mtp_draft", "?drafter", "stop_at_eos"};
    if (ds4_reader_keys(r, v, "settings", keys, 9)) return -1;
    const ds4_json *num = ds4_json_get(v, "numerics");
    if (num && (num->type != DS4_JSON_STRING || num->len == 0 ||
                num->len >= sizeof(s->numerics) || strlen(num->str) != num->len))
        return ds4_reader_fail(r, "settings.numerics: expected a profile's name, at most %zu "
                               "bytes", sizeof(s->numerics) - 1);
    if (num) memcpy(s->numerics, num->str, num->len + 1);
    if (ds4_reader_bool(r, ds4_json_get(v, "qat"), "settings.qat", &s->qat) ||
        get_u32(r, ds4_json_get(v, "ctx"), "settings.ctx", &s->ctx) ||
        get_u32(r, ds4_json_get(v, "chunk"), "settings.chunk", &s->chunk) ||
        get_u32(r, ds4_json_get(v, "top_k"), "settings.top_k", &s->top_k) ||
        get_u32(r, ds4_json_get(v, "max_steps"), "settings.max_steps", &s->max_steps) ||
        get_u32(r, ds4_json_get(v, "mtp_draft"), "settings.mtp_draft", &s->mtp_draft) ||
        ds4_reader_bool(r, ds4_json_get(v, "stop_at_eos"), "settings.stop_at_eos", &s->stop_at_eos))
        return -1;
    const ds4_json *dr = ds4_json_get(v, "drafter");
    if (dr && (dr->type != DS4_JSON_STRING || dr->len != 6 || strcmp(dr->str, "dspark") ||
               s->mtp_draft == 0))
        return ds4_reader_fail(r, "settings.drafter: expected \"dspark\" with mtp_draft > 0 (the "
                               "MTP head is named by no drafter key)");
    if (dr) memcpy(s->drafter, "dspark", 7);
    if (s->top_k > DS4_GOLDEN_MAX_TOP)
        return ds4_reader_fail(r, "settings.top_k %u exceeds the limit %d", s->top_k, DS4_GOLDEN_MAX_TOP);
    return 0;
}

static int read_prompt(const ds4_rd *r, const ds4_json *v, ds4_golden_header *h) {
    static const char *const keys[] = {"tokens", "?text_hex"};
    if (ds4_reader_keys(r, v, "prompt", keys, 2)) return -1;
    const ds4_json *t = ds4_json_get(v, "tokens");
    if (t->type != DS4_JSON_ARRAY) return ds4_reader_fail(r, "prompt.tokens: expected an array");
    if (t->n > UINT32_MAX) return ds4_reader_fail(r, "prompt.tokens: too many tokens");
    h->prompt = malloc(t->n ? t->n * sizeof(int32_t) : 1);
    if (!h->prompt) return ds4_reader_nomem(r);
    h->n_prompt = (uint32_t)t->n;
    for (size_t i = 0; i < t->n; i++) {
        char w[48];
        snprintf(w, sizeof(w), "prompt.tokens[%zu]", i);
        if (get_id(r, &t->elems[i], w, &h->prompt[i])) return -1;
    }
    const ds4_json *x = ds4_json_get(v, "text_hex");
    if (x) {
        h->has_prompt_text = true;
        if (get_hex(r, x, "prompt.text_hex", SIZE_MAX / 2, &h->prompt_text, &h->n_prompt_text))
            return -1;
    }
    return 0;
}

static int read_header(const ds4_rd *r, const ds4_json *v, ds4_golden *g) {
    static const char *const keys[] = {"format", "ds4ref_version", "model", "settings",
                                       "prompt"};
    if (!v || v->type != DS4_JSON_OBJECT) return ds4_reader_fail(r, "header: expected an object");
    if (!ds4_json_is_str(ds4_json_get(v, "format"), DS4_GOLDEN_FORMAT))
        return ds4_reader_fail(r, "header: \"format\" is not \"" DS4_GOLDEN_FORMAT "\"");
    if (ds4_reader_keys(r, v, "header", keys, 5)) return -1;
    ds4_golden_header *h = &g->h;
    const ds4_json *ver = ds4_json_get(v, "ds4ref_version");
    if (!ver || ver->type != DS4_JSON_STRING || ver->len == 0 ||
        ver->len > DS4_GOLDEN_VERSION_MAX)
        return ds4_reader_fail(r, "ds4ref_version: expected a string of 1..%d characters",
                   DS4_GOLDEN_VERSION_MAX);
    for (size_t i = 0; i < ver->len; i++)
        if (ver->str[i] < 0x20 || ver->str[i] > 0x7e)
            return ds4_reader_fail(r, "ds4ref_version: not printable ASCII");
    memcpy(h->version, ver->str, ver->len);
    const ds4_json *model = ds4_json_get(v, "model");
    if (read_model(r, model, "model", false, &h->model)) return -1;
    const ds4_json *mtp = ds4_json_get(model, "mtp");
    if (mtp->type != DS4_JSON_NULL) {
        h->has_mtp = true;
        if (read_model(r, mtp, "model.mtp", true, &h->mtp)) return -1;
    }
    if (read_settings(r, ds4_json_get(v, "settings"), &h->settings)) return -1;
    return read_prompt(r, ds4_json_get(v, "prompt"), h);
}

static int read_tok(const ds4_rd *r, const ds4_json *v, const char *what, const char *id_key,
                    ds4_golden_tok *t) {
    char w[64];
    snprintf(w, sizeof(w), "%s%s", what, id_key);
    if (get_id(r, ds4_json_get(v, id_key), w, &t->id)) return -1;
    size_t n;
    snprintf(w, sizeof(w), "%sbytes", what);
    if (get_hex(r, ds4_json_get(v, "bytes"), w, DS4_GOLDEN_MAX_TOKEN_BYTES, &t->bytes, &n))
        return -1;
    t->n_bytes = (uint32_t)n;
    snprintf(w, sizeof(w), "%slogit", what);
    if (ds4_reader_f32(r, ds4_json_get(v, "logit"), w, &t->logit)) return -1;
    snprintf(w, sizeof(w), "%slogprob", what);
    return ds4_reader_f64(r, ds4_json_get(v, "logprob"), w, &t->logprob);
}

static int read_step(const ds4_rd *r, const ds4_json *v, ds4_golden *g, ds4_golden_step *st) {
    static const char *const keys[] = {"step", "token", "bytes", "logit", "logprob",
                                       "logits_sha256", "top"};
    if (ds4_reader_keys(r, v, "step", keys, 7)) return -1;
    uint32_t idx;
    if (get_u32(r, ds4_json_get(v, "step"), "step", &idx)) return -1;
    if (idx != g->n_steps) return ds4_reader_fail(r, "step %u where step %u was expected", idx, g->n_steps);
    if (read_tok(r, v, "", "token", &st->tok)) return -1;
    if (get_digest(r, ds4_json_get(v, "logits_sha256"), "logits_sha256", st->logits_sha256))
        return -1;
    const ds4_json *top = ds4_json_get(v, "top");
    if (top->type != DS4_JSON_ARRAY) return ds4_reader_fail(r, "top: expected an array");
    if (top->n > DS4_GOLDEN_MAX_TOP)
        return ds4_reader_fail(r, "top: %zu entries, more than %d", top->n, DS4_GOLDEN_MAX_TOP);
    st->top = calloc(top->n ? top->n : 1, sizeof(ds4_golden_tok));
    if (!st->top) return ds4_reader_nomem(r);
    for (size_t i = 0; i < top->n; i++) {
        static const char *const tkeys[] = {"id", "bytes", "logit", "logprob"};
        char w[32];
        snprintf(w, sizeof(w), "top[%zu]", i);
        if (ds4_reader_keys(r, &top->elems[i], w, tkeys, 4)) return -1;
        st->n_top = (uint32_t)i + 1;
        snprintf(w, sizeof(w), "top[%zu].", i);
        if (read_tok(r, &top->elems[i], w, "id", &st->top[i])) return -1;
    }
    char why[240];
    ds4_golden_check_step(g, st, why, sizeof(why));
    if (why[0]) return ds4_reader_fail(r, "step %u: %s", idx, why);
    return 0;
}

static int read_end(const ds4_rd *r, const ds4_json *v, ds4_golden *g) {
    static const char *const keys[] = {"end", "steps", "complete", "stop"};
    if (ds4_reader_keys(r, v, "end", keys, 4)) return -1;
    if (ds4_json_get(v, "end")->type != DS4_JSON_TRUE) return ds4_reader_fail(r, "end: expected true");
    uint32_t n;
    bool complete = false;
    if (get_u32(r, ds4_json_get(v, "steps"), "end.steps", &n) ||
        ds4_reader_bool(r, ds4_json_get(v, "complete"), "end.complete", &complete))
        return -1;
    const ds4_json *s = ds4_json_get(v, "stop");
    ds4_stop stop = s->type == DS4_JSON_STRING ? ds4_golden_stop_by_name(s->str, s->len) : DS4_STOP_UNKNOWN;
    if (stop == DS4_STOP_UNKNOWN)
        return ds4_reader_fail(r, "end.stop: expected one of \"length\", \"eos\", \"ctx\", "
                   "\"interrupted\", \"error\"");
    if (n != g->n_steps) return ds4_reader_fail(r, "end.steps is %u but the file has %u steps", n,
                                    g->n_steps);
    if (complete != ds4_stop_complete(stop))
        return ds4_reader_fail(r, "end.complete is %s, but stop \"%s\" means %s", complete ? "true" : "false",
                   ds4_golden_stop_name(stop), ds4_stop_complete(stop) ? "complete" : "incomplete");
    char why[200];
    ds4_golden_check_end(g, stop, why, sizeof(why));
    if (why[0]) return ds4_reader_fail(r, "%s", why);
    ds4_golden_set_end(g, stop);
    return 0;
}

/* The line exactly as the writer would print it; a different spelling
 * (spaces, key order, "1.50" for 1.5, uppercase hex) is rejected. */
static int check_canonical(const ds4_rd *r, const char *line, size_t len, const ds4_buf *canon) {
    if (canon->failed) return ds4_reader_nomem(r);
    size_t n = canon->len - 1;   /* without its '\n' */
    size_t i = 0;
    while (i < len && i < n && line[i] == canon->p[i]) i++;
    if (i == len && i == n) return 0;
    return ds4_reader_fail(r, "not in canonical form at byte %zu: the file has \"%.24s\" where ds4ref "
               "writes \"%.24s\"", i, line + i, canon->p + i);
}

typedef enum { LINE_HEADER, LINE_STEP, LINE_END } line_kind;

static int parse_line(const ds4_rd *r, const char *line, size_t len, line_kind kind,
                      ds4_golden *g) {
    char name[300];
    snprintf(name, sizeof(name), "%s:%u", r->name, r->line);
    ds4_json_doc *doc;
    if (ds4_json_parse(line, len, name, &doc, r->err)) return -1;
    const ds4_json *v = ds4_json_root(doc);
    ds4_buf canon = {0};
    int rc;
    if (kind == LINE_HEADER) {
        rc = read_header(r, v, g);
        if (rc == 0) ds4_golden_write_header_line(&canon, g);
    } else if (kind == LINE_STEP) {
        ds4_golden_step st;
        memset(&st, 0, sizeof(st));
        rc = read_step(r, v, g, &st);
        if (rc == 0) ds4_golden_write_step_line(&canon, g->n_steps, &st);
        if (rc == 0) rc = check_canonical(r, line, len, &canon);
        if (rc == 0) rc = ds4_golden_take_step(g, &st, r->err);
        ds4_golden_step_free(&st);
        ds4_buf_free(&canon);
        ds4_json_free(doc);
        return rc;
    } else {
        rc = read_end(r, v, g);
        if (rc == 0) ds4_golden_write_end_line(&canon, g->n_steps, g->stop);
    }
    if (rc == 0) rc = check_canonical(r, line, len, &canon);
    ds4_buf_free(&canon);
    ds4_json_free(doc);
    return rc;
}

int ds4_golden_read_text(const char *buf, size_t len, const char *name, ds4_golden *g,
                     ds4err *err) {
    ds4_golden_init(g, DS4_TRACE_GOLDEN);
    g->has_header = g->has_ids = g->has_logits = g->has_sel_scores = g->has_digests = true;
    g->has_prompt_tokens = g->has_prompt_count = true;
    ds4_rd r = {name ? name : "golden", 0, err};
    size_t pos = 0;
    int rc = 0;
    while (rc == 0 && !g->has_end) {
        const char *line;
        size_t n;
        bool newline;
        if (!ds4_reader_next_line(&r, buf, len, &pos, &line, &n, &newline)) {
            r.line++;
            rc = r.line == 1 ? ds4_reader_fail(&r, "empty file: expected the header line")
                             : ds4_reader_fail(&r, "the file ends without the end line (truncated?)");
            break;
        }
        if (!newline) {
            rc = ds4_reader_fail(&r, "no newline at the end of the line (truncated?)");
            break;
        }
        if (r.line == 1) {
            rc = parse_line(&r, line, n, LINE_HEADER, g);
            continue;
        }
        /* Steps and the end line are told apart by their first key, which
         * the canonical check then pins down anyway. */
        bool is_end = n >= 7 && !memcmp(line, "{\"end\":", 7);
        rc = parse_line(&r, line, n, is_end ? LINE_END : LINE_STEP, g);
    }
    if (rc == 0 && pos != len) {
        r.line++;
        rc = ds4_reader_fail(&r, "data after the end line");
    }
    if (rc) ds4_golden_free(g);
    return rc;
}

/* The whole file, then the parser: the two trace readers of whole files
 * (golden_read.c, lpvec.c) end with these few lines, for their own parser
 * and result type; ds4 dumps are read through trace.c. */
int ds4_golden_read(const char *path, ds4_golden *g, ds4err *err) {
    char *buf;
    size_t len;
    ds4_golden_init(g, DS4_TRACE_GOLDEN);
    if (ds4_file_read(path, DS4_GOLDEN_MAX_FILE, &buf, &len, err)) return -1;
    int rc = ds4_golden_read_text(buf, len, path, g, err);
    free(buf);
    return rc;
}

