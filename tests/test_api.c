/* The public API (include/ds4ref.h), used only through that header: every
 * entry point, its error paths, and the equalities it promises (logits of an
 * earlier position recomputed exactly, speculative and batched generation
 * equal to plain greedy, the GGUF listing and f32 stream agreeing with the
 * model's own view of its tensors and with an independent decode of the
 * file's bytes (tests/refquant.c, the tests' own decoder), diff verdicts
 * agreeing with the tokens the two runs produced, the UTF-8 rule against
 * the encodings of every scalar value). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ds4check.h"
#include "ds4ref.h"
#include "refquant.h"
#include "testutil.h"

typedef struct fixture {
    char *dir, *path, *mtp;
    ds4ref_model *m;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof(*f));
    f->dir = tu_tmpdir();
    f->path = tu_path(f->dir, "tiny.gguf");
    f->mtp = tu_path(f->dir, "tiny-mtp.gguf");
    ds4ref_synth_options o;
    ds4ref_synth_options_init(&o);
    o.seed = 5;
    ds4ref_error e;
    if (ds4ref_synth_write(&o, f->path, f->mtp, &e)) fail_msg("%s", e.message);
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = f->path;
    mo.mtp_path = f->mtp;
    if (ds4ref_model_open(&mo, &f->m, &e)) fail_msg("%s", e.message);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    ds4ref_model_close(f->m);
    remove(f->path);
    remove(f->mtp);
    free(f->path);
    free(f->mtp);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

static void test_open_errors(void **state) {
    (void)state;
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    ds4ref_model *m = (ds4ref_model *)1;
    ds4ref_error e;
    mo.path = "/nonexistent/x.gguf";
    assert_int_equal(ds4ref_model_open(&mo, &m, &e), DS4REF_E_IO);
    assert_null(m);
    assert_int_equal(e.code, DS4REF_E_IO);
    assert_non_null(strstr(e.message, "/nonexistent/x.gguf"));
    mo.path = NULL;
    assert_int_equal(ds4ref_model_open(&mo, &m, NULL), DS4REF_E_ARG);
    assert_string_equal(ds4ref_status_name(DS4REF_E_RANGE), "DS4REF_E_RANGE");
}

/* A model of a shape that runs with QAT off only opens with it off; QAT on
 * is refused with a message that says why and what to do. */
static void test_qat_off_only(void **state) {
    fixture *f = *state;
    char *path = tu_path(f->dir, "k64.gguf");
    ds4ref_synth_options so;
    ds4ref_synth_options_init(&so);
    so.config = "tiny-k64";
    ds4ref_error e;
    assert_int_equal(ds4ref_synth_write(&so, path, NULL, &e), 0);
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = path;
    ds4ref_model *m = NULL;
    assert_int_equal(ds4ref_model_open(&mo, &m, &e), DS4REF_E_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(e.message, path));
    assert_non_null(strstr(e.message, "not a multiple of 64"));
    assert_non_null(strstr(e.message, "QAT off"));
    mo.qat = 0;
    assert_int_equal(ds4ref_model_open(&mo, &m, &e), 0);
    ds4ref_model_info in;
    ds4ref_model_get_info(m, &in);
    assert_int_equal(in.head_dim, 64);
    ds4ref_model_close(m);
    remove(path);
    free(path);
}

static size_t chat_len(ds4ref_model *m, const ds4ref_chat_options *co, int32_t **ids) {
    ds4ref_error e;
    size_t n = 0;
    if (ds4ref_chat_prompt(m, "hi", 2, co, ids, &n, &e)) fail_msg("%s", e.message);
    return n;
}

/* The reasoning efforts through the API: 0731's "high" is the first
 * release's "max" text, its "max" another, longer one, "low" none; names
 * the release refuses, unknown names and a think_max that disagrees are
 * errors naming the field. */
static void check_chat_efforts(ds4ref_model *m) {
    int32_t *plain, *old_max, *high, *max, *ids;
    ds4ref_chat_options co = {.system = "", .thinking = 1};
    size_t n_plain = chat_len(m, &co, &plain);
    co.think_max = 1;
    size_t n_old_max = chat_len(m, &co, &old_max);
    co = (ds4ref_chat_options){.system = "", .thinking = 1, .release = DS4REF_CHAT_V4_0731,
                               .reasoning_effort = "high"};
    size_t n_high = chat_len(m, &co, &high);
    co.reasoning_effort = "max";
    size_t n_max = chat_len(m, &co, &max);
    co.reasoning_effort = "low";
    size_t n_low = chat_len(m, &co, &ids);
    assert_true(n_old_max > n_plain);
    assert_int_equal(n_high, n_old_max);
    assert_memory_equal(high, old_max, n_high * sizeof(int32_t));
    assert_true(n_max > n_plain && (n_max != n_high || memcmp(max, high, n_max * 4)));
    assert_int_equal(n_low, n_plain);
    assert_memory_equal(ids, plain, n_low * sizeof(int32_t));
    ds4ref_free(ids);
    ds4ref_free(plain);
    ds4ref_free(old_max);
    ds4ref_free(high);
    ds4ref_free(max);

    static const struct {
        int release, think_max;
        const char *effort, *needle;
    } bad[] = {
        {DS4REF_CHAT_V4, 0, "low", "low is 0731's"},
        {DS4REF_CHAT_V4_0731, 0, "medium", "reasoning_effort \"medium\": expected low, high or max"},
        {DS4REF_CHAT_V4_0731, 1, "high", "think_max and reasoning_effort \"high\" disagree"},
        {7, 0, NULL, "release 7"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ds4ref_error e;
        size_t n;
        co = (ds4ref_chat_options){.thinking = 1, .release = bad[i].release,
                                   .think_max = bad[i].think_max,
                                   .reasoning_effort = bad[i].effort};
        assert_int_equal(ds4ref_chat_prompt(m, "hi", 2, &co, &ids, &n, &e), DS4REF_E_ARG);
        if (!strstr(e.message, bad[i].needle)) fail_msg("\"%s\" lacks \"%s\"", e.message, bad[i].needle);
    }
}

static void test_info_and_tokenizer(void **state) {
    fixture *f = *state;
    ds4ref_model_info in;
    ds4ref_model_get_info(f->m, &in);
    assert_int_equal(in.n_layer, 4);
    assert_int_equal(in.n_vocab, 512);
    assert_true(in.has_mtp && in.has_tokenizer);
    assert_int_equal(in.bos, 256);
    ds4ref_error e;
    int32_t *ids;
    size_t n;
    const char text[] = "Hello \xff\x00 world";
    assert_int_equal(ds4ref_tokenize(f->m, text, sizeof(text) - 1, 0, &ids, &n, &e), 0);
    char *back;
    size_t len;
    assert_int_equal(ds4ref_detokenize(f->m, ids, n, &back, &len, &e), 0);
    assert_int_equal(len, sizeof(text) - 1);
    assert_memory_equal(back, text, len);
    ds4ref_free(back);
    ds4ref_free(ids);
    int32_t bad = 512;
    assert_int_equal(ds4ref_detokenize(f->m, &bad, 1, &back, &len, &e), DS4REF_E_RANGE);
    const char *s;
    assert_int_equal(ds4ref_token_string(f->m, 256, &s, &len, &e), 0);
    assert_int_equal(len, strlen("<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"));
    ds4ref_chat_options co = {.system = "", .thinking = 0};
    assert_int_equal(ds4ref_chat_prompt(f->m, "hi", 2, &co, &ids, &n, &e), 0);
    assert_true(n >= 5);
    assert_int_equal(ids[0], in.bos);
    assert_int_equal(ids[n - 1], 261);   /* </think> */
    ds4ref_free(ids);
    check_chat_efforts(f->m);
}

/* Every one of the four dimensions, the unused ones included. */
static void assert_shape(const uint64_t ne[4], uint64_t n0, uint64_t n1, uint64_t n2) {
    assert_int_equal(ne[0], n0);
    assert_int_equal(ne[1], n1);
    assert_int_equal(ne[2], n2);
    assert_int_equal(ne[3], 1);
}

static void test_tensor(void **state) {
    fixture *f = *state;
    float *v;
    uint64_t ne[4];
    ds4ref_error e;
    assert_int_equal(ds4ref_tensor_f32(f->m, "output_hc_base.weight", &v, ne, &e), 0);
    assert_shape(ne, 4, 1, 1);
    ds4ref_free(v);
    assert_int_equal(ds4ref_tensor_f32(f->m, "mtp.0.enorm.weight", &v, ne, &e), 0);
    assert_shape(ne, 256, 1, 1);
    ds4ref_free(v);
    assert_int_equal(ds4ref_tensor_f32(f->m, "blk.1.attn_q_b.weight", &v, ne, &e), 0);
    assert_shape(ne, 64, 512, 1);   /* q_lora x n_head*head_dim */
    ds4ref_free(v);
    assert_int_equal(ds4ref_tensor_f32(f->m, "blk.2.ffn_down_exps.weight", &v, ne, &e), 0);
    assert_shape(ne, 256, 256, 8);  /* n_ff x n_embd x n_expert */
    ds4ref_free(v);
    assert_int_equal(ds4ref_tensor_f32(f->m, "no.such.tensor", &v, ne, &e), DS4REF_E_ARG);
    assert_non_null(strstr(e.message, "no.such.tensor"));
}

static void test_sessions(void **state) {
    fixture *f = *state;
    ds4ref_session *s;
    ds4ref_error e;
    ds4ref_session_options so = {.ctx = 64, .chunk = 5};
    assert_int_equal(ds4ref_session_new(f->m, &so, &s, &e), 0);
    int32_t toks[30];
    for (int i = 0; i < 30; i++) toks[i] = (i * 37 + 11) % 512;
    float *all = malloc(sizeof(float) * 30 * 512), *one = malloc(sizeof(float) * 512);
    assert_int_equal(ds4ref_session_eval(s, toks, 30, all, &e), 0);
    assert_int_equal(ds4ref_session_pos(s), 30);
    /* An earlier position is recomputed bit for bit, and the session ends
     * where it was. */
    assert_int_equal(ds4ref_session_logits(s, 12, one, &e), 0);
    assert_memory_equal(one, all + 12 * 512, sizeof(float) * 512);
    assert_int_equal(ds4ref_session_pos(s), 30);
    assert_int_equal(ds4ref_session_logits(s, 29, one, &e), 0);
    assert_memory_equal(one, all + 29 * 512, sizeof(float) * 512);
    ds4ref_logprob top[5];
    uint32_t n;
    assert_int_equal(ds4ref_session_top_logprobs(s, 29, 5, top, &n, &e), 0);
    assert_int_equal(n, 5);
    for (uint32_t i = 0; i < n; i++) assert_true(top[i].logit == all[29 * 512 + top[i].id]);
    assert_true(top[0].logit >= top[1].logit && top[0].logprob < 0);
    /* A caller's own logits get the very same figures. */
    ds4ref_logprob mine[5];
    uint32_t n_mine;
    assert_int_equal(ds4ref_top_logprobs(f->m, all + 29 * 512, 5, mine, &n_mine, &e), 0);
    assert_int_equal(n_mine, 5);
    assert_memory_equal(mine, top, sizeof(top));
    /* Errors: position out of range, bad token, truncation forward. */
    assert_int_equal(ds4ref_session_logits(s, 30, one, &e), DS4REF_E_RANGE);
    assert_non_null(strstr(e.message, "position 30"));
    int32_t bad = -1;
    assert_int_equal(ds4ref_session_eval(s, &bad, 1, NULL, &e), DS4REF_E_RANGE);
    assert_int_equal(ds4ref_session_pos(s), 30);
    assert_int_equal(ds4ref_session_truncate(s, 31, &e), DS4REF_E_RANGE);
    assert_int_equal(ds4ref_session_truncate(s, 10, &e), 0);
    assert_int_equal(ds4ref_session_eval(s, toks + 10, 20, all + 10 * 512, &e), 0);
    assert_int_equal(ds4ref_session_logits(s, 29, one, &e), 0);
    assert_memory_equal(one, all + 29 * 512, sizeof(float) * 512);
    int32_t many[40] = {0};
    assert_int_equal(ds4ref_session_eval(s, many, 40, NULL, &e), DS4REF_E_RANGE);
    /* The room a generation has: the last token is never evaluated. */
    assert_int_equal(ds4ref_session_ctx(s), 64);
    assert_int_equal(ds4ref_generate_room(s, 6, 100), 59);
    assert_int_equal(ds4ref_generate_room(s, 6, 59), 59);
    assert_int_equal(ds4ref_generate_room(s, 64, 5), 1);
    assert_int_equal(ds4ref_generate_room(s, 65, 5), 0);
    ds4ref_session_free(s);
    assert_int_equal(ds4ref_session_new(f->m, NULL, &s, &e), 0);
    assert_int_equal(ds4ref_session_ctx(s), 4096);   /* the tiny model's context */
    ds4ref_session_free(s);
    free(all);
    free(one);
}

typedef struct rec {
    int32_t ids[64];
    uint8_t digests[64][32];
    uint32_t n;
} rec;

static int record(void *ud, const ds4ref_step *st) {
    rec *r = ud;
    r->ids[r->n] = st->id;
    memcpy(r->digests[r->n], st->logits_sha256, 32);
    r->n++;
    return 0;
}

static int record_row(void *ud, uint32_t row, const ds4ref_step *st) {
    return record((rec *)ud + row, st);
}

static void test_generate(void **state) {
    fixture *f = *state;
    ds4ref_session *s;
    ds4ref_error e;
    assert_int_equal(ds4ref_session_new(f->m, NULL, &s, &e), 0);
    int32_t prompt[6] = {256, 258, 72, 105, 259, 261};
    ds4ref_generate_options go;
    ds4ref_generate_options_init(&go);
    /* Under valgrind, where these 24 tokens took two minutes, 10: still
     * several verify cycles at depth 3 and a batch of two rows. */
    const uint32_t n = getenv("DS4REF_VALGRIND") ? 10 : 24;
    go.n_tokens = n;
    go.stop_at_eos = 0;
    rec plain = {0}, spec = {0};
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &plain, &e), 0);
    assert_int_equal(plain.n, n);
    ds4ref_spec_stats st = {0};
    go.mtp_draft = 3;
    go.stats = &st;
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &spec, &e), 0);
    assert_memory_equal(&plain, &spec, sizeof(rec));
    assert_true(st.proposed > 0);
    char line[160];
    ds4ref_spec_report(&st, line, sizeof(line));
    assert_non_null(strstr(line, "mtp accept: iters="));
    /* Two rows together, the second being the same prompt: both equal plain. */
    ds4ref_session *s2;
    assert_int_equal(ds4ref_session_new(f->m, NULL, &s2, &e), 0);
    int32_t other[3] = {256, 258, 300};
    ds4ref_session *rows[2] = {s2, s};
    const int32_t *prompts[2] = {other, prompt};
    size_t lens[2] = {3, 6};
    rec both[2];
    memset(both, 0, sizeof(both));
    assert_int_equal(ds4ref_generate_batch(rows, prompts, lens, 2, &go, record_row, both, &e), 0);
    assert_memory_equal(&both[1], &plain, sizeof(rec));
    assert_true(st.deepest <= 3 && (st.deepest > 0) == (st.accepted > 0));
    /* Recorded, each row into PATH.ROW: row 1's golden holds plain's steps. */
    char *g = tu_path(f->dir, "rows.jsonl"), *g1 = tu_path(f->dir, "rows.jsonl.1"),
         *g0 = tu_path(f->dir, "rows.jsonl.0");
    go.golden_path = g;
    memset(both, 0, sizeof(both));
    assert_int_equal(ds4ref_generate_batch(rows, prompts, lens, 2, &go, record_row, both, &e), 0);
    assert_memory_equal(&both[1], &plain, sizeof(rec));
    ds4ref_golden *gold;
    assert_int_equal(ds4ref_golden_read(g1, &gold, &e), 0);
    assert_int_equal(gold->n_steps, n);
    assert_int_equal(gold->n_prompt, 6);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(gold->steps[i].id, plain.ids[i]);
        assert_memory_equal(gold->steps[i].logits_sha256, plain.digests[i], 32);
    }
    ds4ref_golden_free(gold);
    assert_int_equal(ds4ref_golden_read(g0, &gold, &e), 0);
    assert_int_equal(gold->n_prompt, 3);
    ds4ref_golden_free(gold);
    /* An official.vec case takes one prompt at a time. */
    go.vec_path = g;
    assert_int_equal(ds4ref_generate_batch(rows, prompts, lens, 2, &go, NULL, NULL, &e), DS4REF_E_ARG);
    assert_non_null(strstr(e.message, "one prompt at a time"));
    go.vec_path = go.golden_path = NULL;
    remove(g0);
    remove(g1);
    free(g);
    free(g0);
    free(g1);
    /* Speculation without an MTP head, and an empty prompt, are refused. */
    go.mtp_draft = 17;
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &spec, &e), DS4REF_E_ARG);
    go.mtp_draft = 0;
    assert_int_equal(ds4ref_generate(s, prompt, 0, &go, NULL, NULL, &e), DS4REF_E_ARG);
    ds4ref_session_free(s);
    ds4ref_session_free(s2);
}

/* Progress belongs to the prompt: 0 of its length first, then its tokens
 * done after each pass, never a decoding step or a verify batch. */
typedef struct progress_log {
    uint32_t done[32], total[32], n;
} progress_log;

static void log_progress(void *ud, uint32_t done, uint32_t total) {
    progress_log *p = ud;
    if (p->n < 32) {
        p->done[p->n] = done;
        p->total[p->n] = total;
    }
    p->n++;
}

static void test_progress(void **state) {
    fixture *f = *state;
    progress_log log = {0};
    ds4ref_session_options so = {.ctx = 64, .chunk = 4, .progress = log_progress,
                                 .progress_ud = &log};
    ds4ref_session *s;
    ds4ref_error e;
    assert_int_equal(ds4ref_session_new(f->m, &so, &s, &e), 0);
    int32_t prompt[10];
    for (int i = 0; i < 10; i++) prompt[i] = 256 + i;
    ds4ref_generate_options go;
    ds4ref_generate_options_init(&go);
    go.n_tokens = 12;
    go.stop_at_eos = 0;
    static const uint32_t want[4] = {0, 4, 8, 10};
    for (uint32_t draft = 0; draft <= 2; draft += 2) {
        memset(&log, 0, sizeof(log));
        go.mtp_draft = draft;
        assert_int_equal(ds4ref_generate(s, prompt, 10, &go, NULL, NULL, &e), 0);
        assert_int_equal(log.n, 4);
        for (uint32_t i = 0; i < 4; i++) {
            assert_int_equal(log.done[i], want[i]);
            assert_int_equal(log.total[i], 10);
        }
    }
    /* The session's own evaluations report again afterwards. */
    memset(&log, 0, sizeof(log));
    assert_int_equal(ds4ref_session_eval(s, prompt, 3, NULL, &e), 0);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.done[0], 3);
    assert_int_equal(log.total[0], 3);
    ds4ref_session_free(s);
}

/* Outputs are opened before the first token: a path that cannot be written
 * and a .vec case that is already there fail before any step.  A case's
 * prompt goes to prompts/ beside the .vec file. */
static void test_outputs_first(void **state) {
    fixture *f = *state;
    char *dir = tu_tmpdir();
    char *vec = tu_path(dir, "x.vec"), *pdir = tu_path(dir, "prompts");
    char *ptxt = tu_path(pdir, "t.txt"), *missing = tu_path(dir, "no/such/d.json");
    ds4ref_session *s;
    ds4ref_error e;
    assert_int_equal(ds4ref_session_new(f->m, NULL, &s, &e), 0);
    int32_t prompt[6] = {256, 258, 72, 105, 259, 261};
    ds4ref_generate_options go;
    ds4ref_generate_options_init(&go);
    go.n_tokens = 4;
    go.stop_at_eos = 0;
    go.dump_path = missing;
    rec r = {0};
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &r, &e), DS4REF_E_IO);
    assert_int_equal(r.n, 0);
    assert_non_null(strstr(e.message, missing));
    go.dump_path = NULL;
    go.vec_path = vec;
    go.vec_id = "t";
    go.prompt_text = (const uint8_t *)"hi";
    go.prompt_text_len = 2;
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &r, &e), 0);
    assert_int_equal(r.n, 4);
    char *data;
    size_t len;
    assert_int_equal(ds4ref_read_file(ptxt, &data, &len, &e), 0);
    assert_true(len == 2 && !memcmp(data, "hi", 2));
    ds4ref_free(data);
    assert_int_equal(ds4ref_read_file(vec, &data, &len, &e), 0);
    assert_non_null(strstr(data, "\ncase t 4096 4 prompts/t.txt\n"));
    ds4ref_free(data);
    memset(&r, 0, sizeof(r));
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &r, &e), DS4REF_E_ARG);
    assert_int_equal(r.n, 0);
    assert_non_null(strstr(e.message, "case t already exists"));
    /* No text and no prompt file: the case could name no prompt. */
    go.vec_id = "u";
    go.prompt_text = NULL;
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &r, &e), DS4REF_E_ARG);
    assert_int_equal(r.n, 0);
    ds4ref_session_free(s);
    remove(ptxt);
    tu_rmdir(pdir);
    remove(vec);
    tu_rmdir(dir);
    free(vec);
    free(ptxt);
    free(missing);
}

typedef struct taps {
    uint32_t hc_ffn, experts, last_layer;
} taps;

static void count(void *ud, const ds4ref_tap *t) {
    taps *c = ud;
    if (!strcmp(t->name, "hc_ffn")) {
        c->hc_ffn++;
        if (t->layer > c->last_layer) c->last_layer = t->layer;
    }
    if (!strcmp(t->name, "experts")) c->experts++;
}

static void test_taps(void **state) {
    fixture *f = *state;
    ds4ref_session *s;
    ds4ref_error e;
    assert_int_equal(ds4ref_session_new(f->m, NULL, &s, &e), 0);
    taps c = {0};
    ds4ref_set_tap(f->m, count, &c);
    int32_t toks[3] = {256, 1, 2};
    assert_int_equal(ds4ref_session_eval(s, toks, 3, NULL, &e), 0);
    ds4ref_set_tap(f->m, NULL, NULL);
    assert_int_equal(c.hc_ffn, 3 * 4);
    assert_int_equal(c.experts, 3 * 4);
    assert_int_equal(c.last_layer, 3);
    assert_int_equal(ds4ref_session_eval(s, toks, 1, NULL, &e), 0);
    assert_int_equal(c.hc_ffn, 12);
    ds4ref_session_free(s);
}

/* ------------------------------------------------------- tools' entry points */

/* Everything a call wrote to a FILE, NUL-terminated. */
typedef struct capture {
    FILE *f;
    char *p;
    size_t len;
} capture;

static void capture_open(capture *c) {
    c->p = NULL;
    c->len = 0;
    c->f = open_memstream(&c->p, &c->len);
    assert_non_null(c->f);
}

static void capture_close(capture *c) {
    assert_int_equal(fclose(c->f), 0);
    c->f = NULL;
}

static int same_file(const char *a, const char *b) {
    uint8_t *pa, *pb;
    size_t la, lb;
    if (tu_read_file(a, &pa, &la)) return 0;
    if (tu_read_file(b, &pb, &lb)) {
        free(pa);
        return 0;
    }
    int same = la == lb && memcmp(pa, pb, la) == 0;
    free(pa);
    free(pb);
    return same;
}

static void test_synth(void **state) {
    fixture *f = *state;
    ds4ref_error e;
    char *mtp;
    assert_int_equal(ds4ref_synth_mtp_path("dir/x.gguf", &mtp, &e), 0);
    assert_string_equal(mtp, "dir/x-mtp.gguf");
    ds4ref_free(mtp);
    assert_int_equal(ds4ref_synth_mtp_path("model", &mtp, &e), 0);
    assert_string_equal(mtp, "model-mtp.gguf");
    ds4ref_free(mtp);
    assert_int_equal(ds4ref_synth_mtp_path(NULL, &mtp, &e), DS4REF_E_ARG);
    assert_null(mtp);

    /* The same options give the same bytes; another seed other bytes. */
    char *again = tu_path(f->dir, "again.gguf"), *again_mtp = tu_path(f->dir, "again-mtp.gguf");
    ds4ref_synth_options o;
    ds4ref_synth_options_init(&o);
    assert_string_equal(o.config, "tiny");
    assert_int_equal(o.seed, 1);
    o.seed = 5;
    assert_int_equal(ds4ref_synth_write(&o, again, again_mtp, &e), 0);
    assert_int_equal(e.code, DS4REF_OK);
    assert_true(same_file(again, f->path));
    assert_true(same_file(again_mtp, f->mtp));
    o.seed = 6;
    assert_int_equal(ds4ref_synth_write(&o, again, NULL, &e), 0);
    assert_false(same_file(again, f->path));
    /* An F32 model opens with the same shape. */
    o.f32 = 1;
    assert_int_equal(ds4ref_synth_write(&o, again, NULL, &e), 0);
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = again;
    ds4ref_model *m;
    assert_int_equal(ds4ref_model_open(&mo, &m, &e), 0);
    ds4ref_model_info a, b;
    ds4ref_model_get_info(m, &a);
    ds4ref_model_get_info(f->m, &b);
    assert_int_equal(a.n_layer, b.n_layer);
    assert_int_equal(a.n_vocab, b.n_vocab);
    assert_false(a.has_mtp);
    ds4ref_model_close(m);

    /* Errors: unknown or no config, no path, a directory that does not
     * exist, a vocabulary that cannot be read. */
    o.config = "huge";
    assert_int_equal(ds4ref_synth_write(&o, again, NULL, &e), DS4REF_E_ARG);
    assert_int_equal(e.code, DS4REF_E_ARG);
    assert_non_null(strstr(e.message, "'huge'"));
    o.config = NULL;
    assert_int_equal(ds4ref_synth_write(&o, again, NULL, NULL), DS4REF_E_ARG);
    o.config = "tiny";
    assert_int_equal(ds4ref_synth_write(&o, NULL, NULL, &e), DS4REF_E_ARG);
    char *nodir = tu_path(f->dir, "nodir/x.gguf");
    assert_int_equal(ds4ref_synth_write(&o, nodir, NULL, &e), DS4REF_E_IO);
    assert_non_null(strstr(e.message, nodir));
    o.vocab_from = "/nonexistent/tokenizer.json";
    assert_int_equal(ds4ref_synth_write(&o, again, NULL, &e), DS4REF_E_IO);
    assert_non_null(strstr(e.message, "/nonexistent/tokenizer.json"));
    remove(again);
    remove(again_mtp);
    free(again);
    free(again_mtp);
    free(nodir);
}

static uint64_t file_size(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* The listing has the line "  key = VALUE..." with VALUE starting with want. */
static void assert_listed(const char *text, const char *key, const char *want) {
    char pat[128];
    snprintf(pat, sizeof(pat), "\n  %s = %s", key, want);
    if (!strstr(text, pat)) fail_msg("no line '%s...' in the listing", pat + 1);
}

/* One row of ds4ref_gguf_describe's tensor table:
 * "  NAME TYPE [ne0, ne1, ...] FILE_OFFSET BYTES". */
typedef struct listed_tensor {
    char name[128], type[16];
    uint64_t ne[4];     /* 1 past the listed dimensions */
    uint64_t offset, bytes;
} listed_tensor;

static void parse_tensor_line(const char *line, listed_tensor *t) {
    char dims[128];
    unsigned long long off, bytes;
    if (sscanf(line, "  %127s %15s [%127[^]]] %llu %llu", t->name, t->type, dims, &off, &bytes) != 5)
        fail_msg("bad tensor line: %.80s", line);
    t->offset = off;
    t->bytes = bytes;
    int d = 0;
    for (char *p = dims; *p; d++) {
        assert_true(d < 4);
        t->ne[d] = strtoull(p, &p, 10);
        assert_true(t->ne[d] > 0);
        while (*p == ',' || *p == ' ') p++;
    }
    assert_true(d > 0);
    for (; d < 4; d++) t->ne[d] = 1;
}

static void test_gguf_describe(void **state) {
    fixture *f = *state;
    ds4ref_error e;
    capture c;
    capture_open(&c);
    assert_int_equal(ds4ref_gguf_describe(f->path, c.f, &e), 0);
    capture_close(&c);
    /* The header line: path, counts and the file's size. */
    char head[512];
    unsigned long long n_kv, n_tensors, size;
    snprintf(head, sizeof(head), "== %s: GGUF v3, %%llu metadata keys, %%llu tensors, %%llu bytes\n",
             f->path);
    assert_int_equal(sscanf(c.p, head, &n_kv, &n_tensors, &size), 3);
    assert_int_equal(size, file_size(f->path));
    /* Metadata the model reports. */
    ds4ref_model_info in;
    ds4ref_model_get_info(f->m, &in);
    char want[64];
    snprintf(want, sizeof(want), "u32 %u\n", in.n_layer);
    assert_listed(c.p, "deepseek4.block_count", want);
    snprintf(want, sizeof(want), "u32 %u\n", in.n_embd);
    assert_listed(c.p, "deepseek4.embedding_length", want);
    snprintf(want, sizeof(want), "arr[str; %u] [", in.n_vocab);
    assert_listed(c.p, "tokenizer.ggml.tokens", want);
    /* Every metadata line, then the tensor table: one row per tensor, each
     * a tensor the model has, with the shape the model gives it. */
    const char *table = strstr(c.p, "\n  tensor ");
    assert_non_null(table);
    uint64_t keys = 0;
    for (const char *p = strchr(c.p, '\n') + 1; p < table; p = strchr(p, '\n') + 1) {
        const char *eq = strstr(p, " = ");
        keys += !strncmp(p, "  ", 2) && eq && eq < strchr(p, '\n');
    }
    assert_int_equal(keys, n_kv);
    uint64_t rows = 0;
    for (const char *p = strchr(table + 1, '\n') + 1; *p; p = strchr(p, '\n') + 1) {
        listed_tensor t;
        parse_tensor_line(p, &t);
        float *v;
        uint64_t ne[4];
        assert_int_equal(ds4ref_tensor_f32(f->m, t.name, &v, ne, &e), 0);
        ds4ref_free(v);
        for (int d = 0; d < 4; d++) assert_int_equal(ne[d], t.ne[d]);
        rows++;
    }
    assert_int_equal(rows, n_tensors);
    free(c.p);

    /* Errors: a missing file, a malformed one, a failed write, no output. */
    capture_open(&c);
    assert_int_equal(ds4ref_gguf_describe("/nonexistent/x.gguf", c.f, &e), DS4REF_E_IO);
    assert_non_null(strstr(e.message, "/nonexistent/x.gguf"));
    char *bad = tu_path(f->dir, "bad.gguf");
    FILE *b = fopen(bad, "wb");
    fputs("GGUFxxxx", b);
    fclose(b);
    assert_int_equal(ds4ref_gguf_describe(bad, c.f, &e), DS4REF_E_FORMAT);
    assert_int_equal(e.code, DS4REF_E_FORMAT);
    capture_close(&c);
    assert_int_equal(c.len, 0);
    free(c.p);
    assert_int_equal(ds4ref_gguf_describe(f->path, NULL, &e), DS4REF_E_ARG);
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        assert_int_equal(ds4ref_gguf_describe(f->path, full, &e), DS4REF_E_IO);
        assert_non_null(strstr(e.message, "output: write failed"));
        fclose(full);
    }
    remove(bad);
    free(bad);
}

/* ggml type names as ds4ref_gguf_describe lists them. */
static uint32_t listed_type(const char *name) {
    static const struct { const char *name; uint32_t id; } types[] = {
        {"f32", RQ_F32}, {"f16", RQ_F16}, {"bf16", RQ_BF16}, {"q8_0", RQ_Q8_0},
        {"q2_K", RQ_Q2_K}, {"q4_K", RQ_Q4_K}, {"iq2_xxs", RQ_IQ2_XXS}, {"i32", RQ_I32},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcmp(types[i].name, name)) return types[i].id;
    fail_msg("unexpected type %s", name);
    return 0;
}

/* ds4ref_gguf_dequant's bytes for `name` against an independent decode: the
 * tensor's bytes read from the file at the offset the listing gives,
 * decoded element by element by tests/refquant.c (not by the library's
 * dequantizer), written little-endian.  From the base file, the model's
 * ds4ref_tensor_f32 must give the same values and shape. */
static void check_dequant(const fixture *f, const char *path, const char *name,
                          const char *want_type) {
    ds4ref_error e;
    capture c;
    capture_open(&c);
    assert_int_equal(ds4ref_gguf_describe(path, c.f, &e), 0);
    capture_close(&c);
    char key[160];
    snprintf(key, sizeof(key), "\n  %s ", name);
    const char *line = strstr(c.p, key);
    if (!line) fail_msg("%s is not listed", name);
    listed_tensor t;
    parse_tensor_line(line + 1, &t);
    free(c.p);
    assert_string_equal(t.type, want_type);
    uint32_t type = listed_type(t.type);
    size_t n = (size_t)(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]);
    assert_int_equal(t.bytes, n / rq_block_elems(type) * rq_block_bytes(type));
    uint8_t *raw = malloc(t.bytes), *want = malloc(4 * n);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, (long)t.offset, SEEK_SET), 0);
    assert_int_equal(fread(raw, 1, t.bytes, fp), t.bytes);
    fclose(fp);
    for (size_t i = 0; i < n; i++) {
        float x = rq_elem(type, raw, i);
        uint32_t u;
        memcpy(&u, &x, 4);
        for (int k = 0; k < 4; k++) want[4 * i + (size_t)k] = (uint8_t)(u >> 8 * k);
    }
    capture_open(&c);
    assert_int_equal(ds4ref_gguf_dequant(path, name, c.f, &e), 0);
    capture_close(&c);
    assert_int_equal(c.len, 4 * n);
    assert_memory_equal(c.p, want, 4 * n);
    free(c.p);
    float *v;
    uint64_t ne[4];
    assert_int_equal(ds4ref_tensor_f32(f->m, name, &v, ne, &e), 0);
    for (int d = 0; d < 4; d++) assert_int_equal(ne[d], t.ne[d]);
    assert_memory_equal(v, want, 4 * n);   /* little-endian host (x86-64, aarch64) */
    ds4ref_free(v);
    free(raw);
    free(want);
}

static void test_gguf_dequant(void **state) {
    fixture *f = *state;
    /* One tensor of every type of the ds4 mix, and one of the MTP file. */
    check_dequant(f, f->path, "token_embd.weight", "f16");
    check_dequant(f, f->path, "output_norm.weight", "f32");
    check_dequant(f, f->path, "output.weight", "q8_0");
    check_dequant(f, f->path, "blk.0.ffn_gate_exps.weight", "iq2_xxs");
    check_dequant(f, f->path, "blk.0.ffn_down_exps.weight", "q2_K");
    check_dequant(f, f->path, "blk.0.ffn_gate_tid2eid.weight", "i32");
    check_dequant(f, f->mtp, "mtp.0.enorm.weight", "f32");
    ds4ref_error e;
    capture c;
    capture_open(&c);
    assert_int_equal(ds4ref_gguf_dequant(f->path, "no.such.tensor", c.f, &e), DS4REF_E_ARG);
    assert_non_null(strstr(e.message, "no tensor named 'no.such.tensor'"));
    assert_int_equal(ds4ref_gguf_dequant(f->mtp, "output.weight", c.f, &e), DS4REF_E_ARG);
    assert_int_equal(ds4ref_gguf_dequant("/nonexistent/x.gguf", "output.weight", c.f, &e),
                     DS4REF_E_IO);
    assert_int_equal(ds4ref_gguf_dequant(f->path, NULL, c.f, &e), DS4REF_E_ARG);
    capture_close(&c);
    assert_int_equal(c.len, 0);
    free(c.p);
}

/* A greedy golden of 24 steps from `m` (ids recorded in *r). */
static void make_golden(ds4ref_model *m, const char *golden, const char *dump, rec *r) {
    ds4ref_session *s;
    ds4ref_error e;
    assert_int_equal(ds4ref_session_new(m, NULL, &s, &e), 0);
    int32_t prompt[6] = {256, 258, 72, 105, 259, 261};
    ds4ref_generate_options go;
    ds4ref_generate_options_init(&go);
    go.n_tokens = 24;
    go.stop_at_eos = 0;
    go.golden_path = golden;
    go.dump_path = dump;
    memset(r, 0, sizeof(*r));
    if (ds4ref_generate(s, prompt, 6, &go, record, r, &e)) fail_msg("%s", e.message);
    ds4ref_session_free(s);
}

static void test_diff(void **state) {
    fixture *f = *state;
    char *g1 = tu_path(f->dir, "a.jsonl"), *g2 = tu_path(f->dir, "b.jsonl");
    char *d1 = tu_path(f->dir, "a.json");
    rec r1, r2;
    make_golden(f->m, g1, d1, &r1);
    /* The same model without the QAT rounding: other numbers. */
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = f->path;
    mo.qat = 0;
    ds4ref_model *m;
    ds4ref_error e;
    assert_int_equal(ds4ref_model_open(&mo, &m, &e), 0);
    make_golden(m, g2, NULL, &r2);
    ds4ref_model_close(m);

    /* Identical files: exact, nothing violated, PASS. */
    ds4check_diff_options o;
    ds4check_diff_options_init(&o);
    o.exact = 1;
    o.max_dlogprob = 0;
    o.min_top1 = 1;
    ds4check_diff_result res;
    capture c;
    capture_open(&c);
    assert_int_equal(ds4check_diff_files(g1, g1, &o, c.f, &res, &e), 0);
    capture_close(&c);
    assert_int_equal(res.violations, 0);
    assert_true(res.exact);
    assert_false(res.prompt_differs);
    assert_int_equal(res.first_divergence, -1);
    assert_int_equal(res.n_steps_a, 24);
    assert_int_equal(res.n_steps_b, 24);
    assert_int_equal(res.n_compared, 24);
    assert_true(res.top1 == 1 && res.max_dlogprob == 0);
    assert_non_null(strstr(c.p, "exact=yes"));
    assert_non_null(strstr(c.p, "\nresult: PASS\n"));
    free(c.p);

    /* The same stream as a ds4 dump: the tokens, not the bits. */
    ds4check_diff_options_init(&o);
    o.min_top1 = 1;
    assert_int_equal(ds4check_diff_files(g1, d1, &o, NULL, &res, &e), 0);
    assert_int_equal(res.violations, 0);
    assert_int_equal(res.first_divergence, -1);
    assert_true(res.max_dlogprob < 1e-6);

    /* Different numbers: not exact, --exact violated, FAIL; the divergence
     * is where the recorded tokens first differ. */
    int64_t first = -1;
    for (uint32_t i = 0; i < 24 && first < 0; i++)
        if (r1.ids[i] != r2.ids[i]) first = i;
    ds4check_diff_options_init(&o);
    o.exact = 1;
    capture_open(&c);
    assert_int_equal(ds4check_diff_files(g1, g2, &o, c.f, &res, &e), 0);
    capture_close(&c);
    assert_int_equal(res.violations, 1);
    assert_false(res.exact);
    assert_int_equal(res.first_divergence, first);
    assert_true(res.max_dlogprob > 0);
    assert_non_null(strstr(c.p, "note: settings differ: qat 1 vs 0"));
    assert_non_null(strstr(c.p, "\nresult: FAIL\n  violated: --exact"));
    size_t full_len = c.len;
    free(c.p);
    /* Quiet: no per-step lines; JSON: one object with the verdict. */
    o.quiet = 1;
    capture_open(&c);
    assert_int_equal(ds4check_diff_files(g1, g2, &o, c.f, &res, &e), 0);
    capture_close(&c);
    assert_true(c.len < full_len);
    assert_null(strstr(c.p, "\n   0 "));
    free(c.p);
    o.json = 1;
    capture_open(&c);
    assert_int_equal(ds4check_diff_files(g1, g2, &o, c.f, &res, &e), 0);
    capture_close(&c);
    assert_true(c.len > 0 && c.p[0] == '{');
    assert_null(strstr(c.p, "result: FAIL"));
    free(c.p);
    /* A threshold that holds: nothing violated; NAN is no threshold. */
    ds4check_diff_options_init(&o);
    o.max_dlogprob = 1e9;
    o.max_kl = NAN;
    assert_int_equal(ds4check_diff_files(g1, g2, &o, NULL, &res, &e), 0);
    assert_int_equal(res.violations, 0);
    assert_int_equal(ds4check_diff_files(g1, g2, NULL, NULL, NULL, &e), 0);

    /* Errors: a missing file, a malformed one, an unknown .vec case. */
    assert_int_equal(ds4check_diff_files(g1, "/nonexistent/b.jsonl", &o, NULL, &res, &e),
                     DS4REF_E_IO);
    assert_non_null(strstr(e.message, "/nonexistent/b.jsonl"));
    char *bad = tu_path(f->dir, "bad.vec");
    FILE *b = fopen(bad, "wb");
    fputs("GGUFxxxx", b);
    fclose(b);
    assert_int_equal(ds4check_diff_files(bad, g1, &o, NULL, &res, &e), DS4REF_E_FORMAT);
    o.case_id = "nope";
    assert_int_equal(ds4check_diff_files(g1, "vectors/tiny.vec", &o, NULL, &res, &e),
                     DS4REF_E_ARG);
    assert_int_equal(ds4check_diff_files(NULL, g1, &o, NULL, &res, &e), DS4REF_E_ARG);
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        assert_int_equal(ds4check_diff_files(g1, g2, NULL, full, &res, &e), DS4REF_E_IO);
        assert_non_null(strstr(e.message, "cannot write the report"));
        fclose(full);
    }
    remove(g1);
    remove(g2);
    remove(d1);
    remove(bad);
    free(g1);
    free(g2);
    free(d1);
    free(bad);
}

/* The logits of ids under a profile, evaluated in chunks of `chunk` on
 * `threads` threads (malloc'd [n][n_vocab]). */
static float *profile_logits(const fixture *f, const char *numerics, const int32_t *ids,
                             uint32_t n, uint32_t chunk, int threads) {
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = f->path;
    mo.numerics = numerics;
    ds4ref_model *m;
    ds4ref_error e;
    if (ds4ref_model_open(&mo, &m, &e)) fail_msg("%s", e.message);
    ds4ref_model_info in;
    ds4ref_model_get_info(m, &in);
    float *lg = malloc(sizeof(float) * n * in.n_vocab);
    ds4ref_set_threads(threads);
    ds4ref_session_options so = {.chunk = chunk};
    ds4ref_session *s;
    assert_int_equal(ds4ref_session_new(m, &so, &s, &e), 0);
    assert_int_equal(ds4ref_session_eval(s, ids, n, lg, &e), 0);
    ds4ref_session_free(s);
    ds4ref_model_close(m);
    ds4ref_set_threads(0);
    return lg;
}

/* A numerics profile moves the logits off the official ones (by a
 * rounding's worth) and stays as invariant as they are:
 * the same bits in one pass or in chunks of 3, on 1 or 4 threads.  An
 * unknown profile is refused by name. */
static void test_numerics_profiles(void **state) {
    fixture *f = *state;
    if (getenv("DS4REF_VALGRIND")) {
        /* Nine models and ten passes: minutes under valgrind, and the
         * code is the same as the plain run's. */
        tu_skipping("too slow under valgrind; the plain run covers it");
        skip();
    }
    ds4ref_model_info in;
    ds4ref_model_get_info(f->m, &in);
    enum { N = 40 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 53 + 11) % in.n_vocab);
    size_t bytes = sizeof(float) * N * in.n_vocab;
    float *off = profile_logits(f, NULL, ids, N, 256, 2);
    static const char *const profiles[] = {"ggml-act", "ds4", "f16-kv", "jitter"};
    for (size_t p = 0; p < sizeof(profiles) / sizeof(profiles[0]); p++) {
        float *a = profile_logits(f, profiles[p], ids, N, 256, 1);
        float *b = profile_logits(f, profiles[p], ids, N, 3, 4);
        assert_memory_equal(a, b, bytes);
        double worst = 0;
        for (size_t i = 0; i < (size_t)N * in.n_vocab; i++) {
            double d = fabs((double)a[i] - off[i]);
            if (!(d <= worst)) worst = d;   /* a NaN sticks */
        }
        /* Moved, and by a rounding's worth (the tiny model's logits span
         * tens), not garbage. */
        if (!(worst > 0 && worst < 8)) fail_msg("%s: max |dlogit| %g from the official", profiles[p], worst);
        free(a);
        free(b);
    }
    free(off);
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = f->path;
    mo.numerics = "ggml";
    ds4ref_model *m = NULL;
    ds4ref_error e;
    assert_int_equal(ds4ref_model_open(&mo, &m, &e), DS4REF_E_ARG);
    assert_null(m);
    assert_non_null(strstr(e.message, "\"ggml\""));
}

/* More threads after a first evaluation: the per-thread scratch must grow
 * with them (it once kept the first count and overran under valgrind and
 * ASan), and the logits stay the same bits.  ds4ref_set_threads(0) goes back
 * to OpenMP's default. */
static void test_threads_grow(void **state) {
    fixture *f = *state;
    ds4ref_model_info in;
    ds4ref_model_get_info(f->m, &in);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (int32_t)((i * 37 + 5) % in.n_vocab);
    float *a = malloc(sizeof(float) * 40 * in.n_vocab), *b = malloc(sizeof(float) * 40 * in.n_vocab);
    ds4ref_error e;
    ds4ref_session *s;
    ds4ref_set_threads(1);
    assert_int_equal(ds4ref_session_new(f->m, NULL, &s, &e), 0);
    assert_int_equal(ds4ref_session_eval(s, ids, 40, a, &e), 0);
    ds4ref_session_free(s);
    ds4ref_set_threads(4);
    assert_int_equal(ds4ref_session_new(f->m, NULL, &s, &e), 0);
    assert_int_equal(ds4ref_session_eval(s, ids, 40, b, &e), 0);
    ds4ref_session_free(s);
    assert_memory_equal(a, b, sizeof(float) * 40 * in.n_vocab);
    ds4ref_set_threads(0);
    free(a);
    free(b);
}

/* ds4ref_read_file and the logits file: a round trip whose bytes are the
 * values' little-endian encodings written out by hand, an aborted write that
 * leaves the old file, and errors that name the path; a file's SHA-256. */
static void test_files(void **state) {
    fixture *f = *state;
    char *path = tu_path(f->dir, "out.bin"), *missing = tu_path(f->dir, "no/such/dir/out.bin");
    ds4ref_error e;
    ds4ref_logits_file *o;
    const float rows[2][2] = {{1.0f, -2.0f}, {0.5f, 0x1p-149f}};
    const unsigned char want[16] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0,
                                    0x00, 0x00, 0x00, 0x3f, 0x01, 0x00, 0x00, 0x00};
    assert_int_equal(ds4ref_logits_open(path, 2, &o, &e), 0);
    assert_int_equal(ds4ref_logits_write(o, rows[0], 1, &e), 0);
    assert_int_equal(ds4ref_logits_write(o, rows[1], 1, &e), 0);
    assert_int_equal(ds4ref_logits_commit(o, &e), 0);
    char *data;
    size_t len;
    assert_int_equal(ds4ref_read_file(path, &data, &len, &e), 0);
    assert_int_equal(len, 16);
    assert_memory_equal(data, want, 16);
    assert_int_equal(data[16], '\0');
    ds4ref_free(data);

    /* Aborted: the target keeps its old bytes and no temporary file stays. */
    assert_int_equal(ds4ref_logits_open(path, 2, &o, &e), 0);
    assert_int_equal(ds4ref_logits_write(o, rows[1], 1, &e), 0);
    ds4ref_logits_abort(o);
    assert_int_equal(ds4ref_read_file(path, &data, &len, &e), 0);
    assert_int_equal(len, 16);
    ds4ref_free(data);
    assert_int_equal(tu_count_entries(f->dir), 3);   /* tiny.gguf, tiny-mtp.gguf, out.bin */

    /* Errors name the file and come before anything is written. */
    assert_int_equal(ds4ref_logits_open(missing, 2, &o, &e), DS4REF_E_IO);
    assert_null(o);
    assert_non_null(strstr(e.message, missing));
    assert_int_equal(ds4ref_logits_open(path, 0, &o, &e), DS4REF_E_ARG);
    assert_int_equal(ds4ref_read_file(missing, &data, &len, &e), DS4REF_E_IO);
    assert_non_null(strstr(e.message, missing));

    /* ds4ref_file_sha256: FIPS 180-2's vectors ("abc"; a million 'a'), a
     * cancelled digest, a missing file named. */
    char hex[65];
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs("abc", fp);
    fclose(fp);
    assert_int_equal(ds4ref_file_sha256(path, hex, NULL, &e), 0);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    fp = fopen(path, "wb");
    assert_non_null(fp);
    for (int i = 0; i < 1000000; i++) fputc('a', fp);
    fclose(fp);
    assert_int_equal(ds4ref_file_sha256(path, hex, NULL, &e), 0);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    const volatile int stop = 1;
    assert_int_equal(ds4ref_file_sha256(path, hex, &stop, &e), DS4REF_E_INTERRUPTED);
    assert_int_equal(ds4ref_file_sha256(missing, hex, NULL, &e), DS4REF_E_IO);
    assert_non_null(strstr(e.message, missing));
    remove(path);
    free(path);
    free(missing);
}

/* ---------------------------------------------------------------- UTF-8 */

/* The UTF-8 encoding of a scalar value, from its bits; 0 for a surrogate or
 * beyond U+10FFFF. */
static size_t utf8_encode(uint32_t cp, uint8_t out[4]) {
    if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    size_t len = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const uint8_t lead[5] = {0, 0, 0xc0, 0xe0, 0xf0};
    for (size_t i = len - 1; i > 0; i--, cp >>= 6) out[i] = (uint8_t)(0x80 | (cp & 0x3f));
    out[0] = (uint8_t)(lead[len] | cp);
    return len;
}

/* Which sequences of up to three bytes are encodings, indexed by their
 * bytes big-endian (one table per length). */
typedef struct utf8_tables {
    uint8_t one[256], two[65536], *three;   /* three: a bit per 24-bit index */
} utf8_tables;

static bool is_encoding(const utf8_tables *t, const uint8_t *s, size_t len) {
    if (len == 1) return t->one[s[0]];
    if (len == 2) return t->two[s[0] << 8 | s[1]];
    if (len == 3) {
        uint32_t i = (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2];
        return t->three[i >> 3] >> (i & 7) & 1;
    }
    /* Four bytes: the encoding of the value their payload bits spell. */
    uint32_t cp = (uint32_t)(s[0] & 7) << 18 | (uint32_t)(s[1] & 63) << 12 |
                  (uint32_t)(s[2] & 63) << 6 | (s[3] & 63);
    uint8_t e[4];
    return utf8_encode(cp, e) == 4 && !memcmp(e, s, 4);
}

/* What ds4ref_utf8_char must say of s[0..n): UTF-8 has no encoding that
 * begins another, so at most one prefix is one. */
static size_t utf8_expected(const utf8_tables *t, const uint8_t *s, size_t n) {
    for (size_t len = 1; len <= n && len <= 4; len++)
        if (is_encoding(t, s, len)) return len;
    return 0;
}

/* ds4ref_utf8_char against the definition of well-formed: exactly the
 * encodings of the scalar values (U+0000..U+10FFFF but the surrogates).
 * Every encoding is found whole, with bytes after it too, and never when
 * cut short; of every string of one or two bytes, every three-byte string
 * that begins like a three-byte character and the four-byte strings of every
 * lead F0..F7 and second byte, only a prefix that is an encoding is taken. */
static void test_utf8_char(void **state) {
    (void)state;
    utf8_tables *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    t->three = calloc(1 << 21, 1);
    assert_non_null(t->three);
    uint8_t e[8];
    for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
        size_t len = utf8_encode(cp, e);
        if (len == 1) t->one[e[0]] = 1;
        if (len == 2) t->two[e[0] << 8 | e[1]] = 1;
        if (len == 3) {
            uint32_t i = (uint32_t)e[0] << 16 | (uint32_t)e[1] << 8 | e[2];
            t->three[i >> 3] |= (uint8_t)(1u << (i & 7));
        }
        if (!len) continue;
        memset(e + len, 'x', sizeof(e) - len);
        if (ds4ref_utf8_char(e, len) != len || ds4ref_utf8_char(e, sizeof(e)) != len ||
            ds4ref_utf8_char(e, len - 1) != 0)
            fail_msg("U+%04X", cp);
    }
    uint8_t s[4];
    for (uint32_t v = 0; v < 65536; v++) {
        s[0] = (uint8_t)(v >> 8);
        s[1] = (uint8_t)v;
        assert_int_equal(ds4ref_utf8_char(s, 1), utf8_expected(t, s, 1));
        assert_int_equal(ds4ref_utf8_char(s, 2), utf8_expected(t, s, 2));
    }
    for (uint32_t v = 0xe00000; v <= 0xefffff; v++) {
        s[0] = (uint8_t)(v >> 16);
        s[1] = (uint8_t)(v >> 8);
        s[2] = (uint8_t)v;
        if (ds4ref_utf8_char(s, 3) != utf8_expected(t, s, 3)) fail_msg("%06x", v);
    }
    static const uint8_t tails[] = {0x7f, 0x80, 0xbf, 0xc0};
    for (uint32_t v = 0xf000; v <= 0xf7ff; v++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
                s[0] = (uint8_t)(v >> 8);
                s[1] = (uint8_t)v;
                s[2] = tails[a];
                s[3] = tails[b];
                if (ds4ref_utf8_char(s, 4) != utf8_expected(t, s, 4))
                    fail_msg("%02x %02x %02x %02x", s[0], s[1], s[2], s[3]);
            }
    assert_int_equal(ds4ref_utf8_char(NULL, 4), 0);
    assert_int_equal(ds4ref_utf8_char(s, 0), 0);
    free(t->three);
    free(t);
}

/* Serving's primitives against what they promise to equal: rows evaluated
 * together give each row's logits of ds4ref_session_eval alone, a row
 * joining at any point included; a sampler drawn step by step from the
 * logits gives ds4ref_generate's sampled stream; one user turn as a
 * conversation is ds4ref_chat_prompt's ids. */
static void test_serving(void **state) {
    fixture *f = *state;
    ds4ref_model_info info;
    ds4ref_model_get_info(f->m, &info);
    const size_t V = info.n_vocab;
    ds4ref_error e;
    ds4ref_session *a, *b, *alone;
    assert_int_equal(ds4ref_session_new(f->m, NULL, &a, &e), 0);
    assert_int_equal(ds4ref_session_new(f->m, NULL, &b, &e), 0);
    assert_int_equal(ds4ref_session_new(f->m, NULL, &alone, &e), 0);
    const int32_t pa[5] = {256, 258, 72, 105, 259}, pb[3] = {256, 300, 301};
    float *la = malloc(sizeof(float) * V * 5), *lb = malloc(sizeof(float) * V * 3);
    float *want = malloc(sizeof(float) * V * 5);
    assert_true(la && lb && want);
    /* a's prompt alone first, then a's next token with b's whole prompt. */
    ds4ref_session *one[1] = {a};
    const int32_t *ids1[1] = {pa};
    size_t n1[1] = {4};
    float *lg1[1] = {la};
    assert_int_equal(ds4ref_session_eval_many(one, ids1, n1, 1, lg1, &e), 0);
    ds4ref_session *two[2] = {a, b};
    const int32_t *ids2[2] = {pa + 4, pb};
    size_t n2[2] = {1, 3};
    float *lg2[2] = {la + 4 * V, lb};
    assert_int_equal(ds4ref_session_eval_many(two, ids2, n2, 2, lg2, &e), 0);
    assert_int_equal(ds4ref_session_eval(alone, pa, 5, want, &e), 0);
    assert_memory_equal(la, want, sizeof(float) * V * 5);
    ds4ref_session_free(alone);
    assert_int_equal(ds4ref_session_new(f->m, NULL, &alone, &e), 0);
    assert_int_equal(ds4ref_session_eval(alone, pb, 3, want, &e), 0);
    assert_memory_equal(lb, want, sizeof(float) * V * 3);
    /* A bad token in one row evaluates nothing. */
    const int32_t bad[1] = {(int32_t)V};
    const int32_t *ids3[2] = {pa, bad};
    size_t n3[2] = {1, 1};
    assert_int_not_equal(ds4ref_session_eval_many(two, ids3, n3, 2, NULL, &e), 0);
    assert_int_equal(ds4ref_session_pos(a), 5);
    assert_int_equal(ds4ref_session_pos(b), 3);
    assert_int_equal(ds4ref_session_eval_many(two, ids3, n3, 0, NULL, &e), DS4REF_E_ARG);

    /* Sampling: 8 tokens at temperature 0.8, seed 11, both ways. */
    ds4ref_generate_options go;
    ds4ref_generate_options_init(&go);
    go.n_tokens = 8;
    go.stop_at_eos = 0;
    go.temperature = 0.8;
    go.seed = 11;
    rec gen = {0};
    assert_int_equal(ds4ref_generate(alone, pa, 5, &go, record, &gen, &e), 0);
    ds4ref_sampler sm;
    ds4ref_sampler_init(&sm, 11);
    ds4ref_session_free(alone);
    assert_int_equal(ds4ref_session_new(f->m, NULL, &alone, &e), 0);
    assert_int_equal(ds4ref_session_eval(alone, pa, 5, want, &e), 0);
    const float *last = want + 4 * V;
    for (uint32_t i = 0; i < 8; i++) {
        int32_t id;
        assert_int_equal(ds4ref_sample(f->m, &sm, last, 0.8, &id, &e), 0);
        assert_int_equal(id, gen.ids[i]);
        assert_int_equal(ds4ref_session_eval(alone, &id, 1, want, &e), 0);
        last = want;
    }
    assert_int_equal(ds4ref_sample(f->m, &sm, last, 0.0, &(int32_t){0}, &e), DS4REF_E_ARG);
    /* A token's logprob is its entry among the top alternatives. */
    ds4ref_logprob top[3];
    uint32_t nt;
    assert_int_equal(ds4ref_top_logprobs(f->m, last, 3, top, &nt, &e), 0);
    for (uint32_t i = 0; i < nt; i++) {
        double lp;
        assert_int_equal(ds4ref_token_logprob(f->m, last, top[i].id, &lp, &e), 0);
        assert_memory_equal(&lp, &top[i].logprob, sizeof(lp));
    }
    assert_int_equal(ds4ref_token_logprob(f->m, last, (int32_t)V, &(double){0}, &e), DS4REF_E_RANGE);

    /* One user turn. */
    int32_t *c1, *c2;
    size_t k1, k2;
    ds4ref_chat_options co = {0};
    assert_int_equal(ds4ref_chat_prompt(f->m, "Hello there", 11, &co, &c1, &k1, &e), 0);
    ds4ref_chat_message msg = {DS4REF_CHAT_USER, "Hello there", 11};
    assert_int_equal(ds4ref_chat_messages(f->m, &msg, 1, &co, &c2, &k2, &e), 0);
    assert_int_equal(k1, k2);
    assert_memory_equal(c1, c2, sizeof(int32_t) * k1);
    ds4ref_free(c2);
    /* A system turn, a finished assistant turn and a user turn: longer,
     * starting with the same BOS; an unknown role is refused by position. */
    ds4ref_chat_message conv[3] = {{DS4REF_CHAT_SYSTEM, "Be brief.", 9},
                                   {DS4REF_CHAT_ASSISTANT, "Hi.", 3},
                                   {DS4REF_CHAT_USER, "Hello there", 11}};
    assert_int_equal(ds4ref_chat_messages(f->m, conv, 3, &co, &c2, &k2, &e), 0);
    assert_true(k2 > k1 + 4 && c2[0] == c1[0]);
    ds4ref_free(c2);
    conv[1].role = 7;
    assert_int_equal(ds4ref_chat_messages(f->m, conv, 3, &co, &c2, &k2, &e), DS4REF_E_ARG);
    assert_non_null(strstr(e.message, "message 1"));
    ds4ref_free(c1);
    free(la), free(lb), free(want);
    ds4ref_session_free(a);
    ds4ref_session_free(b);
    ds4ref_session_free(alone);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_errors),       cmocka_unit_test(test_qat_off_only),
        cmocka_unit_test(test_info_and_tokenizer),
        cmocka_unit_test(test_tensor),            cmocka_unit_test(test_sessions),
        cmocka_unit_test(test_generate),          cmocka_unit_test(test_progress),
        cmocka_unit_test(test_outputs_first),     cmocka_unit_test(test_taps),
        cmocka_unit_test(test_synth),             cmocka_unit_test(test_gguf_describe),
        cmocka_unit_test(test_gguf_dequant),      cmocka_unit_test(test_diff),
        cmocka_unit_test(test_files),             cmocka_unit_test(test_threads_grow),
        cmocka_unit_test(test_numerics_profiles),
        cmocka_unit_test(test_utf8_char),         cmocka_unit_test(test_serving),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
