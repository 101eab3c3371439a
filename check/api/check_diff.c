/* The public API of diffing (ds4ref_diff_*, include/ds4ref.h): what
 * ds4ref-diff does between its argument parsing and its exit status.  Load
 * both files (any of the three kinds), compute the figures, check the
 * thresholds and write the text or JSON report, all check/diff/diff.c's; this
 * file converts the options, the result and the errors. */
#include "ds4check.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "ref/api/apierr.h"
#include "check/diff/diff.h"
#include "ref/format/trace.h"

void ds4check_diff_options_init(ds4check_diff_options *o) {
    memset(o, 0, sizeof(*o));
    o->max_dlogprob = o->min_top1 = o->min_top5_overlap = o->min_top20_overlap = o->max_kl = -1;
}

/* A public threshold as an internal limit: negative or NAN is unchecked. */
static double limit(double v) { return v >= 0 ? v : NAN; }

static void result_out(const ds4_diff_report *r, uint32_t bad, ds4check_diff_result *res) {
    if (!res) return;
    memset(res, 0, sizeof(*res));
    res->violations = bad;
    res->exact = r->exact;
    res->prompt_differs = r->prompt_differs;
    res->first_divergence = r->first_divergence;
    res->n_steps_a = r->n_a;
    res->n_steps_b = r->n_b;
    res->n_compared = r->n_compared;
    res->top1 = r->top1;
    res->max_dlogprob = r->max_dlp;
    res->max_kl = r->max_kl;
}

int ds4check_diff_files(const char *golden, const char *other, const ds4check_diff_options *o,
                      FILE *report, ds4check_diff_result *result, ds4ref_error *err) {
    ds4check_diff_options def;
    if (!o) {
        ds4check_diff_options_init(&def);
        o = &def;
    }
    if (!golden || !other) return api_fail_msg(err, DS4REF_E_ARG, "ds4check_diff_files: two files expected");
    ds4err e = {0};
    ds4_golden a, b;
    if (ds4_trace_load(golden, o->case_id, &a, &e)) return api_fail(err, &e);
    if (ds4_trace_load(other, o->case_id, &b, &e)) {
        ds4_golden_free(&a);
        return api_fail(err, &e);
    }
    ds4_diff_opts dopt = {.all_steps = o->all_steps != 0, .ignore_model = o->ignore_model != 0};
    ds4_diff_limits lim = {
        .max_dlogprob = limit(o->max_dlogprob), .min_top1 = limit(o->min_top1),
        .min_top5 = limit(o->min_top5_overlap), .min_top20 = limit(o->min_top20_overlap),
        .max_kl = limit(o->max_kl), .exact = o->exact != 0,
    };
    ds4_diff_report r;
    ds4_buf why = {0}, out = {0};
    int rc = ds4chk_diff_compute(&a, &b, &dopt, &r, &e);
    if (rc == 0) {
        uint32_t bad = ds4chk_diff_check(&r, &lim, &why);
        if (report && o->json) {
            rc = ds4chk_diff_format_json(&r, &a, &b, golden, other, &why, &out, &e);
        } else if (report) {
            rc = ds4chk_diff_format_text(&r, &a, &b, golden, other, o->quiet != 0, &why, &out, &e);
        }
        if (rc == 0 && (out.failed || why.failed))
            rc = ds4_err_set(&e, DS4_E_NOMEM, "out of memory");
        if (rc == 0 && report &&
            (fwrite(out.p, 1, out.len, report) != out.len || fflush(report)))
            rc = ds4_err_set(&e, DS4_E_IO, "cannot write the report: %s", strerror(errno));
        if (rc == 0) result_out(&r, bad, result);
        ds4chk_diff_report_free(&r);
    }
    ds4_buf_free(&why);
    ds4_buf_free(&out);
    ds4_golden_free(&a);
    ds4_golden_free(&b);
    return api_result(err, rc, &e);
}
