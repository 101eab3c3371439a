/* The golden stream in memory (golden.h): building one, and the rules every
 * golden step and end record must satisfy, which the writer and the reader
 * both apply. */
#include "ref/format/golden.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

const char *ds4_golden_stop_name(ds4_stop s) {
    return (int)s >= 0 && (int)s < N_STOP ? stop_names[s] : NULL;
}

ds4_stop ds4_golden_stop_by_name(const char *s, size_t n) {
    for (int k = 1; k < N_STOP; k++)
        if (strlen(stop_names[k]) == n && !memcmp(stop_names[k], s, n)) return (ds4_stop)k;
    return DS4_STOP_UNKNOWN;
}

/* Names are C strings: UTF-8, and no NUL before the end (strlen sees to
 * that). */
static bool utf8_cstr(const char *s) {
    return ds4_utf8_valid((const unsigned char *)s, strlen(s));
}

/* ================================================================ memory */

static void tok_free(ds4_golden_tok *t) {
    free(t->bytes);
    t->bytes = NULL;
    t->n_bytes = 0;
}

void ds4_golden_step_free(ds4_golden_step *s) {
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
    for (uint32_t i = 0; i < g->n_steps; i++) ds4_golden_step_free(&g->steps[i]);
    free(g->steps);
    header_free(&g->h);
    ds4_golden_init(g, g->kind);
}

int ds4_golden_nomem(ds4err *err) {
    return ds4_err_set(err, DS4_E_NOMEM, "out of memory building a golden");
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
        ds4_golden_step_free(dst);
        return -1;
    }
    for (uint32_t i = 0; i < src->n_top; i++) {
        if (tok_copy(&dst->top[i], &src->top[i])) {
            ds4_golden_step_free(dst);
            return -1;
        }
        dst->n_top = i + 1;
    }
    return 0;
}

int ds4_golden_set_header(ds4_golden *g, const ds4_golden_header *h, ds4err *err) {
    size_t vlen = strnlen(h->version, sizeof(h->version));
    if (vlen == 0 || vlen > DS4_GOLDEN_VERSION_MAX)
        return ds4_err_set(err, DS4_E_ARG, "golden header: ds4ref version must be 1..%d chars",
                          DS4_GOLDEN_VERSION_MAX);
    for (size_t i = 0; i < vlen; i++)
        if (h->version[i] < 0x20 || h->version[i] > 0x7e)
            return ds4_err_set(err, DS4_E_ARG,
                              "golden header: ds4ref version has a non-printable byte");
    const ds4_modelid *ms[2] = {&h->model, h->has_mtp ? &h->mtp : NULL};
    for (int k = 0; k < 2; k++) {
        if (!ms[k]) continue;
        if (!ms[k]->file || !utf8_cstr(ms[k]->file))
            return ds4_err_set(err, DS4_E_ARG,
                              "golden header: model file name is missing or not UTF-8");
        for (uint64_t i = 0; i < ms[k]->n_tensors; i++)
            if (!utf8_cstr(ms[k]->tensors[i].name))
                return ds4_err_set(err, DS4_E_ARG,
                                  "golden header: %s: tensor %" PRIu64 " name is not UTF-8",
                                  ms[k]->file, i);
    }
    if (h->settings.top_k > DS4_GOLDEN_MAX_TOP)
        return ds4_err_set(err, DS4_E_ARG, "golden header: top_k %u exceeds the limit %d",
                          h->settings.top_k, DS4_GOLDEN_MAX_TOP);
    /* What the reader takes back (FORMATS.md 1.2): the DSpark drafter,
     * named only with drafts; the MTP head is named by no key. */
    const char *dr = h->settings.drafter;
    if (dr[0] && (strcmp(dr, "dspark") || !h->settings.mtp_draft))
        return ds4_err_set(err, DS4_E_ARG, "golden header: drafter '%.8s' with mtp_draft %u: only "
                           "\"dspark\", with drafts, is recorded", dr, h->settings.mtp_draft);
    if (h->n_prompt && !h->prompt)
        return ds4_err_set(err, DS4_E_ARG, "golden header: %u prompt tokens but no token list",
                          h->n_prompt);
    for (uint32_t i = 0; i < h->n_prompt; i++)
        if (h->prompt[i] < 0)
            return ds4_err_set(err, DS4_E_ARG, "golden header: prompt token %u is negative", i);

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
        return ds4_golden_nomem(err);
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
void ds4_golden_check_step(const ds4_golden *g, const ds4_golden_step *s, char *why,
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

int ds4_golden_take_step(ds4_golden *g, ds4_golden_step *st, ds4err *err) {
    if (g->n_steps == UINT32_MAX) return ds4_err_set(err, DS4_E_RANGE, "too many steps");
    if (g->n_steps == g->cap_steps) {
        uint32_t cap = g->cap_steps ? (g->cap_steps > UINT32_MAX / 2 ? UINT32_MAX
                                                                     : g->cap_steps * 2)
                                    : 16;
        ds4_golden_step *p = realloc(g->steps, (size_t)cap * sizeof(*p));
        if (!p) return ds4_golden_nomem(err);
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
        ds4_golden_check_step(g, st, why, sizeof(why));
        if (why[0]) return ds4_err_set(err, DS4_E_FORMAT, "step %u: %s", g->n_steps, why);
    }
    ds4_golden_step c;
    if (step_copy(&c, st)) return ds4_golden_nomem(err);
    if (ds4_golden_take_step(g, &c, err)) {
        ds4_golden_step_free(&c);
        return -1;
    }
    return 0;
}

void ds4_golden_set_end(ds4_golden *g, ds4_stop stop) {
    g->has_end = true;
    g->stop = stop;
}

/* The consistency the end line must have with the steps and settings. */
void ds4_golden_check_end(const ds4_golden *g, ds4_stop stop, char *why, size_t cap) {
    why[0] = '\0';
    uint32_t max = g->h.settings.max_steps;
    if (!ds4_golden_stop_name(stop))
        snprintf(why, cap, "unknown stop reason");
    else if (g->n_steps > max)
        snprintf(why, cap, "%u steps, more than max_steps %u", g->n_steps, max);
    else if (stop == DS4_STOP_LENGTH && g->n_steps != max)
        snprintf(why, cap, "stop \"length\" after %u steps, but max_steps is %u", g->n_steps,
                 max);
}

