/* ds4ref-conform's reports (conform.h): the terminal table and the JSON. */
#include "check/conform/conform.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/file.h"
#include "check/conform/client.h"
#include "ref/text/json.h"

static const char *base_name(const char *p) {
    const char *s = p ? strrchr(p, '/') : NULL;
    return s ? s + 1 : p ? p : "";
}

/* "(official 1.2, official, qat off 1.1, ...)": every candidate's floor. */
static void put_candidates(ds4_buf *b, const ds4_cf_calib *c) {
    ds4_buf_putc(b, '(');
    for (uint32_t i = 0; i < DS4_CF_CANDIDATES; i++) {
        ds4_buf_printf(b, "%s%s ", i ? ", " : "", c->cand[i].name);
        /* Not measured: the model cannot run the FP8 simulation. */
        if (isnan(c->cand[i].floor)) ds4_buf_puts(b, "n/a");
        else ds4_buf_printf(b, "%.3g", c->cand[i].floor);
    }
    ds4_buf_putc(b, ')');
}

/* What explained the chosen candidate: f32 noise, or its roundings. */
static void put_explained(ds4_buf *b, const ds4_cf_candidate *k) {
    if (isnan(k->expected))
        ds4_buf_printf(b, "90%% of the steps within %.3g (f32 noise: at most %g)", k->typical,
                       DS4_CF_EXPLAIN_MIN);
    else
        ds4_buf_printf(b, "90%% of the steps within %.3g, where its own roundings under another "
                       "order of sums leave %.3g (noise: at most %gx)", k->typical, k->expected,
                       DS4_CF_EXPLAIN_FACTOR);
}

/* "numerics: ggml-act, qat off, chosen on 4 base rows: noise floor 0.14
 * nats |dlogprob|, 90% of the steps within ... (official 1.2, ...)", or
 * that none explains the backend. */
static void put_calibration(ds4_buf *b, const ds4_cf_calib *c) {
    if (!c->done) return;
    const ds4_cf_candidate *k = &c->cand[c->best];
    if (c->explained) {
        ds4_buf_printf(b, "numerics: %s, chosen on %u base rows: noise floor %.3g nats "
                       "|dlogprob|, ", k->name, c->rows, k->floor);
        put_explained(b, k);
    } else {
        ds4_buf_printf(b, "numerics: none explains the backend (%u base rows): the closest, %s, "
                       "has a floor of %.3g nats |dlogprob| and ", c->rows, k->name, k->floor);
        put_explained(b, k);
    }
    ds4_buf_putc(b, ' ');
    put_candidates(b, c);
    ds4_buf_putc(b, '\n');
}

/* The verdict on a backend no numerics explains: what it measured, and
 * where its base rows first part from the reference. */
static void put_unexplained(ds4_buf *b, const ds4_cf_result *r) {
    const ds4_cf_calib *c = &r->calib;
    if (!c->done || c->explained) return;
    const ds4_cf_candidate *k = &c->cand[c->best];
    const double e = ds4chk_calibrate_explainable(k);
    ds4_buf_printf(b, "%s: no numerics profile explains this backend: its base rows depart from "
                   "the nearest, %s, by %.3g nats |dlogprob| at 90%% of their steps (floor %.3g), "
                   "%.3g times the %.3g noise could explain", r->unexplained ? "FAIL" : "warning",
                   k->name, k->typical, k->floor, k->typical / e, e);
    if (!isnan(k->expected))
        ds4_buf_printf(b, " (%gx the %.3g its roundings make of another order of sums)",
                       DS4_CF_EXPLAIN_FACTOR, k->expected);
    ds4_buf_puts(b, "; the backend against itself: ");
    if (r->spread.rows && !isnan(r->spread.dlogprob)) ds4_buf_printf(b, "%.3g", r->spread.dlogprob);
    else ds4_buf_puts(b, "n/a (no other cell)");
    ds4_buf_puts(b, ". It computes something else (a wrong model or weights, or a systematic bug)");
    const ds4_cf_part *p = &c->part;
    if (p->row >= 0) {
        ds4_buf_printf(b, ". Its base rows part from the reference first at %s step %u: token "
                       "%s, ", r->prompts[p->row].name, p->step, p->token_name);
        if (isnan(p->dlogprob)) ds4_buf_puts(b, "no token in both top lists");
        else ds4_buf_printf(b, "|dlogprob| %.3g", p->dlogprob);
        if (p->gap > 0)
            ds4_buf_printf(b, ", the reference's argmax %s %.3g nats above it", p->argmax_name,
                           p->gap);
    }
    if (!r->unexplained) ds4_buf_puts(b, ". The cells are judged under the user's limits");
    ds4_buf_puts(b, "\n");
}

/* "backend against itself: 108 rows of its other cells depart from their
 * prompt's base row by up to 0.0906 nats |dlogprob| up to the step where
 * their tokens part (the most: draft=0 chunk=1 batch=1 long)"; no cell
 * named when that is 0. */
static void put_spread(ds4_buf *b, const ds4_cf_result *r) {
    const ds4_cf_spread *s = &r->spread;
    if (!s->rows) return;
    ds4_buf_printf(b, "backend against itself: %u rows of its other cells depart from their "
                   "prompt's base row by up to ", s->rows);
    if (isnan(s->dlogprob)) {
        ds4_buf_puts(b, "n/a (no token in both top lists)\n");
        return;
    }
    ds4_buf_printf(b, "%.3g nats |dlogprob| up to the step where their tokens part",
                   s->dlogprob);
    if (s->dlogprob > 0) {
        char name[160];
        ds4chk_conform_cell_name(r, &r->cells[s->cell], true, name, sizeof(name));
        ds4_buf_printf(b, " (the most: %s", name);
        if (r->cells[s->cell].batch > 1) ds4_buf_printf(b, ", row %d", s->row);
        ds4_buf_putc(b, ')');
    }
    ds4_buf_putc(b, '\n');
}

/* Where the limits came from: the calibration, the user, the fixed
 * defaults, or a mix. */
static const char *limits_from(const ds4_cf_result *r) {
    const uint32_t all = DS4_CF_USER_GAP | DS4_CF_USER_DLOGPROB | DS4_CF_USER_TIE;
    const bool calibrated = r->calib.done && r->calib.explained;
    if ((r->user_limits & all) == all) return "the user's limits";
    if (r->user_limits) return calibrated ? "some limits the user's, the rest from the calibration"
                                          : "some limits the user's, the rest fixed";
    return calibrated ? "limits from the calibration" : "fixed limits";
}

/* "model identity: the reference's (4 outputs' golden headers)", or that
 * the backend named none. */
static void put_identity(ds4_buf *b, const ds4_cf_identity *id) {
    const uint32_t named = id->by_header + id->by_sha256 + id->by_server;
    if (!named) {
        ds4_buf_puts(b, "model identity: not available: ");
        if (id->server_unnamed)
            ds4_buf_printf(b, "the server's /v1/models names %s%s%s, no file here",
                           id->server_names[0] ? "'" : "nothing", id->server_names,
                           id->server_names[0] ? "'" : "");
        else
            ds4_buf_puts(b, "the outputs name no model (a dump may carry \"model_sha256\")");
        ds4_buf_puts(b, "; only the numbers can tell another model (the calibration)\n");
        return;
    }
    ds4_buf_puts(b, "model identity: the reference's (");
    const uint32_t n[3] = {id->by_header, id->by_sha256, id->by_server};
    static const char *const what[3] = {"outputs' golden headers", "outputs' model_sha256",
                                        "cells' /v1/models"};
    for (int k = 0, any = 0; k < 3; k++)
        if (n[k]) ds4_buf_printf(b, "%s%u %s", any++ ? ", " : "", n[k], what[k]);
    if (id->unnamed) ds4_buf_printf(b, "; %u outputs named none", id->unnamed);
    if (id->server_unnamed) ds4_buf_printf(b, "; %u cells' servers named none", id->server_unnamed);
    ds4_buf_puts(b, ")\n");
}

static void put_header(ds4_buf *b, const ds4_cf_result *r, const ds4_cf_opts *o) {
    ds4_buf_printf(b, "ds4ref-conform: backend %s on %s", o->backend_name ? o->backend_name : o->backend,
                   base_name(o->model_path));
    if (o->mtp_path) ds4_buf_printf(b, " (MTP %s)", base_name(o->mtp_path));
    else if (o->own_drafter) ds4_buf_puts(b, " (its DSpark drafter)");
    ds4_buf_printf(b, ", %u tokens a row, context %u\n", o->n_tokens, r->ctx);
    if ((o->server_url || o->server_cmd) &&
        ds4chk_client_dialect((uint32_t)o->server_dialect)->chat_text)
        ds4_buf_puts(b, "logprobs: not available (ds4's server answers text): each row's text, read "
                        "as the reference's tokens while they explain it and tokenized again "
                        "after, judged by the reference's teacher forcing alone (the gap)\n");
    const ds4_cf_limits *l = &r->limits;
    if (l->exact) {
        ds4_buf_puts(b, "mode: exact (tokens and logprobs bit-identical to ds4ref)\n");
    } else {
        put_calibration(b, &r->calib);
        ds4_buf_puts(b, "mode: tolerance (");
        if (r->greedy) ds4_buf_printf(b, "gap <= %.3g nats, ", l->max_gap);
        if (!isnan(l->max_dlogprob)) ds4_buf_printf(b, "|dlogprob| <= %.3g, ", l->max_dlogprob);
        if (!isnan(l->min_top5)) ds4_buf_printf(b, "top-5 overlap >= %g, ", l->min_top5);
        if (!isnan(l->min_top20)) ds4_buf_printf(b, "top-20 overlap >= %g, ", l->min_top20);
        ds4_buf_printf(b, "ties below %.3g nats; %s)\n", l->tie_eps, limits_from(r));
        put_unexplained(b, r);
    }
    put_spread(b, r);
    put_identity(b, &r->identity);
    ds4_buf_puts(b, "prompts:");
    uint32_t cached = 0;
    for (uint32_t i = 0; i < r->n_prompts; i++) {
        ds4_buf_printf(b, "%s %s (%u tokens)", i ? "," : "", r->prompts[i].name, r->prompts[i].n);
        cached += r->prompts[i].cached;
    }
    ds4_buf_printf(b, "; references: %u computed, %u from the cache\n\n", r->n_prompts - cached,
                   cached);
}

/* "pass", "FAIL@5", "tie@7", "n/e", "ERROR", "n/a", with ":r1" when row 1
 * of a batch decided it, then "91%/3" for a speculative cell whose backend
 * reported its accepts. */
static void entry(const ds4_cf_cell *c, char *out, size_t cap) {
    char st[40];
    switch (c->status) {
    case DS4_CF_PASS: snprintf(st, sizeof(st), "pass"); break;
    case DS4_CF_NOT_EXERCISED: snprintf(st, sizeof(st), "n/e"); break;
    case DS4_CF_TIE: snprintf(st, sizeof(st), "tie@%" PRId64, c->f.step); break;
    case DS4_CF_FAIL:
        if (c->f.step >= 0) snprintf(st, sizeof(st), "FAIL@%" PRId64, c->f.step);
        else snprintf(st, sizeof(st), "FAIL");
        break;
    case DS4_CF_ERROR: snprintf(st, sizeof(st), "ERROR"); break;
    default: snprintf(st, sizeof(st), "n/a"); break;
    }
    bool by_row = c->status == DS4_CF_TIE || c->status == DS4_CF_FAIL || c->status == DS4_CF_ERROR;
    if (by_row && c->batch > 1 && c->row >= 0) {
        size_t n = strlen(st);
        snprintf(st + n, sizeof(st) - n, ":r%d", c->row);
    }
    const ds4_cf_accept *a = &c->accept;
    if (c->draft && a->known && c->status != DS4_CF_NA && c->status != DS4_CF_ERROR) {
        double rate = a->proposed ? 100.0 * (double)a->accepted / (double)a->proposed : 0;
        if (a->has_deepest) snprintf(out, cap, "%s %.0f%%/%" PRIu64, st, rate, a->deepest);
        else snprintf(out, cap, "%s %.0f%%", st, rate);
    } else {
        snprintf(out, cap, "%s", st);
    }
}

static void put_table(ds4_buf *b, const ds4_cf_result *r) {
    int w = 14;
    for (uint32_t p = 0; p < r->n_prompts; p++)
        if ((int)strlen(r->prompts[p].name) + 1 > w) w = (int)strlen(r->prompts[p].name) + 1;
    /* A confidence column only when some cell has a threshold. */
    bool conf = false;
    for (uint32_t i = 0; i < r->n_cells; i++) conf |= r->cells[i].conf > 0;
    ds4_buf_puts(b, conf ? "draft chunk batch conf " : "draft chunk batch ");
    for (uint32_t p = 0; p < r->n_prompts; p++) ds4_buf_printf(b, " %-*s", w, r->prompts[p].name);
    ds4_buf_putc(b, '\n');
    for (uint32_t i = 0; i < r->n_cells; i += r->n_prompts) {
        const ds4_cf_cell *c = &r->cells[i];
        char ch[16];
        ds4_buf_printf(b, "%5u %5s %4u%c ", c->draft, ds4chk_matrix_chunk_name(c->chunk_spec, ch, sizeof(ch)),
                       c->batch, c->cache == DS4_CF_WARM ? 'w' : ' ');
        if (conf) ds4_buf_printf(b, "%4.2f ", c->conf / 100.0);
        for (uint32_t p = 0; p < r->n_prompts && i + p < r->n_cells; p++) {
            char e[64];
            entry(&r->cells[i + p], e, sizeof(e));
            ds4_buf_printf(b, " %-*s", w, e);
        }
        ds4_buf_putc(b, '\n');
    }
}

/* Findings of every row of c besides the one its line shows. */
static uint32_t other_findings(const ds4_cf_cell *c) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < c->batch; i++) n += c->rows[i].all.n;
    return n > 0 ? n - 1 : 0;
}

/* "  draft=3 chunk=7 batch=2 chat, row 1 (code): DETAIL [gap G, |dlogprob| D]",
 * then how many other findings the JSON holds. */
static void put_cell_line(ds4_buf *b, const ds4_cf_result *r, const ds4_cf_cell *c) {
    char name[160];
    ds4chk_conform_cell_name(r, c, true, name, sizeof(name));
    ds4_buf_printf(b, "  %s", name);
    if (c->row >= 0 && c->batch > 1)
        ds4_buf_printf(b, ", row %d (%s)", c->row, r->prompts[c->rows[c->row].prompt].name);
    ds4_buf_printf(b, ": %s", c->f.detail);
    if (c->status == DS4_CF_FAIL && !isnan(c->f.gap)) {
        ds4_buf_printf(b, " [gap %.3g", c->f.gap);
        if (!isnan(c->f.dlogprob)) ds4_buf_printf(b, ", |dlogprob| %.3g", c->f.dlogprob);
        ds4_buf_putc(b, ']');
    }
    if (c->log[0] && c->status == DS4_CF_ERROR) ds4_buf_printf(b, " (log: %s)", c->log);
    uint32_t more = c->status == DS4_CF_NOT_EXERCISED ? 0 : other_findings(c);
    if (more) ds4_buf_printf(b, " (+%u more findings: --json)", more);
    ds4_buf_putc(b, '\n');
}

/* Every cell of one status, a line each. */
static void put_list(ds4_buf *b, const ds4_cf_result *r, ds4_cf_status a, ds4_cf_status z,
                     const char *title) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->n_cells; i++) {
        const ds4_cf_cell *c = &r->cells[i];
        if (c->status < a || c->status > z) continue;
        if (n++ == 0) ds4_buf_printf(b, "\n%s:\n", title);
        put_cell_line(b, r, c);
    }
}

/* Per prompt, the failing cell with the lowest depth, then the smallest
 * batch, then the smallest chunk: where to start looking. */
static void put_smallest(ds4_buf *b, const ds4_cf_result *r) {
    bool title = false;
    for (uint32_t p = 0; p < r->n_prompts; p++) {
        const ds4_cf_cell *best = NULL;
        for (uint32_t i = 0; i < r->n_cells; i++) {
            const ds4_cf_cell *c = &r->cells[i];
            if (c->prompt != p || (c->status != DS4_CF_FAIL && c->status != DS4_CF_ERROR)) continue;
            if (!best || c->draft < best->draft ||
                (c->draft == best->draft &&
                 (c->batch < best->batch || (c->batch == best->batch && c->chunk < best->chunk))))
                best = c;
        }
        if (!best) continue;
        if (!title) ds4_buf_puts(b, "\nsmallest failing cell:\n");
        title = true;
        put_cell_line(b, r, best);
    }
}

/* Why the ties are ties, and a pattern that says they are not. */
static void put_ties(ds4_buf *b, const ds4_cf_result *r) {
    const ds4_cf_ties *t = &r->ties;
    if (!t->cells) return;
    ds4_buf_printf(b, "%u ties: %u where the reference puts the two tokens within %.3g nats, %u "
                   "where only the backend's own top two were that close; the reference's margins "
                   "%.3g at the median, %.3g at the widest\n", t->cells, t->by_reference,
                   r->limits.tie_eps, t->by_own, t->median, t->widest);
    if (t->pattern)
        ds4_buf_printf(b, "FAIL: the ties hide a systematic difference: every cell with %s=%s "
                       "departs from its prompt's base stream (%u of %u tie or fail), against %u "
                       "of %u with the base value of %s\n", t->dim, t->value, t->pattern_cells,
                       t->pattern_cells, t->base_ties, t->base_cells, t->dim);
}

/* Rows of a text-dialect server judged only in part: the engine named a
 * token by a text that several ids (or none) have. */
static void put_cuts(ds4_buf *b, const ds4_cf_result *r) {
    uint32_t rows = 0, least = UINT32_MAX;
    for (uint32_t i = 0; i < r->n_cells; i++)
        for (uint32_t k = 0; k < r->cells[i].batch; k++)
            if (r->cells[i].rows[k].cut >= 0) {
                rows++;
                if ((uint32_t)r->cells[i].rows[k].cut < least) least = (uint32_t)r->cells[i].rows[k].cut;
            }
    if (rows)
        ds4_buf_printf(b, "\n%u rows judged only up to a token the engine named by an ambiguous "
                       "text (the first after %u steps; --json: judged_steps, the cell's log)\n",
                       rows, least);
}

/* The report: the header, the matrix table, each failure and tie, the
 * smallest failing cell of each prompt, the summary line. */
static int report_text(const ds4_cf_result *r, const ds4_cf_opts *o, ds4_buf *b) {
    put_header(b, r, o);
    put_table(b, r);
    put_list(b, r, DS4_CF_FAIL, DS4_CF_ERROR, "failures");
    put_list(b, r, DS4_CF_TIE, DS4_CF_TIE, "ties (a near-tie, not failed)");
    put_ties(b, r);
    put_list(b, r, DS4_CF_NOT_EXERCISED, DS4_CF_NOT_EXERCISED, "not exercised");
    put_smallest(b, r);
    put_cuts(b, r);
    if (r->interrupted || r->not_found)
        ds4_buf_printf(b, "\n%s: %s; the cells that did not run are n/a\n",
                       r->interrupted ? "INTERRUPTED" : "STOPPED", r->stopped);
    ds4_buf_printf(b, "\n%u cells: %u pass, %u fail, %u error, %u tie, %u not exercised, %u n/a\n",
                   r->n_cells, r->count[DS4_CF_PASS], r->count[DS4_CF_FAIL],
                   r->count[DS4_CF_ERROR], r->count[DS4_CF_TIE],
                   r->count[DS4_CF_NOT_EXERCISED], r->count[DS4_CF_NA]);
    if (r->unexplained)
        ds4_buf_puts(b, "FAIL: no numerics profile explains this backend (the header says why)\n");
    if (r->ties.pattern) ds4_buf_puts(b, "FAIL: the ties hide a systematic difference (above)\n");
    return b->failed ? -1 : 0;
}

/* ---- JSON ---- */

static void put_num(ds4_buf *b, const char *key, double v) {
    if (isnan(v) || isinf(v)) ds4_buf_printf(b, ",\"%s\":null", key);
    else ds4_buf_printf(b, ",\"%s\":%.17g", key, v);
}

static void put_str(ds4_buf *b, const char *key, const char *s) {
    ds4_buf_printf(b, ",\"%s\":", key);
    ds4_json_put_str(b, s, strlen(s));
}

/* {"status", "step", "token", "gap", "dlogprob", "detail"}. */
static void put_finding_json(ds4_buf *b, const ds4_cf_finding *f) {
    ds4_buf_puts(b, "{\"status\":");
    const char *st = ds4chk_verdict_status_name(f->status);
    ds4_json_put_str(b, st, strlen(st));
    if (f->step >= 0) ds4_buf_printf(b, ",\"step\":%" PRId64, f->step);
    else ds4_buf_puts(b, ",\"step\":null");
    if (f->token >= 0) ds4_buf_printf(b, ",\"token\":%" PRId32, f->token);
    else ds4_buf_puts(b, ",\"token\":null");
    put_num(b, "gap", f->gap);
    put_num(b, "dlogprob", f->dlogprob);
    put_str(b, "detail", f->detail);
    ds4_buf_putc(b, '}');
}

static void put_cell_json(ds4_buf *b, const ds4_cf_result *r, const ds4_cf_cell *c) {
    char ch[16];
    ds4_buf_printf(b, "{\"draft\":%u,\"chunk\":", c->draft);
    if (c->chunk_spec == DS4_CF_WHOLE) ds4_buf_puts(b, "\"whole\"");
    else ds4_buf_puts(b, ds4chk_matrix_chunk_name(c->chunk_spec, ch, sizeof(ch)));
    ds4_buf_printf(b, ",\"chunk_tokens\":%u,\"batch\":%u", c->chunk, c->batch);
    put_str(b, "prompt", r->prompts[c->prompt].name);
    put_str(b, "status", ds4chk_verdict_status_name(c->status));
    put_str(b, "cache", c->cache == DS4_CF_WARM ? "warm" : "cold");
    ds4_buf_printf(b, ",\"conf\":%u", c->conf);
    if (c->f.step >= 0 && c->status != DS4_CF_PASS) ds4_buf_printf(b, ",\"first_step\":%" PRId64, c->f.step);
    else ds4_buf_puts(b, ",\"first_step\":null");
    put_num(b, "gap", c->status == DS4_CF_PASS ? NAN : c->f.gap);
    put_str(b, "detail", c->status == DS4_CF_PASS ? "" : c->f.detail);
    if (c->row >= 0 && c->status != DS4_CF_PASS) ds4_buf_printf(b, ",\"row\":%d", c->row);
    else ds4_buf_puts(b, ",\"row\":null");
    put_num(b, "dlogprob", c->status == DS4_CF_PASS ? NAN : c->f.dlogprob);
    if (c->f.token >= 0 && c->status != DS4_CF_PASS) ds4_buf_printf(b, ",\"token\":%" PRId32, c->f.token);
    else ds4_buf_puts(b, ",\"token\":null");
    const ds4_cf_accept *a = &c->accept;
    if (a->known) {
        ds4_buf_printf(b, ",\"proposed\":%" PRIu64 ",\"accepted\":%" PRIu64, a->proposed, a->accepted);
        put_num(b, "accept_rate", a->proposed ? (double)a->accepted / (double)a->proposed : NAN);
        if (a->has_deepest) ds4_buf_printf(b, ",\"deepest\":%" PRIu64, a->deepest);
        else ds4_buf_puts(b, ",\"deepest\":null");
    } else {
        ds4_buf_puts(b, ",\"proposed\":null,\"accepted\":null,\"accept_rate\":null,\"deepest\":null");
    }
    put_num(b, "seconds", c->seconds);
    ds4_buf_puts(b, ",\"rows\":[");
    for (uint32_t i = 0; i < c->batch; i++) {
        const ds4_cf_row *row = &c->rows[i];
        ds4_buf_puts(b, i ? ",{" : "{");
        ds4_buf_puts(b, "\"prompt\":");
        const char *pn = r->prompts[row->prompt].name;
        ds4_json_put_str(b, pn, strlen(pn));
        put_str(b, "status", ds4chk_verdict_status_name(row->f.status));
        put_str(b, "detail", row->f.detail);
        ds4_buf_puts(b, ",\"findings\":[");
        for (uint32_t k = 0; k < row->all.n; k++) {
            if (k) ds4_buf_putc(b, ',');
            put_finding_json(b, &row->all.v[k]);
        }
        ds4_buf_printf(b, "],\"findings_complete\":%s", row->all.failed ? "false" : "true");
        if (row->cut >= 0) ds4_buf_printf(b, ",\"judged_steps\":%d", row->cut);
        ds4_buf_putc(b, '}');
    }
    ds4_buf_puts(b, "]}");
}

/* "calibration": null, or {"numerics", "qat", "floor", "typical", "gap",
 * "expected", "explained" (the chosen candidate's), "rows", "explains"
 * (true when some candidate explains the backend), "factor", "min" (the
 * rule's), "part" (null, or where the base rows of a backend nothing
 * explains first part from the reference: "prompt", "step", "token",
 * "argmax", "dlogprob", "gap"), "candidates": [{the same five}]}. */
static void put_candidate_json(ds4_buf *b, const ds4_cf_candidate *k) {
    char name[48];
    snprintf(name, sizeof(name), "%s", k->name);
    char *comma = strchr(name, ',');
    if (comma) *comma = '\0';
    ds4_buf_puts(b, "\"numerics\":");
    ds4_json_put_str(b, name, strlen(name));
    ds4_buf_printf(b, ",\"qat\":%s", k->qat ? "true" : "false");
    put_num(b, "floor", k->floor);
    put_num(b, "typical", k->typical);
    put_num(b, "gap", k->gap);
    put_num(b, "expected", k->expected);
    ds4_buf_printf(b, ",\"explained\":%s", k->explained ? "true" : "false");
}

static void put_part_json(ds4_buf *b, const ds4_cf_result *r) {
    const ds4_cf_part *p = &r->calib.part;
    if (p->row < 0) {
        ds4_buf_puts(b, ",\"part\":null");
        return;
    }
    ds4_buf_puts(b, ",\"part\":{\"prompt\":");
    ds4_json_put_str(b, r->prompts[p->row].name, strlen(r->prompts[p->row].name));
    ds4_buf_printf(b, ",\"step\":%u,\"token\":%" PRId32 ",\"argmax\":%" PRId32, p->step,
                   p->token, p->argmax);
    put_num(b, "dlogprob", p->dlogprob);
    put_num(b, "gap", p->gap);
    ds4_buf_putc(b, '}');
}

static void put_calibration_json(ds4_buf *b, const ds4_cf_result *r) {
    const ds4_cf_calib *c = &r->calib;
    if (!c->done) {
        ds4_buf_puts(b, ",\"calibration\":null");
        return;
    }
    ds4_buf_puts(b, ",\"calibration\":{");
    put_candidate_json(b, &c->cand[c->best]);
    ds4_buf_printf(b, ",\"rows\":%u,\"explains\":%s", c->rows, c->explained ? "true" : "false");
    put_num(b, "factor", DS4_CF_EXPLAIN_FACTOR);
    put_num(b, "min", DS4_CF_EXPLAIN_MIN);
    put_part_json(b, r);
    ds4_buf_puts(b, ",\"candidates\":[");
    for (uint32_t i = 0; i < DS4_CF_CANDIDATES; i++) {
        ds4_buf_puts(b, i ? ",{" : "{");
        put_candidate_json(b, &c->cand[i]);
        ds4_buf_putc(b, '}');
    }
    ds4_buf_puts(b, "]}");
}

/* "spread": null (no row compared), or {"rows", "dlogprob", "cell", "row"}. */
static void put_spread_json(ds4_buf *b, const ds4_cf_result *r) {
    const ds4_cf_spread *s = &r->spread;
    if (!s->rows) {
        ds4_buf_puts(b, ",\"spread\":null");
        return;
    }
    ds4_buf_printf(b, ",\"spread\":{\"rows\":%u", s->rows);
    put_num(b, "dlogprob", s->dlogprob);
    if (s->cell >= 0) {
        char name[160];
        ds4chk_conform_cell_name(r, &r->cells[s->cell], true, name, sizeof(name));
        put_str(b, "cell", name);
        ds4_buf_printf(b, ",\"row\":%d", s->row);
    }
    ds4_buf_putc(b, '}');
}

/* "ties": {"cells", "reference", "own", "median", "widest", "pattern": null
 * or {"dim", "value", "cells", "base_ties", "base_cells"}}. */
static void put_ties_json(ds4_buf *b, const ds4_cf_ties *t) {
    ds4_buf_printf(b, ",\"ties\":{\"cells\":%u,\"reference\":%u,\"own\":%u", t->cells,
                   t->by_reference, t->by_own);
    put_num(b, "median", t->median);
    put_num(b, "widest", t->widest);
    ds4_buf_puts(b, ",\"pattern\":");
    if (!t->pattern) {
        ds4_buf_puts(b, "null}");
        return;
    }
    ds4_buf_puts(b, "{\"dim\":");
    ds4_json_put_str(b, t->dim, strlen(t->dim));
    put_str(b, "value", t->value);
    ds4_buf_printf(b, ",\"cells\":%u,\"base_ties\":%u,\"base_cells\":%u}}", t->pattern_cells,
                   t->base_ties, t->base_cells);
}

/* Every cell as JSON (docs/CONFORM.md §4): {"format", "backend", ...,
 * "cells": [...], "summary"}. */
static int report_json(const ds4_cf_result *r, const ds4_cf_opts *o, ds4_buf *b) {
    ds4_buf_puts(b, "{\"format\":\"ds4ref-conform-v1\"");
    put_str(b, "backend", o->backend_name ? o->backend_name : o->backend);
    if (o->backend) put_str(b, "template", o->backend);
    if (o->server_url) put_str(b, "server", o->server_url);
    if (o->server_cmd) put_str(b, "server_cmd", o->server_cmd);
    put_str(b, "mode", r->limits.exact ? "exact" : "tolerance");
    put_str(b, "model", o->model_path);
    if (o->mtp_path) put_str(b, "mtp", o->mtp_path);
    ds4_buf_printf(b, ",\"tokens\":%u,\"ctx\":%u,\"top_k\":%u", o->n_tokens, r->ctx, o->top_k);
    put_num(b, "max_gap", r->limits.max_gap);
    put_num(b, "tie_eps", r->limits.tie_eps);
    put_num(b, "max_dlogprob", r->limits.max_dlogprob);
    put_str(b, "limits", limits_from(r));
    ds4_buf_printf(b, ",\"interrupted\":%s", r->interrupted ? "true" : "false");
    put_str(b, "stopped", r->stopped);
    ds4_buf_printf(b, ",\"unexplained\":%s", r->unexplained ? "true" : "false");
    put_calibration_json(b, r);
    put_spread_json(b, r);
    put_ties_json(b, &r->ties);
    const ds4_cf_identity *id = &r->identity;
    ds4_buf_printf(b, ",\"identity\":{\"header\":%u,\"sha256\":%u,\"server\":%u,"
                   "\"unnamed\":%u,\"server_unnamed\":%u}", id->by_header, id->by_sha256,
                   id->by_server, id->unnamed, id->server_unnamed);
    ds4_buf_puts(b, ",\"prompts\":[");
    for (uint32_t i = 0; i < r->n_prompts; i++) {
        ds4_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        ds4_json_put_str(b, r->prompts[i].name, strlen(r->prompts[i].name));
        ds4_buf_printf(b, ",\"tokens\":%u}", r->prompts[i].n);
    }
    ds4_buf_puts(b, "],\"cells\":[");
    for (uint32_t i = 0; i < r->n_cells; i++) {
        if (i) ds4_buf_putc(b, ',');
        ds4_buf_puts(b, "\n");
        put_cell_json(b, r, &r->cells[i]);
    }
    ds4_buf_puts(b, "\n],\"summary\":{");
    for (int s = 0; s < DS4_CF_NSTATUS; s++) {
        if (s) ds4_buf_putc(b, ',');
        ds4_json_put_str(b, ds4chk_verdict_status_name((ds4_cf_status)s),
                         strlen(ds4chk_verdict_status_name((ds4_cf_status)s)));
        ds4_buf_printf(b, ":%u", r->count[s]);
    }
    ds4_buf_printf(b, ",\"cells\":%u}}\n", r->n_cells);
    return b->failed ? -1 : 0;
}

int ds4chk_report_write(const ds4_cf_result *r, const ds4_cf_opts *in, FILE *report,
                         ds4_afile *json, ds4err *e) {
    ds4_buf b = {0};
    int rc = 0;
    if (report) {
        rc = report_text(r, in, &b) ? ds4_err_set(e, DS4_E_NOMEM, "out of memory") : 0;
        if (rc == 0 && (fwrite(b.p, 1, b.len, report) != b.len || fflush(report)))
            rc = ds4_err_set(e, DS4_E_IO, "report: write failed");
        ds4_buf_free(&b);
    }
    if (rc == 0 && json->path) {
        rc = report_json(r, in, &b) ? ds4_err_set(e, DS4_E_NOMEM, "out of memory") : 0;
        if (rc == 0) rc = ds4_file_atomic_write(json, b.p, b.len, e);
        if (rc == 0) rc = ds4_file_atomic_commit(json, e);
        ds4_buf_free(&b);
    }
    return rc;
}
