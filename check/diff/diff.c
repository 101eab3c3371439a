#include "check/diff/diff.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/detmath.h"
#include "base/file.h"
#include "base/hex.h"
#include "base/sha256.h"
#include "ref/text/json.h"
#include "ref/format/trace.h"

static const uint32_t top_n[DS4_DIFF_NTOP] = {1, 5, 20};

/* ================================================================ matching */

static bool same_bytes(const ds4_golden_tok *x, const ds4_golden_tok *y) {
    return x->n_bytes == y->n_bytes && !memcmp(x->bytes, y->bytes, x->n_bytes);
}

static bool same_token(const ds4_golden_tok *x, const ds4_golden_tok *y, bool ids) {
    return same_bytes(x, y) && (!ids || x->id == y->id);
}

/* Index of t in list[0..n), matched by id or by bytes; -1 if absent. */
static int64_t find(const ds4_golden_tok *t, const ds4_golden_tok *list, uint32_t n, bool ids) {
    for (uint32_t i = 0; i < n; i++)
        if (ids ? list[i].id == t->id : same_bytes(&list[i], t)) return i;
    return -1;
}

static bool lp_same(double x, double y, bool f32) {
    if (f32) {
        float fx = (float)x, fy = (float)y;
        return !memcmp(&fx, &fy, sizeof(float));
    }
    return !memcmp(&x, &y, sizeof(double));
}

static bool f32_same(float x, float y) {
    return !memcmp(&x, &y, sizeof(float));
}

/* ================================================================ one step */

typedef struct sides {
    const ds4_golden *a, *b;
    bool ids, logits, sel, digests, f32;
} sides;

/* The first field that is not bit-identical, or "" (in why). */
static void exactness(const sides *s, const ds4_golden_step *x, const ds4_golden_step *y,
                      char *why, size_t cap) {
    why[0] = '\0';
    if (!same_token(&x->tok, &y->tok, s->ids)) {
        snprintf(why, cap, "token");
    } else if (s->sel && !f32_same(x->tok.logit, y->tok.logit)) {
        snprintf(why, cap, "logit");
    } else if (s->sel && !lp_same(x->tok.logprob, y->tok.logprob, s->f32)) {
        snprintf(why, cap, "logprob");
    } else if (s->digests && memcmp(x->logits_sha256, y->logits_sha256, 32)) {
        snprintf(why, cap, "logits_sha256");
    } else if (x->n_top != y->n_top) {
        snprintf(why, cap, "top list length %u vs %u", x->n_top, y->n_top);
    }
    for (uint32_t k = 0; !why[0] && k < x->n_top; k++) {
        const ds4_golden_tok *p = &x->top[k], *q = &y->top[k];
        if (!same_token(p, q, s->ids))
            snprintf(why, cap, "top[%u] token", k);
        else if (s->logits && !f32_same(p->logit, q->logit))
            snprintf(why, cap, "top[%u].logit", k);
        else if (!lp_same(p->logprob, q->logprob, s->f32))
            snprintf(why, cap, "top[%u].logprob", k);
    }
}

/* log(sum exp(v[i])) with the usual shift by the maximum. */
static double lse(const double *v, uint32_t n) {
    double m = v[0];
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > m) m = v[i];
    double s = 0;
    for (uint32_t i = 0; i < n; i++) s += ds4_det_exp(v[i] - m);
    return m + ds4_det_log(s);
}

static int compare_step(const sides *s, const ds4_golden_step *x, const ds4_golden_step *y,
                        ds4_diff_step *d, ds4err *err) {
    d->compared = true;
    d->token_equal = same_token(&x->tok, &y->tok, s->ids);
    for (int k = 0; k < DS4_DIFF_NTOP; k++) {
        uint32_t na = x->n_top < top_n[k] ? x->n_top : top_n[k];
        uint32_t nb = y->n_top < top_n[k] ? y->n_top : top_n[k];
        d->avail[k] = na < nb ? na : nb;
        for (uint32_t i = 0; i < na; i++)
            if (find(&x->top[i], y->top, nb, s->ids) >= 0) d->overlap[k]++;
    }
    double *pa = malloc(sizeof(double) * (x->n_top ? x->n_top : 1));
    double *pb = malloc(sizeof(double) * (x->n_top ? x->n_top : 1));
    if (!pa || !pb) {
        free(pa);
        free(pb);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory comparing steps");
    }
    uint32_t n = 0;
    double sum = 0;
    for (uint32_t i = 0; i < x->n_top; i++) {
        int64_t j = find(&x->top[i], y->top, y->n_top, s->ids);
        if (j < 0) continue;
        pa[n] = x->top[i].logprob;
        pb[n] = y->top[j].logprob;
        double dl = fabs(pa[n] - pb[n]);
        if (n == 0 || dl > d->max_dlp) d->max_dlp = dl;
        sum += dl;
        n++;
    }
    d->n_common = n;
    if (n) d->mean_dlp = sum / n;
    if (n >= 2) {
        double la = lse(pa, n), lb = lse(pb, n), kl = 0;
        for (uint32_t i = 0; i < n; i++) {
            double lpa = pa[i] - la, lpb = pb[i] - lb;
            kl += ds4_det_exp(lpa) * (lpa - lpb);
        }
        d->has_kl = true;
        d->kl = kl > 0 ? kl : 0;
    }
    free(pa);
    free(pb);
    exactness(s, x, y, d->inexact, sizeof(d->inexact));
    d->exact = !d->inexact[0];
    return 0;
}

/* ================================================================ notes */

static void note(ds4_diff_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(ds4_diff_report *r, const char *fmt, ...) {
    char line[DS4_ERR_MSG + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ds4_buf_puts(&r->notes, "note: ");
    ds4_buf_puts(&r->notes, line);
    ds4_buf_puts(&r->notes, "\n");
}

static void compare_prompts(const ds4_golden *a, const ds4_golden *b, ds4_diff_report *r) {
    if (a->has_prompt_tokens && b->has_prompt_tokens) {
        uint32_t n = a->h.n_prompt < b->h.n_prompt ? a->h.n_prompt : b->h.n_prompt;
        for (uint32_t i = 0; i < n; i++)
            if (a->h.prompt[i] != b->h.prompt[i]) {
                r->prompt_differs = true;
                note(r, "prompts differ at token %u (%" PRId32 " vs %" PRId32 "): the steps "
                     "are not comparable", i, a->h.prompt[i], b->h.prompt[i]);
                return;
            }
    }
    if (a->has_prompt_count && b->has_prompt_count && a->h.n_prompt != b->h.n_prompt) {
        r->prompt_differs = true;
        note(r, "prompts differ: %u vs %u tokens: the steps are not comparable", a->h.n_prompt,
             b->h.n_prompt);
        return;
    }
    if (!a->has_prompt_count || !b->has_prompt_count)
        note(r, "prompt not compared (%s)", !a->has_prompt_count && !b->has_prompt_count
                                                ? "neither side records it"
                                            : !a->has_prompt_count ? "A does not record it"
                                                                   : "B does not record it");
    else if (!a->has_prompt_tokens || !b->has_prompt_tokens)
        note(r, "prompt compared by token count only (%u tokens)", a->h.n_prompt);
}

/* Append "name x vs y" to the list in s when x != y and the setting is
 * known on both sides. */
static void setting(char *s, size_t cap, const char *name, unsigned x, unsigned y, bool known) {
    size_t n = strlen(s);
    if (known && x != y && n < cap)
        snprintf(s + n, cap - n, "%s%s %u vs %u", n ? ", " : "", name, x, y);
}

/* Which drafter a golden's stream was drafted by (FORMATS.md §1.2). */
static const char *drafter_of(const ds4_golden_settings *s) {
    return !s->mtp_draft ? "none" : s->drafter[0] ? s->drafter : "mtp";
}

static void compare_settings(const ds4_golden *a, const ds4_golden *b, ds4_diff_report *r) {
    const ds4_golden_settings *x = &a->h.settings, *y = &b->h.settings;
    bool both = a->has_header && b->has_header;
    char s[400] = "";
    setting(s, sizeof(s), "qat", x->qat, y->qat, both);
    size_t n = strlen(s);
    if (both && strcmp(x->numerics, y->numerics) && n < sizeof(s))
        snprintf(s + n, sizeof(s) - n, "%snumerics %s vs %s", n ? ", " : "",
                 x->numerics[0] ? x->numerics : "official", y->numerics[0] ? y->numerics : "official");
    setting(s, sizeof(s), "ctx", x->ctx, y->ctx, x->ctx && y->ctx);
    setting(s, sizeof(s), "chunk", x->chunk, y->chunk, both);
    setting(s, sizeof(s), "top_k", x->top_k, y->top_k, true);
    setting(s, sizeof(s), "max_steps", x->max_steps, y->max_steps, both);
    setting(s, sizeof(s), "mtp_draft", x->mtp_draft, y->mtp_draft, both);
    n = strlen(s);
    if (both && strcmp(drafter_of(x), drafter_of(y)) && n < sizeof(s))
        snprintf(s + n, sizeof(s) - n, "%sdrafter %s vs %s", n ? ", " : "", drafter_of(x),
                 drafter_of(y));
    setting(s, sizeof(s), "stop_at_eos", x->stop_at_eos, y->stop_at_eos, both);
    if (s[0]) note(r, "settings differ: %s", s);
    if (both && strcmp(a->h.version, b->h.version))
        note(r, "ds4ref versions differ: %s vs %s", a->h.version, b->h.version);
}

static void compare_models(const ds4_golden *a, const ds4_golden *b, bool ignore,
                           ds4_diff_report *r) {
    if (!a->has_header || !b->has_header) return;
    char d[DS4_ERR_MSG];
    ds4_modelid_describe_diff(&a->h.model, &b->h.model, d, sizeof(d));
    if (d[0]) {
        r->model_differs = !ignore;
        note(r, "models differ (%s vs %s)%s: %s", a->h.model.file, b->h.model.file,
             ignore ? ", ignored (--ignore-model)" : "", d);
    } else if (strcmp(a->h.model.file, b->h.model.file)) {
        note(r, "same model under two names: %s, %s", a->h.model.file, b->h.model.file);
    }
    /* The MTP head only proposes drafts: greedy speculative decoding gives
     * the trunk's records bit for bit, so the head is reported, not held
     * against exactness. */
    if (a->h.has_mtp != b->h.has_mtp) {
        note(r, "only %s was decoded with an MTP head", a->h.has_mtp ? "A" : "B");
    } else if (a->h.has_mtp) {
        ds4_modelid_describe_diff(&a->h.mtp, &b->h.mtp, d, sizeof(d));
        if (d[0]) note(r, "MTP heads differ: %s", d);
    }
}

static void compare_ends(const ds4_golden *a, const ds4_golden *b, ds4_diff_report *r) {
    const ds4_golden *g[2] = {a, b};
    for (int k = 0; k < 2; k++)
        if (g[k]->has_end && !ds4_stop_complete(g[k]->stop))
            note(r, "%s is incomplete (stop: %s): it ends after %u steps", k ? "B" : "A",
                 ds4_golden_stop_name(g[k]->stop), g[k]->n_steps);
    if (a->n_steps != b->n_steps)
        note(r, "A has %u steps, B has %u: steps %u.. are not compared", a->n_steps,
             b->n_steps, a->n_steps < b->n_steps ? a->n_steps : b->n_steps);
    if (a->has_end && b->has_end && a->stop != b->stop)
        note(r, "stop reasons differ: %s vs %s", ds4_golden_stop_name(a->stop), ds4_golden_stop_name(b->stop));
}

/* ================================================================ report */

int ds4chk_diff_compute(const ds4_golden *a, const ds4_golden *b, const ds4_diff_opts *o,
                     ds4_diff_report *r, ds4err *err) {
    memset(r, 0, sizeof(*r));
    sides s = {a, b, a->has_ids && b->has_ids, a->has_logits && b->has_logits,
               a->has_sel_scores && b->has_sel_scores, a->has_digests && b->has_digests,
               a->lp_f32 || b->lp_f32};
    r->n_a = a->n_steps;
    r->n_b = b->n_steps;
    r->n_steps = a->n_steps < b->n_steps ? a->n_steps : b->n_steps;
    r->steps = calloc(r->n_steps ? r->n_steps : 1, sizeof(ds4_diff_step));
    if (!r->steps) return ds4_err_set(err, DS4_E_NOMEM, "out of memory comparing");
    r->first_divergence = r->first_inexact = -1;
    compare_prompts(a, b, r);
    compare_settings(a, b, r);
    compare_models(a, b, o->ignore_model, r);
    compare_ends(a, b, r);

    double sum_top[DS4_DIFF_NTOP] = {0}, sum_dlp = 0, sum_kl = 0;
    uint32_t n_top[DS4_DIFF_NTOP] = {0};
    r->max_dlp = r->max_kl = 0;
    for (uint32_t i = 0; i < r->n_steps; i++) {
        if (r->first_divergence >= 0 && !o->all_steps) break;
        ds4_diff_step *d = &r->steps[i];
        if (compare_step(&s, &a->steps[i], &b->steps[i], d, err)) {
            ds4chk_diff_report_free(r);
            return -1;
        }
        r->n_compared++;
        if (d->token_equal) r->n_agree++;
        else if (r->first_divergence < 0) r->first_divergence = i;
        if (!d->exact && r->first_inexact < 0) r->first_inexact = i;
        for (int k = 1; k < DS4_DIFF_NTOP; k++)
            if (d->avail[k]) {
                sum_top[k] += (double)d->overlap[k] / d->avail[k];
                n_top[k]++;
            }
        if (d->n_common) {
            if (d->max_dlp > r->max_dlp) r->max_dlp = d->max_dlp;
            sum_dlp += d->mean_dlp * d->n_common;
            r->n_pairs += d->n_common;
        }
        if (d->has_kl) {
            if (d->kl > r->max_kl) r->max_kl = d->kl;
            sum_kl += d->kl;
            r->n_kl++;
        }
    }
    r->top1 = r->n_compared ? (double)r->n_agree / r->n_compared : NAN;
    r->top5 = n_top[DS4_DIFF_TOP5] ? sum_top[DS4_DIFF_TOP5] / n_top[DS4_DIFF_TOP5] : NAN;
    r->top20 = n_top[DS4_DIFF_TOP20] ? sum_top[DS4_DIFF_TOP20] / n_top[DS4_DIFF_TOP20] : NAN;
    r->mean_dlp = r->n_pairs ? sum_dlp / (double)r->n_pairs : NAN;
    if (!r->n_pairs) r->max_dlp = NAN;
    r->mean_kl = r->n_kl ? sum_kl / r->n_kl : NAN;
    if (!r->n_kl) r->max_kl = NAN;
    bool ends_same = !(a->has_end && b->has_end) || a->stop == b->stop;
    r->exact = !r->prompt_differs && !r->model_differs && ends_same && r->n_a == r->n_b &&
               r->n_compared == r->n_steps && r->first_inexact < 0;
    if (r->notes.failed) {
        ds4chk_diff_report_free(r);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory comparing");
    }
    return 0;
}

void ds4chk_diff_report_free(ds4_diff_report *r) {
    free(r->steps);
    ds4_buf_free(&r->notes);
    memset(r, 0, sizeof(*r));
}

/* ================================================================ limits */

static void violation(ds4_buf *why, uint32_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void violation(ds4_buf *why, uint32_t *n, const char *fmt, ...) {
    char line[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ds4_buf_puts(why, line);
    ds4_buf_puts(why, "\n");
    (*n)++;
}

/* figure must be <= limit (upper) or >= limit (lower); NAN figure = unmeasured.
 * note follows the limit in the message. */
static void bound(ds4_buf *why, uint32_t *n, const char *flag, double limit, const char *note,
                  double figure, bool upper) {
    if (isnan(limit)) return;
    if (isnan(figure))
        violation(why, n, "%s %g%s: nothing to measure it on", flag, limit, note);
    else if (upper ? figure > limit : figure < limit)
        violation(why, n, "%s %g%s: got %.6g", flag, limit, note, figure);
}

static bool no_limits(const ds4_diff_limits *l) {
    return isnan(l->max_dlogprob) && isnan(l->min_top1) && isnan(l->min_top5) &&
           isnan(l->min_top20) && isnan(l->max_kl) && !l->exact;
}

uint32_t ds4chk_diff_check(const ds4_diff_report *r, const ds4_diff_limits *l, ds4_buf *why) {
    uint32_t n = 0;
    if (r->prompt_differs) violation(why, &n, "prompts differ: the streams are not comparable");
    /* Asked for no threshold, the verdict answers the first question of a
     * diff: did OTHER choose every token the reference chose? */
    if (no_limits(l)) {
        bound(why, &n, "--min-top1", 1, " (the default when no threshold is given)", r->top1,
              false);
        return n;
    }
    bound(why, &n, "--max-dlogprob", l->max_dlogprob, "", r->max_dlp, true);
    bound(why, &n, "--min-top1", l->min_top1, "", r->top1, false);
    bound(why, &n, "--min-top5-overlap", l->min_top5, "", r->top5, false);
    bound(why, &n, "--min-top20-overlap", l->min_top20, "", r->top20, false);
    bound(why, &n, "--max-kl", l->max_kl, "", r->max_kl, true);
    if (l->exact && !r->exact) {
        if (r->first_inexact >= 0)
            violation(why, &n, "--exact: step %" PRId64 " differs (%s)", r->first_inexact,
                      r->steps[r->first_inexact].inexact);
        else
            violation(why, &n, "--exact: the streams differ outside the steps (see notes)");
    }
    return n;
}

/* ================================================================ text */

static void puts_fmt(ds4_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void puts_fmt(ds4_buf *b, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ds4_buf_puts(b, line);
}

static void describe_source(ds4_buf *b, const char *label, const char *name,
                            const ds4_golden *g) {
    puts_fmt(b, "%s: ", label);
    ds4_buf_puts(b, name);
    puts_fmt(b, ": %s", ds4_trace_kind_name(g->kind));
    if (g->kind == DS4_TRACE_VEC) puts_fmt(b, " %s", g->vec_id);
    puts_fmt(b, ", %u steps", g->n_steps);
    if (g->has_end)
        puts_fmt(b, ", %s (%s)", ds4_stop_complete(g->stop) ? "complete" : "INCOMPLETE",
                 ds4_golden_stop_name(g->stop));
    if (g->has_header) puts_fmt(b, ", model %s", g->h.model.file);
    ds4_buf_puts(b, "\n");
}

static void tok_text(const ds4_golden_tok *t, char *out, size_t cap) {
    char s[64];
    ds4_hex_show(t->bytes, t->n_bytes, s, 28);
    if (t->id >= 0) snprintf(out, cap, "\"%s\"(%" PRId32 ")", s, t->id);
    else snprintf(out, cap, "\"%s\"", s);
}

static void fig(char *out, size_t cap, bool valid, double v) {
    if (valid) snprintf(out, cap, "%.3g", v);
    else snprintf(out, cap, "-");
}

/* The text report ends with the verdict and one line per violation. */
static void text_verdict(const ds4_buf *why, ds4_buf *out) {
    if (!why || !why->len) {
        ds4_buf_puts(out, "result: PASS\n");
        return;
    }
    ds4_buf_puts(out, "result: FAIL\n");
    size_t pos = 0;
    while (pos < why->len) {
        const char *nl = memchr(why->p + pos, '\n', why->len - pos);
        size_t n = (size_t)(nl - (why->p + pos));
        ds4_buf_puts(out, "  violated: ");
        ds4_buf_put(out, why->p + pos, n + 1);
        pos += n + 1;
    }
}

int ds4chk_diff_format_text(const ds4_diff_report *r, const ds4_golden *a, const ds4_golden *b,
                         const char *name_a, const char *name_b, bool quiet,
                         const ds4_buf *violations, ds4_buf *out, ds4err *err) {
    describe_source(out, "A", name_a, a);
    describe_source(out, "B", name_b, b);
    if (r->notes.len) ds4_buf_put(out, r->notes.p, r->notes.len);
    if (!quiet && r->n_compared) {
        puts_fmt(out, "%4s %-3s %-40s %5s %5s %7s %6s %10s %10s %10s %s\n", "step", "tok",
                 "token (A | B when they differ)", "top1", "top5", "top20", "common",
                 "max|dlp|", "mean|dlp|", "KL", "exact");
        for (uint32_t i = 0; i < r->n_steps; i++) {
            const ds4_diff_step *d = &r->steps[i];
            if (!d->compared) continue;
            char ta[80], tb[80], tok[170], o[3][16], mx[16], mn[16], kl[16];
            tok_text(&a->steps[i].tok, ta, sizeof(ta));
            tok_text(&b->steps[i].tok, tb, sizeof(tb));
            if (d->token_equal) snprintf(tok, sizeof(tok), "%s", ta);
            else snprintf(tok, sizeof(tok), "%s | %s", ta, tb);
            for (int k = 0; k < DS4_DIFF_NTOP; k++)
                snprintf(o[k], sizeof(o[k]), "%u/%u", d->overlap[k], d->avail[k]);
            fig(mx, sizeof(mx), d->n_common > 0, d->max_dlp);
            fig(mn, sizeof(mn), d->n_common > 0, d->mean_dlp);
            fig(kl, sizeof(kl), d->has_kl, d->kl);
            puts_fmt(out, "%4u %-3s %-40s %5s %5s %7s %6u %10s %10s %10s %s\n", i,
                     d->token_equal ? "=" : "X", tok, o[0], o[1], o[2], d->n_common, mx, mn, kl,
                     d->exact ? "yes" : d->inexact);
        }
    }
    if (r->first_divergence >= 0) {
        char ta[80], tb[80];
        int64_t i = r->first_divergence;
        tok_text(&a->steps[i].tok, ta, sizeof(ta));
        tok_text(&b->steps[i].tok, tb, sizeof(tb));
        puts_fmt(out, "divergence at step %" PRId64 ": A chose %s, B chose %s", i, ta, tb);
        if (r->n_compared < r->n_steps)
            puts_fmt(out, "; later steps follow different prefixes and are not compared "
                     "(--all-steps compares them anyway)");
        ds4_buf_puts(out, "\n");
    }
    char t1[16], t5[16], t20[16], mx[16], mn[16], kmax[16], kmean[16];
    snprintf(t1, sizeof(t1), "-");
    if (!isnan(r->top1)) snprintf(t1, sizeof(t1), "%.6g", r->top1);
    fig(t5, sizeof(t5), !isnan(r->top5), r->top5);
    fig(t20, sizeof(t20), !isnan(r->top20), r->top20);
    fig(mx, sizeof(mx), r->n_pairs > 0, r->max_dlp);
    fig(mn, sizeof(mn), r->n_pairs > 0, r->mean_dlp);
    fig(kmax, sizeof(kmax), r->n_kl > 0, r->max_kl);
    fig(kmean, sizeof(kmean), r->n_kl > 0, r->mean_kl);
    puts_fmt(out, "summary: steps_a=%u steps_b=%u compared=%u token_agree=%u top1=%s "
             "first_divergence=%" PRId64 " top5=%s top20=%s max_dlogprob=%s mean_dlogprob=%s "
             "max_kl=%s mean_kl=%s exact=%s",
             r->n_a, r->n_b, r->n_compared, r->n_agree, t1, r->first_divergence, t5, t20,
             mx, mn, kmax, kmean, r->exact ? "yes" : "no");
    if (r->first_inexact >= 0) puts_fmt(out, " first_inexact=%" PRId64, r->first_inexact);
    ds4_buf_puts(out, "\n");
    text_verdict(violations, out);
    return out->failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory formatting") : 0;
}

/* ================================================================ JSON */

static void json_num(ds4_buf *b, bool valid, double v) {
    if (valid && isfinite(v)) puts_fmt(b, "%.17g", v);
    else ds4_buf_puts(b, "null");
}

/* ,"key":number (json_num) after an earlier member. */
static void json_num_member(ds4_buf *b, const char *key, bool valid, double v) {
    ds4_buf_puts(b, ",\"");
    ds4_buf_puts(b, key);
    ds4_buf_puts(b, "\":");
    json_num(b, valid, v);
}

static void json_tok(ds4_buf *b, const ds4_golden_tok *t) {
    char hex[2 * DS4_GOLDEN_MAX_TOKEN_BYTES + 1];
    ds4_hex(t->bytes, t->n_bytes, hex);
    if (t->id >= 0) puts_fmt(b, "{\"id\":%" PRId32 ",\"bytes\":\"", t->id);
    else ds4_buf_puts(b, "{\"id\":null,\"bytes\":\"");
    ds4_buf_puts(b, hex);
    ds4_buf_puts(b, "\"}");
}

/* Lines of text as a JSON array of strings, without their prefix. */
static void json_lines(ds4_buf *b, const ds4_buf *lines, const char *prefix) {
    ds4_buf_puts(b, "[");
    size_t pos = 0, k = 0, pl = strlen(prefix);
    while (lines && pos < lines->len) {
        const char *s = lines->p + pos;
        const char *nl = memchr(s, '\n', lines->len - pos);
        size_t n = nl ? (size_t)(nl - s) : lines->len - pos;
        pos += n + 1;
        if (n >= pl && !memcmp(s, prefix, pl)) {
            s += pl;
            n -= pl;
        }
        if (k++) ds4_buf_puts(b, ",");
        ds4_json_put_str(b, s, n);
    }
    ds4_buf_puts(b, "]");
}

static void json_source(ds4_buf *b, const char *name, const ds4_golden *g) {
    ds4_buf_puts(b, "{\"file\":");
    ds4_json_put_str(b, name, strlen(name));
    puts_fmt(b, ",\"kind\":\"%s\",\"steps\":%u,\"stop\":",
             g->kind == DS4_TRACE_GOLDEN ? "golden" : g->kind == DS4_TRACE_DUMP ? "dump" : "vec",
             g->n_steps);
    if (g->has_end) puts_fmt(b, "\"%s\"", ds4_golden_stop_name(g->stop));
    else ds4_buf_puts(b, "null");
    ds4_buf_puts(b, "}");
}

int ds4chk_diff_format_json(const ds4_diff_report *r, const ds4_golden *a, const ds4_golden *b,
                         const char *name_a, const char *name_b, const ds4_buf *violations,
                         ds4_buf *out, ds4err *err) {
    ds4_buf_puts(out, "{\"a\":");
    json_source(out, name_a, a);
    ds4_buf_puts(out, ",\"b\":");
    json_source(out, name_b, b);
    ds4_buf_puts(out, ",\"notes\":");
    json_lines(out, &r->notes, "note: ");
    ds4_buf_puts(out, ",\"steps\":[");
    bool first = true;
    for (uint32_t i = 0; i < r->n_steps; i++) {
        const ds4_diff_step *d = &r->steps[i];
        if (!d->compared) continue;
        puts_fmt(out, "%s{\"step\":%u,\"token_equal\":%s,\"a\":", first ? "" : ",", i,
                 d->token_equal ? "true" : "false");
        first = false;
        json_tok(out, &a->steps[i].tok);
        ds4_buf_puts(out, ",\"b\":");
        json_tok(out, &b->steps[i].tok);
        for (int k = 0; k < DS4_DIFF_NTOP; k++)
            puts_fmt(out, ",\"top%u\":[%u,%u]", top_n[k], d->overlap[k], d->avail[k]);
        puts_fmt(out, ",\"common\":%u", d->n_common);
        json_num_member(out, "max_dlogprob", d->n_common > 0, d->max_dlp);
        json_num_member(out, "mean_dlogprob", d->n_common > 0, d->mean_dlp);
        json_num_member(out, "kl", d->has_kl, d->kl);
        puts_fmt(out, ",\"exact\":%s,\"inexact\":", d->exact ? "true" : "false");
        ds4_json_put_str(out, d->inexact, strlen(d->inexact));
        ds4_buf_puts(out, "}");
    }
    puts_fmt(out, "],\"summary\":{\"steps_a\":%u,\"steps_b\":%u,\"compared\":%u,"
             "\"token_agree\":%u", r->n_a, r->n_b, r->n_compared, r->n_agree);
    json_num_member(out, "top1", true, r->top1);
    json_num_member(out, "first_divergence", r->first_divergence >= 0, (double)r->first_divergence);
    json_num_member(out, "top5", true, r->top5);
    json_num_member(out, "top20", true, r->top20);
    json_num_member(out, "max_dlogprob", true, r->max_dlp);
    json_num_member(out, "mean_dlogprob", true, r->mean_dlp);
    json_num_member(out, "max_kl", true, r->max_kl);
    json_num_member(out, "mean_kl", true, r->mean_kl);
    puts_fmt(out, ",\"exact\":%s", r->exact ? "true" : "false");
    json_num_member(out, "first_inexact", r->first_inexact >= 0, (double)r->first_inexact);
    ds4_buf_puts(out, "},\"violations\":");
    json_lines(out, violations, "");
    puts_fmt(out, ",\"pass\":%s}\n", violations && violations->len ? "false" : "true");
    return out->failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory formatting") : 0;
}
