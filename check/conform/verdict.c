/* Verdicts of ds4ref-conform (verdict.h). */
#include "check/conform/verdict.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "check/diff/diff.h"

const char *ds4chk_verdict_status_name(ds4_cf_status s) {
    static const char *const names[DS4_CF_NSTATUS] = {"pass",  "not exercised", "tie",
                                                      "fail",  "error",         "n/a"};
    return s < DS4_CF_NSTATUS ? names[s] : "?";
}

void ds4chk_verdict_finding_pass(ds4_cf_finding *f) {
    *f = (ds4_cf_finding){.status = DS4_CF_PASS, .step = -1, .token = -1, .gap = NAN,
                          .dlogprob = NAN, .margin = NAN};
}

void ds4chk_verdict_findings_push(ds4_cf_findings *l, const ds4_cf_finding *f) {
    ds4_cf_finding *v = realloc(l->v, sizeof(*v) * (l->n + 1));
    if (!v) {
        l->failed = true;
        return;
    }
    l->v = v;
    l->v[l->n++] = *f;
}

void ds4chk_verdict_findings_free(ds4_cf_findings *l) {
    free(l->v);
    memset(l, 0, sizeof(*l));
}

double *ds4chk_verdict_margins(const ds4_golden *out) {
    double *m = out->n_steps ? malloc(sizeof(double) * out->n_steps) : NULL;
    for (uint32_t i = 0; m && i < out->n_steps; i++) {
        const ds4_golden_step *st = &out->steps[i];
        m[i] = st->n_top >= 2 ? st->top[0].logprob - st->top[1].logprob : NAN;
    }
    return m;
}

static void found(ds4_cf_finding *f, ds4_cf_status st, int64_t step, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void found(ds4_cf_finding *f, ds4_cf_status st, int64_t step, const char *fmt, ...) {
    f->status = st;
    f->step = step;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->detail, sizeof(f->detail), fmt, ap);
    va_end(ap);
}

const char *ds4chk_verdict_token_name(const ds4_tokenizer *tok, int32_t id, char *out, size_t cap) {
    ds4_buf b = {0};
    ds4err ignored = {0};
    int n = snprintf(out, cap, "%" PRId32, id);
    if (tok && id >= 0 && ds4_tok_decode(tok, &id, 1, &b, &ignored) == 0 && !b.failed) {
        size_t at = (size_t)n;
        at += (size_t)snprintf(out + at, cap - at, " '");
        for (size_t i = 0; i < b.len && at + 6 < cap; i++) {
            unsigned char c = (unsigned char)b.p[i];
            at += (size_t)(c >= 0x20 && c < 0x7f && c != '\'' && c != '\\'
                               ? snprintf(out + at, cap - at, "%c", c)
                               : snprintf(out + at, cap - at, "\\x%02x", c));
        }
        snprintf(out + at, cap - at, "'");
    }
    ds4_buf_free(&b);
    return out;
}

bool ds4chk_verdict_usable(const ds4_golden *out, const int32_t *prompt, uint32_t n_prompt,
                         uint32_t n_want, uint32_t n_vocab, ds4_cf_finding *f) {
    ds4chk_verdict_finding_pass(f);
    if (!out->has_ids) {
        found(f, DS4_CF_ERROR, -1, "the output has no token ids (write a ds4 dump or a ds4ref "
                                   "golden)");
        return false;
    }
    if (out->has_prompt_tokens &&
        (out->h.n_prompt != n_prompt || memcmp(out->h.prompt, prompt, sizeof(int32_t) * n_prompt))) {
        found(f, DS4_CF_FAIL, -1, "the output's prompt is not the cell's (%u tokens, the cell "
                                  "gave %u)", out->h.n_prompt, n_prompt);
        return false;
    }
    if (!out->has_prompt_tokens && out->has_prompt_count && out->h.n_prompt != n_prompt) {
        found(f, DS4_CF_FAIL, -1, "the output's prompt has %u tokens, the cell gave %u",
              out->h.n_prompt, n_prompt);
        return false;
    }
    if (out->n_steps > n_want) {
        found(f, DS4_CF_FAIL, n_want, "%u steps written, %u asked for", out->n_steps, n_want);
        return false;
    }
    for (uint32_t i = 0; i < out->n_steps; i++) {
        int32_t id = out->steps[i].tok.id;
        if (id < 0 || (uint32_t)id >= n_vocab) {
            found(f, DS4_CF_FAIL, i, "step %u: token %" PRId32 " is outside the vocabulary of %u",
                  i, id, n_vocab);
            f->token = id;
            return false;
        }
    }
    return true;
}

/* Largest |dlogprob| at step i over the tokens both lists hold (and the
 * committed token's own logprob, when the output records it). */
static double step_dlogprob(const ds4_golden_step *st, bool has_sel, const ds4_cf_tf *tf,
                            uint32_t i) {
    double worst = NAN;
    const int32_t *ids = tf->top_ids + (size_t)i * tf->k;
    const double *lps = tf->top_lp + (size_t)i * tf->k;
    for (uint32_t a = 0; a < st->n_top; a++)
        for (uint32_t b = 0; b < tf->n_top[i]; b++)
            if (st->top[a].id == ids[b]) {
                double d = fabs(st->top[a].logprob - lps[b]);
                if (!(d <= worst)) worst = d;
            }
    if (has_sel) {
        double d = fabs(st->tok.logprob - tf->lp[i]);
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

double ds4chk_verdict_step_dlogprob(const ds4_golden *out, const ds4_cf_tf *tf, uint32_t i) {
    return step_dlogprob(&out->steps[i], out->has_sel_scores, tf, i);
}

/* Of the reference's first n alternatives at step i, the share among the
 * output's first n (out of those both lists have room for); NAN when
 * neither has any. */
static double step_overlap(const ds4_golden_step *st, const ds4_cf_tf *tf, uint32_t i,
                           uint32_t n) {
    uint32_t na = tf->n_top[i] < n ? tf->n_top[i] : n, nb = st->n_top < n ? st->n_top : n;
    uint32_t avail = na < nb ? na : nb, hit = 0;
    if (!avail) return NAN;
    for (uint32_t a = 0; a < na; a++)
        for (uint32_t b = 0; b < nb; b++) hit += tf->top_ids[(size_t)i * tf->k + a] == st->top[b].id;
    return (double)hit / avail;
}

/* Exact mode: bit-identical to the reference golden. */
static void check_exact(const ds4_golden *ref, const ds4_golden *out, ds4_cf_finding *f) {
    ds4_diff_opts o = {.all_steps = false};
    ds4_diff_report r;
    ds4err err = {0};
    if (ds4chk_diff_compute(ref, out, &o, &r, &err)) {
        found(f, DS4_CF_ERROR, -1, "comparing with the reference: %s", err.msg);
        return;
    }
    if (!r.exact) {
        if (r.first_inexact >= 0)
            found(f, DS4_CF_FAIL, r.first_inexact, "step %" PRId64 ": not bit-identical to the "
                  "reference (%s)", r.first_inexact, r.steps[r.first_inexact].inexact);
        else if (r.n_a != r.n_b)
            found(f, DS4_CF_FAIL, r.n_a < r.n_b ? r.n_a : r.n_b, "%u steps, the reference has %u",
                  r.n_b, r.n_a);
        else
            found(f, DS4_CF_FAIL, -1, "not bit-identical to the reference (%s)",
                  r.prompt_differs ? "prompt" : r.model_differs ? "model" : "stop reason");
    }
    ds4chk_diff_report_free(&r);
}

/* The finding of step i, if it fails: the gap first (a wrong token), else
 * the |dlogprob| of the tokens both lists hold. */
static bool step_finding(const ds4_golden_step *st, bool has_sel, const ds4_cf_tf *tf, uint32_t i,
                         const ds4_cf_limits *l, const ds4_tokenizer *tok, ds4_cf_finding *g) {
    char a[96], b[96];
    const int32_t *top = tf->top_ids + (size_t)i * tf->k;
    double d = step_dlogprob(st, has_sel, tf, i);
    ds4chk_verdict_finding_pass(g);
    if (l->greedy && tf->gap[i] > l->max_gap)
        found(g, DS4_CF_FAIL, i, "step %u: committed %s, %.3g nats below the reference's "
              "argmax %s (max %.3g)", i, ds4chk_verdict_token_name(tok, st->tok.id, a, sizeof(a)),
              tf->gap[i], ds4chk_verdict_token_name(tok, tf->n_top[i] ? top[0] : -1, b, sizeof(b)),
              l->max_gap);
    else if (d > l->max_dlogprob)
        found(g, DS4_CF_FAIL, i, "step %u: |dlogprob| %.3g against the reference under the "
              "same tokens (max %.3g)", i, d, l->max_dlogprob);
    else
        return false;
    g->token = st->tok.id;
    g->gap = tf->gap[i];
    g->dlogprob = d;
    return true;
}

/* The token, gap and |dlogprob| at a finding's step, when it has one the
 * output reached (an overlap or exactness finding names only the step). */
static void at_step(ds4_cf_finding *g, const ds4_golden *out, const ds4_cf_tf *tf) {
    if (g->step < 0 || (uint64_t)g->step >= out->n_steps) return;
    uint32_t i = (uint32_t)g->step;
    g->token = out->steps[i].tok.id;
    g->gap = tf->gap[i];
    g->dlogprob = step_dlogprob(&out->steps[i], out->has_sel_scores, tf, i);
}

/* A finding of the row as a whole: kept, and the row's first when it has
 * none yet. */
static void keep(ds4_cf_findings *all, ds4_cf_finding *first, const ds4_cf_finding *g) {
    ds4chk_verdict_findings_push(all, g);
    if (first->status == DS4_CF_PASS) *first = *g;
}

void ds4chk_verdict_row(const ds4_golden *ref, const ds4_golden *out, const ds4_cf_tf *tf,
                      uint32_t n_want, int32_t eos, const ds4_cf_limits *l,
                      const ds4_tokenizer *tok, ds4_cf_findings *all, ds4_cf_finding *f) {
    ds4chk_verdict_finding_pass(f);
    ds4_cf_finding g;
    double sum5 = 0, sum20 = 0;
    uint32_t n5 = 0, n20 = 0;
    int64_t low5 = -1, low20 = -1;
    for (uint32_t i = 0; i < out->n_steps; i++) {
        const ds4_golden_step *st = &out->steps[i];
        if (step_finding(st, out->has_sel_scores, tf, i, l, tok, &g)) keep(all, f, &g);
        double o5 = step_overlap(st, tf, i, 5), o20 = step_overlap(st, tf, i, 20);
        if (!isnan(o5)) {
            sum5 += o5;
            n5++;
            if (low5 < 0 && o5 < l->min_top5) low5 = i;
        }
        if (!isnan(o20)) {
            sum20 += o20;
            n20++;
            if (low20 < 0 && o20 < l->min_top20) low20 = i;
        }
    }
    ds4chk_verdict_finding_pass(&g);
    if (n5 && sum5 / n5 < l->min_top5) {
        found(&g, DS4_CF_FAIL, low5, "mean top-5 overlap %.3g below %.3g (from step %" PRId64 ")",
              sum5 / n5, l->min_top5, low5);
        at_step(&g, out, tf);
        keep(all, f, &g);
    }
    ds4chk_verdict_finding_pass(&g);
    if (n20 && sum20 / n20 < l->min_top20) {
        found(&g, DS4_CF_FAIL, low20, "mean top-20 overlap %.3g below %.3g (from step %" PRId64 ")",
              sum20 / n20, l->min_top20, low20);
        at_step(&g, out, tf);
        keep(all, f, &g);
    }
    bool ended = out->n_steps && out->steps[out->n_steps - 1].tok.id == eos;
    ds4chk_verdict_finding_pass(&g);
    if (out->n_steps < n_want && !ended) {
        found(&g, DS4_CF_FAIL, out->n_steps, "stopped after %u of %u steps without the end token",
              out->n_steps, n_want);
        keep(all, f, &g);
    }
    ds4chk_verdict_finding_pass(&g);
    if (l->exact) {
        check_exact(ref, out, &g);
        at_step(&g, out, tf);
        if (g.status != DS4_CF_PASS) keep(all, f, &g);
    }
}

/* "0.012" for a margin, "?" when not recorded. */
static const char *margin_text(const ds4_cf_stream *s, uint32_t i, char *out, size_t cap) {
    if (s->margin && !isnan(s->margin[i])) snprintf(out, cap, "%.3g", s->margin[i]);
    else snprintf(out, cap, "?");
    return out;
}

void ds4chk_verdict_same(const ds4_cf_stream *base, const ds4_cf_stream *row, const char *base_name,
                       const ds4_cf_limits *l, const ds4_tokenizer *tok, ds4_cf_finding *f) {
    ds4chk_verdict_finding_pass(f);
    const ds4_cf_tf *bt = base->tf, *rt = row->tf;
    uint32_t n = bt->n < rt->n ? bt->n : rt->n, i = 0;
    while (i < n && bt->ids[i] == rt->ids[i]) i++;
    if (i == n) return;   /* a shorter stream is the row check's to judge */
    /* Up to step i both saw the same tokens, so both records hold the
     * reference's logprobs under one prefix; the backend's own margins say
     * how close its choice was in each run. */
    double diff = fabs(bt->lp[i] - rt->lp[i]);
    bool own = (row->margin && row->margin[i] < l->tie_eps) ||
               (base->margin && base->margin[i] < l->tie_eps);
    char a[96], b[96], mr[32], mb[32];
    found(f, diff < l->tie_eps || own ? DS4_CF_TIE : DS4_CF_FAIL, i,
          "step %u: %s here, %s in the %s stream; the reference puts them %.3g nats apart, the "
          "backend its own top two %s here and %s there (a tie below %.3g)", i,
          ds4chk_verdict_token_name(tok, rt->ids[i], a, sizeof(a)),
          ds4chk_verdict_token_name(tok, bt->ids[i], b, sizeof(b)), base_name, diff,
          margin_text(row, i, mr, sizeof(mr)), margin_text(base, i, mb, sizeof(mb)), l->tie_eps);
    f->token = rt->ids[i];
    f->gap = rt->gap[i];
    f->own_tie = f->status == DS4_CF_TIE && !(diff < l->tie_eps);
    f->margin = diff;
}
