/* Bit-exact invariance of the forward pass on the synthetic models.
 *
 * The logits (and final HC states) of a token must be the same bits whether it
 * is evaluated in one prefill, in chunks of any size, one token at a time,
 * with any number of threads, next to other sequences in one batch, or after
 * the session was truncated back and re-extended.  Each test compares two
 * ways of computing the same thing; none compares a path with itself. */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ref/decode/sample.h"
#include "ref/decode/session.h"
#include "ref/model/model.h"
#include "ref/model/synth.h"
#include "testutil.h"

typedef struct fixture {
    char *dir;
    char *path_ds4, *path_f32;
    ds4_model ds4, f32;
} fixture;

/* Under valgrind (tests/run_tests.sh sets DS4REF_VALGRIND) the memory
 * checks matter, not the coverage of long sequences: shorter runs, and the
 * tests that only repeat the same code paths are skipped. */
static bool under_valgrind(void) { return getenv("DS4REF_VALGRIND") != NULL; }

static uint32_t n_tokens(void) {
    /* Long enough to emit ratio-128 compressed rows and to make the indexer
     * choose. */
    return under_valgrind() ? 24 : 200;
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof(*f));
    f->dir = tu_tmpdir();
    f->path_ds4 = tu_path(f->dir, "tiny.gguf");
    f->path_f32 = tu_path(f->dir, "tiny-f32.gguf");
    ds4err err = {0};
    ds4_synth_opts o = {.config = "tiny", .seed = 7};
    if (ds4_synth_write(&o, f->path_ds4, NULL, &err)) fail_msg("%s", err.msg);
    o.f32 = true;
    if (ds4_synth_write(&o, f->path_f32, NULL, &err)) fail_msg("%s", err.msg);
    if (ds4_model_open(&f->ds4, f->path_ds4, &err)) fail_msg("%s", err.msg);
    if (ds4_model_open(&f->f32, f->path_f32, &err)) fail_msg("%s", err.msg);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    ds4_model_close(&f->ds4);
    ds4_model_close(&f->f32);
    remove(f->path_ds4);
    remove(f->path_f32);
    free(f->path_ds4);
    free(f->path_f32);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* An engine and a session on it, as every test here opens them. */
typedef struct runner {
    ds4_engine e;
    ds4_session s;
} runner;

static void runner_session(runner *r, uint32_t chunk, uint32_t ctx) {
    ds4err err = {0};
    ds4_session_opts so = {.ctx = ctx, .chunk = chunk, .rollback = 16};
    assert_int_equal(ds4_session_init(&r->s, &r->e, &so, &err), 0);
}

static void runner_open(runner *r, const ds4_model *m, bool qat, uint32_t chunk, uint32_t ctx) {
    ds4err err = {0};
    ds4_fwd_opts o = {.qat = qat};
    assert_int_equal(ds4_engine_init(&r->e, m, &o, chunk, &err), 0);
    runner_session(r, chunk, ctx);
}

static void runner_eval(runner *r, const int32_t *toks, uint32_t n, float *lg, float *hc) {
    ds4err err = {0};
    if (ds4_session_eval(&r->s, toks, n, lg, hc, &err)) fail_msg("%s", err.msg);
}

/* A new session on the same engine, as a server opens one a request. */
static void runner_new_session(runner *r, uint32_t chunk, uint32_t ctx) {
    ds4_session_free(&r->s);
    runner_session(r, chunk, ctx);
}

static void runner_close(runner *r) {
    ds4_session_free(&r->s);
    ds4_engine_free(&r->e);
}

/* Logits of every position, evaluated in passes of `chunk` tokens, with the
 * engine choosing among the thread counts of a machine of `machine` threads
 * (ref/forward/threads.h) when `tuned` is not NULL, where its figures go. */
static float *eval_all_tuned(const ds4_model *m, bool qat, const int32_t *toks, uint32_t n,
                             uint32_t chunk, float **hc, int machine, ds4_threads *tuned) {
    runner r;
    runner_open(&r, m, qat, chunk, 1024);
    int saved = omp_get_max_threads();
    if (tuned) {
        /* OpenMP's count on such a machine, for a thread nobody set. */
        ds4_threads_init(&r.e.threads, machine);
        omp_set_num_threads(machine);
    }
    float *lg = malloc(sizeof(float) * (size_t)n * m->cfg.n_vocab);
    if (hc) *hc = malloc(sizeof(float) * (size_t)n * m->cfg.n_hc * m->cfg.n_embd);
    runner_eval(&r, toks, n, lg, hc ? *hc : NULL);
    if (tuned) {
        *tuned = r.e.threads;
        /* Every pass gave the caller its count back. */
        assert_int_equal(omp_get_max_threads(), machine);
        omp_set_num_threads(saved);
    }
    runner_close(&r);
    return lg;
}

static float *eval_all(const ds4_model *m, bool qat, const int32_t *toks, uint32_t n,
                       uint32_t chunk, float **hc) {
    return eval_all_tuned(m, qat, toks, n, chunk, hc, 0, NULL);
}

static void chunk_invariance(const ds4_model *m, bool qat) {
    uint32_t n = n_tokens(), V = m->cfg.n_vocab;
    size_t hc_dim = (size_t)m->cfg.n_hc * m->cfg.n_embd;
    int32_t *toks = tu_random_tokens(n, V, 11);
    float *hc_ref, *hc;
    float *ref = eval_all(m, qat, toks, n, n, &hc_ref);
    const uint32_t chunks[] = {1, 7, 64};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        float *lg = eval_all(m, qat, toks, n, chunks[i], &hc);
        assert_memory_equal(ref, lg, sizeof(float) * n * V);
        assert_memory_equal(hc_ref, hc, sizeof(float) * n * hc_dim);
        free(lg);
        free(hc);
    }
    for (size_t i = 0; i < (size_t)n * V; i++) assert_true(isfinite(ref[i]));
    free(ref);
    free(hc_ref);
    free(toks);
}

static void test_chunks_ds4(void **state) {
    fixture *f = *state;
    chunk_invariance(&f->ds4, true);
    if (!under_valgrind()) chunk_invariance(&f->ds4, false);
}

static void test_chunks_f32(void **state) {
    fixture *f = *state;
    if (under_valgrind()) {
        tu_skipping("too slow under valgrind; the plain run covers it");
        skip();
    }
    chunk_invariance(&f->f32, true);
}

static void test_threads(void **state) {
    fixture *f = *state;
    if (under_valgrind()) {
        tu_skipping("too slow under valgrind; the plain run covers it");
        skip();
    }
    uint32_t n = n_tokens(), V = f->ds4.cfg.n_vocab;
    int32_t *toks = tu_random_tokens(n, V, 12);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    float *ref = eval_all(&f->ds4, true, toks, n, 64, NULL);
    for (int t = 2; t <= 3; t++) {
        omp_set_num_threads(t);
        float *lg = eval_all(&f->ds4, true, toks, n, 64, NULL);
        assert_memory_equal(ref, lg, sizeof(float) * n * V);
        free(lg);
    }
    omp_set_num_threads(saved);
    free(ref);
    free(toks);
}

/* At a long context a one-token pass shares the indexer's rows among the
 * threads (attention.c), where a longer pass shares its tokens: both must
 * give the same bits.  1100 positions: the ratio-4 layer's indexer scores
 * 275 rows, enough for the rows to be shared. */
static void test_long_indexer(void **state) {
    fixture *f = *state;
    if (under_valgrind()) {
        tu_skipping("too slow under valgrind; the plain run covers it");
        skip();
    }
    const uint32_t n = 1100, tail = 4, V = f->ds4.cfg.n_vocab;
    int32_t *toks = tu_random_tokens(n, V, 14);
    int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    float *ref = malloc(sizeof(float) * (size_t)n * V), *lg = malloc(sizeof(float) * tail * V);
    runner r;
    runner_open(&r, &f->ds4, true, 256, 2048);
    runner_eval(&r, toks, n, ref, NULL);
    runner_new_session(&r, 256, 2048);
    runner_eval(&r, toks, n - tail, NULL, NULL);
    for (uint32_t i = 0; i < tail; i++) runner_eval(&r, toks + n - tail + i, 1, lg + (size_t)i * V, NULL);
    assert_memory_equal(ref + (size_t)(n - tail) * V, lg, sizeof(float) * tail * V);
    runner_close(&r);
    omp_set_num_threads(saved);
    free(ref);
    free(lg);
    free(toks);
}

/* A pass's thread count, as the engine chooses it on a big machine, moves
 * from pass to pass and must move no bit; the caller's count comes back
 * after every pass. */
static void test_tuned_threads(void **state) {
    fixture *f = *state;
    if (under_valgrind()) {
        tu_skipping("too slow under valgrind; the plain run covers it");
        skip();
    }
    if (getenv("OMP_NUM_THREADS")) {
        tu_skipping("OMP_NUM_THREADS is set: the engine does not choose");
        skip();
    }
    uint32_t n = 12, V = f->ds4.cfg.n_vocab;
    int32_t *toks = tu_random_tokens(n, V, 13);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    float *ref = eval_all(&f->ds4, true, toks, n, 1, NULL);
    omp_set_num_threads(saved);
    ds4_threads th;
    float *lg = eval_all_tuned(&f->ds4, true, toks, n, 1, NULL, 20, &th);
    assert_memory_equal(ref, lg, sizeof(float) * n * V);
    assert_int_equal(omp_get_max_threads(), saved);
    /* 12 passes, the first not measured, with at least the first count and
     * a neighbour: the count moved during the run. */
    assert_int_equal(th.cls[0].passes, n - 1);
    int measured = 0;
    for (int k = 0; k < th.n_cand; k++) measured += th.cls[0].sec[k] > 0;
    assert_true(measured >= 2);
    assert_int_equal(th.cls[2].passes, 0);

    /* The engine takes the machine's count, not the count of the thread
     * that opened it; and a thread whose count was set through OpenMP keeps
     * it: nothing is chosen or measured. */
    omp_set_num_threads(1);
    runner r;
    runner_open(&r, &f->ds4, true, 1, 1024);
    assert_int_equal(r.e.threads.machine, ds4_threads_default());
    ds4_threads_init(&r.e.threads, 20);
    omp_set_num_threads(3);
    runner_eval(&r, toks, n, lg, NULL);
    assert_int_equal(r.e.threads.cls[0].passes, 0);
    assert_int_equal(omp_get_max_threads(), 3);
    assert_memory_equal(ref, lg, sizeof(float) * n * V);
    runner_close(&r);
    omp_set_num_threads(saved);
    free(lg);
    free(ref);
    free(toks);
}

/* Two sequences evaluated together in every forward pass give the same bits
 * as each evaluated alone. */
static void test_batched_sequences(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->ds4;
    uint32_t n = n_tokens(), V = m->cfg.n_vocab, step = 5;
    int32_t *ta = tu_random_tokens(n, V, 21), *tb = tu_random_tokens(n, V, 22);
    float *ra = eval_all(m, true, ta, n, n, NULL), *rb = eval_all(m, true, tb, n, n, NULL);
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts o = {.qat = true};
    assert_int_equal(ds4_engine_init(&e, m, &o, 2 * step + 3, &err), 0);
    ds4_kv ka, kb;
    assert_int_equal(ds4_kv_init(&ka, &m->cfg, m->cfg.ratio, m->cfg.n_layer, 1024, step + 3, 0, &err), 0);
    assert_int_equal(ds4_kv_init(&kb, &m->cfg, m->cfg.ratio, m->cfg.n_layer, 1024, step + 3, 0, &err), 0);
    float *la = malloc(sizeof(float) * (size_t)n * V), *lb = malloc(sizeof(float) * (size_t)n * V);
    /* Sequence b runs 3 tokens ahead per pass, so positions never line up. */
    uint32_t pa = 0, pb = 0;
    while (pa < n || pb < n) {
        uint32_t na = pa + step <= n ? step : n - pa, nb = pb + step + 3 <= n ? step + 3 : n - pb;
        ds4_fwd_seq q[2] = {
            {.kv = &ka, .tokens = ta + pa, .n = na, .logits = la + (size_t)pa * V},
            {.kv = &kb, .tokens = tb + pb, .n = nb, .logits = lb + (size_t)pb * V},
        };
        if (ds4_forward(&e, q, 2, &err)) fail_msg("%s", err.msg);
        pa += na;
        pb += nb;
    }
    assert_memory_equal(ra, la, sizeof(float) * n * V);
    assert_memory_equal(rb, lb, sizeof(float) * n * V);
    ds4_kv_free(&ka);
    ds4_kv_free(&kb);
    ds4_engine_free(&e);
    free(ra);
    free(rb);
    free(la);
    free(lb);
    free(ta);
    free(tb);
}

/* Truncating back and re-extending reproduces the original logits, both
 * through the rings (short steps back) and through replay (long ones). */
static void test_truncate(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->ds4;
    uint32_t n = n_tokens(), V = m->cfg.n_vocab;
    int32_t *toks = tu_random_tokens(n, V, 31);
    float *ref = eval_all(m, true, toks, n, n, NULL);
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts o = {.qat = true};
    assert_int_equal(ds4_engine_init(&e, m, &o, 16, &err), 0);
    ds4_session s;
    ds4_session_opts so = {.ctx = 1024, .chunk = 16, .rollback = 8};
    assert_int_equal(ds4_session_init(&s, &e, &so, &err), 0);
    float *lg = malloc(sizeof(float) * (size_t)n * V);
    assert_int_equal(ds4_session_eval(&s, toks, n, lg, NULL, &err), 0);
    /* Positions around window, ratio-4 and ratio-128 boundaries, near (ring)
     * and far (replay). */
    const uint32_t targets[] = {n - 1, n - 3, n - 8, n - 9, 129, 128, 127, 17, 16, 4, 3, 1};
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
        uint32_t p = targets[i];
        if (p >= n) continue;
        assert_int_equal(ds4_session_truncate(&s, p, &err), 0);
        assert_int_equal(ds4_session_pos(&s), p);
        /* The logits after token p-1 are restored... */
        assert_memory_equal(s.logits, ref + (size_t)(p - 1) * V, sizeof(float) * V);
        /* ...and re-extending gives the original rows. */
        uint32_t len = n - p < 20 ? n - p : 20;
        assert_int_equal(ds4_session_eval(&s, toks + p, len, lg, NULL, &err), 0);
        assert_memory_equal(lg, ref + (size_t)p * V, sizeof(float) * len * V);
        assert_int_equal(ds4_session_truncate(&s, p + len, &err), 0);
        if (p + len < n)
            assert_int_equal(ds4_session_eval(&s, toks + p + len, n - p - len, NULL, NULL, &err), 0);
        assert_int_equal(ds4_session_pos(&s), n);
    }
    ds4_session_free(&s);
    ds4_engine_free(&e);
    free(lg);
    free(ref);
    free(toks);
}

static void test_bad_requests(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->ds4;
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts o = {.qat = true};
    assert_int_equal(ds4_engine_init(&e, m, &o, 8, &err), 0);
    ds4_session s;
    ds4_session_opts so = {.ctx = 10, .chunk = 8, .rollback = 0};
    assert_int_equal(ds4_session_init(&s, &e, &so, &err), 0);
    int32_t bad[2] = {1, (int32_t)m->cfg.n_vocab};
    assert_int_equal(ds4_session_eval(&s, bad, 2, NULL, NULL, &err), -1);
    assert_int_equal(err.code, DS4_E_RANGE);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_int_equal(ds4_session_pos(&s), 0);
    int32_t neg = -3;
    assert_int_equal(ds4_session_eval(&s, &neg, 1, NULL, NULL, &err), -1);
    int32_t many[11] = {0};
    assert_int_equal(ds4_session_eval(&s, many, 11, NULL, NULL, &err), -1);
    assert_int_equal(err.code, DS4_E_RANGE);
    assert_non_null(strstr(err.msg, "context of 10 tokens"));
    assert_int_equal(ds4_session_eval(&s, many, 10, NULL, NULL, &err), 0);
    assert_int_equal(ds4_session_truncate(&s, 11, &err), -1);
    assert_int_equal(err.code, DS4_E_RANGE);
    ds4_session_free(&s);
    ds4_engine_free(&e);
}

/* The generator must make models whose top-k choices are not near-ties, or
 * goldens would depend on the last bit of every kernel. */
typedef struct gaps {
    double min_router, min_indexer;
    uint32_t k, topk;
    uint32_t n_router, n_indexer;   /* taps seen */
} gaps;

static double kth_gap(const double *v, uint32_t n, uint32_t k) {
    double *c = malloc(sizeof(double) * n), mx = 0;
    memcpy(c, v, sizeof(double) * n);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            if (c[j] > c[i]) {
                double t = c[i];
                c[i] = c[j];
                c[j] = t;
            }
    for (uint32_t i = 0; i < n; i++) mx = fabs(c[i]) > mx ? fabs(c[i]) : mx;
    double g = (c[k - 1] - c[k]) / mx;
    free(c);
    return g;
}

static void gap_tap(void *ud, const ds4_tap *t) {
    gaps *g = ud;
    if (!strcmp(t->name, "expert_scores")) {
        double x = kth_gap(t->data, t->n, g->k);
        if (x < g->min_router) g->min_router = x;
        g->n_router++;
    } else if (!strcmp(t->name, "indexer_scores")) {
        double x = kth_gap(t->data, t->n, g->topk);
        if (x < g->min_indexer) g->min_indexer = x;
        g->n_indexer++;
    }
}

static void test_synthetic_margins(void **state) {
    fixture *f = *state;
    if (under_valgrind()) {
        tu_skipping("too slow under valgrind; the plain run covers it");
        skip();
    }
    const ds4_model *m = &f->ds4;
    uint32_t n = n_tokens();
    int32_t *toks = tu_random_tokens(n, m->cfg.n_vocab, 41);
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts o = {.qat = true};
    assert_int_equal(ds4_engine_init(&e, m, &o, n, &err), 0);
    gaps g = {1, 1, m->cfg.n_expert_used, m->cfg.idx_topk, 0, 0};
    e.tap = gap_tap;
    e.tap_ud = &g;
    ds4_session s;
    ds4_session_opts so = {.ctx = 1024, .chunk = n};
    assert_int_equal(ds4_session_init(&s, &e, &so, &err), 0);
    assert_int_equal(ds4_session_eval(&s, toks, n, NULL, NULL, &err), 0);
    /* Every score that chose something was looked at: one router tap per
     * token of each score-routed layer, one indexer tap per token of each
     * ratio-4 layer that sees more entries than it keeps. */
    uint32_t want_router = 0, want_indexer = 0;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        want_router += m->layers[l].hash ? 0 : n;
        for (uint32_t p = 0; m->cfg.ratio[l] == 4 && p < n; p++)
            want_indexer += (p + 1) / 4 > m->cfg.idx_topk;
    }
    printf("  smallest relative top-k gap: router %.3g over %u rows, indexer %.3g over %u rows\n",
           g.min_router, g.n_router, g.min_indexer, g.n_indexer);
    assert_true(want_router > 0 && want_indexer > 0);
    assert_int_equal(g.n_router, want_router);
    assert_int_equal(g.n_indexer, want_indexer);
    assert_true(g.min_router > 1e-6);
    assert_true(g.min_indexer > 1e-6);
    ds4_session_free(&s);
    ds4_engine_free(&e);
    free(toks);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_ds4),
        cmocka_unit_test(test_chunks_f32),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_tuned_threads),
        cmocka_unit_test(test_long_indexer),
        cmocka_unit_test(test_batched_sequences),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_synthetic_margins),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
