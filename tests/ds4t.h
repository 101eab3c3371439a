/* The ds4_test runner: named integration tests over a whole model, selected
 * by flag as in ds4's tests/ds4_test.c.  Each test lives in tests/ds4t_*.c and
 * is listed in the table of ds4_test.c. */
#ifndef DS4T_H
#define DS4T_H

#include <stdbool.h>
#include <stdint.h>

/* What a test returns. */
enum { DS4T_PASS = 0, DS4T_FAIL = 1, DS4T_SKIP = 77 };

typedef struct ds4t_entry {
    const char *flag;        /* "--logprob-vectors" */
    const char *help;
    int (*run)(void);
} ds4t_entry;

/* Assertion failures are counted, printed as "file:line: message" and do not
 * stop the test (ds4's TEST_ASSERT convention). */
extern int ds4t_failures;
void ds4t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A macro because the failure must name the caller's file and line. */
#define DS4T_CHECK(cond, ...) \
    do { if (!(cond)) ds4t_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* Print why a test is skipped (one line) and return DS4T_SKIP. */
int ds4t_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* $name if set and non-empty, else def. */
const char *ds4t_env(const char *name, const char *def);

/* A file a test needs is not there.  When the user named it ($var set),
 * that is an error: printed, counted, DS4T_FAIL, so that a CI job with a
 * mistyped path fails.  When the test only looked for its default, a
 * skip, saying which variable names it. */
int ds4t_absent(const char *var, const char *path, const char *what);

/* The numerics profile DS4_TEST_NUMERICS names (0: official). */
uint32_t ds4t_numerics(void);

#endif
