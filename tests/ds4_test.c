/* ds4_test: integration tests of ds4ref, with the interface of ds4's test
 * runner: no argument (or --all) runs every test; flags select tests; the
 * closing line is "N passed, N failed, N skipped".  A file the user named
 * (DS4_TEST_MODEL, DS4_TEST_VECTOR_FILE, DS4_TEST_MTP) that is not there
 * fails its test; a default that is not there skips it.
 *
 * Environment: DS4_TEST_MODEL (default ./ds4flash.gguf), DS4_TEST_VECTOR_FILE
 * (default ../shared/vectors/official/official.vec), DS4_TEST_MTP,
 * DS4_TEST_NUMERICS (a numerics profile, model/numerics.h).
 *
 * Unlike the command-line programs, which use only the public API
 * (ds4ref.h), the runner and its tests (ds4t_*.c) include internal headers:
 * they check internals (golden writer and reader, drafter, verification
 * depth) that the public API deliberately hides. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/reslimit.h"
#include "base/version.h"
#include "ref/model/numerics.h"
#include "ds4t.h"
#include "../programs/wait_policy.h"

extern const ds4t_entry ds4t_golden_vectors, ds4t_logprob_vectors;
extern const ds4t_entry ds4t_mtp_verify_depth;

static const ds4t_entry *const tests[] = {
    &ds4t_logprob_vectors,
    &ds4t_golden_vectors,
    &ds4t_mtp_verify_depth,
};
static const size_t n_tests = sizeof(tests) / sizeof(tests[0]);

int ds4t_failures;

void ds4t_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    ds4t_failures++;
}

int ds4t_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  skipped: ");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    return DS4T_SKIP;
}

const char *ds4t_env(const char *name, const char *def) {
    const char *v = getenv(name);
    return v && *v ? v : def;
}

int ds4t_absent(const char *var, const char *path, const char *what) {
    const char *v = getenv(var);
    if (v && *v) {
        ds4t_fail(__FILE__, __LINE__, "%s=%s: not found or not readable (%s)", var, path, what);
        return DS4T_FAIL;
    }
    return ds4t_skip("%s %s not found (set %s)", what, path, var);
}

/* DS4_TEST_NUMERICS, checked once in main. */
static uint32_t numerics;

uint32_t ds4t_numerics(void) {
    return numerics;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ds4_test [--all | --list | --version | TEST...]\n\ntests:\n");
    for (size_t i = 0; i < n_tests; i++) fprintf(f, "  %-22s %s\n", tests[i]->flag, tests[i]->help);
    fprintf(f, "\nenvironment:\n"
               "  DS4_TEST_MODEL        the model (default ./ds4flash.gguf), or a checkpoint\n"
               "                        (its folder; DS4_TEST_MTP: the same path)\n"
               "  DS4_TEST_VECTOR_FILE  the official.vec of --logprob-vectors (default\n"
               "                        ../shared/vectors/official/official.vec); each case's\n"
               "                        prompt is read from prompts/ beside it, else from the\n"
               "                        path the case records\n"
               "  DS4_TEST_LOGPROB_TOLERANCE  --logprob-vectors' |dlogprob| limit (default\n"
               "                        and most 4, ds4's own)\n"
               "  DS4_TEST_MTP          the MTP head, with a real DS4_TEST_MODEL\n"
               "  DS4_TEST_NUMERICS     a numerics profile for --logprob-vectors and the MTP\n"
               "                        tests (ds4ref --numerics; default official): ds4\n"
               "                        compares ds4's vectors under ds4.c's own rounding\n");
}

int main(int argc, char **argv) {
    ds4ref_wait_policy(argv);
    /* A model truncated while a test reads it ends with one line and
     * DS4_EXIT_SIGBUS, not "Bus error". */
    ds4err err = {0};
    if (ds4_reslimit_sigbus_install("ds4_test", &err) ||
        ds4_numerics_parse(getenv("DS4_TEST_NUMERICS"), &numerics, &err)) {
        fprintf(stderr, "ds4_test: %s\n", err.msg);
        return err.code;
    }
    int selected[64] = {0};
    int any = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("ds4_test %s\n", DS4REF_VERSION);
            return 0;
        }
        if (!strcmp(argv[i], "--list")) {
            for (size_t t = 0; t < n_tests; t++) puts(tests[t]->flag);
            return 0;
        }
        if (!strcmp(argv[i], "--all")) {
            any = 0;
            continue;
        }
        size_t t = 0;
        while (t < n_tests && strcmp(argv[i], tests[t]->flag)) t++;
        if (t == n_tests) {
            fprintf(stderr, "ds4_test: unknown option or test %s (see --help)\n", argv[i]);
            return 2;
        }
        selected[t] = 1;
        any = 1;
    }
    int passed = 0, failed = 0, skipped = 0;
    for (size_t t = 0; t < n_tests; t++) {
        if (any && !selected[t]) continue;
        printf("%s\n", tests[t]->flag);
        fflush(stdout);
        ds4t_failures = 0;
        int rc = tests[t]->run();
        if (rc == DS4T_PASS && ds4t_failures) rc = DS4T_FAIL;
        printf("%s: %s\n", tests[t]->flag + 2, rc == DS4T_PASS ? "OK" : rc == DS4T_SKIP ? "SKIP" : "ERR");
        passed += rc == DS4T_PASS;
        failed += rc == DS4T_FAIL;
        skipped += rc == DS4T_SKIP;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
