/* Golden streams (ref/format/golden.h), the ds4 dump layout (ref/format/dump.h), the
 * atomic writer (base/file.h) and model identities (ref/model/modelid.h).
 *
 * The expected file texts below are written out by hand from
 * docs/FORMATS.md, not produced by the code under test; digests are checked
 * against known constants or against SHA-256 of independently assembled
 * byte strings. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/hex.h"
#include "base/sha256.h"
#include "ref/decode/step.h"
#include "ref/model/modelid.h"
#include "quant/gguf.h"
#include "quant/gguf_write.h"
#include "testutil.h"
#include "ref/format/dump.h"
#include "ref/format/golden.h"
#include "ref/format/golden_read.h"
#include "ref/format/golden_write.h"
#include "ref/run/run.h"

/* ------------------------------------------------------------ fixtures */

/* Token bytes for the fake vocabulary. */
static int fake_bytes(void *ud, int32_t id, ds4_buf *out, ds4err *err) {
    (void)ud;
    static const struct {
        int32_t id;
        const char *s;
        size_t n;
    } v[] = {
        {1, "Ada", 3},
        {2, " Lov", 4},
        {3, "\"q\\\n", 4},
        {4, "\xff\xfe", 2},
        {5, "\xc3\xa9", 2},
        {6, "\x00\x01\x7f", 3},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (v[i].id == id) return ds4_buf_put(out, v[i].s, v[i].n);
    if (id >= 1000) return ds4_err_set(err, DS4_E_RANGE, "fake vocabulary: no token %d", id);
    char s[16];
    snprintf(s, sizeof(s), "t%d", id);
    return ds4_buf_puts(out, s);
}

static const char empty_sha256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/* A header whose model has no tensors (its tensor digest is then SHA-256 of
 * nothing, a known constant). */
static void small_header(ds4_golden_header *h, uint32_t top_k, uint32_t max_steps) {
    static int32_t prompt[] = {0, 17, 42};
    memset(h, 0, sizeof(*h));
    snprintf(h->version, sizeof(h->version), "0.1-test");
    h->model.file = "m.gguf";
    h->model.size = 1234;
    memset(h->model.metadata_sha256, 0x11, 32);
    assert_int_equal(ds4_hex_decode(empty_sha256, 64, h->model.tensor_data_sha256), 0);
    h->settings = (ds4_golden_settings){.qat = true, .ctx = 4096, .chunk = 512, .top_k = top_k,
                                        .max_steps = max_steps, .mtp_draft = 0,
                                        .stop_at_eos = true};
    h->n_prompt = 3;
    h->prompt = prompt;
    h->has_prompt_text = true;
    h->prompt_text = (uint8_t *)"Hi";
    h->n_prompt_text = 2;
}

typedef struct gen {
    ds4_gen_step st;
    int32_t ids[16];
    float logits[16];
    double lps[16];
} gen;

/* A generation step whose greedy token is ids[0] (as step.c makes it). */
static void make_gen(gen *g, uint32_t n, const int32_t *ids, const float *logits,
                     const double *lps, uint8_t digest_byte) {
    memset(g, 0, sizeof(*g));
    memcpy(g->ids, ids, n * sizeof(int32_t));
    memcpy(g->logits, logits, n * sizeof(float));
    memcpy(g->lps, lps, n * sizeof(double));
    g->st.token = ids[0];
    g->st.logit = logits[0];
    g->st.logprob = lps[0];
    g->st.n_top = n;
    g->st.top_ids = g->ids;
    g->st.top_logits = g->logits;
    g->st.top_logprobs = g->lps;
    memset(g->st.digest, digest_byte, 32);
}

/* A generation step into a golden writer, as the golden runner records it. */
static int write_gen(ds4_golden_writer *w, const ds4_gen_step *gs, ds4err *err) {
    ds4_golden_step st;
    int rc = ds4_run_step_golden(gs, fake_bytes, NULL, &st, err);
    if (rc == 0) rc = ds4_golden_writer_step(w, &st, err);
    ds4_golden_step_free(&st);
    return rc;
}

/* The two steps of the hand-written example. */
static void example_steps(gen s[2]) {
    make_gen(&s[0], 2, (int32_t[]){1, 4}, (float[]){12.5f, 0.1f}, (double[]){-0.25, -0.1},
             0x22);
    make_gen(&s[1], 2, (int32_t[]){3, 6}, (float[]){3.0f, 3.0f},
             (double[]){-4.9406564584124654e-324, -1.5}, 0x33);
}

#define H11 "1111111111111111111111111111111111111111111111111111111111111111"
#define H22 "2222222222222222222222222222222222222222222222222222222222222222"
#define H33 "3333333333333333333333333333333333333333333333333333333333333333"

static const char example_golden[] =
    "{\"format\":\"ds4ref-golden-v1\",\"ds4ref_version\":\"0.1-test\",\"model\":{\"file\":"
    "\"m.gguf\",\"size\":1234,\"metadata_sha256\":\"" H11 "\",\"tensor_data_sha256\":"
    "\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\"tensors\":[],"
    "\"mtp\":null},\"settings\":{\"qat\":true,\"ctx\":4096,\"chunk\":512,\"top_k\":2,"
    "\"max_steps\":2,\"mtp_draft\":0,\"stop_at_eos\":true},\"prompt\":{\"tokens\":[0,17,42],"
    "\"text_hex\":\"4869\"}}\n"
    "{\"step\":0,\"token\":1,\"bytes\":\"416461\",\"logit\":12.5,\"logprob\":-0.25,"
    "\"logits_sha256\":\"" H22 "\",\"top\":[{\"id\":1,\"bytes\":\"416461\",\"logit\":12.5,"
    "\"logprob\":-0.25},{\"id\":4,\"bytes\":\"fffe\",\"logit\":0.100000001,"
    "\"logprob\":-0.10000000000000001}]}\n"
    "{\"step\":1,\"token\":3,\"bytes\":\"22715c0a\",\"logit\":3,"
    "\"logprob\":-4.9406564584124654e-324,\"logits_sha256\":\"" H33 "\",\"top\":[{\"id\":3,"
    "\"bytes\":\"22715c0a\",\"logit\":3,\"logprob\":-4.9406564584124654e-324},{\"id\":6,"
    "\"bytes\":\"00017f\",\"logit\":3,\"logprob\":-1.5}]}\n"
    "{\"end\":true,\"steps\":2,\"complete\":true,\"stop\":\"length\"}\n";

static const char example_dump[] =
    "{\n"
    "  \"source\":\"ds4ref\",\n"
    "  \"prompt_tokens\":3,\n"
    "  \"ctx\":4096,\n"
    "  \"top_k\":2,\n"
    "  \"steps\":[\n"
    "    {\"step\":0,\"selected\":{\"id\":1,\"text\":\"Ada\",\"bytes\":[65,100,97]},"
    "\"top_logprobs\":[{\"token\":{\"id\":1,\"text\":\"Ada\",\"bytes\":[65,100,97]},"
    "\"logit\":12.5,\"logprob\":-0.25},{\"token\":{\"id\":4,\"text\":\"\\u00ff\\u00fe\","
    "\"bytes\":[255,254]},\"logit\":0.100000001,\"logprob\":-0.100000001}]},\n"
    "    {\"step\":1,\"selected\":{\"id\":3,\"text\":\"\\\"q\\\\\\n\",\"bytes\":[34,113,92,10]},"
    "\"top_logprobs\":[{\"token\":{\"id\":3,\"text\":\"\\\"q\\\\\\n\",\"bytes\":[34,113,92,10]},"
    "\"logit\":3,\"logprob\":-0},{\"token\":{\"id\":6,\"text\":\"\\u0000\\u0001\x7f\","
    "\"bytes\":[0,1,127]},\"logit\":3,\"logprob\":-1.5}]}\n"
    "  ]\n"
    "}\n";

/* The example golden built through the streaming writer, in memory. */
static ds4_golden_writer *example_writer(const char *path) {
    ds4_golden_header h;
    small_header(&h, 2, 2);
    ds4_golden_writer *w;
    ds4err err = {0};
    assert_int_equal(ds4_golden_writer_open(&w, path, &h, &err), 0);
    gen s[2];
    example_steps(s);
    for (int i = 0; i < 2; i++)
        assert_int_equal(write_gen(w, &s[i].st, &err), 0);
    assert_int_equal(ds4_golden_writer_finish(w, DS4_STOP_LENGTH, &err), 0);
    return w;
}

static char *slurp(const char *path, size_t *len) {
    uint8_t *p;
    if (tu_read_file(path, &p, len)) return NULL;
    char *s = realloc(p, *len + 1);
    if (!s) {
        free(p);
        return NULL;
    }
    s[*len] = '\0';
    return s;
}

/* ------------------------------------------------------------ exact text */

static void test_golden_text_is_the_documented_one(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char *path = tu_path(dir, "g.jsonl");
    ds4_golden_writer *w = example_writer(path);
    size_t len;
    char *text = slurp(path, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(example_golden));
    assert_string_equal(text, example_golden);

    /* The in-memory formatter gives the same bytes. */
    ds4_buf b = {0};
    ds4err err = {0};
    assert_int_equal(ds4_golden_write_text(ds4_golden_writer_golden(w), &b, &err), 0);
    assert_int_equal(b.len, len);
    assert_memory_equal(b.p, example_golden, len);
    ds4_buf_free(&b);

    free(text);
    ds4_golden_writer_free(w);
    free(path);
    tu_rmdir(dir);
}

static void test_dump_text_is_ds4_layout(void **state) {
    (void)state;
    ds4_golden_writer *w = example_writer(NULL);
    ds4_buf b = {0};
    ds4err err = {0};
    assert_int_equal(ds4_dump_format(ds4_golden_writer_golden(w), &b, &err), 0);
    assert_int_equal(b.len, sizeof(example_dump) - 1);
    assert_memory_equal(b.p, example_dump, b.len);
    ds4_buf_free(&b);
    ds4_golden_writer_free(w);
}

/* ------------------------------------------------------------ reading back */

static void test_read_example(void **state) {
    (void)state;
    ds4_golden g;
    ds4err err = {0};
    int rc = ds4_golden_read_text(example_golden, strlen(example_golden), "ex", &g, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_string_equal(g.h.version, "0.1-test");
    assert_string_equal(g.h.model.file, "m.gguf");
    assert_int_equal(g.h.model.size, 1234);
    assert_false(g.h.has_mtp);
    assert_int_equal(g.h.settings.ctx, 4096);
    assert_int_equal(g.h.settings.chunk, 512);
    assert_true(g.h.settings.qat);
    assert_int_equal(g.h.n_prompt, 3);
    assert_int_equal(g.h.prompt[2], 42);
    assert_int_equal(g.h.n_prompt_text, 2);
    assert_memory_equal(g.h.prompt_text, "Hi", 2);
    assert_int_equal(g.n_steps, 2);
    assert_true(g.has_end);
    assert_int_equal(g.stop, DS4_STOP_LENGTH);
    const ds4_golden_step *s = &g.steps[1];
    assert_int_equal(s->tok.id, 3);
    assert_int_equal(s->tok.n_bytes, 4);
    assert_memory_equal(s->tok.bytes, "\"q\\\n", 4);
    double tiny = -4.9406564584124654e-324;
    assert_memory_equal(&s->tok.logprob, &tiny, sizeof(double));
    assert_int_equal(s->n_top, 2);
    assert_memory_equal(s->top[1].bytes, "\x00\x01\x7f", 3);
    float f = 0.1f;
    assert_memory_equal(&g.steps[0].top[1].logit, &f, sizeof(float));
    double d = -0.1;
    assert_memory_equal(&g.steps[0].top[1].logprob, &d, sizeof(double));
    uint8_t dig[32];
    memset(dig, 0x33, 32);
    assert_memory_equal(s->logits_sha256, dig, 32);
    ds4_golden_free(&g);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rand_f32(uint64_t *s) {
    for (;;) {
        uint32_t b = (uint32_t)rng_next(s);
        float f;
        memcpy(&f, &b, 4);
        if (isfinite(f)) return f;
    }
}

static double rand_f64(uint64_t *s) {
    for (;;) {
        uint64_t b = rng_next(s);
        double d;
        memcpy(&d, &b, 8);
        if (isfinite(d)) return d;
    }
}

static int by_logit_desc(const void *pa, const void *pb) {
    float a = *(const float *)pa, b = *(const float *)pb;
    return a > b ? -1 : a < b;
}

/* Random bit patterns of every magnitude (subnormals, huge values, -0) must
 * come back as the identical bits, and the file must re-format identically. */
static void test_numbers_round_trip_bit_exactly(void **state) {
    (void)state;
    enum { STEPS = 300, K = 12 };
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "r.jsonl");
    ds4_golden_header h;
    small_header(&h, K, STEPS);
    ds4_golden_writer *w;
    ds4err err = {0};
    assert_int_equal(ds4_golden_writer_open(&w, path, &h, &err), 0);
    static float want_logit[STEPS][K];
    static double want_lp[STEPS][K];
    uint64_t seed = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < STEPS; i++) {
        gen g;
        float lg[K];
        double lp[K];
        int32_t ids[K];
        for (int k = 0; k < K; k++) lg[k] = rand_f32(&seed);
        if (i % 7 == 0) lg[3] = -0.0f;
        qsort(lg, K, sizeof(float), by_logit_desc);
        for (int k = 0; k < K; k++) {
            ids[k] = 100 + k;   /* ascending: equal logits stay in valid order */
            lp[k] = rand_f64(&seed);
            want_logit[i][k] = lg[k];
            want_lp[i][k] = lp[k];
        }
        make_gen(&g, K, ids, lg, lp, (uint8_t)i);
        assert_int_equal(write_gen(w, &g.st, &err), 0);
    }
    assert_int_equal(ds4_golden_writer_finish(w, DS4_STOP_LENGTH, &err), 0);
    ds4_golden_writer_free(w);

    ds4_golden g;
    int rc = ds4_golden_read(path, &g, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(g.n_steps, STEPS);
    for (int i = 0; i < STEPS; i++)
        for (int k = 0; k < K; k++) {
            assert_memory_equal(&g.steps[i].top[k].logit, &want_logit[i][k], 4);
            assert_memory_equal(&g.steps[i].top[k].logprob, &want_lp[i][k], 8);
        }
    size_t len;
    char *text = slurp(path, &len);
    ds4_buf b = {0};
    assert_int_equal(ds4_golden_write_text(&g, &b, &err), 0);
    assert_int_equal(b.len, len);
    assert_memory_equal(b.p, text, len);
    ds4_buf_free(&b);
    free(text);
    ds4_golden_free(&g);
    free(path);
    tu_rmdir(dir);
}

/* ------------------------------------------------------------ corruption */

/* example_golden with the first occurrence of `from` (searched from line
 * `line`, 1-based) replaced by `to`. */
static char *mutate(int line, const char *from, const char *to) {
    const char *p = example_golden;
    for (int l = 1; l < line; l++) p = strchr(p, '\n') + 1;
    const char *at = strstr(p, from);
    assert_non_null(at);
    size_t pre = (size_t)(at - example_golden);
    size_t n = strlen(example_golden) - strlen(from) + strlen(to);
    char *s = malloc(n + 1);
    memcpy(s, example_golden, pre);
    memcpy(s + pre, to, strlen(to));
    strcpy(s + pre + strlen(to), at + strlen(from));
    return s;
}

static void expect_reject(const char *text, size_t len, int line, const char *needle) {
    ds4_golden g;
    ds4err err = {0};
    int rc = ds4_golden_read_text(text, len, "bad.jsonl", &g, &err);
    char where[32];
    snprintf(where, sizeof(where), "bad.jsonl:%d:", line);
    if (rc == 0 || !strstr(err.msg, where) || (needle && !strstr(err.msg, needle)))
        fprintf(stderr, "expected a rejection at %s (%s), got rc=%d: %s\n", where,
                needle ? needle : "", rc, err.msg);
    assert_int_not_equal(rc, 0);
    assert_int_equal(err.code, DS4_E_FORMAT);
    assert_non_null(strstr(err.msg, where));
    if (needle) assert_non_null(strstr(err.msg, needle));
}

static void expect_mutation_rejected(int line, const char *from, const char *to, int err_line,
                                     const char *needle) {
    char *s = mutate(line, from, to);
    expect_reject(s, strlen(s), err_line, needle);
    free(s);
}

static void test_corrupted_goldens_are_rejected_with_line(void **state) {
    (void)state;
    size_t n = strlen(example_golden);
    /* Sanity: the unmodified text is accepted (else every case below is moot). */
    ds4_golden g;
    ds4err err = {0};
    assert_int_equal(ds4_golden_read_text(example_golden, n, "ok", &g, &err), 0);
    ds4_golden_free(&g);

    /* Truncations. */
    const char *l3 = strstr(example_golden, "{\"step\":1");
    expect_reject(example_golden, (size_t)(l3 - example_golden) + 40, 3, "truncated");
    const char *l4 = strstr(example_golden, "{\"end\"");
    expect_reject(example_golden, (size_t)(l4 - example_golden), 4, "without the end line");
    expect_reject(example_golden, n - 1, 4, "no newline");
    expect_reject("", 0, 1, "empty");

    /* Digests. */
    expect_mutation_rejected(2, "\"logits_sha256\":\"22", "\"logits_sha256\":\"g2", 2, "hex");
    expect_mutation_rejected(2, "\"logits_sha256\":\"22", "\"logits_sha256\":\"2", 2, "odd");
    expect_mutation_rejected(1, "\"metadata_sha256\":\"11", "\"metadata_sha256\":\"", 1, "64");
    expect_mutation_rejected(1, "\"metadata_sha256\":\"11", "\"metadata_sha256\":\"1A", 1,
                             "lowercase");
    expect_mutation_rejected(1, "\"tensor_data_sha256\":\"e3", "\"tensor_data_sha256\":\"f3", 1,
                             "tensor list");

    /* Broken JSON and structure. */
    expect_mutation_rejected(2, "}]}\n", "}]\n", 2, NULL);
    expect_mutation_rejected(3, "\"logit\":3,", "\"logit\":3,,", 3, NULL);
    expect_mutation_rejected(1, "\"chunk\":512", "\"chunk\":512,\"threads\":8", 1, "threads");
    expect_mutation_rejected(1, "\"chunk\":512", "\"chunk\":512,\"chunk\":512", 1, "twice");
    expect_mutation_rejected(1, "\"tokens\":[0,", "\"tokens\":[-1,", 1, "prompt.tokens[0]");
    expect_mutation_rejected(1, "0.1-test", "0.1\\u0001", 1, "ds4ref_version");
    expect_mutation_rejected(1, "ds4ref-golden-v1", "ds4ref-golden-v2", 1, "format");
    expect_mutation_rejected(2, "\"step\":0", "\"step\":5", 2, "step 0 was expected");

    /* Numbers: spelling and consistency. */
    expect_mutation_rejected(2, "\"logit\":12.5,", "\"logit\":12.50,", 2, "canonical");
    expect_mutation_rejected(2, "\"logprob\":-0.25}", "\"logprob\":-0.26}", 2, "top[0]");
    expect_mutation_rejected(2, "\"logit\":0.100000001", "\"logit\":13", 2, "descending");
    expect_mutation_rejected(3, "\"id\":6", "\"id\":3", 3, "not after");
    expect_mutation_rejected(2, "{\"id\":4,", "{\"id\":1,", 2, "twice");
    expect_mutation_rejected(3, "\"logit\":3,", "\"logit\":1e999,", 3, "finite");
    expect_mutation_rejected(1, "\"top_k\":2", "\"top_k\":1", 2, "top_k 1");

    /* The end line. */
    expect_mutation_rejected(4, "\"steps\":2", "\"steps\":3", 4, "end.steps");
    expect_mutation_rejected(4, "\"complete\":true", "\"complete\":false", 4, "complete");
    expect_mutation_rejected(4, "\"length\"", "\"paused\"", 4, "end.stop");
    expect_mutation_rejected(1, "\"max_steps\":2", "\"max_steps\":3", 4, "max_steps is 3");
    expect_mutation_rejected(4, "}\n", "}\n\n", 5, "after the end line");
    expect_mutation_rejected(1, "}}\n", "}}\r\n", 1, NULL);

    /* The drafter: only DSpark is named, and only with drafts. */
    expect_mutation_rejected(1, "\"mtp_draft\":0,", "\"mtp_draft\":0,\"drafter\":\"dspark\",", 1,
                             "settings.drafter");
    expect_mutation_rejected(1, "\"mtp_draft\":0,", "\"mtp_draft\":3,\"drafter\":\"mtp\",", 1,
                             "settings.drafter");
    expect_mutation_rejected(1, "\"mtp_draft\":0,", "\"mtp_draft\":3,\"drafter\":\"dspar\",", 1,
                             "settings.drafter");
}

/* A DSpark golden's header names its drafter and reads back to the same
 * bytes; the MTP head's names none, as before DSpark. */
static void test_drafter_setting(void **state) {
    (void)state;
    const char *at = strstr(example_golden, "\"mtp_draft\":0,");
    char text[sizeof(example_golden) + 64];
    size_t head = (size_t)(at - example_golden);
    snprintf(text, sizeof(text), "%.*s\"mtp_draft\":4,\"drafter\":\"dspark\",%s", (int)head,
             example_golden, at + strlen("\"mtp_draft\":0,"));
    ds4_golden g;
    ds4err err = {0};
    if (ds4_golden_read_text(text, strlen(text), "dspark", &g, &err)) fail_msg("%s", err.msg);
    assert_string_equal(g.h.settings.drafter, "dspark");
    assert_int_equal(g.h.settings.mtp_draft, 4);
    ds4_buf b = {0};
    ds4_golden_write_header_line(&b, &g);
    assert_int_equal(b.len, (size_t)(strchr(text, '\n') - text) + 1);
    assert_memory_equal(b.p, text, b.len);
    /* The MTP head: no drafter key, the bytes of the example. */
    g.h.settings.drafter[0] = '\0';
    g.h.settings.mtp_draft = 0;
    b.len = 0;
    ds4_golden_write_header_line(&b, &g);
    assert_memory_equal(b.p, example_golden, b.len);
    ds4_buf_free(&b);
    /* The writer refuses what the reader would: another name, or one
     * without drafts. */
    char *dir = tu_tmpdir(), *path = tu_path(dir, "g.jsonl");
    ds4_golden_writer *w;
    memcpy(g.h.settings.drafter, "script", 7);
    g.h.settings.mtp_draft = 3;
    assert_int_not_equal(ds4_golden_writer_open(&w, path, &g.h, &err), 0);
    assert_non_null(strstr(err.msg, "drafter"));
    memcpy(g.h.settings.drafter, "dspark", 7);
    g.h.settings.mtp_draft = 0;
    assert_int_not_equal(ds4_golden_writer_open(&w, path, &g.h, &err), 0);
    free(path);
    tu_rmdir(dir);
    ds4_golden_free(&g);
}

/* ------------------------------------------------------------ the writer */

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) {
    (void)sig;
    g_stop = 1;
}

/* The CLI pattern: SIGINT sets a flag, the loop stops, the golden so far is
 * committed and marked incomplete.  Until then only a temporary file exists. */
static void test_interrupted_golden(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "g.jsonl");
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;   /* no SA_RESTART: system calls see EINTR */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGINT, &sa, &old), 0);
    g_stop = 0;

    ds4_golden_header h;
    small_header(&h, 2, 10);
    ds4_golden_writer *w;
    ds4err err = {0};
    assert_int_equal(ds4_golden_writer_open(&w, path, &h, &err), 0);
    gen s[2];
    example_steps(s);
    uint32_t done = 0;
    for (uint32_t i = 0; i < 10 && !g_stop; i++) {
        assert_int_equal(write_gen(w, &s[i % 2].st, &err), 0);
        done++;
        if (i == 2) raise(SIGINT);
    }
    assert_int_equal(done, 3);
    assert_int_equal(access(path, F_OK), -1);        /* not there before the commit */
    assert_int_equal(tu_count_entries(dir), 1);      /* only the temporary file */
    assert_int_equal(ds4_golden_writer_finish(w, DS4_STOP_INTERRUPTED, &err), 0);
    ds4_golden_writer_free(w);
    sigaction(SIGINT, &old, NULL);
    assert_int_equal(tu_count_entries(dir), 1);      /* the golden, no temporary */

    size_t len;
    char *text = slurp(path, &len);
    assert_non_null(strstr(text, "{\"end\":true,\"steps\":3,\"complete\":false,"
                                 "\"stop\":\"interrupted\"}\n"));
    free(text);
    ds4_golden g;
    assert_int_equal(ds4_golden_read(path, &g, &err), 0);
    assert_int_equal(g.n_steps, 3);
    assert_int_equal(g.stop, DS4_STOP_INTERRUPTED);
    assert_false(ds4_stop_complete(g.stop));
    ds4_golden_free(&g);
    free(path);
    tu_rmdir(dir);
}

static void test_abandoned_writer_leaves_old_file(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "g.jsonl");
    ds4err err = {0};
    assert_int_equal(ds4_file_write_atomic(path, "old\n", 4, &err), 0);
    ds4_golden_header h;
    small_header(&h, 2, 2);
    ds4_golden_writer *w;
    assert_int_equal(ds4_golden_writer_open(&w, path, &h, &err), 0);
    assert_int_equal(tu_count_entries(dir), 2);
    ds4_golden_writer_free(w);
    assert_int_equal(tu_count_entries(dir), 1);
    size_t len;
    char *text = slurp(path, &len);
    assert_string_equal(text, "old\n");
    free(text);
    free(path);
    tu_rmdir(dir);
}

static void test_writer_refuses_what_the_reader_would(void **state) {
    (void)state;
    ds4_golden_header h;
    small_header(&h, 2, 2);
    ds4_golden_writer *w;
    ds4err err = {0};
    gen g;

    assert_int_equal(ds4_golden_writer_open(&w, NULL, &h, &err), 0);
    make_gen(&g, 2, (int32_t[]){1, 2}, (float[]){1.0f, 2.0f}, (double[]){-1, -0.5}, 0);
    assert_int_not_equal(write_gen(w, &g.st, &err), 0);
    assert_non_null(strstr(err.msg, "descending"));
    make_gen(&g, 2, (int32_t[]){1, 2}, (float[]){2.0f, 1.0f}, (double[]){-INFINITY, -1}, 0);
    assert_int_not_equal(write_gen(w, &g.st, &err), 0);
    assert_non_null(strstr(err.msg, "finite"));
    make_gen(&g, 3, (int32_t[]){1, 2, 3}, (float[]){3, 2, 1}, (double[]){-1, -2, -3}, 0);
    assert_int_not_equal(write_gen(w, &g.st, &err), 0);
    assert_non_null(strstr(err.msg, "top_k"));
    make_gen(&g, 2, (int32_t[]){1, 2000}, (float[]){2, 1}, (double[]){-1, -2}, 0);
    assert_int_not_equal(write_gen(w, &g.st, &err), 0);
    assert_non_null(strstr(err.msg, "no token 2000"));
    /* The greedy token must head its top list. */
    make_gen(&g, 2, (int32_t[]){1, 2}, (float[]){2, 1}, (double[]){-1, -2}, 0);
    g.st.logprob = -1.5;
    assert_int_not_equal(write_gen(w, &g.st, &err), 0);
    assert_non_null(strstr(err.msg, "top[0]"));
    /* Nothing was recorded; "length" needs max_steps steps. */
    assert_int_equal(ds4_golden_writer_golden(w)->n_steps, 0);
    assert_int_not_equal(ds4_golden_writer_finish(w, DS4_STOP_LENGTH, &err), 0);
    assert_int_equal(ds4_golden_writer_finish(w, DS4_STOP_ERROR, &err), 0);
    ds4_golden_writer_free(w);

    small_header(&h, 2, 2);
    snprintf(h.version, sizeof(h.version), "bad\nversion");
    assert_int_not_equal(ds4_golden_writer_open(&w, NULL, &h, &err), 0);
    assert_int_equal(err.code, DS4_E_ARG);
}

/* ------------------------------------------------------------ dumps */

static void test_dump_reads_back(void **state) {
    (void)state;
    ds4_golden g;
    ds4err err = {0};
    assert_int_equal(ds4_dump_parse(example_dump, strlen(example_dump), "d.json", &g, &err), 0);
    assert_int_equal(g.kind, DS4_TRACE_DUMP);
    assert_true(g.lp_f32 && g.has_ids && g.has_logits && !g.has_digests);
    assert_int_equal(g.h.n_prompt, 3);
    assert_int_equal(g.n_steps, 2);
    assert_int_equal(g.steps[1].tok.id, 3);
    assert_memory_equal(g.steps[1].top[1].bytes, "\x00\x01\x7f", 3);
    float f = (float)-0.1;
    float got = (float)g.steps[0].top[1].logprob;
    assert_memory_equal(&got, &f, 4);
    assert_true(signbit(g.steps[1].top[0].logprob) && g.steps[1].top[0].logprob == 0);
    ds4_golden_free(&g);

    /* Keys ds4 may add later are ignored. */
    const char *extra = "{\"source\":\"ds4\",\"prompt_tokens\":1,\"ctx\":8,\"top_k\":1,"
                        "\"backend\":\"metal\",\"steps\":[{\"step\":0,\"selected\":{\"id\":5,"
                        "\"text\":\"x\",\"bytes\":[120]},\"top_logprobs\":[{\"token\":{\"id\":5,"
                        "\"text\":\"x\",\"bytes\":[120]},\"logit\":1,\"logprob\":0,\"rank\":0}]}]}";
    assert_int_equal(ds4_dump_parse(extra, strlen(extra), "e.json", &g, &err), 0);
    ds4_golden_free(&g);

    /* A backend that knows only ids writes tokens without text and bytes;
     * one with text only gets the text's UTF-8 as its bytes. */
    const char *ids_only = "{\"source\":\"x\",\"prompt_tokens\":1,\"ctx\":8,\"top_k\":2,"
                           "\"steps\":[{\"step\":0,\"selected\":{\"id\":5},\"top_logprobs\":["
                           "{\"token\":{\"id\":5},\"logit\":1,\"logprob\":-0.5,\"rank\":0},"
                           "{\"token\":{\"id\":7,\"text\":\"\\u00e9\"},\"logit\":0.5,"
                           "\"logprob\":-1,\"rank\":1}]}]}";
    assert_int_equal(ds4_dump_parse(ids_only, strlen(ids_only), "i.json", &g, &err), 0);
    assert_int_equal(g.steps[0].tok.id, 5);
    assert_int_equal(g.steps[0].tok.n_bytes, 0);
    assert_int_equal(g.steps[0].top[1].id, 7);
    assert_int_equal(g.steps[0].top[1].n_bytes, 2);
    assert_memory_equal(g.steps[0].top[1].bytes, "\xc3\xa9", 2);
    assert_true(g.has_logits);
    ds4_golden_free(&g);

    /* A server's answer has logprobs and no logits: then the file has none. */
    const char *no_logits = "{\"source\":\"server\",\"prompt_tokens\":1,\"ctx\":8,\"top_k\":1,"
                            "\"steps\":[{\"step\":0,\"selected\":{\"id\":5},\"top_logprobs\":["
                            "{\"token\":{\"id\":5},\"logprob\":-0.5}]}]}";
    assert_int_equal(ds4_dump_parse(no_logits, strlen(no_logits), "n.json", &g, &err), 0);
    assert_false(g.has_logits);
    assert_true(g.steps[0].top[0].logprob == -0.5);
    assert_string_equal(g.model_sha256, "");
    ds4_golden_free(&g);

    /* The model file's SHA-256 a backend may give, kept lowercase. */
    char named[1024];
    snprintf(named, sizeof(named), "{\"model_sha256\":\"%s\",%s", "0123456789ABCDEF0123456789abcdef"
             "0123456789abcdef0123456789ABCDEF", no_logits + 1);
    assert_int_equal(ds4_dump_parse(named, strlen(named), "s.json", &g, &err), 0);
    assert_string_equal(g.model_sha256,
                        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    ds4_golden_free(&g);

    static const struct {
        const char *from, *to, *needle;
    } bad[] = {
        {"[65,100,97]}", "[65,100,256]}", "steps[0].selected.bytes[2]"},
        {"\"bytes\":[65,100,97]", "\"bytes\":\"Ada\"", "\"bytes\" is not an array"},
        {"\"logprob\":-1.5", "\"logprob\":\"x\"", "steps[1].top_logprobs[1].logprob"},
        {"{\"step\":1", "{\"step\":2", "steps[1].step"},
        {"\"top_k\":2", "\"top_k\":1", "more than top_k"},
        {"\"source\":\"ds4ref\"", "\"source\":4", "source"},
        {"\"steps\":[", "\"stepz\":[", "steps"},
        /* model_sha256: 64 hex digits, nothing else. */
        {"\"source\":", "\"model_sha256\":\"abc\",\"source\":", "model_sha256"},
        {"\"source\":", "\"model_sha256\":7,\"source\":", "model_sha256"},
        {"\"source\":", "\"model_sha256\":\"0123456789abcdef0123456789abcdef0123456789abcdef"
                        "0123456789abcdeg\",\"source\":", "model_sha256"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *at = strstr(example_dump, bad[i].from);
        assert_non_null(at);
        size_t pre = (size_t)(at - example_dump);
        char *s = malloc(strlen(example_dump) + strlen(bad[i].to) + 1);
        memcpy(s, example_dump, pre);
        strcpy(s + pre, bad[i].to);
        strcat(s, at + strlen(bad[i].from));
        int rc = ds4_dump_parse(s, strlen(s), "d.json", &g, &err);
        if (rc == 0 || !strstr(err.msg, bad[i].needle))
            fprintf(stderr, "case %zu: rc=%d msg=%s\n", i, rc, err.msg);
        assert_int_not_equal(rc, 0);
        assert_int_equal(err.code, DS4_E_FORMAT);
        assert_non_null(strstr(err.msg, "d.json"));
        assert_non_null(strstr(err.msg, bad[i].needle));
        free(s);
    }
}

/* ------------------------------------------------------------ fileio */

static void test_fileio(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "f.txt");
    ds4err err = {0};
    char *buf;
    size_t len;
    assert_int_not_equal(ds4_file_read(path, 100, &buf, &len, &err), 0);
    assert_int_equal(err.code, DS4_E_IO);
    assert_non_null(strstr(err.msg, "f.txt"));

    assert_int_equal(ds4_file_write_atomic(path, "hello", 5, &err), 0);
    assert_int_equal(ds4_file_read(path, 5, &buf, &len, &err), 0);
    assert_int_equal(len, 5);
    assert_string_equal(buf, "hello");
    free(buf);
    assert_int_not_equal(ds4_file_read(path, 4, &buf, &len, &err), 0);
    assert_int_equal(err.code, DS4_E_NOMEM);

    /* An aborted writer leaves the old content; a committed one replaces it. */
    ds4_afile f;
    assert_int_equal(ds4_file_atomic_open(&f, path, &err), 0);
    assert_int_equal(ds4_file_atomic_write(&f, "new 2", 5, &err), 0);
    ds4_file_atomic_abort(&f);
    assert_int_equal(ds4_file_read(path, 100, &buf, &len, &err), 0);
    assert_string_equal(buf, "hello");
    free(buf);
    assert_int_equal(ds4_file_atomic_open(&f, path, &err), 0);
    /* More than the writer's buffer. */
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (int i = 0; i < 100; i++) assert_int_equal(ds4_file_atomic_write(&f, big, sizeof(big) - 1, &err), 0);
    assert_int_equal(ds4_file_atomic_commit(&f, &err), 0);
    assert_int_equal(ds4_file_read(path, SIZE_MAX, &buf, &len, &err), 0);
    assert_int_equal(len, 100 * (sizeof(big) - 1));
    assert_int_equal(buf[len - 1], 'x');
    free(buf);
    assert_int_equal(tu_count_entries(dir), 1);

    char *nodir = tu_path(dir, "missing/f.txt");
    assert_int_not_equal(ds4_file_write_atomic(nodir, "x", 1, &err), 0);
    assert_int_equal(err.code, DS4_E_IO);
    free(nodir);
    free(path);
    tu_rmdir(dir);
}

/* Reads a FIFO to its end in a thread, while the test writes it. */
typedef struct fifo_reader {
    const char *path;
    char *got;
    size_t len;
    int rc;
} fifo_reader;

static void *read_fifo(void *arg) {
    fifo_reader *r = arg;
    ds4err e = {0};
    r->rc = ds4_file_read(r->path, 1000, &r->got, &r->len, &e);
    return NULL;
}

/* Targets that a rename would damage: a symbolic link keeps being a link
 * (the file it points to is replaced), and a FIFO keeps being a FIFO, its
 * reader getting the bytes (the same holds for /dev/null, which a rename
 * over it as root would turn into a regular file). */
static void test_fileio_special_targets(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *file = tu_path(dir, "file.txt"), *link = tu_path(dir, "link.txt");
    char *fifo = tu_path(dir, "fifo");
    ds4err err = {0};
    assert_int_equal(ds4_file_write_atomic(file, "old", 3, &err), 0);
    assert_int_equal(symlink(file, link), 0);
    assert_int_equal(ds4_file_write_atomic(link, "new!", 4, &err), 0);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char *buf;
    size_t len;
    assert_int_equal(ds4_file_read(file, 100, &buf, &len, &err), 0);
    assert_string_equal(buf, "new!");
    free(buf);

    assert_int_equal(mkfifo(fifo, 0600), 0);
    fifo_reader r = {.path = fifo};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, read_fifo, &r), 0);
    assert_int_equal(ds4_file_write_atomic(fifo, "through", 7, &err), 0);
    /* Before joining: had the FIFO been renamed over, its reader would wait
     * forever. */
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.len, 7);
    assert_string_equal(r.got, "through");
    free(r.got);
    assert_int_equal(tu_count_entries(dir), 3);   /* no temporary file left */
    remove(fifo);
    remove(link);
    remove(file);
    free(fifo);
    free(link);
    free(file);
    tu_rmdir(dir);
}

/* ------------------------------------------------------------ model identity */

static void test_modelid(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "tiny.gguf");
    static float w1[64], w2[7];
    static uint8_t w3[1000];
    for (int i = 0; i < 64; i++) w1[i] = (float)i * 0.5f;
    for (int i = 0; i < 7; i++) w2[i] = -(float)i;
    for (int i = 0; i < 1000; i++) w3[i] = (uint8_t)(i * 7);
    ds4_gguf_writer *gw = ds4_gguf_writer_new(32);
    assert_non_null(gw);
    ds4_gguf_write_str(gw, "general.architecture", "test");
    ds4_gguf_write_tensor(gw, "blk.0.a", 0, 2, (uint64_t[]){8, 8}, w1, sizeof(w1));
    ds4_gguf_write_tensor(gw, "b", 0, 1, (uint64_t[]){7}, w2, sizeof(w2));
    ds4_gguf_write_tensor(gw, "c.f16", 1, 1, (uint64_t[]){500}, w3, sizeof(w3));
    ds4err err = {0};
    assert_int_equal(ds4_gguf_writer_save(gw, path, &err), 0);
    ds4_gguf_writer_free(gw);

    ds4_gguf_file g;
    assert_int_equal(ds4_gguf_open(&g, path, &err), 0);
    ds4_modelid a, b;
    omp_set_num_threads(1);
    assert_int_equal(ds4_modelid_of(&g, &a, &err), 0);
    omp_set_num_threads(3);
    assert_int_equal(ds4_modelid_of(&g, &b, &err), 0);
    assert_string_equal(a.file, "tiny.gguf");
    assert_true(ds4_modelid_same(&a, &b));
    assert_memory_equal(a.tensor_data_sha256, b.tensor_data_sha256, 32);

    /* Independent: the file's own bytes. */
    uint8_t *raw;
    size_t len;
    assert_int_equal(tu_read_file(path, &raw, &len), 0);
    assert_int_equal(a.size, len);
    uint8_t d[32];
    ds4_sha256 h;
    ds4_sha256_init(&h);
    ds4_sha256_update(&h, raw, g.data_off);
    ds4_sha256_final(&h, d);
    assert_memory_equal(a.metadata_sha256, d, 32);
    /* Tensor data digest: name, NUL, SHA-256 of the data, in file order,
     * assembled as one byte string. */
    const void *data[3] = {w1, w2, w3};
    size_t sizes[3] = {sizeof(w1), sizeof(w2), sizeof(w3)};
    const char *names[3] = {"blk.0.a", "b", "c.f16"};
    uint8_t cat[3 * (8 + 32)];
    size_t n = 0;
    assert_int_equal(a.n_tensors, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(a.tensors[i].name, names[i]);
        ds4_sha256_init(&h);
        ds4_sha256_update(&h, data[i], sizes[i]);
        ds4_sha256_final(&h, d);
        assert_memory_equal(a.tensors[i].sha256, d, 32);
        memcpy(cat + n, names[i], strlen(names[i]) + 1);
        n += strlen(names[i]) + 1;
        memcpy(cat + n, d, 32);
        n += 32;
    }
    ds4_sha256_init(&h);
    ds4_sha256_update(&h, cat, n);
    ds4_sha256_final(&h, d);
    assert_memory_equal(a.tensor_data_sha256, d, 32);

    /* A different tensor is named. */
    char msg[400];
    ds4_modelid_describe_diff(&a, &b, msg, sizeof(msg));
    assert_string_equal(msg, "");
    b.tensors[1].sha256[5] ^= 1;
    ds4_modelid_combine(b.tensors, b.n_tensors, b.tensor_data_sha256);
    assert_false(ds4_modelid_same(&a, &b));
    ds4_modelid_describe_diff(&a, &b, msg, sizeof(msg));
    assert_non_null(strstr(msg, "tensor data differs"));
    assert_non_null(strstr(msg, "1 tensor changed: b"));
    assert_null(strstr(msg, "blk.0.a"));

    /* Round trip through a golden header. */
    ds4_golden_header gh;
    small_header(&gh, 1, 0);
    gh.model = a;
    gh.has_mtp = true;
    gh.mtp = b;
    ds4_golden_writer *w;
    assert_int_equal(ds4_golden_writer_open(&w, NULL, &gh, &err), 0);
    assert_int_equal(ds4_golden_writer_finish(w, DS4_STOP_LENGTH, &err), 0);
    ds4_buf text = {0};
    assert_int_equal(ds4_golden_write_text(ds4_golden_writer_golden(w), &text, &err), 0);
    ds4_golden back;
    assert_int_equal(ds4_golden_read_text(text.p, text.len, "h", &back, &err), 0);
    assert_true(back.h.has_mtp);
    assert_true(ds4_modelid_same(&back.h.model, &a));
    assert_true(ds4_modelid_same(&back.h.mtp, &b));
    assert_string_equal(back.h.mtp.tensors[2].name, "c.f16");
    ds4_golden_free(&back);
    ds4_buf_free(&text);
    ds4_golden_writer_free(w);

    free(raw);
    ds4_modelid_free(&a);
    ds4_modelid_free(&b);
    ds4_gguf_close(&g);
    free(path);
    tu_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_text_is_the_documented_one),
        cmocka_unit_test(test_dump_text_is_ds4_layout),
        cmocka_unit_test(test_read_example),
        cmocka_unit_test(test_numbers_round_trip_bit_exactly),
        cmocka_unit_test(test_corrupted_goldens_are_rejected_with_line),
        cmocka_unit_test(test_drafter_setting),
        cmocka_unit_test(test_interrupted_golden),
        cmocka_unit_test(test_abandoned_writer_leaves_old_file),
        cmocka_unit_test(test_writer_refuses_what_the_reader_would),
        cmocka_unit_test(test_dump_reads_back),
        cmocka_unit_test(test_fileio),
        cmocka_unit_test(test_fileio_special_targets),
        cmocka_unit_test(test_modelid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
