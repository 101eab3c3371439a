/* Speculative decoding against plain decoding.
 *
 * Greedy: every record (token, logits digest, top-k) of a speculative run must
 * be the record ds4_generate_greedy produces on a session of its own, one
 * token per pass, for every drafter (scripted with errors injected at every
 * depth, MTP), depth 1..16, chunk size, context end, EOS and early stop, and
 * for several rows decoded together; the session must end in the same state.
 * Sampling: the generator's definition (SplitMix64 vectors), the categorical
 * draw and the rejection rule against exact probabilities (chi-square), the
 * sampled runs' logits against teacher-forced plain decoding, and the joint
 * distribution of the first three sampled tokens against the exact one
 * computed from the model's logits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ref/decode/mtp_drafter.h"
#include "ref/decode/rng.h"
#include "ref/decode/sample.h"
#include "ref/decode/session.h"
#include "ref/decode/speculative.h"
#include "ref/decode/step.h"
#include "greedy.h"
#include "ref/model/model.h"
#include "ref/model/synth.h"
#include "script_drafter.h"
#include "testutil.h"

static bool under_valgrind(void) { return getenv("DS4REF_VALGRIND") != NULL; }

typedef tu_model fixture;

static int group_setup(void **state) {
    ds4err err = {0};
    fixture *f = tu_model_new("tiny", 11, true, &err);
    if (!f) fail_msg("%s", err.msg);
    *state = f;
    return 0;
}

static int group_teardown(void **state) {
    tu_model_free(*state);
    return 0;
}

/* ---- running plain and speculative decoding ---- */

/* What a run left behind: its records, its session's final state, and the
 * records of a few plain greedy steps taken afterwards on the same session. */
typedef struct run {
    ds4_gen_step *steps, *after;
    uint32_t n, n_after, pos;
    int rc;
    char err[512];
    float *logits, *hc;
    int32_t *hist;
    ds4_spec_stats stats;
    uint64_t passes;       /* forward passes the session saw while decoding */
} run;

typedef struct conf {
    uint32_t ctx, chunk, rollback;
    uint32_t cap;          /* engine capacity; 0: chunk */
    uint32_t more;         /* plain greedy steps after the run */
    ds4_gen_opts go;
    ds4_gen_cb cb;
    void *ud;
} conf;

enum { PLAIN, SCRIPT, MTP };

typedef struct drafting {
    int kind;
    uint32_t depth;
    const int32_t *stream;  /* SCRIPT */
    uint32_t n_stream;
    const uint8_t *errs;
    uint32_t n_errs;
    double temp;
    uint64_t seed;
} drafting;

static void count_pass(void *ud, uint32_t done, uint32_t total) {
    (void)done, (void)total;
    (*(uint64_t *)ud)++;
}

/* Keep the session's state, then take c->more plain greedy steps on it. */
static void finish(run *r, ds4_session *s, const conf *c) {
    const ds4_config *mc = &s->e->m->cfg;
    size_t hc_dim = (size_t)mc->n_hc * mc->n_embd;
    r->pos = s->kv.pos;
    r->logits = malloc(sizeof(float) * mc->n_vocab);
    r->hc = malloc(sizeof(float) * hc_dim);
    r->hist = malloc(sizeof(int32_t) * (r->pos ? r->pos : 1));
    memcpy(r->logits, s->logits, sizeof(float) * mc->n_vocab);
    memcpy(r->hc, s->hc_last, sizeof(float) * hc_dim);
    memcpy(r->hist, s->hist, sizeof(int32_t) * r->pos);
    if (!c->more || r->rc) return;
    /* Continue from the last record's token, as a caller would. */
    ds4err err = {0};
    int32_t last = r->steps[r->n - 1].token;
    if (ds4_session_eval(s, &last, 1, NULL, NULL, &err)) fail_msg("%s", err.msg);
    ds4_gen_opts go = {.n_steps = c->more, .top_k = c->go.top_k, .eos = -1};
    r->after = calloc(c->more, sizeof(ds4_gen_step));
    if (ds4_generate_greedy(s, &go, r->after, &r->n_after, NULL, NULL, &err)) fail_msg("%s", err.msg);
}

static void run_free(run *r) {
    ds4_step_list_free(r->steps, r->n);
    ds4_step_list_free(r->after, r->n_after);
    free(r->steps);
    free(r->after);
    free(r->logits);
    free(r->hc);
    free(r->hist);
    memset(r, 0, sizeof(*r));
}

static void engine_for(const ds4_model *m, const conf *c, ds4_engine *e) {
    ds4err err = {0};
    ds4_fwd_opts fo = {.qat = true};
    if (ds4_engine_init(e, m, &fo, c->cap ? c->cap : c->chunk, &err)) fail_msg("%s", err.msg);
}

static void session_for(ds4_engine *e, const conf *c, ds4_session *s) {
    ds4err err = {0};
    ds4_session_opts so = {.ctx = c->ctx, .chunk = c->chunk, .rollback = c->rollback};
    if (ds4_session_init(s, e, &so, &err)) fail_msg("%s", err.msg);
}

/* The reference: ds4_generate_greedy, one token per forward pass. */
static void plain(const ds4_model *m, const int32_t *prompt, uint32_t np, const conf *c, run *r) {
    memset(r, 0, sizeof(*r));
    ds4err err = {0};
    ds4_engine e;
    ds4_session s;
    engine_for(m, c, &e);
    session_for(&e, c, &s);
    if (ds4_session_eval(&s, prompt, np, NULL, NULL, &err)) fail_msg("%s", err.msg);
    r->steps = calloc(c->go.n_steps ? c->go.n_steps : 1, sizeof(ds4_gen_step));
    r->rc = ds4_generate_greedy(&s, &c->go, r->steps, &r->n, c->cb, c->ud, &err);
    snprintf(r->err, sizeof(r->err), "%s", r->rc ? err.msg : "");
    finish(r, &s, c);
    ds4_session_free(&s);
    ds4_engine_free(&e);
}

static ds4_drafter *drafter_for(ds4_engine *e, const conf *c, const drafting *dr,
                                const drafter_script *scripts, uint32_t n_rows) {
    ds4err err = {0};
    ds4_drafter *d = NULL;
    int rc = 0;
    if (dr->kind == SCRIPT)
        rc = script_drafter_new(&d, scripts, n_rows, e->m->cfg.n_vocab, &err);
    else if (dr->kind == MTP)
        rc = ds4_mtp_drafter_new(&d, e, n_rows, c->ctx, c->chunk, dr->depth, &err);
    if (rc) fail_msg("%s", err.msg);
    return d;
}

/* A speculative run of one row through ds4_spec_generate1. */
static void spec(const ds4_model *m, const int32_t *prompt, uint32_t np, const conf *c,
                 const drafting *dr, run *r) {
    memset(r, 0, sizeof(*r));
    ds4err err = {0};
    ds4_engine e;
    ds4_session s;
    engine_for(m, c, &e);
    session_for(&e, c, &s);
    drafter_script sc = {dr->stream, dr->n_stream, dr->errs, dr->n_errs};
    ds4_drafter *d = drafter_for(&e, c, dr, &sc, 1);
    ds4_session *rows[1] = {&s};
    if (ds4_spec_prefill(d, rows, &prompt, &np, 1, &err)) fail_msg("%s", err.msg);
    s.progress = count_pass;
    s.progress_ud = &r->passes;
    ds4_spec_cfg sc2 = {d, dr->depth, dr->temp};
    r->steps = calloc(c->go.n_steps ? c->go.n_steps : 1, sizeof(ds4_gen_step));
    r->rc = ds4_spec_generate1(&s, &sc2, &c->go, dr->seed, r->steps, &r->n, c->cb, c->ud, &r->stats,
                               &err);
    snprintf(r->err, sizeof(r->err), "%s", r->rc ? err.msg : "");
    s.progress = NULL;
    finish(r, &s, c);
    ds4_spec_drafter_free(d);
    ds4_session_free(&s);
    ds4_engine_free(&e);
}

static void same_steps(const ds4_gen_step *a, const ds4_gen_step *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        if (a[i].token != b[i].token) fail_msg("step %u: token %d, expected %d", i, b[i].token, a[i].token);
        assert_memory_equal(a[i].digest, b[i].digest, 32);
        assert_memory_equal(&a[i].logit, &b[i].logit, sizeof(float));
        assert_memory_equal(&a[i].logprob, &b[i].logprob, sizeof(double));
        assert_int_equal(a[i].n_top, b[i].n_top);
        assert_memory_equal(a[i].top_ids, b[i].top_ids, sizeof(int32_t) * a[i].n_top);
        assert_memory_equal(a[i].top_logits, b[i].top_logits, sizeof(float) * a[i].n_top);
    }
}

/* Records, outcome and final session state all equal. */
static void same_run(const ds4_model *m, const run *ref, const run *got) {
    size_t hc_dim = (size_t)m->cfg.n_hc * m->cfg.n_embd;
    assert_int_equal(got->rc, ref->rc);
    assert_string_equal(got->err, ref->err);
    assert_int_equal(got->n, ref->n);
    same_steps(ref->steps, got->steps, ref->n);
    assert_int_equal(got->pos, ref->pos);
    assert_memory_equal(got->hist, ref->hist, sizeof(int32_t) * ref->pos);
    assert_memory_equal(got->logits, ref->logits, sizeof(float) * m->cfg.n_vocab);
    assert_memory_equal(got->hc, ref->hc, sizeof(float) * hc_dim);
    assert_int_equal(got->n_after, ref->n_after);
    same_steps(ref->after, got->after, ref->n_after);
}

/* ---- the shared prompt and its plain greedy continuation ---- */

#define NP 6

typedef struct ref_data {
    int32_t *prompt;
    conf c;
    run ref;
    int32_t *stream;       /* prompt + the reference's tokens */
    uint32_t n_stream;
} ref_data;

static void ref_make(const fixture *f, uint32_t n_steps, ref_data *rd) {
    memset(rd, 0, sizeof(*rd));
    rd->prompt = tu_random_tokens(NP, f->m.cfg.n_vocab, 77);
    rd->c = (conf){.ctx = 128, .chunk = 64, .go = {.n_steps = n_steps, .top_k = 4, .eos = -1}};
    plain(&f->m, rd->prompt, NP, &rd->c, &rd->ref);
    assert_int_equal(rd->ref.n, n_steps);
    rd->n_stream = NP + rd->ref.n;
    rd->stream = malloc(sizeof(int32_t) * rd->n_stream);
    memcpy(rd->stream, rd->prompt, sizeof(int32_t) * NP);
    for (uint32_t i = 0; i < rd->ref.n; i++) rd->stream[NP + i] = rd->ref.steps[i].token;
}

static void ref_free(ref_data *rd) {
    run_free(&rd->ref);
    free(rd->prompt);
    free(rd->stream);
}

static uint32_t n_steps_default(void) { return under_valgrind() ? 7 : 24; }

/* Under valgrind (tests/run_tests.sh sets DS4REF_VALGRIND) each test runs
 * one representative configuration (index `keep` of its list) on short
 * sequences: the memory checks matter there, not the coverage. */
static bool skip_config(size_t i, size_t keep) { return under_valgrind() && i != keep; }

/* Accepted and proposed drafts of a scripted run, replayed from the rules:
 * each cycle records x, then verifies min(N, steps left - 1) drafts of which
 * the first wrong one (err_depth of that proposal) is rejected. */
static void script_counts(uint32_t n_steps, uint32_t N, const uint8_t *errs, uint32_t n_errs,
                          uint64_t *prop, uint64_t *acc, uint64_t *passes) {
    uint32_t done = 0, c = 0;
    *prop = *acc = *passes = 0;
    for (;;) {
        done++;
        if (done == n_steps) break;
        uint32_t n = n_steps - done - 1 < N ? n_steps - done - 1 : N;
        uint32_t a = n;
        if (n) {
            uint32_t e = errs ? errs[c++ % n_errs] : 0;
            if (e && e <= n) a = e - 1;
        }
        *prop += n;
        *acc += a;
        (*passes)++;
        done += a;
    }
}

/* The per-position counts of a run add up to its totals, and a draft is
 * accepted only after every draft before it in its cycle. */
static void positions_consistent(const ds4_spec_stats *st) {
    uint64_t p = 0, a = 0;
    for (uint32_t k = 0; k < DS4_SPEC_MAX_DRAFT; k++) {
        p += st->proposed_at[k];
        a += st->accepted_at[k];
        assert_true(st->accepted_at[k] <= st->proposed_at[k]);
        if (k) assert_true(st->accepted_at[k] <= st->accepted_at[k - 1]);
        if (k) assert_true(st->proposed_at[k] <= st->proposed_at[k - 1]);
    }
    assert_int_equal(p, st->proposed);
    assert_int_equal(a, st->accepted);
}

/* ---- greedy: every depth, every accept length ---- */

static void test_scripted_depths(void **state) {
    fixture *f = *state;
    ref_data rd;
    ref_make(f, n_steps_default(), &rd);
    for (uint32_t N = 1; N <= DS4_SPEC_MAX_DRAFT; N++) {
        if (skip_config(N, 3)) continue;
        /* Proposal c is wrong at depth c % (N+1): every accept length 0..N. */
        uint8_t errs[DS4_SPEC_MAX_DRAFT + 1];
        for (uint32_t i = 0; i <= N; i++) errs[i] = (uint8_t)i;
        for (int perfect = 0; perfect <= 1; perfect++) {
            drafting dr = {SCRIPT, N, rd.stream, rd.n_stream, perfect ? NULL : errs, N + 1, 0, 0};
            conf c = rd.c;
            c.rollback = N;
            run r;
            spec(&f->m, rd.prompt, NP, &c, &dr, &r);
            same_run(&f->m, &rd.ref, &r);
            uint64_t prop, acc, passes;
            script_counts(rd.ref.n, N, dr.errs, dr.n_errs, &prop, &acc, &passes);
            assert_int_equal(r.stats.proposed, prop);
            assert_int_equal(r.stats.accepted, acc);
            positions_consistent(&r.stats);
            assert_int_equal(r.stats.passes, passes);
            /* One forward pass per cycle: [x, drafts] fits the chunk. */
            assert_int_equal(r.passes, passes);
            if (perfect) assert_int_equal(passes, (rd.ref.n - 1 + N) / (N + 1));
            run_free(&r);
        }
    }
    ref_free(&rd);
}

/* Verify batches larger than the chunk are split into several passes, and a
 * session with no rollback clamps the depth to what its rings take back:
 * the same bits either way. */
static void test_scripted_chunks(void **state) {
    fixture *f = *state;
    ref_data rd;
    ref_make(f, n_steps_default(), &rd);
    static const uint8_t errs[] = {0, 2, 0, 7, 1, 3, 16};
    const uint32_t chunks[] = {1, 2, 3, 5}, depths[] = {3, 16};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        for (size_t j = 0; j < sizeof(depths) / sizeof(depths[0]); j++) {
            if (skip_config(i * 2 + j, 2)) continue;
            drafting dr = {SCRIPT, depths[j], rd.stream, rd.n_stream, errs, sizeof(errs), 0, 0};
            conf c = rd.c;
            c.chunk = chunks[i];
            c.rollback = depths[j];
            run r;
            spec(&f->m, rd.prompt, NP, &c, &dr, &r);
            same_run(&f->m, &rd.ref, &r);
            assert_true(r.passes >= r.stats.passes);
            if (depths[j] + 1 > chunks[i] && r.stats.accepted) assert_true(r.passes > r.stats.passes);
            run_free(&r);
        }
    }
    /* chunk 1, rollback 0: at most one draft can be undone per cycle. */
    drafting dr = {SCRIPT, 16, rd.stream, rd.n_stream, errs, sizeof(errs), 0, 0};
    conf c = rd.c;
    c.chunk = 1;
    c.rollback = 0;
    run r;
    spec(&f->m, rd.prompt, NP, &c, &dr, &r);
    same_run(&f->m, &rd.ref, &r);
    assert_true(r.stats.proposed <= r.stats.iters);
    run_free(&r);
    ref_free(&rd);
}

/* The MTP drafter at every depth (its random-weight drafts are mostly
 * rejected: the rejection paths at every depth), and with split verifies. */
static void test_mtp_depths(void **state) {
    fixture *f = *state;
    ref_data rd;
    ref_make(f, under_valgrind() ? 4 : 12, &rd);
    const uint32_t depths[] = {1, 2, 3, 4, 6, 8, 16};
    for (size_t j = 0; j < sizeof(depths) / sizeof(depths[0]); j++) {
        for (uint32_t chunk = 64; chunk >= 3; chunk = chunk == 64 ? 3 : 0) {
            if (under_valgrind() && (depths[j] != 2 || chunk != 3)) continue;
            if (chunk == 3 && depths[j] != 2 && depths[j] != 8) continue;
            drafting dr = {MTP, depths[j], NULL, 0, NULL, 0, 0, 0};
            conf c = rd.c;
            c.chunk = chunk;
            c.rollback = depths[j];
            run r;
            spec(&f->m, rd.prompt, NP, &c, &dr, &r);
            same_run(&f->m, &rd.ref, &r);
            char line[160];
            ds4_spec_report(&r.stats, line, sizeof(line));
            printf("  MTP depth %2u chunk %2u: %s\n", depths[j], chunk, line);
            assert_true(r.stats.iters > 0);
            assert_true(r.stats.accepted <= r.stats.proposed);
            run_free(&r);
        }
    }
    ref_free(&rd);
}

/* The continuous depth-1 cycle: each cycle is exactly one forward pass over
 * [x, draft], drafted from the state the previous verify left; there is no
 * separate decode of x. */
static void test_depth1_continuous(void **state) {
    fixture *f = *state;
    ref_data rd;
    ref_make(f, n_steps_default(), &rd);
    for (int kind = SCRIPT; kind <= MTP; kind++) {
        if (skip_config((size_t)kind, SCRIPT)) continue;
        drafting dr = {kind, 1, rd.stream, rd.n_stream, NULL, 0, 0, 0};
        conf c = rd.c;
        c.rollback = 1;
        run r;
        spec(&f->m, rd.prompt, NP, &c, &dr, &r);
        same_run(&f->m, &rd.ref, &r);
        assert_int_equal(r.passes, r.stats.passes);
        /* Every pass commits x and the accepted draft. */
        assert_int_equal(r.stats.passes + r.stats.accepted, rd.ref.n - 1);
        if (kind == SCRIPT) assert_int_equal(r.stats.passes, rd.ref.n / 2);
        run_free(&r);
    }
    ref_free(&rd);
}

/* ---- greedy: ends of generation ---- */

static void test_eos(void **state) {
    fixture *f = *state;
    ref_data rd;
    ref_make(f, n_steps_default(), &rd);
    /* EOS: the first token of the continuation that did not occur before
     * step 3, so plain decoding stops in the middle. */
    int32_t eos = -1;
    for (uint32_t k = 3; eos < 0 && k < rd.ref.n; k++) {
        bool seen = false;
        for (uint32_t i = 0; i < k; i++) seen |= rd.ref.steps[i].token == rd.ref.steps[k].token;
        if (!seen) eos = rd.ref.steps[k].token;
    }
    assert_true(eos >= 0);
    conf c = rd.c;
    c.go.eos = eos;
    c.go.stop_at_eos = true;
    c.more = 3;
    run ref;
    plain(&f->m, rd.prompt, NP, &c, &ref);
    assert_true(ref.n < c.go.n_steps);
    assert_int_equal(ref.steps[ref.n - 1].token, eos);
    static const uint8_t errs[] = {0, 3, 1};
    const drafting drs[] = {
        {SCRIPT, 8, rd.stream, rd.n_stream, NULL, 0, 0, 0},   /* EOS accepted mid-batch */
        {SCRIPT, 4, rd.stream, rd.n_stream, errs, 3, 0, 0},
        {MTP, 4, NULL, 0, NULL, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(drs) / sizeof(drs[0]); i++) {
        if (skip_config(i, 0)) continue;
        conf cs = c;
        cs.rollback = drs[i].depth;
        run r;
        spec(&f->m, rd.prompt, NP, &cs, &drs[i], &r);
        same_run(&f->m, &ref, &r);
        run_free(&r);
    }
    run_free(&ref);
    ref_free(&rd);
}

static int stop_at(void *ud, uint32_t step, const ds4_gen_step *st) {
    (void)st;
    return step == *(const uint32_t *)ud;
}

/* A callback ending generation in the middle of an accepted run of drafts:
 * the session is left exactly where plain decoding leaves it, and decoding
 * goes on from there identically. */
static void test_stop_callback(void **state) {
    fixture *f = *state;
    ref_data rd;
    ref_make(f, n_steps_default(), &rd);
    uint32_t stop_step = under_valgrind() ? 4 : 10;
    conf c = rd.c;
    c.cb = stop_at;
    c.ud = &stop_step;
    c.more = 4;
    run ref;
    plain(&f->m, rd.prompt, NP, &c, &ref);
    assert_int_equal(ref.n, stop_step + 1);
    static const uint8_t errs[] = {0, 2};
    const drafting drs[] = {
        {SCRIPT, 6, rd.stream, rd.n_stream, NULL, 0, 0, 0},
        {SCRIPT, 3, rd.stream, rd.n_stream, errs, 2, 0, 0},
        {MTP, 2, NULL, 0, NULL, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(drs) / sizeof(drs[0]); i++) {
        if (skip_config(i, 0)) continue;
        conf cs = c;
        cs.rollback = drs[i].depth;
        run r;
        spec(&f->m, rd.prompt, NP, &cs, &drs[i], &r);
        same_run(&f->m, &ref, &r);
        run_free(&r);
    }
    run_free(&ref);
    ref_free(&rd);
}

/* Running into the end of the context: with n_steps clamped to the room (as
 * ds4_run_golden does) both succeed, the depth shrinking to fit; without, both
 * fail at the same step with the same error. */
static void test_context_end(void **state) {
    fixture *f = *state;
    ref_data rd;
    ref_make(f, n_steps_default(), &rd);
    uint32_t room = under_valgrind() ? 4 : 10;
    static const uint8_t errs[] = {0, 5, 0, 1};
    for (int clamped = 1; clamped >= 0; clamped--) {
        conf c = rd.c;
        c.ctx = NP + room;
        c.go.n_steps = clamped ? room + 1 : room + 6;
        run ref;
        plain(&f->m, rd.prompt, NP, &c, &ref);
        assert_int_equal(ref.rc, clamped ? 0 : -1);
        const drafting drs[] = {
            {SCRIPT, 8, rd.stream, rd.n_stream, NULL, 0, 0, 0},
            {SCRIPT, 16, rd.stream, rd.n_stream, errs, 4, 0, 0},
            {MTP, 5, NULL, 0, NULL, 0, 0, 0},
        };
        for (size_t i = 0; i < sizeof(drs) / sizeof(drs[0]); i++) {
            if (skip_config(i, 2)) continue;
            conf cs = c;
            cs.rollback = drs[i].depth;
            run r;
            spec(&f->m, rd.prompt, NP, &cs, &drs[i], &r);
            same_run(&f->m, &ref, &r);
            run_free(&r);
        }
        run_free(&ref);
    }
    ref_free(&rd);
}

/* ---- greedy: several rows decoded together ---- */

#define B 3

/* Rows of different prompt lengths and step counts, decoded through joint
 * passes on an engine too small for one pass per cycle; each row's run must
 * be exactly that prompt decoded alone. */
static void test_batched_rows(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    uint32_t V = m->cfg.n_vocab;
    const uint32_t np[B] = {5, 9, 3};
    const uint32_t steps_v[B] = {3, 2, 4}, steps_n[B] = {14, 10, 16};
    int32_t *prompts[B];
    run refs[B];
    int32_t *streams[B];
    for (uint32_t i = 0; i < B; i++) {
        prompts[i] = tu_random_tokens(np[i], V, 100 + i);
        conf c = {.ctx = 128, .chunk = 64,
                  .go = {.n_steps = under_valgrind() ? steps_v[i] : steps_n[i], .top_k = 3, .eos = -1}};
        plain(m, prompts[i], np[i], &c, &refs[i]);
        streams[i] = malloc(sizeof(int32_t) * (np[i] + refs[i].n));
        memcpy(streams[i], prompts[i], sizeof(int32_t) * np[i]);
        for (uint32_t k = 0; k < refs[i].n; k++) streams[i][np[i] + k] = refs[i].steps[k].token;
    }
    static const uint8_t e0[] = {0}, e1[] = {1, 0, 3}, e2[] = {2, 5, 1, 0};
    const uint8_t *errs[B] = {e0, e1, e2};
    const uint32_t n_errs[B] = {1, 3, 4};
    for (int kind = PLAIN; kind <= MTP; kind++) {
        if (skip_config((size_t)kind, MTP)) continue;
        uint32_t depth = kind == MTP ? 3 : 5;
        conf c = {.ctx = 128, .chunk = 4, .rollback = depth, .cap = 7,
                  .go = {.top_k = 3, .eos = -1}};
        ds4err err = {0};
        ds4_engine e;
        engine_for(m, &c, &e);
        ds4_session s[B];
        ds4_session *rows[B];
        drafter_script scripts[B];
        const int32_t *pp[B];
        ds4_spec_row sr[B];
        for (uint32_t i = 0; i < B; i++) {
            session_for(&e, &c, &s[i]);
            rows[i] = &s[i];
            pp[i] = prompts[i];
            scripts[i] = (drafter_script){streams[i], np[i] + refs[i].n, errs[i], n_errs[i]};
        }
        drafting dr = {kind, depth, NULL, 0, NULL, 0, 0, 0};
        ds4_drafter *d = kind == PLAIN ? NULL : drafter_for(&e, &c, &dr, scripts, B);
        if (ds4_spec_prefill(d, rows, pp, np, B, &err)) fail_msg("%s", err.msg);
        for (uint32_t i = 0; i < B; i++)
            sr[i] = (ds4_spec_row){.s = rows[i], .n_steps = refs[i].n,
                                   .steps = calloc(refs[i].n, sizeof(ds4_gen_step))};
        ds4_spec_cfg sc = {d, depth, 0};
        ds4_spec_stats stats = {0};
        if (ds4_spec_generate(&sc, &c.go, sr, B, &stats, &err)) fail_msg("%s", err.msg);
        for (uint32_t i = 0; i < B; i++) {
            run r = {.steps = sr[i].steps, .n = sr[i].n_done};
            finish(&r, &s[i], &c);
            same_run(m, &refs[i], &r);
            run_free(&r);
            ds4_session_free(&s[i]);
        }
        if (kind == SCRIPT) {
            assert_true(stats.accepted > 0 && stats.accepted < stats.proposed);
            /* The deepest accept is a whole cycle's worth at most, and some
             * cycle accepts more than one draft whenever the depth allows. */
            assert_true(stats.deepest >= 1 && stats.deepest <= depth);
            if (depth > 1) assert_true(stats.deepest > 1);
        }
        ds4_spec_drafter_free(d);
        ds4_engine_free(&e);
    }
    for (uint32_t i = 0; i < B; i++) {
        run_free(&refs[i]);
        free(prompts[i]);
        free(streams[i]);
    }
}

/* ---- the report line ---- */

static void test_report(void **state) {
    (void)state;
    char line[160];
    ds4_spec_stats st = {.passes = 6, .iters = 4, .proposed = 10, .accepted = 7, .deepest = 3};
    ds4_spec_report(&st, line, sizeof(line));
    assert_string_equal(line, "mtp accept: iters=4 proposed=10 accepted=7 rate=70.0% per_iter=1.75 "
                              "deepest=3");
    ds4_spec_stats none = {0};
    ds4_spec_report(&none, line, sizeof(line));
    assert_string_equal(line, "mtp accept: iters=0 proposed=0 accepted=0 rate=0.0% per_iter=0.00 "
                              "deepest=0");
    ds4_spec_report_positions(&none, line, sizeof(line));
    assert_string_equal(line, "");
    st.proposed_at[0] = 4, st.proposed_at[1] = 4, st.proposed_at[2] = 2;
    st.accepted_at[0] = 4, st.accepted_at[1] = 2, st.accepted_at[2] = 1;
    ds4_spec_report_positions(&st, line, sizeof(line));
    assert_string_equal(line, "accept by position: 1=4/4 2=2/4 3=1/2");
    /* A buffer too small cuts the line, still terminated. */
    char small[24];
    ds4_spec_report_positions(&st, small, sizeof(small));
    assert_string_equal(small, "accept by position: 1=4");
}


/* ---- sampling ---- */

/* Upper 1e-6 quantile of chi-square with df degrees of freedom
 * (Wilson-Hilferty): with fixed seeds a test fails only on a real
 * difference in distribution, and then with a wide margin. */
static double chi2_crit(uint32_t df) {
    double a = 2.0 / (9.0 * df), z = 4.7534;
    double t = 1 - a + z * sqrt(a);
    return df * t * t * t;
}

/* Pearson's statistic of counts against probabilities, over the bins with
 * p > 0 (a count in a bin with p == 0 is an infinite misfit). */
static double chi2(const uint64_t *obs, const double *p, uint32_t n, uint64_t total, uint32_t *df) {
    double x = 0;
    uint32_t bins = 0;
    *df = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (p[i] <= 0) {
            if (obs[i]) return INFINITY;
            continue;
        }
        double e = p[i] * (double)total, d = (double)obs[i] - e;
        x += d * d / e;
        bins++;
    }
    *df = bins - 1;
    return x;
}

/* Softmax at temperature t with the C library's exp: independent of
 * ds4ref's arithmetic, and exact enough for a chi-square. */
static void softmax_libm(const float *l, uint32_t n, double t, double *p) {
    double mx = -INFINITY, s = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(l[i]) && l[i] > mx) mx = l[i];
    for (uint32_t i = 0; i < n; i++) {
        p[i] = isnan(l[i]) ? 0.0 : exp(((double)l[i] - mx) / t);
        s += p[i];
    }
    for (uint32_t i = 0; i < n; i++) p[i] /= s;
}

/* SplitMix64 reference values (seed 0 are the published ones; seed 12345
 * stream 7 computed separately from the definition in rng.h). */
static void test_rng_definition(void **state) {
    (void)state;
    ds4_rng r;
    ds4_rng_init(&r, 0, 0);
    assert_true(ds4_rng_next(&r) == 0xE220A8397B1DCDAFull);
    assert_true(ds4_rng_next(&r) == 0x6E789E6AA1B965F4ull);
    assert_true(ds4_rng_next(&r) == 0x06C45D188009454Full);
    ds4_rng_init(&r, 12345, 7);
    assert_true(ds4_rng_next(&r) == 0xC1E8194F6BB7AAA4ull);
    assert_true(ds4_rng_next(&r) == 0x083BA0CB6E9CFF28ull);
    ds4_rng_init(&r, 0, 0);
    assert_true(ds4_rng_uniform(&r) == ldexp((double)(0xE220A8397B1DCDAFull >> 11), -53));
    /* The categorical walk: weights {0, 0, 2, 0, 1} give 2 when u*3 < 2. */
    const double w[5] = {0, 0, 2, 0, 1};
    ds4_rng a, b;
    ds4_rng_init(&a, 5, 0);
    b = a;
    for (int k = 0; k < 1000; k++) {
        double u = ds4_rng_uniform(&b);
        assert_int_equal(ds4_rng_pick(&a, w, 5, 3.0), u * 3.0 < 2.0 ? 2 : 4);
    }
    const double none[2] = {0, 0};
    assert_int_equal(ds4_rng_pick(&a, none, 2, 0.0), -1);
    const float nan_logits[2] = {NAN, NAN}, one[3] = {NAN, -INFINITY, 0.5f};
    double ws[3];
    assert_int_equal(ds4_rng_sample(&a, nan_logits, 2, 1.0, ws), -1);
    for (int k = 0; k < 20; k++) assert_int_equal(ds4_rng_sample(&a, one, 3, 0.3, ws), 2);
}

/* Draws from logits at a temperature follow softmax(l / T). */
static void test_rng_sample_distribution(void **state) {
    (void)state;
    const float l[8] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, NAN, -INFINITY, 1.5f};
    uint64_t n = under_valgrind() ? 2000 : 60000, cnt[8] = {0};
    double w[8], p[8], p_wrong[8];
    ds4_rng r;
    ds4_rng_init(&r, 42, 0);
    for (uint64_t k = 0; k < n; k++) cnt[ds4_rng_sample(&r, l, 8, 0.7, w)]++;
    softmax_libm(l, 8, 0.7, p);
    softmax_libm(l, 8, 0.8, p_wrong);
    uint32_t df, df2;
    double x = chi2(cnt, p, 8, n, &df), x_wrong = chi2(cnt, p_wrong, 8, n, &df2);
    printf("  categorical draws: chi2 %.2f (df %u, limit %.1f); against T=0.8: %.1f\n", x, df,
           chi2_crit(df), x_wrong);
    assert_int_equal(df, 5);
    if (under_valgrind()) return;
    assert_true(x < chi2_crit(df));
    assert_true(x_wrong > chi2_crit(df2));
}

/* The rejection rule is lossless: a draft drawn from q, accepted or replaced
 * by the rule, is distributed as p; for a drafter that is not randomised (q
 * one-hot) too.  The drafts themselves (distributed as q) fail the same
 * test: it can tell. */
static void test_accept_rule(void **state) {
    (void)state;
    enum { V = 8 };
    const float lp[V] = {0.3f, 1.2f, -0.4f, 0.9f, 2.1f, -1.0f, 0.0f, 0.5f};
    const float lq[V] = {1.5f, 0.1f, 0.8f, -0.2f, 1.9f, 0.4f, -1.5f, 1.1f};
    double p[V], q[V], resid[V];
    softmax_libm(lp, V, 1.0, p);
    softmax_libm(lq, V, 1.0, q);
    uint64_t n = under_valgrind() ? 2000 : 100000;
    for (int onehot = 0; onehot <= 1; onehot++) {
        uint64_t out[V] = {0}, drafted[V] = {0}, acc = 0;
        ds4_rng r, rq;
        ds4_rng_init(&r, 99, 0);
        ds4_rng_init(&rq, 99, 1);
        double Sq = 0, overlap = 0;
        for (int i = 0; i < V; i++) {
            Sq += q[i];
            overlap += p[i] < q[i] ? p[i] : q[i];
        }
        for (uint64_t k = 0; k < n; k++) {
            int32_t d = onehot ? 3 : ds4_rng_pick(&rq, q, V, Sq);
            bool ok;
            out[ds4_spec_accept(&r, p, onehot ? NULL : q, d, V, resid, &ok)]++;
            drafted[d]++;
            acc += ok;
        }
        uint32_t df, df2;
        double x = chi2(out, p, V, n, &df), xd = chi2(drafted, p, V, n, &df2);
        double rate = (double)acc / (double)n, want = onehot ? p[3] : overlap;
        printf("  rejection rule (%s): chi2 %.2f (df %u, limit %.1f); drafts alone %.1f; accept "
               "rate %.4f, expected %.4f\n", onehot ? "one-hot q" : "sampled q", x, df,
               chi2_crit(df), xd, rate, want);
        if (under_valgrind()) continue;
        assert_true(x < chi2_crit(df));
        assert_true(xd > chi2_crit(df2));
        assert_true(fabs(rate - want) < 5 * sqrt(want * (1 - want) / (double)n));
    }
}

/* Sampled runs: every record's logits are exactly those of teacher-forced
 * plain decoding of the same tokens; plain sampling draws token i from
 * stream 0 of its seed, one uniform each; runs are reproducible; rows
 * decoded together are the rows decoded alone. */
static void test_sampled_exact(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    uint32_t V = m->cfg.n_vocab;
    ref_data rd;
    ref_make(f, under_valgrind() ? 4 : 16, &rd);
    static const uint8_t errs[] = {0, 1, 2};
    const double temp = 0.9;
    const drafting drs[] = {
        {PLAIN, 0, NULL, 0, NULL, 0, temp, 1234},
        {SCRIPT, 3, rd.stream, rd.n_stream, errs, 3, temp, 1234},
        {MTP, 3, NULL, 0, NULL, 0, temp, 1234},
    };
    double *w = malloc(sizeof(double) * V);
    for (size_t i = 0; i < sizeof(drs) / sizeof(drs[0]); i++) {
        if (skip_config(i, 2)) continue;
        conf c = rd.c;
        c.rollback = drs[i].depth;
        run r, again = {0};
        spec(m, rd.prompt, NP, &c, &drs[i], &r);
        assert_int_equal(r.rc, 0);
        assert_int_equal(r.n, c.go.n_steps);
        if (!under_valgrind()) {
            spec(m, rd.prompt, NP, &c, &drs[i], &again);
            same_steps(r.steps, again.steps, r.n);
        }
        /* Teacher-forced plain decoding of the sampled tokens. */
        ds4err err = {0};
        ds4_engine e;
        ds4_session s;
        engine_for(m, &c, &e);
        session_for(&e, &c, &s);
        if (ds4_session_eval(&s, rd.prompt, NP, NULL, NULL, &err)) fail_msg("%s", err.msg);
        ds4_rng rng;
        ds4_rng_init(&rng, drs[i].seed, 0);
        for (uint32_t k = 0; k < r.n; k++) {
            ds4_gen_step st = {0};
            if (ds4_step_from_logits(s.logits, V, c.go.top_k, &st, &err)) fail_msg("%s", err.msg);
            assert_memory_equal(st.digest, r.steps[k].digest, 32);
            assert_memory_equal(st.top_ids, r.steps[k].top_ids, sizeof(int32_t) * st.n_top);
            int32_t t = r.steps[k].token;
            assert_true(r.steps[k].logit == s.logits[t]);
            if (drs[i].kind == PLAIN) assert_int_equal(t, ds4_rng_sample(&rng, s.logits, V, temp, w));
            ds4_step_list_free(&st, 1);
            if (k + 1 < r.n && ds4_session_eval(&s, &t, 1, NULL, NULL, &err)) fail_msg("%s", err.msg);
        }
        ds4_session_free(&s);
        ds4_engine_free(&e);
        run_free(&again);
        run_free(&r);
    }
    free(w);
    /* Two rows together, each as alone (same seeds). */
    int32_t *p2 = tu_random_tokens(4, V, 5);
    const int32_t *pp[2] = {rd.prompt, p2};
    const uint32_t np[2] = {NP, 4};
    const uint64_t seeds[2] = {5, 6};
    conf c = {.ctx = 64, .chunk = 4, .rollback = 3, .cap = 6,
              .go = {.n_steps = under_valgrind() ? 3 : 10, .top_k = 2, .eos = -1}};
    run alone[2];
    for (int i = 0; i < 2; i++) {
        drafting dr = {MTP, 3, NULL, 0, NULL, 0, temp, seeds[i]};
        spec(m, pp[i], np[i], &c, &dr, &alone[i]);
    }
    ds4err err = {0};
    ds4_engine e;
    engine_for(m, &c, &e);
    ds4_session s[2];
    ds4_session *rows[2] = {&s[0], &s[1]};
    session_for(&e, &c, &s[0]);
    session_for(&e, &c, &s[1]);
    drafting dr = {MTP, 3, NULL, 0, NULL, 0, temp, 0};
    ds4_drafter *d = drafter_for(&e, &c, &dr, NULL, 2);
    if (ds4_spec_prefill(d, rows, pp, np, 2, &err)) fail_msg("%s", err.msg);
    ds4_spec_row sr[2];
    for (int i = 0; i < 2; i++)
        sr[i] = (ds4_spec_row){.s = rows[i], .seed = seeds[i],
                               .steps = calloc(c.go.n_steps, sizeof(ds4_gen_step))};
    ds4_spec_cfg sc = {d, 3, temp};
    if (ds4_spec_generate(&sc, &c.go, sr, 2, NULL, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < 2; i++) {
        run r = {.steps = sr[i].steps, .n = sr[i].n_done};
        finish(&r, &s[i], &c);
        same_run(m, &alone[i], &r);
        run_free(&r);
        run_free(&alone[i]);
        ds4_session_free(&s[i]);
    }
    ds4_spec_drafter_free(d);
    ds4_engine_free(&e);
    free(p2);
    ref_free(&rd);
}

/* A sequential goodness-of-fit of sampled tokens: the first token of every
 * row against p(t0 | prompt); for each first token drawn often enough, the
 * second tokens of those rows against p(t1 | prompt t0); likewise the third.
 * Given the prefix, the rows' next tokens are independent draws from the
 * model's conditional, so the chi-squares of the nodes add up, and so do
 * their degrees of freedom.  Every node is also scored against the
 * conditionals at a wrong temperature. */
typedef struct gof {
    double x, x_wrong;
    uint32_t df, df_wrong, nodes;
} gof;

#define GOF_MIN_ROWS 20

/* Bins: the tokens expected at least 5 times, then the rest (merged into
 * the smallest bin when expected less than 5 times). */
static void gof_node(gof *g, const int32_t *next, uint32_t n, const double *p, const double *pw,
                     uint32_t V) {
    uint64_t *obs = calloc(V + 1, sizeof(uint64_t));
    double *e = calloc(V + 1, sizeof(double)), *ew = calloc(V + 1, sizeof(double));
    uint32_t *bin = malloc(sizeof(uint32_t) * V), nb = 0;
    for (uint32_t t = 0; t < V; t++) bin[t] = n * p[t] >= 5 ? nb++ : UINT32_MAX;
    uint32_t other = nb, smallest = 0;
    for (uint32_t t = 0; t < V; t++) {
        uint32_t b = bin[t] == UINT32_MAX ? other : bin[t];
        e[b] += p[t];
        ew[b] += pw[t];
    }
    for (uint32_t i = 0; i < n; i++) obs[bin[next[i]] == UINT32_MAX ? other : bin[next[i]]]++;
    for (uint32_t b = 1; b < nb; b++)
        if (e[b] < e[smallest]) smallest = b;
    if (nb && e[other] * n < 5) {
        obs[smallest] += obs[other];
        e[smallest] += e[other];
        ew[smallest] += ew[other];
    } else {
        nb++;
    }
    if (nb >= 2) {
        uint32_t df, dfw;
        g->x += chi2(obs, e, nb, n, &df);
        g->x_wrong += chi2(obs, ew, nb, n, &dfw);
        g->df += df;
        g->df_wrong += dfw;
        g->nodes++;
    }
    free(obs);
    free(e);
    free(ew);
    free(bin);
}

/* The conditionals after prompt + prefix, at temp and temp_wrong. */
static void conditionals(const ds4_model *m, const int32_t *prompt, uint32_t np, const int32_t *prefix,
                         uint32_t n_prefix, double temp, double temp_wrong, double *p, double *pw) {
    conf c = {.ctx = np + n_prefix, .chunk = 4};
    ds4err err = {0};
    ds4_engine e;
    ds4_session s;
    engine_for(m, &c, &e);
    session_for(&e, &c, &s);
    if (ds4_session_eval(&s, prompt, np, NULL, NULL, &err) ||
        ds4_session_eval(&s, prefix, n_prefix, NULL, NULL, &err))
        fail_msg("%s", err.msg);
    softmax_libm(s.logits, m->cfg.n_vocab, temp, p);
    softmax_libm(s.logits, m->cfg.n_vocab, temp_wrong, pw);
    ds4_session_free(&s);
    ds4_engine_free(&e);
}

/* Level `depth` of the tree below prefix: rows[0..n) all start with it. */
static void gof_level(gof *g, const ds4_model *m, const int32_t *prompt, uint32_t np,
                      int32_t *const *toks, uint32_t n, int32_t *prefix, uint32_t depth,
                      double temp, double temp_wrong) {
    uint32_t V = m->cfg.n_vocab;
    double *p = malloc(sizeof(double) * V), *pw = malloc(sizeof(double) * V);
    int32_t *next = malloc(sizeof(int32_t) * n);
    conditionals(m, prompt, np, prefix, depth, temp, temp_wrong, p, pw);
    for (uint32_t i = 0; i < n; i++) next[i] = toks[i][depth];
    gof_node(g, next, n, p, pw, V);
    if (depth < 2) {
        int32_t **sub = malloc(sizeof(int32_t *) * n);
        for (uint32_t t = 0; t < V; t++) {
            uint32_t k = 0;
            for (uint32_t i = 0; i < n; i++)
                if (next[i] == (int32_t)t) sub[k++] = toks[i];
            if (k < GOF_MIN_ROWS) continue;
            prefix[depth] = (int32_t)t;
            gof_level(g, m, prompt, np, sub, k, prefix, depth + 1, temp, temp_wrong);
        }
        free(sub);
    }
    free(p);
    free(pw);
    free(next);
}

/* The first three tokens of many sampled runs (one row per seed, all rows
 * decoded together), for plain sampling and for speculative sampling at
 * depth 2 with the MTP head and with a scripted drafter (a one-hot q), must
 * fit the model's distribution; the same tokens must not fit the
 * distribution at a wrong temperature (the test has the power to see a
 * broken rule). */
static void test_sampled_distribution(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    const uint32_t n_rows = under_valgrind() ? 3 : 160;
    const double temp = 0.3, temp_wrong = 0.4;
    int32_t prompt[1] = {4};
    /* The script: the greedy continuation of the prompt. */
    conf cg = {.ctx = 8, .chunk = 4, .go = {.n_steps = 4, .eos = -1}};
    run greedy;
    plain(m, prompt, 1, &cg, &greedy);
    int32_t stream[5] = {prompt[0]};
    for (int k = 0; k < 4; k++) stream[1 + k] = greedy.steps[k].token;
    run_free(&greedy);
    drafter_script *scripts = malloc(sizeof(drafter_script) * n_rows);
    for (uint32_t i = 0; i < n_rows; i++) scripts[i] = (drafter_script){stream, 5, NULL, 0};
    for (int kind = PLAIN; kind <= MTP; kind++) {
        if (skip_config((size_t)kind, MTP)) continue;
        uint32_t depth = kind == PLAIN ? 0 : 2;
        conf c = {.ctx = 8, .chunk = 4, .rollback = 2, .cap = 256,
                  .go = {.n_steps = kind == PLAIN ? 3 : 4, .eos = -1}};
        ds4err err = {0};
        ds4_engine e;
        engine_for(m, &c, &e);
        ds4_session *s = calloc(n_rows, sizeof(ds4_session));
        ds4_session **rows = malloc(sizeof(ds4_session *) * n_rows);
        const int32_t **pp = malloc(sizeof(int32_t *) * n_rows);
        uint32_t *np = malloc(sizeof(uint32_t) * n_rows);
        ds4_spec_row *sr = calloc(n_rows, sizeof(ds4_spec_row));
        for (uint32_t i = 0; i < n_rows; i++) {
            session_for(&e, &c, &s[i]);
            rows[i] = &s[i];
            pp[i] = prompt;
            np[i] = 1;
        }
        drafting dr = {kind, depth, NULL, 0, NULL, 0, temp, 0};
        ds4_drafter *d = kind == PLAIN ? NULL : drafter_for(&e, &c, &dr, scripts, n_rows);
        if (ds4_spec_prefill(d, rows, pp, np, n_rows, &err)) fail_msg("%s", err.msg);
        for (uint32_t i = 0; i < n_rows; i++)
            sr[i] = (ds4_spec_row){.s = rows[i], .seed = 1000 + i,
                                   .steps = calloc(c.go.n_steps, sizeof(ds4_gen_step))};
        ds4_spec_cfg sc = {d, depth ? depth : 1, temp};
        ds4_spec_stats stats = {0};
        if (ds4_spec_generate(&sc, &c.go, sr, n_rows, &stats, &err)) fail_msg("%s", err.msg);
        int32_t *toks = malloc(sizeof(int32_t) * 3 * n_rows);
        int32_t **tp = malloc(sizeof(int32_t *) * n_rows);
        for (uint32_t i = 0; i < n_rows; i++) {
            for (int k = 0; k < 3; k++) toks[3 * i + k] = sr[i].steps[k].token;
            tp[i] = toks + 3 * i;
            ds4_step_list_free(sr[i].steps, sr[i].n_done);
            free(sr[i].steps);
            ds4_session_free(&s[i]);
        }
        gof g = {0};
        int32_t prefix[2];
        gof_level(&g, m, prompt, 1, tp, n_rows, prefix, 0, temp, temp_wrong);
        char line[160];
        ds4_spec_report(&stats, line, sizeof(line));
        printf("  %-6s sampling: chi2 %.2f (df %u, %u nodes, limit %.1f), at T=%.1f %.1f; %s\n",
               kind == PLAIN ? "plain" : kind == SCRIPT ? "script" : "MTP", g.x, g.df, g.nodes,
               chi2_crit(g.df ? g.df : 1), temp_wrong, g.x_wrong, line);
        if (!under_valgrind()) {
            assert_true(g.nodes >= 3);
            assert_true(g.x < chi2_crit(g.df));
            assert_true(g.x_wrong > chi2_crit(g.df_wrong));
            if (kind != PLAIN) assert_true(stats.accepted > 0 && stats.accepted < stats.proposed);
        }
        free(toks);
        free(tp);
        ds4_spec_drafter_free(d);
        free(s);
        free(rows);
        free(pp);
        free(np);
        free(sr);
        ds4_engine_free(&e);
    }
    free(scripts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scripted_depths),
        cmocka_unit_test(test_scripted_chunks),
        cmocka_unit_test(test_mtp_depths),
        cmocka_unit_test(test_depth1_continuous),
        cmocka_unit_test(test_eos),
        cmocka_unit_test(test_stop_callback),
        cmocka_unit_test(test_context_end),
        cmocka_unit_test(test_batched_rows),
        cmocka_unit_test(test_report),
        cmocka_unit_test(test_rng_definition),
        cmocka_unit_test(test_rng_sample_distribution),
        cmocka_unit_test(test_accept_rule),
        cmocka_unit_test(test_sampled_exact),
        cmocka_unit_test(test_sampled_distribution),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
