/* ds4ref-diff: compare another implementation's output against a golden.
 *
 *   ds4ref-diff [options] GOLDEN OTHER
 *
 * Both files may be a ds4ref golden, a ds4 --dump-logprobs JSON or an
 * official.vec file (the kind is told from the content).  Argument parsing
 * over the public API (ds4check_diff_files in ds4ref.h), which loads, compares
 * and writes the report; this turns its verdict into the exit status.  The
 * figures and their definitions live in check/diff/diff.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4check.h"

static const char usage[] =
    "usage: ds4ref-diff [options] GOLDEN OTHER\n"
    "\n"
    "Compares OTHER with GOLDEN (the reference) step by step.  Either file may\n"
    "be a ds4ref golden (ds4ref --golden-out), a ds4 --dump-logprobs JSON or an\n"
    "official.vec file; the kind is detected from the content.\n"
    "\n"
    "Per step: token agreement (bytes, and ids when both sides have them), top-1/\n"
    "top-5/top-20 overlap, max and mean |dlogprob| over the tokens in both top\n"
    "lists, KL(GOLDEN || OTHER) over those tokens renormalized, bit-exactness.\n"
    "Steps are compared up to the first divergence of the greedy tokens: after\n"
    "it the two runs continue from different prefixes.\n"
    "\n"
    "options:\n"
    "  --case ID              case to use from an official.vec file (needed when\n"
    "                         it holds more than one)\n"
    "  --all-steps            compare every common step, also after a divergence\n"
    "                         (for an OTHER teacher-forced on GOLDEN's tokens)\n"
    "  --max-dlogprob X       fail if some |dlogprob| exceeds X\n"
    "  --min-top1 F           fail if OTHER chose GOLDEN's greedy token at less than\n"
    "                         the fraction F of the compared steps (0..1)\n"
    "  --min-top5-overlap F   fail if the mean top-5 overlap fraction is below F\n"
    "  --min-top20-overlap F  the same for top-20\n"
    "  --max-kl X             fail if the KL of some step exceeds X\n"
    "  --exact                fail unless OTHER is bit-identical to GOLDEN in\n"
    "                         everything both record (tokens, logits, logprobs,\n"
    "                         logits digests, prompt, step count, model)\n"
    "  --ignore-model         two goldens of different models are noted, not held\n"
    "                         against --exact: the numbers alone (a model and its\n"
    "                         unquantized twin)\n"
    "  --json                 print the report as one JSON object\n"
    "  -q, --quiet            omit the per-step lines\n"
    "  -h, --help             this text\n"
    "  --version              the version\n"
    "\n"
    "A threshold whose figure cannot be measured (say, KL against a file with one\n"
    "alternative per step) counts as violated.  Differing prompts always fail.\n"
    "Without any threshold, --min-top1 1 applies: a divergence fails.  Figures\n"
    "cover the compared steps; steps only one file has are noted, not counted.\n"
    "\n"
    "exit status: 0 within the thresholds, 1 a threshold violated, 2 usage error,\n"
    "3 I/O error, 4 malformed input, 6 out of memory.\n";

static int fail_usage(const char *msg, const char *arg) {
    fprintf(stderr, "ds4ref-diff: %s%s%s (try --help)\n", msg, arg ? ": " : "", arg ? arg : "");
    return DS4REF_E_ARG;
}

/* A number in [lo, hi]; -1 when arg is not one. */
static int parse_num(const char *arg, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (!*arg || *end || errno || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* 0 when parsed, -1 for --help, -2 for --version, else an exit status. */
static int parse_args(int argc, char **argv, const char **golden, const char **other,
                      ds4check_diff_options *o) {
    ds4check_diff_options_init(o);
    const struct {
        const char *flag;
        double hi;
        double *dst;
    } nums[] = {
        {"--max-dlogprob", INFINITY, &o->max_dlogprob},
        {"--min-top1", 1, &o->min_top1},
        {"--min-top5-overlap", 1, &o->min_top5_overlap},
        {"--min-top20-overlap", 1, &o->min_top20_overlap},
        {"--max-kl", INFINITY, &o->max_kl},
    };
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int matched = 0;
        for (size_t k = 0; k < sizeof(nums) / sizeof(nums[0]); k++) {
            if (strcmp(a, nums[k].flag)) continue;
            if (i + 1 >= argc) return fail_usage("missing value after", a);
            if (parse_num(argv[++i], 0, nums[k].hi, nums[k].dst))
                return fail_usage(nums[k].hi == 1 ? "expected a fraction 0..1 after"
                                                  : "expected a number >= 0 after", a);
            matched = 1;
        }
        if (matched) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return -1;
        if (!strcmp(a, "--version")) return -2;
        if (!strcmp(a, "--case")) {
            if (i + 1 >= argc) return fail_usage("missing value after", a);
            o->case_id = argv[++i];
        } else if (!strcmp(a, "--all-steps")) {
            o->all_steps = 1;
        } else if (!strcmp(a, "--exact")) {
            o->exact = 1;
        } else if (!strcmp(a, "--ignore-model")) {
            o->ignore_model = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (a[0] == '-' && a[1]) {
            return fail_usage("unknown option", a);
        } else if (npos == 0) {
            *golden = a;
            npos++;
        } else if (npos == 1) {
            *other = a;
            npos++;
        } else {
            return fail_usage("too many files", a);
        }
    }
    if (npos != 2) return fail_usage("expected two files, GOLDEN and OTHER", NULL);
    return 0;
}

int main(int argc, char **argv) {
    const char *golden = NULL, *other = NULL;
    ds4check_diff_options o;
    int rc = parse_args(argc, argv, &golden, &other, &o);
    if (rc == -1) fputs(usage, stdout);
    if (rc == -2) printf("ds4ref-diff %s\n", ds4ref_version());
    if (rc < 0) return 0;
    if (rc) return rc;
    ds4ref_error err = {0};
    ds4check_diff_result r;
    if ((rc = ds4check_diff_files(golden, other, &o, stdout, &r, &err))) {
        fprintf(stderr, "ds4ref-diff: %s\n", err.message);
        return rc;
    }
    return r.violations ? 1 : 0;
}
