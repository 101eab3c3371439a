/* Tests of ref/forward/threads.c: the thread counts a forward pass gets when
 * the engine chooses.
 *
 * The machine is simulated: a table gives the seconds a token each count
 * takes, the engine's choice is fed the table's figure for the count it
 * picked, and the tests check what a user would want of it, stated from the
 * table and not from the code: it finds the fastest count (one that is
 * neither the largest nor the smallest; all of them, on a machine that is
 * all ours) without running the slowest, spends at most one pass in
 * DS4_THREADS_REPROBE on others, follows the machine when the fastest count
 * changes, and keeps decode and prefill apart. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include <omp.h>

#include "ref/forward/threads.h"

/* A simulated machine: seconds a token for each thread count. */
typedef struct machine {
    int threads[DS4_THREADS_CANDIDATES];
    double sec[DS4_THREADS_CANDIDATES];
} machine;

static double cost(const machine *m, int threads) {
    for (int i = 0; i < DS4_THREADS_CANDIDATES; i++)
        if (m->threads[i] == threads) return m->sec[i];
    fail_msg("count %d is not one of the machine's", threads);
    return 0;
}

/* Runs `passes` passes of class cls; returns how many did not run with
 * `want` threads. */
static int run(ds4_threads *t, int cls, const machine *m, int passes, int want) {
    int off = 0;
    for (int i = 0; i < passes; i++) {
        int k = ds4_threads_next(t, cls);
        assert_in_range(k, 0, t->n_cand - 1);
        if (t->cand[k] != want) off++;
        ds4_threads_record(t, cls, k, cost(m, t->cand[k]));
    }
    return off;
}

static void test_candidates(void **state) {
    (void)state;
    ds4_threads t;
    ds4_threads_init(&t, 2);
    assert_int_equal(t.n_cand, 1);
    assert_int_equal(t.cand[0], 2);
    ds4_threads_init(&t, 16);
    assert_int_equal(t.n_cand, 1);
    assert_int_equal(t.cand[0], 16);
    assert_int_equal(ds4_threads_best(&t, 0), 0);
    ds4_threads_init(&t, 64);
    static const int c64[] = {32, 40, 48, 56, 64};
    assert_int_equal(t.n_cand, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(t.cand[i], c64[i]);
    ds4_threads_init(&t, 17);   /* 8.5 -> 9, 10.6 -> 11, 12.75 -> 13, 14.9 -> 15 */
    static const int c17[] = {9, 11, 13, 15, 17};
    for (int i = 0; i < 5; i++) assert_int_equal(t.cand[i], c17[i]);
    ds4_threads_init(&t, 0);
    assert_int_equal(t.n_cand, 1);
    assert_int_equal(t.cand[0], 1);
}

static void test_one_candidate(void **state) {
    (void)state;
    ds4_threads t;
    ds4_threads_init(&t, 8);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(ds4_threads_next(&t, 0), 0);
        ds4_threads_record(&t, 0, 0, 1.0);
    }
    int saved;
    assert_int_equal(ds4_threads_begin(&t, 1, &saved), -1);
}

/* The 64-core machine of docs/PERFORMANCE.md, roughly: 40 threads fastest,
 * 64 three times slower. */
static const machine lent64 = {{32, 40, 48, 56, 64}, {1.10, 1.00, 1.40, 1.80, 3.00}};

static void test_explores_then_keeps_fastest(void **state) {
    (void)state;
    ds4_threads t;
    ds4_threads_init(&t, 64);
    /* Three quarters, then down while that is faster; the slow counts,
     * 56 and all 64, are never run. */
    static const int first[] = {48, 40, 32};
    for (int i = 0; i < 3; i++) {
        int k = ds4_threads_next(&t, 0);
        assert_int_equal(t.cand[k], first[i]);
        ds4_threads_record(&t, 0, k, cost(&lent64, t.cand[k]));
    }
    assert_int_equal(ds4_threads_best(&t, 0), 40);
    /* Then 40, but for one pass in DS4_THREADS_REPROBE. */
    int passes = 20 * DS4_THREADS_REPROBE;
    int off = run(&t, 0, &lent64, passes, 40);
    assert_true(off >= passes / DS4_THREADS_REPROBE - 1);
    assert_true(off <= passes / DS4_THREADS_REPROBE + 1);
    assert_int_equal(ds4_threads_best(&t, 0), 40);
    /* The time lost to measuring is a few percent. */
    double spent = 0, best = passes * cost(&lent64, 40);
    ds4_threads u = t;
    for (int i = 0; i < passes; i++) {
        int k = ds4_threads_next(&u, 0);
        spent += cost(&lent64, u.cand[k]);
        ds4_threads_record(&u, 0, k, cost(&lent64, u.cand[k]));
    }
    assert_true(spent < 1.06 * best);
    assert_int_equal(u.cls[0].sec[4], 0);
    assert_int_equal(u.cls[0].sec[3], 0);
}

/* A machine that is all ours: every thread counts, and the climb goes up to
 * all of them without running the half. */
static void test_climbs_to_all(void **state) {
    (void)state;
    const machine own = {{32, 40, 48, 56, 64}, {2.0, 1.6, 1.35, 1.15, 1.0}};
    ds4_threads t;
    ds4_threads_init(&t, 64);
    static const int first[] = {48, 40, 56, 64};
    for (int i = 0; i < 4; i++) {
        int k = ds4_threads_next(&t, 0);
        assert_int_equal(t.cand[k], first[i]);
        ds4_threads_record(&t, 0, k, cost(&own, t.cand[k]));
    }
    int off = run(&t, 0, &own, 10 * DS4_THREADS_REPROBE, 64);
    assert_true(off <= 11);
    assert_int_equal(ds4_threads_best(&t, 0), 64);
    assert_int_equal(t.cls[0].sec[0], 0);
}

static void test_follows_the_machine(void **state) {
    (void)state;
    ds4_threads t;
    ds4_threads_init(&t, 64);
    run(&t, 0, &lent64, 100, 40);
    assert_int_equal(ds4_threads_best(&t, 0), 40);
    /* The host's load moves: now 56 is the fastest and 40 slow. */
    const machine later = {{32, 40, 48, 56, 64}, {1.6, 1.5, 1.2, 0.9, 1.3}};
    /* Reprobes of the neighbours lead the climb there. */
    run(&t, 0, &later, (t.n_cand + 1) * DS4_THREADS_REPROBE, 56);
    assert_int_equal(ds4_threads_best(&t, 0), 56);
    int off = run(&t, 0, &later, 4 * DS4_THREADS_REPROBE, 56);
    assert_true(off <= 5);
}

static void test_decode_and_prefill_apart(void **state) {
    (void)state;
    assert_int_equal(ds4_threads_class_of(1), 0);
    assert_int_equal(ds4_threads_class_of(2), 1);
    assert_int_equal(ds4_threads_class_of(DS4_THREADS_PREFILL_TOKENS - 1), 1);
    assert_int_equal(ds4_threads_class_of(DS4_THREADS_PREFILL_TOKENS), 2);
    assert_int_equal(ds4_threads_class_of(4096), 2);
    ds4_threads t;
    ds4_threads_init(&t, 64);
    const machine prefill = {{32, 40, 48, 56, 64}, {1.3, 1.1, 1.0, 1.05, 1.2}};
    for (int i = 0; i < 100; i++) {
        run(&t, 0, &lent64, 1, 40);
        run(&t, 2, &prefill, 1, 48);
    }
    assert_int_equal(ds4_threads_best(&t, 0), 40);
    assert_int_equal(ds4_threads_best(&t, 2), 48);
    assert_int_equal(ds4_threads_best(&t, 1), 0);
    assert_int_equal(t.cls[0].passes, 100);
    assert_int_equal(t.cls[2].passes, 100);
}

/* Nonsense figures (a clock that went backwards, an empty pass) are not
 * recorded. */
static void test_bad_figures(void **state) {
    (void)state;
    ds4_threads t;
    ds4_threads_init(&t, 64);
    ds4_threads_record(&t, 0, 2, 0.0);
    ds4_threads_record(&t, 0, 2, -1.0);
    ds4_threads_record(&t, 0, 9, 1.0);
    ds4_threads_record(&t, 0, -1, 1.0);
    assert_int_equal(t.cls[0].passes, 0);
    assert_int_equal(ds4_threads_best(&t, 0), 0);
}

/* Whether the engine chooses on a thread of its own, whose OpenMP count
 * is the simulated machine's. */
typedef struct other_ask {
    const ds4_threads *t;
    int count, tuning;
} other_ask;

static void *other_tuning(void *arg) {
    other_ask *a = arg;
    omp_set_num_threads(a->count);
    a->tuning = ds4_threads_tuning(a->t);
    return NULL;
}

/* begin/end: the pass runs with the candidate's count, the caller gets its
 * own back, the first pass is not measured, and a count the user fixed (or
 * OMP_NUM_THREADS, or omp_set_num_threads) turns the choice off.  The
 * machine is a simulated one of 64 threads, where a thread nobody set has
 * OpenMP's count 64. */
static void test_begin_end(void **state) {
    (void)state;
    unsetenv("OMP_NUM_THREADS");
    ds4_threads_fix(0);
    const int real = omp_get_max_threads(), before = 64;
    omp_set_num_threads(before);
    ds4_threads t;
    ds4_threads_init(&t, 64);
    assert_true(ds4_threads_tuning(&t));
    int saved, k = ds4_threads_begin(&t, 1, &saved);
    assert_int_equal(k, 2);
    assert_int_equal(omp_get_max_threads(), 48);
    /* A failed pass is not measured, and the next one is still the first. */
    ds4_threads_end(&t, 1, k, saved, false, 0.5);
    assert_int_equal(omp_get_max_threads(), before);
    assert_false(t.warm);
    k = ds4_threads_begin(&t, 1, &saved);
    ds4_threads_end(&t, 1, k, saved, true, 0.5);
    assert_true(t.warm);
    assert_int_equal(t.cls[0].passes, 0);
    k = ds4_threads_begin(&t, 4, &saved);
    ds4_threads_end(&t, 4, k, saved, true, 0.5);
    assert_int_equal(t.cls[1].passes, 1);
    assert_true(t.cls[1].sec[k] == 0.125);
    k = ds4_threads_begin(&t, 1, &saved);
    ds4_threads_end(&t, 1, k, saved, false, 0.5);
    assert_int_equal(t.cls[0].passes, 0);

    /* A count the thread set through OpenMP is left as it is, and so is it
     * by "ds4ref chooses" on a thread that fixed no count. */
    omp_set_num_threads(8);
    assert_false(ds4_threads_tuning(&t));
    assert_int_equal(ds4_threads_begin(&t, 1, &saved), DS4_THREADS_UNTOUCHED);
    assert_int_equal(omp_get_max_threads(), 8);
    assert_int_equal(ds4_threads_fix(0), 8);
    omp_set_num_threads(before);

    /* A fixed count is this thread's, applied to each pass it runs. */
    assert_int_equal(ds4_threads_fix(3), 3);
    assert_false(ds4_threads_tuning(&t));
    omp_set_num_threads(5);
    k = ds4_threads_begin(&t, 1, &saved);
    assert_int_equal(k, DS4_THREADS_FIXED);
    assert_int_equal(omp_get_max_threads(), 3);
    ds4_threads_end(&t, 1, k, saved, true, 0.5);
    assert_int_equal(omp_get_max_threads(), 5);
    assert_int_equal(t.cls[0].passes, 0);
    /* Another thread, with the machine's count, still has the choice. */
    other_ask ask = {&t, before, -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_tuning, &ask), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(ask.tuning, 1);
    /* Undone: the count the thread had before it fixed one. */
    assert_int_equal(ds4_threads_fix(0), before);
    assert_true(ds4_threads_tuning(&t));
    /* Inside a parallel region nothing is chosen. */
    int inside = -1;
    #pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 0 && omp_get_num_threads() > 1) {
            omp_set_num_threads(before);
            inside = ds4_threads_tuning(&t);
        }
    }
    assert_true(inside == 0 || inside == -1);   /* -1: no second thread was given */

    setenv("OMP_NUM_THREADS", "2", 1);
    assert_false(ds4_threads_tuning(&t));
    assert_int_equal(ds4_threads_begin(&t, 1, &saved), DS4_THREADS_UNTOUCHED);
    assert_int_equal(omp_get_max_threads(), before);
    unsetenv("OMP_NUM_THREADS");
    omp_set_num_threads(real);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_candidates),
        cmocka_unit_test(test_one_candidate),
        cmocka_unit_test(test_explores_then_keeps_fastest),
        cmocka_unit_test(test_climbs_to_all),
        cmocka_unit_test(test_follows_the_machine),
        cmocka_unit_test(test_decode_and_prefill_apart),
        cmocka_unit_test(test_bad_figures),
        cmocka_unit_test(test_begin_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
