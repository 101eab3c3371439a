#include "ref/format/dump.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/hex.h"
#include "base/utf8.h"
#include "ref/text/json.h"
#include "ref/format/reader.h"

/* ================================================================ writing */

/* ds4's json_write_string: its escapes, not Python's (\b and \f go out as
 * \u0008 and \u000c, DEL stays raw). */
static void put_text(ds4_buf *b, const uint8_t *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    bool valid = ds4_utf8_valid(s, n);
    ds4_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        if (c == '"' || c == '\\') {
            e[1] = (char)c;
            ds4_buf_put(b, e, 2);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            ds4_buf_put(b, e, 2);
        } else if (c < 0x20 || (!valid && c >= 0x80)) {
            ds4_buf_put(b, e, 6);
        } else {
            ds4_buf_put(b, &c, 1);
        }
    }
    ds4_buf_put(b, "\"", 1);
}

static void put_tok(ds4_buf *b, const ds4_golden_tok *t) {
    char s[32];
    snprintf(s, sizeof(s), "{\"id\":%" PRId32 ",\"text\":", t->id);
    ds4_buf_puts(b, s);
    put_text(b, t->bytes, t->n_bytes);
    ds4_buf_puts(b, ",\"bytes\":[");
    for (uint32_t i = 0; i < t->n_bytes; i++) {
        snprintf(s, sizeof(s), i ? ",%u" : "%u", (unsigned)t->bytes[i]);
        ds4_buf_puts(b, s);
    }
    ds4_buf_puts(b, "]}");
}

int ds4_dump_format(const ds4_golden *g, ds4_buf *out, ds4err *err) {
    if (!g->has_ids || !g->has_logits)
        return ds4_err_set(err, DS4_E_ARG, "a ds4 logprob dump needs token ids and logits");
    char s[200];
    snprintf(s, sizeof(s),
             "{\n  \"source\":\"" DS4_DUMP_SOURCE "\",\n  \"prompt_tokens\":%u,\n  \"ctx\":%u,"
             "\n  \"top_k\":%u,\n  \"steps\":[\n",
             g->h.n_prompt, g->h.settings.ctx, g->h.settings.top_k);
    ds4_buf_puts(out, s);
    for (uint32_t i = 0; i < g->n_steps; i++) {
        const ds4_golden_step *st = &g->steps[i];
        snprintf(s, sizeof(s), "%s    {\"step\":%u,\"selected\":", i ? ",\n" : "", i);
        ds4_buf_puts(out, s);
        put_tok(out, &st->tok);
        ds4_buf_puts(out, ",\"top_logprobs\":[");
        for (uint32_t k = 0; k < st->n_top; k++) {
            ds4_buf_puts(out, k ? ",{\"token\":" : "{\"token\":");
            put_tok(out, &st->top[k]);
            snprintf(s, sizeof(s), ",\"logit\":%.9g,\"logprob\":%.9g}",
                     (double)st->top[k].logit, (double)(float)st->top[k].logprob);
            ds4_buf_puts(out, s);
        }
        ds4_buf_puts(out, "]}");
    }
    ds4_buf_puts(out, "\n  ]\n}\n");
    return out->failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory formatting a dump") : 0;
}

int ds4_dump_write(const ds4_golden *g, ds4_afile *dst, ds4err *err) {
    ds4_buf b = {0};
    int rc = ds4_dump_format(g, &b, err);
    if (rc == 0) rc = ds4_file_atomic_write(dst, b.p, b.len, err);
    if (rc == 0) rc = ds4_file_atomic_commit(dst, err);
    else ds4_file_atomic_abort(dst);
    ds4_buf_free(&b);
    return rc;
}

/* ================================================================ reading */

static int read_tok(const ds4_rd *r, const ds4_json *v, const char *where, ds4_golden_tok *t) {
    char w[120];
    if (!v || v->type != DS4_JSON_OBJECT)
        return ds4_reader_fail(r, "%s: expected a token object", where);
    uint64_t id;
    snprintf(w, sizeof(w), "%s.id", where);
    if (ds4_reader_uint(r, ds4_json_get(v, "id"), w, INT32_MAX, &id)) return -1;
    t->id = (int32_t)id;
    /* Its bytes: "bytes" when given, else the UTF-8 of "text"; a backend
     * that knows only ids may write neither (the checks compare ids). */
    const ds4_json *text = ds4_json_get(v, "text");
    if (text && text->type != DS4_JSON_STRING)
        return ds4_reader_fail(r, "%s: \"text\" is not a string", where);
    const ds4_json *bytes = ds4_json_get(v, "bytes");
    if (bytes && bytes->type != DS4_JSON_ARRAY)
        return ds4_reader_fail(r, "%s: \"bytes\" is not an array", where);
    size_t n = bytes ? bytes->n : text ? text->len : 0;
    if (n > DS4_GOLDEN_MAX_TOKEN_BYTES)
        return ds4_reader_fail(r, "%s: %zu bytes, more than %d", where, n,
                           DS4_GOLDEN_MAX_TOKEN_BYTES);
    t->bytes = malloc(n ? n : 1);
    if (!t->bytes) return ds4_reader_nomem(r);
    t->n_bytes = (uint32_t)n;
    if (!bytes) {
        if (n) memcpy(t->bytes, text->str, n);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t b;
        snprintf(w, sizeof(w), "%s.bytes[%zu]", where, i);
        if (ds4_reader_uint(r, &bytes->elems[i], w, 255, &b)) return -1;
        t->bytes[i] = (uint8_t)b;
    }
    return 0;
}

static int read_step(const ds4_rd *r, const ds4_json *v, size_t i, uint32_t top_k,
                     ds4_golden_step *st, bool *no_logit) {
    char w[120];
    snprintf(w, sizeof(w), "steps[%zu]", i);
    if (!v || v->type != DS4_JSON_OBJECT) return ds4_reader_fail(r, "%s: expected an object", w);
    uint64_t idx;
    snprintf(w, sizeof(w), "steps[%zu].step", i);
    if (ds4_reader_uint(r, ds4_json_get(v, "step"), w, UINT32_MAX, &idx)) return -1;
    if (idx != i) return ds4_reader_fail(r, "%s: is %" PRIu64 ", expected %zu", w, idx, i);
    snprintf(w, sizeof(w), "steps[%zu].selected", i);
    if (read_tok(r, ds4_json_get(v, "selected"), w, &st->tok)) return -1;
    const ds4_json *top = ds4_json_get(v, "top_logprobs");
    snprintf(w, sizeof(w), "steps[%zu].top_logprobs", i);
    if (!top || top->type != DS4_JSON_ARRAY)
        return ds4_reader_fail(r, "%s: missing or not an array", w);
    if (top->n > top_k)
        return ds4_reader_fail(r, "%s: %zu entries, more than top_k %u", w, top->n, top_k);
    st->top = calloc(top->n ? top->n : 1, sizeof(ds4_golden_tok));
    if (!st->top) return ds4_reader_nomem(r);
    for (size_t k = 0; k < top->n; k++) {
        const ds4_json *e = &top->elems[k];
        ds4_golden_tok *t = &st->top[k];
        st->n_top = (uint32_t)k + 1;
        snprintf(w, sizeof(w), "steps[%zu].top_logprobs[%zu]", i, k);
        if (e->type != DS4_JSON_OBJECT) return ds4_reader_fail(r, "%s: expected an object", w);
        snprintf(w, sizeof(w), "steps[%zu].top_logprobs[%zu].token", i, k);
        if (read_tok(r, ds4_json_get(e, "token"), w, t)) return -1;
        float lp = 0;
        /* A server's logprobs come without logits: then none is used. */
        snprintf(w, sizeof(w), "steps[%zu].top_logprobs[%zu].logit", i, k);
        const ds4_json *logit = ds4_json_get(e, "logit");
        if (!logit) *no_logit = true;
        else if (ds4_reader_f32(r, logit, w, &t->logit)) return -1;
        snprintf(w, sizeof(w), "steps[%zu].top_logprobs[%zu].logprob", i, k);
        if (ds4_reader_f32(r, ds4_json_get(e, "logprob"), w, &lp)) return -1;
        t->logprob = lp;
    }
    return 0;
}

/* "model_sha256", when the dump has it: 64 hex digits, kept lowercase. */
static int read_model_sha256(const ds4_rd *r, const ds4_json *v, char out[65]) {
    out[0] = '\0';
    if (!v) return 0;
    if (v->type != DS4_JSON_STRING || ds4_hex_sha256(v->str, v->len, out)) {
        out[0] = '\0';
        return ds4_reader_fail(r, "model_sha256: expected the 64 hex digits of a SHA-256");
    }
    return 0;
}

int ds4_dump_parse(const char *buf, size_t len, const char *name, ds4_golden *g,
                   ds4err *err) {
    ds4_rd r = {name ? name : "dump", 0, err};
    ds4_golden_init(g, DS4_TRACE_DUMP);
    g->has_ids = g->has_logits = g->lp_f32 = g->has_prompt_count = true;
    ds4_json_doc *doc;
    if (ds4_json_parse(buf, len, r.name, &doc, err)) return -1;
    const ds4_json *root = ds4_json_root(doc);
    int rc = -1;
    uint64_t x;
    if (root->type != DS4_JSON_OBJECT) {
        ds4_reader_fail(&r, "top level: expected an object");
        goto out;
    }
    const ds4_json *src = ds4_json_get(root, "source");
    if (!src || src->type != DS4_JSON_STRING) {
        ds4_reader_fail(&r, "source: missing or not a string");
        goto out;
    }
    if (read_model_sha256(&r, ds4_json_get(root, "model_sha256"), g->model_sha256)) goto out;
    if (ds4_reader_uint(&r, ds4_json_get(root, "prompt_tokens"), "prompt_tokens", UINT32_MAX, &x))
        goto out;
    g->h.n_prompt = (uint32_t)x;
    if (ds4_reader_uint(&r, ds4_json_get(root, "ctx"), "ctx", UINT32_MAX, &x)) goto out;
    g->h.settings.ctx = (uint32_t)x;
    if (ds4_reader_uint(&r, ds4_json_get(root, "top_k"), "top_k", DS4_GOLDEN_MAX_TOP, &x)) goto out;
    g->h.settings.top_k = (uint32_t)x;
    const ds4_json *steps = ds4_json_get(root, "steps");
    if (!steps || steps->type != DS4_JSON_ARRAY) {
        ds4_reader_fail(&r, "steps: missing or not an array");
        goto out;
    }
    if (steps->n > UINT32_MAX) {
        ds4_reader_fail(&r, "steps: too many steps");
        goto out;
    }
    g->h.settings.max_steps = (uint32_t)steps->n;
    for (size_t i = 0; i < steps->n; i++) {
        ds4_golden_step st;
        memset(&st, 0, sizeof(st));
        bool no_logit = false;
        int s = read_step(&r, &steps->elems[i], i, g->h.settings.top_k, &st, &no_logit);
        if (no_logit) g->has_logits = false;
        if (s == 0) s = ds4_golden_push_step(g, &st, err);
        ds4_golden_step_free(&st);
        if (s) goto out;
    }
    rc = 0;
out:
    ds4_json_free(doc);
    if (rc) ds4_golden_free(g);
    return rc;
}
