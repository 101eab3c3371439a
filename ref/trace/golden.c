#include "trace/golden.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "decode/generate.h"
#include "base/sha256.h"
#include "base/utf8.h"

static const char *const stop_names[] = {
    [DS4_STOP_UNKNOWN] = NULL,
    [DS4_STOP_LENGTH] = "length",
    [DS4_STOP_EOS] = "eos",
    [DS4_STOP_CTX] = "ctx",
    [DS4_STOP_INTERRUPTED] = "interrupted",
    [DS4_STOP_ERROR] = "error",
};
#define N_STOP ((int)(sizeof(stop_names) / sizeof(stop_names[0])))

const char *ds4_stop_name(ds4_stop s) {
    return (int)s >= 0 && (int)s < N_STOP ? stop_names[s] : NULL;
}

/* ================================================================ helpers */

int ds4_hex_decode(const char *s, size_t n, uint8_t *out) {
    if (n % 2) return -1;
    for (size_t i = 0; i < n; i += 2) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[i + (size_t)k];
            int d = c >= '0' && c <= '9' ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) return -1;
            v = v * 16 + d;
        }
        out[i / 2] = (uint8_t)v;
    }
    return 0;
}

void ds4_bytes_show(const uint8_t *b, uint32_t n, char *out, size_t max) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (max < 8) {
        if (max) out[0] = '\0';
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        char piece[5];
        size_t len = 0;
        if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\' && b[i] != '"') {
            piece[len++] = (char)b[i];
        } else {
            piece[len++] = '\\';
            piece[len++] = 'x';
            piece[len++] = hex[b[i] >> 4];
            piece[len++] = hex[b[i] & 15];
        }
        if (o + len + 4 > max) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, piece, len);
        o += len;
    }
    out[o] = '\0';
}

static bool utf8_valid(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = ds4_utf8_next(s + i, n - i, &cp);
        if (!len || cp == 0) return false;   /* NUL would end a C string */
        i += len;
    }
    return true;
}

/* ================================================================ memory */

static void tok_free(ds4_golden_tok *t) {
    free(t->bytes);
    t->bytes = NULL;
    t->n_bytes = 0;
}

static void step_free(ds4_golden_step *s) {
    tok_free(&s->tok);
    for (uint32_t i = 0; i < s->n_top; i++) tok_free(&s->top[i]);
    free(s->top);
    memset(s, 0, sizeof(*s));
}

static void header_free(ds4_golden_header *h) {
    ds4_modelid_free(&h->model);
    ds4_modelid_free(&h->mtp);
    free(h->prompt);
    free(h->prompt_text);
    memset(h, 0, sizeof(*h));
}

void ds4_golden_init(ds4_golden *g, ds4_trace_kind kind) {
    memset(g, 0, sizeof(*g));
    g->kind = kind;
}

void ds4_golden_free(ds4_golden *g) {
    for (uint32_t i = 0; i < g->n_steps; i++) step_free(&g->steps[i]);
    free(g->steps);
    header_free(&g->h);
    ds4_golden_init(g, g->kind);
}

static int nomem(ds4err *err) {
    return ds4err_set(err, DS4_E_NOMEM, "out of memory building a golden");
}

static int tok_copy(ds4_golden_tok *dst, const ds4_golden_tok *src) {
    *dst = *src;
    dst->bytes = malloc(src->n_bytes ? src->n_bytes : 1);
    if (!dst->bytes) return -1;
    if (src->n_bytes) memcpy(dst->bytes, src->bytes, src->n_bytes);
    return 0;
}

static int step_copy(ds4_golden_step *dst, const ds4_golden_step *src) {
    memset(dst, 0, sizeof(*dst));
    memcpy(dst->logits_sha256, src->logits_sha256, 32);
    if (tok_copy(&dst->tok, &src->tok)) return -1;
    dst->top = calloc(src->n_top ? src->n_top : 1, sizeof(ds4_golden_tok));
    if (!dst->top) {
        step_free(dst);
        return -1;
    }
    for (uint32_t i = 0; i < src->n_top; i++) {
        if (tok_copy(&dst->top[i], &src->top[i])) {
            step_free(dst);
            return -1;
        }
        dst->n_top = i + 1;
    }
    return 0;
}

int ds4_golden_set_header(ds4_golden *g, const ds4_golden_header *h, ds4err *err) {
    size_t vlen = strnlen(h->version, sizeof(h->version));
    if (vlen == 0 || vlen > DS4_GOLDEN_VERSION_MAX)
        return ds4err_set(err, DS4_E_ARG, "golden header: ds4ref version must be 1..%d chars",
                          DS4_GOLDEN_VERSION_MAX);
    for (size_t i = 0; i < vlen; i++)
        if (h->version[i] < 0x20 || h->version[i] > 0x7e)
            return ds4err_set(err, DS4_E_ARG,
                              "golden header: ds4ref version has a non-printable byte");
    const ds4_modelid *ms[2] = {&h->model, h->has_mtp ? &h->mtp : NULL};
    for (int k = 0; k < 2; k++) {
        if (!ms[k]) continue;
        if (!ms[k]->file || !utf8_valid((const uint8_t *)ms[k]->file, strlen(ms[k]->file)))
            return ds4err_set(err, DS4_E_ARG,
                              "golden header: model file name is missing or not UTF-8");
        for (uint64_t i = 0; i < ms[k]->n_tensors; i++)
            if (!utf8_valid((const uint8_t *)ms[k]->tensors[i].name,
                            strlen(ms[k]->tensors[i].name)))
                return ds4err_set(err, DS4_E_ARG,
                                  "golden header: %s: tensor %" PRIu64 " name is not UTF-8",
                                  ms[k]->file, i);
    }
    if (h->settings.top_k > DS4_GOLDEN_MAX_TOP)
        return ds4err_set(err, DS4_E_ARG, "golden header: top_k %u exceeds the limit %d",
                          h->settings.top_k, DS4_GOLDEN_MAX_TOP);
    if (h->n_prompt && !h->prompt)
        return ds4err_set(err, DS4_E_ARG, "golden header: %u prompt tokens but no token list",
                          h->n_prompt);
    for (uint32_t i = 0; i < h->n_prompt; i++)
        if (h->prompt[i] < 0)
            return ds4err_set(err, DS4_E_ARG, "golden header: prompt token %u is negative", i);

    ds4_golden_header c;
    memset(&c, 0, sizeof(c));
    memcpy(c.version, h->version, vlen);
    c.settings = h->settings;
    c.has_mtp = h->has_mtp;
    c.n_prompt = h->n_prompt;
    c.has_prompt_text = h->has_prompt_text;
    c.n_prompt_text = h->has_prompt_text ? h->n_prompt_text : 0;
    if (ds4_modelid_copy(&c.model, &h->model, err)) return -1;
    if (h->has_mtp && ds4_modelid_copy(&c.mtp, &h->mtp, err)) {
        header_free(&c);
        return -1;
    }
    c.prompt = malloc(h->n_prompt ? (size_t)h->n_prompt * sizeof(int32_t) : 1);
    c.prompt_text = malloc(c.n_prompt_text ? c.n_prompt_text : 1);
    if (!c.prompt || !c.prompt_text) {
        header_free(&c);
        return nomem(err);
    }
    if (h->n_prompt) memcpy(c.prompt, h->prompt, (size_t)h->n_prompt * sizeof(int32_t));
    if (c.n_prompt_text) memcpy(c.prompt_text, h->prompt_text, c.n_prompt_text);
    header_free(&g->h);
    g->h = c;
    g->kind = DS4_TRACE_GOLDEN;
    g->has_header = g->has_ids = g->has_logits = g->has_sel_scores = g->has_digests = true;
    g->has_prompt_tokens = g->has_prompt_count = true;
    g->lp_f32 = false;
    return 0;
}

/* ================================================================ checks */

static bool tok_same(const ds4_golden_tok *a, const ds4_golden_tok *b) {
    return a->id == b->id && a->n_bytes == b->n_bytes &&
           !memcmp(a->bytes, b->bytes, a->n_bytes) &&
           !memcmp(&a->logit, &b->logit, sizeof(float)) &&
           !memcmp(&a->logprob, &b->logprob, sizeof(double));
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* What a ds4ref golden step must satisfy; "" when it does.  The writer and
 * the reader both apply it, so ds4ref never writes what it would refuse. */
static void check_golden_step(const ds4_golden *g, const ds4_golden_step *s, char *why,
                              size_t cap) {
    why[0] = '\0';
    const ds4_golden_tok *t = &s->tok;
    if (t->id < 0) {
        snprintf(why, cap, "token id %" PRId32 " is negative", t->id);
    } else if (t->n_bytes > DS4_GOLDEN_MAX_TOKEN_BYTES) {
        snprintf(why, cap, "token has %u bytes, more than %d", t->n_bytes,
                 DS4_GOLDEN_MAX_TOKEN_BYTES);
    } else if (!isfinite(t->logit) || !isfinite(t->logprob)) {
        snprintf(why, cap, "token %" PRId32 ": logit %g / logprob %g is not finite", t->id,
                 (double)t->logit, t->logprob);
    } else if (s->n_top > g->h.settings.top_k) {
        snprintf(why, cap, "%u alternatives, more than top_k %u", s->n_top,
                 g->h.settings.top_k);
    } else if (s->n_top && !tok_same(&s->top[0], t)) {
        snprintf(why, cap, "top[0] (id %" PRId32 ") is not the greedy token %" PRId32
                 " with the same bytes and scores", s->top[0].id, t->id);
    }
    if (why[0]) return;
    int32_t ids[DS4_GOLDEN_MAX_TOP];
    for (uint32_t i = 0; i < s->n_top; i++) {
        const ds4_golden_tok *a = &s->top[i];
        ids[i] = a->id;
        if (a->id < 0) {
            snprintf(why, cap, "top[%u]: id %" PRId32 " is negative", i, a->id);
        } else if (a->n_bytes > DS4_GOLDEN_MAX_TOKEN_BYTES) {
            snprintf(why, cap, "top[%u]: %u bytes, more than %d", i, a->n_bytes,
                     DS4_GOLDEN_MAX_TOKEN_BYTES);
        } else if (!isfinite(a->logit) || !isfinite(a->logprob)) {
            snprintf(why, cap, "top[%u]: logit %g / logprob %g is not finite", i,
                     (double)a->logit, a->logprob);
        } else if (i > 0) {
            const ds4_golden_tok *p = &s->top[i - 1];
            if (!(p->logit > a->logit || (p->logit == a->logit && p->id < a->id)))
                snprintf(why, cap, "top[%u] (id %" PRId32 ", logit %.9g) is not after top[%u] "
                         "(id %" PRId32 ", logit %.9g): order is logit descending, then id "
                         "ascending", i, a->id, (double)a->logit, i - 1, p->id,
                         (double)p->logit);
        }
        if (why[0]) return;
    }
    qsort(ids, s->n_top, sizeof(int32_t), cmp_i32);
    for (uint32_t i = 1; i < s->n_top; i++)
        if (ids[i] == ids[i - 1]) {
            snprintf(why, cap, "token id %" PRId32 " appears twice in top", ids[i]);
            return;
        }
}

static int append_moved(ds4_golden *g, ds4_golden_step *st, ds4err *err) {
    if (g->n_steps == UINT32_MAX) return ds4err_set(err, DS4_E_RANGE, "too many steps");
    if (g->n_steps == g->cap_steps) {
        uint32_t cap = g->cap_steps ? (g->cap_steps > UINT32_MAX / 2 ? UINT32_MAX
                                                                     : g->cap_steps * 2)
                                    : 16;
        ds4_golden_step *p = realloc(g->steps, (size_t)cap * sizeof(*p));
        if (!p) return nomem(err);
        g->steps = p;
        g->cap_steps = cap;
    }
    g->steps[g->n_steps++] = *st;
    memset(st, 0, sizeof(*st));
    return 0;
}

int ds4_golden_push_step(ds4_golden *g, const ds4_golden_step *st, ds4err *err) {
    if (g->kind == DS4_TRACE_GOLDEN) {
        char why[240];
        check_golden_step(g, st, why, sizeof(why));
        if (why[0]) return ds4err_set(err, DS4_E_FORMAT, "step %u: %s", g->n_steps, why);
    }
    ds4_golden_step c;
    if (step_copy(&c, st)) return nomem(err);
    if (append_moved(g, &c, err)) {
        step_free(&c);
        return -1;
    }
    return 0;
}

/* ================================================================ from a generation step */

static int resolve(ds4_golden_tok *t, int32_t id, ds4_tok_bytes_fn fn, void *ud, ds4err *err) {
    ds4_buf b = {0};
    t->id = id;
    if (fn(ud, id, &b, err)) {
        ds4_buf_free(&b);
        return -1;
    }
    if (b.failed) {
        ds4_buf_free(&b);
        return nomem(err);
    }
    if (b.len > DS4_GOLDEN_MAX_TOKEN_BYTES) {
        ds4_buf_free(&b);
        return ds4err_set(err, DS4_E_RANGE, "token %" PRId32 " has %zu bytes, more than %d",
                          id, b.len, DS4_GOLDEN_MAX_TOKEN_BYTES);
    }
    t->n_bytes = (uint32_t)b.len;
    t->bytes = b.len ? (uint8_t *)b.p : malloc(1);
    if (!t->bytes) return nomem(err);
    return 0;
}

int ds4_golden_add_step(ds4_golden *g, const ds4_gen_step *gs, ds4_tok_bytes_fn fn, void *ud,
                        ds4err *err) {
    if (gs->n_top > DS4_GOLDEN_MAX_TOP)
        return ds4err_set(err, DS4_E_RANGE, "step %u: %u alternatives, more than %d",
                          g->n_steps, gs->n_top, DS4_GOLDEN_MAX_TOP);
    ds4_golden_step st;
    memset(&st, 0, sizeof(st));
    st.top = calloc(gs->n_top ? gs->n_top : 1, sizeof(ds4_golden_tok));
    if (!st.top) return nomem(err);
    int rc = resolve(&st.tok, gs->token, fn, ud, err);
    st.tok.logit = gs->logit;
    st.tok.logprob = gs->logprob;
    memcpy(st.logits_sha256, gs->digest, 32);
    for (uint32_t i = 0; rc == 0 && i < gs->n_top; i++) {
        rc = resolve(&st.top[i], gs->top_ids[i], fn, ud, err);
        st.top[i].logit = gs->top_logits[i];
        st.top[i].logprob = gs->top_logprobs[i];
        st.n_top = i + 1;
    }
    if (rc == 0 && g->kind == DS4_TRACE_GOLDEN) {
        char why[240];
        check_golden_step(g, &st, why, sizeof(why));
        if (why[0]) rc = ds4err_set(err, DS4_E_RANGE, "step %u: %s", g->n_steps, why);
    }
    if (rc == 0) rc = append_moved(g, &st, err);
    step_free(&st);
    return rc;
}

void ds4_golden_set_end(ds4_golden *g, ds4_stop stop) {
    g->has_end = true;
    g->stop = stop;
}

/* ================================================================ formatting */

static void put_u64(ds4_buf *b, uint64_t v) {
    char s[24];
    snprintf(s, sizeof(s), "%" PRIu64, v);
    ds4_buf_puts(b, s);
}

static void put_f32(ds4_buf *b, float v) {
    char s[40];
    snprintf(s, sizeof(s), "%.9g", (double)v);
    ds4_buf_puts(b, s);
}

static void put_f64(ds4_buf *b, double v) {
    char s[40];
    snprintf(s, sizeof(s), "%.17g", v);
    ds4_buf_puts(b, s);
}

static void put_hex(ds4_buf *b, const uint8_t *p, size_t n) {
    char chunk[129];
    ds4_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i += 64) {
        size_t k = n - i < 64 ? n - i : 64;
        ds4_hex(p + i, k, chunk);
        ds4_buf_put(b, chunk, 2 * k);
    }
    ds4_buf_put(b, "\"", 1);
}

static void put_model(ds4_buf *b, const ds4_modelid *m, const ds4_modelid *mtp, bool nested) {
    ds4_buf_puts(b, "{\"file\":");
    ds4_json_put_str(b, m->file, strlen(m->file));
    ds4_buf_puts(b, ",\"size\":");
    put_u64(b, m->size);
    ds4_buf_puts(b, ",\"metadata_sha256\":");
    put_hex(b, m->metadata_sha256, 32);
    ds4_buf_puts(b, ",\"tensor_data_sha256\":");
    put_hex(b, m->tensor_data_sha256, 32);
    ds4_buf_puts(b, ",\"tensors\":[");
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        ds4_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        ds4_json_put_str(b, m->tensors[i].name, strlen(m->tensors[i].name));
        ds4_buf_puts(b, ",\"sha256\":");
        put_hex(b, m->tensors[i].sha256, 32);
        ds4_buf_puts(b, "}");
    }
    ds4_buf_puts(b, "]");
    if (!nested) {
        ds4_buf_puts(b, ",\"mtp\":");
        if (mtp) put_model(b, mtp, NULL, true);
        else ds4_buf_puts(b, "null");
    }
    ds4_buf_puts(b, "}");
}

static void put_header_line(ds4_buf *b, const ds4_golden *g) {
    const ds4_golden_header *h = &g->h;
    const ds4_golden_settings *s = &h->settings;
    ds4_buf_puts(b, "{\"format\":\"" DS4_GOLDEN_FORMAT "\",\"ds4ref_version\":");
    ds4_json_put_str(b, h->version, strlen(h->version));
    ds4_buf_puts(b, ",\"model\":");
    put_model(b, &h->model, h->has_mtp ? &h->mtp : NULL, false);
    ds4_buf_puts(b, ",\"settings\":{\"qat\":");
    ds4_buf_puts(b, s->qat ? "true" : "false");
    ds4_buf_puts(b, ",\"ctx\":");
    put_u64(b, s->ctx);
    ds4_buf_puts(b, ",\"chunk\":");
    put_u64(b, s->chunk);
    ds4_buf_puts(b, ",\"top_k\":");
    put_u64(b, s->top_k);
    ds4_buf_puts(b, ",\"max_steps\":");
    put_u64(b, s->max_steps);
    ds4_buf_puts(b, ",\"mtp_draft\":");
    put_u64(b, s->mtp_draft);
    ds4_buf_puts(b, ",\"stop_at_eos\":");
    ds4_buf_puts(b, s->stop_at_eos ? "true" : "false");
    ds4_buf_puts(b, "},\"prompt\":{\"tokens\":[");
    for (uint32_t i = 0; i < h->n_prompt; i++) {
        if (i) ds4_buf_put(b, ",", 1);
        put_u64(b, (uint64_t)h->prompt[i]);
    }
    ds4_buf_puts(b, "]");
    if (h->has_prompt_text) {
        ds4_buf_puts(b, ",\"text_hex\":");
        put_hex(b, h->prompt_text, h->n_prompt_text);
    }
    ds4_buf_puts(b, "}}\n");
}

static void put_tok_fields(ds4_buf *b, const ds4_golden_tok *t, const char *id_key) {
    ds4_buf_puts(b, id_key);
    put_u64(b, (uint64_t)t->id);
    ds4_buf_puts(b, ",\"bytes\":");
    put_hex(b, t->bytes, t->n_bytes);
    ds4_buf_puts(b, ",\"logit\":");
    put_f32(b, t->logit);
    ds4_buf_puts(b, ",\"logprob\":");
    put_f64(b, t->logprob);
}

static void put_step_line(ds4_buf *b, uint32_t i, const ds4_golden_step *s) {
    ds4_buf_puts(b, "{\"step\":");
    put_u64(b, i);
    put_tok_fields(b, &s->tok, ",\"token\":");
    ds4_buf_puts(b, ",\"logits_sha256\":");
    put_hex(b, s->logits_sha256, 32);
    ds4_buf_puts(b, ",\"top\":[");
    for (uint32_t k = 0; k < s->n_top; k++) {
        ds4_buf_puts(b, k ? ",{" : "{");
        put_tok_fields(b, &s->top[k], "\"id\":");
        ds4_buf_puts(b, "}");
    }
    ds4_buf_puts(b, "]}\n");
}

static void put_end_line(ds4_buf *b, uint32_t n_steps, ds4_stop stop) {
    ds4_buf_puts(b, "{\"end\":true,\"steps\":");
    put_u64(b, n_steps);
    ds4_buf_puts(b, ds4_stop_complete(stop) ? ",\"complete\":true,\"stop\":\""
                                            : ",\"complete\":false,\"stop\":\"");
    ds4_buf_puts(b, ds4_stop_name(stop));
    ds4_buf_puts(b, "\"}\n");
}

/* The consistency the end line must have with the steps and settings. */
static void check_end(const ds4_golden *g, ds4_stop stop, char *why, size_t cap) {
    why[0] = '\0';
    uint32_t max = g->h.settings.max_steps;
    if (!ds4_stop_name(stop))
        snprintf(why, cap, "unknown stop reason");
    else if (g->n_steps > max)
        snprintf(why, cap, "%u steps, more than max_steps %u", g->n_steps, max);
    else if (stop == DS4_STOP_LENGTH && g->n_steps != max)
        snprintf(why, cap, "stop \"length\" after %u steps, but max_steps is %u", g->n_steps,
                 max);
}

int ds4_golden_format(const ds4_golden *g, ds4_buf *out, ds4err *err) {
    if (g->kind != DS4_TRACE_GOLDEN || !g->has_header)
        return ds4err_set(err, DS4_E_ARG, "only a ds4ref golden can be written as one");
    if (!g->has_end) return ds4err_set(err, DS4_E_ARG, "golden has no end record yet");
    char why[200];
    check_end(g, g->stop, why, sizeof(why));
    if (why[0]) return ds4err_set(err, DS4_E_ARG, "golden end: %s", why);
    put_header_line(out, g);
    for (uint32_t i = 0; i < g->n_steps; i++) put_step_line(out, i, &g->steps[i]);
    put_end_line(out, g->n_steps, g->stop);
    return out->failed ? nomem(err) : 0;
}

int ds4_golden_write(const ds4_golden *g, const char *path, ds4err *err) {
    ds4_buf b = {0};
    int rc = ds4_golden_format(g, &b, err);
    if (rc == 0) rc = ds4_write_file_atomic(path, b.p ? b.p : "", b.len, err);
    if (rc) ds4err_prefix(err, "%s", path);
    ds4_buf_free(&b);
    return rc;
}

/* ================================================================ reading */

typedef struct rd {
    const char *name;
    uint32_t line;
    ds4err *err;
} rd;

static int bad(const rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const rd *r, const char *fmt, ...) {
    char msg[DS4_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return ds4err_set(r->err, DS4_E_FORMAT, "%s:%u: %s", r->name, r->line, msg);
}

/* Every member of obj is one of keys[] (each at most once) and every key not
 * marked optional ('?' prefix) is there. */
static int check_keys(const rd *r, const ds4_json *obj, const char *what,
                      const char *const *keys, size_t nk) {
    if (!obj || obj->type != DS4_JSON_OBJECT) return bad(r, "%s: expected an object", what);
    unsigned seen = 0;
    for (size_t m = 0; m < obj->n; m++) {
        const ds4_json *k = &obj->keys[m];
        size_t j = 0;
        for (; j < nk; j++) {
            const char *name = keys[j][0] == '?' ? keys[j] + 1 : keys[j];
            if (k->len == strlen(name) && !memcmp(k->str, name, k->len)) break;
        }
        if (j == nk) return bad(r, "%s: unexpected key \"%.60s\"", what, k->str);
        if (seen & (1u << j)) return bad(r, "%s: key \"%s\" appears twice", what, k->str);
        seen |= 1u << j;
    }
    for (size_t j = 0; j < nk; j++)
        if (keys[j][0] != '?' && !(seen & (1u << j)))
            return bad(r, "%s: missing key \"%s\"", what, keys[j]);
    return 0;
}

static int get_uint(const rd *r, const ds4_json *v, const char *what, uint64_t max,
                    uint64_t *out) {
    if (!v || v->type != DS4_JSON_NUMBER)
        return bad(r, "%s: expected a non-negative integer", what);
    for (size_t i = 0; i < v->len; i++)
        if (v->str[i] < '0' || v->str[i] > '9')
            return bad(r, "%s: expected a non-negative integer, got %.40s", what, v->str);
    errno = 0;
    unsigned long long x = strtoull(v->str, NULL, 10);
    if (errno || x > max)
        return bad(r, "%s: %.40s is out of range (at most %" PRIu64 ")", what, v->str, max);
    *out = x;
    return 0;
}

static int get_u32(const rd *r, const ds4_json *v, const char *what, uint32_t *out) {
    uint64_t x;
    if (get_uint(r, v, what, UINT32_MAX, &x)) return -1;
    *out = (uint32_t)x;
    return 0;
}

static int get_id(const rd *r, const ds4_json *v, const char *what, int32_t *out) {
    uint64_t x;
    if (get_uint(r, v, what, INT32_MAX, &x)) return -1;
    *out = (int32_t)x;
    return 0;
}

static int get_bool(const rd *r, const ds4_json *v, const char *what, bool *out) {
    if (!v || (v->type != DS4_JSON_TRUE && v->type != DS4_JSON_FALSE))
        return bad(r, "%s: expected true or false", what);
    *out = v->type == DS4_JSON_TRUE;
    return 0;
}

/* A finite f32.  The literal is converted with strtof, not through a double,
 * so it lands on exactly the float it was printed from. */
static int get_f32(const rd *r, const ds4_json *v, const char *what, float *out) {
    if (!v || v->type != DS4_JSON_NUMBER) return bad(r, "%s: expected a number", what);
    char *end;
    float x = strtof(v->str, &end);
    if (end != v->str + v->len || !isfinite(x))
        return bad(r, "%s: %.40s is not a finite f32 value", what, v->str);
    *out = x;
    return 0;
}

static int get_f64(const rd *r, const ds4_json *v, const char *what, double *out) {
    if (!v || v->type != DS4_JSON_NUMBER) return bad(r, "%s: expected a number", what);
    char *end;
    double x = strtod(v->str, &end);
    if (end != v->str + v->len || !isfinite(x))
        return bad(r, "%s: %.40s is not a finite double", what, v->str);
    *out = x;
    return 0;
}

/* Lowercase hex string of at most max_bytes bytes, decoded into a malloc'd
 * buffer (at least 1 byte allocated). */
static int get_hex(const rd *r, const ds4_json *v, const char *what, size_t max_bytes,
                   uint8_t **out, size_t *n) {
    if (!v || v->type != DS4_JSON_STRING) return bad(r, "%s: expected a hex string", what);
    if (v->len % 2) return bad(r, "%s: odd number of hex digits (%zu)", what, v->len);
    if (v->len / 2 > max_bytes)
        return bad(r, "%s: %zu bytes, more than %zu", what, v->len / 2, max_bytes);
    for (size_t i = 0; i < v->len; i++) {
        char c = v->str[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return bad(r, "%s: byte %zu of the hex string is not a lowercase hex digit", what,
                       i);
    }
    *out = malloc(v->len / 2 ? v->len / 2 : 1);
    if (!*out) return nomem(r->err);
    ds4_hex_decode(v->str, v->len, *out);
    *n = v->len / 2;
    return 0;
}

static int get_digest(const rd *r, const ds4_json *v, const char *what, uint8_t out[32]) {
    uint8_t *p;
    size_t n;
    if (get_hex(r, v, what, 32, &p, &n)) return -1;
    if (n != 32) {
        free(p);
        return bad(r, "%s: expected 64 hex digits, got %zu", what, 2 * n);
    }
    memcpy(out, p, 32);
    free(p);
    return 0;
}

/* A string without NUL bytes, copied. */
static int get_cstr(const rd *r, const ds4_json *v, const char *what, char **out) {
    if (!v || v->type != DS4_JSON_STRING) return bad(r, "%s: expected a string", what);
    if (memchr(v->str, '\0', v->len)) return bad(r, "%s: contains a NUL character", what);
    *out = strdup(v->str);
    return *out ? 0 : nomem(r->err);
}

static int read_model(const rd *r, const ds4_json *v, const char *what, bool nested,
                      ds4_modelid *m) {
    static const char *const keys[] = {"file", "size", "metadata_sha256",
                                       "tensor_data_sha256", "tensors", "mtp"};
    if (check_keys(r, v, what, keys, nested ? 5 : 6)) return -1;
    char w[80];
    snprintf(w, sizeof(w), "%s.file", what);
    if (get_cstr(r, ds4_json_get(v, "file"), w, &m->file)) return -1;
    snprintf(w, sizeof(w), "%s.size", what);
    if (get_uint(r, ds4_json_get(v, "size"), w, UINT64_MAX, &m->size)) return -1;
    snprintf(w, sizeof(w), "%s.metadata_sha256", what);
    if (get_digest(r, ds4_json_get(v, "metadata_sha256"), w, m->metadata_sha256)) return -1;
    snprintf(w, sizeof(w), "%s.tensor_data_sha256", what);
    if (get_digest(r, ds4_json_get(v, "tensor_data_sha256"), w, m->tensor_data_sha256))
        return -1;
    const ds4_json *ts = ds4_json_get(v, "tensors");
    if (ts->type != DS4_JSON_ARRAY) return bad(r, "%s.tensors: expected an array", what);
    m->tensors = calloc(ts->n ? ts->n : 1, sizeof(ds4_tensor_hash));
    if (!m->tensors) return nomem(r->err);
    for (size_t i = 0; i < ts->n; i++) {
        static const char *const tkeys[] = {"name", "sha256"};
        snprintf(w, sizeof(w), "%s.tensors[%zu]", what, i);
        if (check_keys(r, &ts->elems[i], w, tkeys, 2)) return -1;
        m->n_tensors = i + 1;
        if (get_cstr(r, ds4_json_get(&ts->elems[i], "name"), w, &m->tensors[i].name) ||
            get_digest(r, ds4_json_get(&ts->elems[i], "sha256"), w, m->tensors[i].sha256))
            return -1;
    }
    uint8_t d[32];
    ds4_modelid_combine(m->tensors, m->n_tensors, d);
    if (memcmp(d, m->tensor_data_sha256, 32))
        return bad(r, "%s.tensor_data_sha256 does not match the digest of its tensor list",
                   what);
    return 0;
}

static int read_settings(const rd *r, const ds4_json *v, ds4_golden_settings *s) {
    static const char *const keys[] = {"qat", "ctx", "chunk", "top_k",
                                       "max_steps", "mtp_draft", "stop_at_eos"};
    if (check_keys(r, v, "settings", keys, 7)) return -1;
    if (get_bool(r, ds4_json_get(v, "qat"), "settings.qat", &s->qat) ||
        get_u32(r, ds4_json_get(v, "ctx"), "settings.ctx", &s->ctx) ||
        get_u32(r, ds4_json_get(v, "chunk"), "settings.chunk", &s->chunk) ||
        get_u32(r, ds4_json_get(v, "top_k"), "settings.top_k", &s->top_k) ||
        get_u32(r, ds4_json_get(v, "max_steps"), "settings.max_steps", &s->max_steps) ||
        get_u32(r, ds4_json_get(v, "mtp_draft"), "settings.mtp_draft", &s->mtp_draft) ||
        get_bool(r, ds4_json_get(v, "stop_at_eos"), "settings.stop_at_eos", &s->stop_at_eos))
        return -1;
    if (s->top_k > DS4_GOLDEN_MAX_TOP)
        return bad(r, "settings.top_k %u exceeds the limit %d", s->top_k, DS4_GOLDEN_MAX_TOP);
    return 0;
}

static int read_prompt(const rd *r, const ds4_json *v, ds4_golden_header *h) {
    static const char *const keys[] = {"tokens", "?text_hex"};
    if (check_keys(r, v, "prompt", keys, 2)) return -1;
    const ds4_json *t = ds4_json_get(v, "tokens");
    if (t->type != DS4_JSON_ARRAY) return bad(r, "prompt.tokens: expected an array");
    if (t->n > UINT32_MAX) return bad(r, "prompt.tokens: too many tokens");
    h->prompt = malloc(t->n ? t->n * sizeof(int32_t) : 1);
    if (!h->prompt) return nomem(r->err);
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

static int read_header(const rd *r, const ds4_json *v, ds4_golden *g) {
    static const char *const keys[] = {"format", "ds4ref_version", "model", "settings",
                                       "prompt"};
    if (!v || v->type != DS4_JSON_OBJECT) return bad(r, "header: expected an object");
    if (!ds4_json_is_str(ds4_json_get(v, "format"), DS4_GOLDEN_FORMAT))
        return bad(r, "header: \"format\" is not \"" DS4_GOLDEN_FORMAT "\"");
    if (check_keys(r, v, "header", keys, 5)) return -1;
    ds4_golden_header *h = &g->h;
    const ds4_json *ver = ds4_json_get(v, "ds4ref_version");
    if (!ver || ver->type != DS4_JSON_STRING || ver->len == 0 ||
        ver->len > DS4_GOLDEN_VERSION_MAX)
        return bad(r, "ds4ref_version: expected a string of 1..%d characters",
                   DS4_GOLDEN_VERSION_MAX);
    for (size_t i = 0; i < ver->len; i++)
        if (ver->str[i] < 0x20 || ver->str[i] > 0x7e)
            return bad(r, "ds4ref_version: not printable ASCII");
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

static int read_tok(const rd *r, const ds4_json *v, const char *what, const char *id_key,
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
    if (get_f32(r, ds4_json_get(v, "logit"), w, &t->logit)) return -1;
    snprintf(w, sizeof(w), "%slogprob", what);
    return get_f64(r, ds4_json_get(v, "logprob"), w, &t->logprob);
}

static int read_step(const rd *r, const ds4_json *v, ds4_golden *g, ds4_golden_step *st) {
    static const char *const keys[] = {"step", "token", "bytes", "logit", "logprob",
                                       "logits_sha256", "top"};
    if (check_keys(r, v, "step", keys, 7)) return -1;
    uint32_t idx;
    if (get_u32(r, ds4_json_get(v, "step"), "step", &idx)) return -1;
    if (idx != g->n_steps) return bad(r, "step %u where step %u was expected", idx, g->n_steps);
    if (read_tok(r, v, "", "token", &st->tok)) return -1;
    if (get_digest(r, ds4_json_get(v, "logits_sha256"), "logits_sha256", st->logits_sha256))
        return -1;
    const ds4_json *top = ds4_json_get(v, "top");
    if (top->type != DS4_JSON_ARRAY) return bad(r, "top: expected an array");
    if (top->n > DS4_GOLDEN_MAX_TOP)
        return bad(r, "top: %zu entries, more than %d", top->n, DS4_GOLDEN_MAX_TOP);
    st->top = calloc(top->n ? top->n : 1, sizeof(ds4_golden_tok));
    if (!st->top) return nomem(r->err);
    for (size_t i = 0; i < top->n; i++) {
        static const char *const tkeys[] = {"id", "bytes", "logit", "logprob"};
        char w[32];
        snprintf(w, sizeof(w), "top[%zu]", i);
        if (check_keys(r, &top->elems[i], w, tkeys, 4)) return -1;
        st->n_top = (uint32_t)i + 1;
        snprintf(w, sizeof(w), "top[%zu].", i);
        if (read_tok(r, &top->elems[i], w, "id", &st->top[i])) return -1;
    }
    char why[240];
    check_golden_step(g, st, why, sizeof(why));
    if (why[0]) return bad(r, "step %u: %s", idx, why);
    return 0;
}

static int read_end(const rd *r, const ds4_json *v, ds4_golden *g) {
    static const char *const keys[] = {"end", "steps", "complete", "stop"};
    if (check_keys(r, v, "end", keys, 4)) return -1;
    if (ds4_json_get(v, "end")->type != DS4_JSON_TRUE) return bad(r, "end: expected true");
    uint32_t n;
    bool complete = false;
    if (get_u32(r, ds4_json_get(v, "steps"), "end.steps", &n) ||
        get_bool(r, ds4_json_get(v, "complete"), "end.complete", &complete))
        return -1;
    const ds4_json *s = ds4_json_get(v, "stop");
    ds4_stop stop = DS4_STOP_UNKNOWN;
    for (int k = 1; k < N_STOP; k++)
        if (ds4_json_is_str(s, stop_names[k])) stop = (ds4_stop)k;
    if (stop == DS4_STOP_UNKNOWN)
        return bad(r, "end.stop: expected one of \"length\", \"eos\", \"ctx\", "
                   "\"interrupted\", \"error\"");
    if (n != g->n_steps) return bad(r, "end.steps is %u but the file has %u steps", n,
                                    g->n_steps);
    if (complete != ds4_stop_complete(stop))
        return bad(r, "end.complete is %s, but stop \"%s\" means %s", complete ? "true" : "false",
                   stop_names[stop], ds4_stop_complete(stop) ? "complete" : "incomplete");
    char why[200];
    check_end(g, stop, why, sizeof(why));
    if (why[0]) return bad(r, "%s", why);
    ds4_golden_set_end(g, stop);
    return 0;
}

/* The line exactly as the writer would print it; a different spelling
 * (spaces, key order, "1.50" for 1.5, uppercase hex) is rejected. */
static int check_canonical(const rd *r, const char *line, size_t len, const ds4_buf *canon) {
    if (canon->failed) return nomem(r->err);
    size_t n = canon->len - 1;   /* without its '\n' */
    size_t i = 0;
    while (i < len && i < n && line[i] == canon->p[i]) i++;
    if (i == len && i == n) return 0;
    return bad(r, "not in canonical form at byte %zu: the file has \"%.24s\" where ds4ref "
               "writes \"%.24s\"", i, line + i, canon->p + i);
}

typedef enum { LINE_HEADER, LINE_STEP, LINE_END } line_kind;

static int parse_line(const rd *r, const char *line, size_t len, line_kind kind,
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
        if (rc == 0) put_header_line(&canon, g);
    } else if (kind == LINE_STEP) {
        ds4_golden_step st;
        memset(&st, 0, sizeof(st));
        rc = read_step(r, v, g, &st);
        if (rc == 0) put_step_line(&canon, g->n_steps, &st);
        if (rc == 0) rc = check_canonical(r, line, len, &canon);
        if (rc == 0) rc = append_moved(g, &st, r->err);
        step_free(&st);
        ds4_buf_free(&canon);
        ds4_json_free(doc);
        return rc;
    } else {
        rc = read_end(r, v, g);
        if (rc == 0) put_end_line(&canon, g->n_steps, g->stop);
    }
    if (rc == 0) rc = check_canonical(r, line, len, &canon);
    ds4_buf_free(&canon);
    ds4_json_free(doc);
    return rc;
}

int ds4_golden_parse(const char *buf, size_t len, const char *name, ds4_golden *g,
                     ds4err *err) {
    ds4_golden_init(g, DS4_TRACE_GOLDEN);
    g->has_header = g->has_ids = g->has_logits = g->has_sel_scores = g->has_digests = true;
    g->has_prompt_tokens = g->has_prompt_count = true;
    rd r = {name ? name : "golden", 0, err};
    size_t pos = 0;
    int rc = 0;
    while (rc == 0 && !g->has_end) {
        r.line++;
        if (pos == len) {
            rc = r.line == 1 ? bad(&r, "empty file: expected the header line")
                             : bad(&r, "the file ends without the end line (truncated?)");
            break;
        }
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (!nl) {
            rc = bad(&r, "no newline at the end of the line (truncated?)");
            break;
        }
        size_t n = (size_t)(nl - (buf + pos));
        const char *line = buf + pos;
        pos += n + 1;
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
        rc = bad(&r, "data after the end line");
    }
    if (rc) ds4_golden_free(g);
    return rc;
}

int ds4_golden_read(const char *path, ds4_golden *g, ds4err *err) {
    char *buf;
    size_t len;
    ds4_golden_init(g, DS4_TRACE_GOLDEN);
    if (ds4_read_file(path, DS4_GOLDEN_MAX_FILE, &buf, &len, err)) return -1;
    int rc = ds4_golden_parse(buf, len, path, g, err);
    free(buf);
    return rc;
}

/* ================================================================ streaming writer */

struct ds4_golden_writer {
    ds4_golden g;
    bool to_file;
    ds4_afile f;
    bool finished;
};

int ds4_golden_writer_open(ds4_golden_writer **out, const char *path,
                           const ds4_golden_header *h, ds4err *err) {
    *out = NULL;
    ds4_golden_writer *w = calloc(1, sizeof(*w));
    if (!w) return nomem(err);
    w->f.fd = -1;
    ds4_golden_init(&w->g, DS4_TRACE_GOLDEN);
    if (ds4_golden_set_header(&w->g, h, err)) {
        free(w);
        return -1;
    }
    if (path) {
        ds4_buf b = {0};
        put_header_line(&b, &w->g);
        int rc = b.failed ? nomem(err) : ds4_afile_open(&w->f, path, err);
        if (rc == 0) {
            w->to_file = true;
            rc = ds4_afile_write(&w->f, b.p, b.len, err);
            if (rc == 0) rc = ds4_afile_flush(&w->f, err);
        }
        ds4_buf_free(&b);
        if (rc) {
            ds4_golden_writer_free(w);
            return -1;
        }
    }
    *out = w;
    return 0;
}

int ds4_golden_writer_step(ds4_golden_writer *w, const ds4_gen_step *st, ds4_tok_bytes_fn fn,
                           void *ud, ds4err *err) {
    if (w->finished) return ds4err_set(err, DS4_E_ARG, "golden writer already finished");
    if (ds4_golden_add_step(&w->g, st, fn, ud, err)) return -1;
    if (!w->to_file) return 0;
    ds4_buf b = {0};
    put_step_line(&b, w->g.n_steps - 1, &w->g.steps[w->g.n_steps - 1]);
    int rc = b.failed ? nomem(err) : ds4_afile_write(&w->f, b.p, b.len, err);
    if (rc == 0) rc = ds4_afile_flush(&w->f, err);
    ds4_buf_free(&b);
    return rc;
}

int ds4_golden_writer_finish(ds4_golden_writer *w, ds4_stop stop, ds4err *err) {
    if (w->finished) return ds4err_set(err, DS4_E_ARG, "golden writer already finished");
    char why[200];
    check_end(&w->g, stop, why, sizeof(why));
    if (why[0]) return ds4err_set(err, DS4_E_ARG, "golden end: %s", why);
    ds4_golden_set_end(&w->g, stop);
    w->finished = true;
    if (!w->to_file) return 0;
    ds4_buf b = {0};
    put_end_line(&b, w->g.n_steps, stop);
    int rc = b.failed ? nomem(err) : ds4_afile_write(&w->f, b.p, b.len, err);
    ds4_buf_free(&b);
    if (rc) {
        ds4_afile_abort(&w->f);
        return -1;
    }
    return ds4_afile_commit(&w->f, err);
}

const ds4_golden *ds4_golden_writer_golden(const ds4_golden_writer *w) {
    return &w->g;
}

void ds4_golden_writer_free(ds4_golden_writer *w) {
    if (!w) return;
    ds4_afile_abort(&w->f);
    ds4_golden_free(&w->g);
    free(w);
}
