/* The public API (include/ds4ref.h), used only through that header: every
 * entry point, its error paths, and the equalities it promises (logits of an
 * earlier position recomputed exactly, speculative and batched generation
 * equal to plain greedy). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ds4ref.h"

/* The one internal call: making a model to test with. */
#include "synth.h"
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
    ds4err err = {0};
    ds4_synth_opts o = {.config = "tiny", .seed = 5};
    if (ds4_synth_write(&o, f->path, f->mtp, &err)) fail_msg("%s", err.msg);
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = f->path;
    mo.mtp_path = f->mtp;
    ds4ref_error e;
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
}

static void test_tensor(void **state) {
    fixture *f = *state;
    float *v;
    uint64_t ne[4];
    ds4ref_error e;
    assert_int_equal(ds4ref_tensor_f32(f->m, "output_hc_base.weight", &v, ne, &e), 0);
    assert_int_equal(ne[0], 4);
    ds4ref_free(v);
    assert_int_equal(ds4ref_tensor_f32(f->m, "mtp.0.enorm.weight", &v, ne, &e), 0);
    assert_int_equal(ne[0], 256);
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
    go.n_tokens = 24;
    go.stop_at_eos = 0;
    rec plain = {0}, spec = {0};
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &plain, &e), 0);
    assert_int_equal(plain.n, 24);
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
    /* Speculation without an MTP head, and an empty prompt, are refused. */
    go.mtp_draft = 17;
    assert_int_equal(ds4ref_generate(s, prompt, 6, &go, record, &spec, &e), DS4REF_E_ARG);
    go.mtp_draft = 0;
    assert_int_equal(ds4ref_generate(s, prompt, 0, &go, NULL, NULL, &e), DS4REF_E_ARG);
    ds4ref_session_free(s);
    ds4ref_session_free(s2);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_errors),       cmocka_unit_test(test_info_and_tokenizer),
        cmocka_unit_test(test_tensor),            cmocka_unit_test(test_sessions),
        cmocka_unit_test(test_generate),          cmocka_unit_test(test_taps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
