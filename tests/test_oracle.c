/* ds4ref against independent implementations (../shared/oracle):
 *
 *  - official/: the official DeepSeek V4 model.py in float64, the authority.
 *    QAT off must agree to 1e-4 in every logit with the same argmax and the
 *    same expert and indexer selections everywhere; QAT on must pass the
 *    oracle README's statistical gate (a float32-activation port legitimately
 *    flips a few FP8/FP4 roundings that sit within 1e-8 of a tie).
 *  - tiny-f32/: llama.cpp's deepseek4 in f32.  Agreement is ~1e-6 except
 *    where llama.cpp evaluates softplus as log(1 + exp(x)) in f32, which
 *    underflows for the very negative router logits that hash-routed layers
 *    can select (docs/ORACLES.md); the gate covers the positions before the
 *    first such token, then the distribution.
 *  - tiny-ds4types/: llama.cpp and ds4.c, which both quantize activations;
 *    ds4ref does not, so it must agree with each at least as well as they
 *    agree with each other (medians and argmax counts of the README, §6).
 *
 * Every test skips with a message when ../shared is absent. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decode/sample.h"
#include "decode/session.h"
#include "model/model.h"
#include "testutil.h"
#include "text/json.h"

/* ---- running a model over a token file, with selections recorded ---- */

typedef struct selections {
    uint32_t n_layer, n_pos, k, topk;
    int32_t *experts;      /* [n_layer][n_pos][k] */
    int32_t *blocks;       /* [n_layer][n_pos][topk], -1 padded */
    double *min_hash_logit;/* [n_pos] lowest router logit among hash-selected experts */
} selections;

static void record(void *ud, const ds4_tap *t) {
    selections *s = ud;
    if (t->layer >= s->n_layer || t->pos >= s->n_pos) return;
    uint64_t at = (uint64_t)t->layer * s->n_pos + t->pos;
    if (!strcmp(t->name, "experts")) {
        memcpy(s->experts + at * s->k, t->data, sizeof(int32_t) * s->k);
    } else if (!strcmp(t->name, "indexer_sel")) {
        int32_t *dst = s->blocks + at * s->topk;
        for (uint32_t i = 0; i < s->topk; i++) dst[i] = i < t->n ? ((const int32_t *)t->data)[i] : -1;
    }
}

typedef struct run {
    uint32_t n, n_vocab;
    float *logits;         /* [n][n_vocab] */
    selections sel;
} run;

static int32_t *read_tokens(const char *path, uint32_t *n) {
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    int32_t *t = malloc(sizeof(int32_t) * 8192);
    while (*n < 8192 && fscanf(f, "%d", &t[*n]) == 1) (*n)++;
    fclose(f);
    return t;
}

static void run_model(const char *model, const char *tokens, bool qat, uint32_t chunk, run *r) {
    ds4err err = {0};
    ds4_model m;
    assert_int_equal(ds4_model_open(&m, model, &err), 0);
    uint32_t n;
    int32_t *toks = read_tokens(tokens, &n);
    assert_non_null(toks);
    ds4_engine e;
    ds4_fwd_opts o = {.qat = qat};
    assert_int_equal(ds4_engine_init(&e, &m, &o, chunk, &err), 0);
    memset(r, 0, sizeof(*r));
    r->n = n;
    r->n_vocab = m.cfg.n_vocab;
    r->sel.n_layer = m.cfg.n_layer;
    r->sel.n_pos = n;
    r->sel.k = m.cfg.n_expert_used;
    r->sel.topk = m.cfg.idx_topk ? m.cfg.idx_topk : 1;
    r->sel.experts = calloc((size_t)m.cfg.n_layer * n * r->sel.k, sizeof(int32_t));
    r->sel.blocks = calloc((size_t)m.cfg.n_layer * n * r->sel.topk, sizeof(int32_t));
    e.tap = record;
    e.tap_ud = &r->sel;
    ds4_session s;
    ds4_session_opts so = {.ctx = n + 1, .chunk = chunk, .rollback = 0};
    assert_int_equal(ds4_session_init(&s, &e, &so, &err), 0);
    r->logits = malloc(sizeof(float) * (size_t)n * m.cfg.n_vocab);
    if (ds4_session_eval(&s, toks, n, r->logits, NULL, &err)) fail_msg("%s", err.msg);
    ds4_session_free(&s);
    ds4_engine_free(&e);
    ds4_model_close(&m);
    free(toks);
}

static void run_free(run *r) {
    free(r->logits);
    free(r->sel.experts);
    free(r->sel.blocks);
}

static float *read_f32(const char *path, size_t n) {
    uint8_t *buf;
    size_t len;
    if (tu_read_file(path, &buf, &len)) return NULL;
    assert_int_equal(len, n * sizeof(float));
    return (float *)(void *)buf;
}

static double *read_f64(const char *path, size_t n) {
    uint8_t *buf;
    size_t len;
    if (tu_read_file(path, &buf, &len)) return NULL;
    assert_int_equal(len, n * sizeof(double));
    return (double *)(void *)buf;
}

/* ---- per-position comparison figures (oracle README §8) ---- */

typedef struct figures {
    double rms_median, rms_p90, rms_max, max_abs;
    uint32_t argmax_agree, first_over_1e4, n;
} figures;

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint32_t argmax_d(const double *v, uint32_t n) {
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* ref as double rows; positions [0, n). */
static figures compare(const float *ours, const double *ref, uint32_t n, uint32_t V) {
    figures f = {0};
    double *rms = malloc(sizeof(double) * n);
    f.first_over_1e4 = UINT32_MAX;
    f.n = n;
    for (uint32_t i = 0; i < n; i++) {
        double ss = 0;
        for (uint32_t v = 0; v < V; v++) {
            double d = (double)ours[(size_t)i * V + v] - ref[(size_t)i * V + v];
            ss += d * d;
            if (fabs(d) > f.max_abs) f.max_abs = fabs(d);
        }
        rms[i] = sqrt(ss / V);
        if (rms[i] > 1e-4 && f.first_over_1e4 == UINT32_MAX) f.first_over_1e4 = i;
        if ((uint32_t)ds4_argmax(ours + (size_t)i * V, V) == argmax_d(ref + (size_t)i * V, V))
            f.argmax_agree++;
    }
    qsort(rms, n, sizeof(double), cmp_dbl);
    f.rms_median = rms[n / 2];
    f.rms_p90 = rms[n * 9 / 10];
    f.rms_max = rms[n - 1];
    free(rms);
    return f;
}

static double *widen(const float *x, size_t n) {
    double *d = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static void print_figures(const char *what, const figures *f) {
    printf("  %-44s rms median %.3g p90 %.3g max %.3g | max|d| %.3g | argmax %u/%u\n", what,
           f->rms_median, f->rms_p90, f->rms_max, f->max_abs, f->argmax_agree, f->n);
}

/* ---- the official oracle ---- */

/* Fraction of (layer, position) selections equal to the official debug dump
 * (as sets; the official order is by score). */
static double selection_agreement(const run *r, const char *debug_path, uint32_t *checked) {
    uint8_t *buf;
    size_t len;
    assert_int_equal(tu_read_file(debug_path, &buf, &len), 0);
    ds4_json_doc *doc;
    ds4err err = {0};
    if (ds4_json_parse((const char *)buf, len, debug_path, &doc, &err)) fail_msg("%s", err.msg);
    const ds4_json *root = ds4_json_root(doc);
    uint32_t same = 0, total = 0;
    for (uint32_t l = 0; l < r->sel.n_layer; l++) {
        char key[16];
        snprintf(key, sizeof(key), "L%u", l);
        const ds4_json *ex = ds4_json_get(ds4_json_get(ds4_json_get(root, "routing"), key), "experts");
        assert_non_null(ex);
        for (uint32_t p = 0; p < r->n; p++) {
            const ds4_json *row = &ex->elems[p];
            const int32_t *ours = r->sel.experts + ((uint64_t)l * r->n + p) * r->sel.k;
            bool eq = row->n == r->sel.k;
            for (uint32_t i = 0; eq && i < row->n; i++) {
                bool found = false;
                for (uint32_t j = 0; j < r->sel.k; j++) found |= ours[j] == (int32_t)row->elems[i].num;
                eq = found;
            }
            same += eq;
            total++;
        }
        const ds4_json *ix = ds4_json_get(ds4_json_get(root, "indexer"), key);
        if (!ix) continue;
        const ds4_json *blocks = ds4_json_get(ix, "blocks");
        for (uint32_t p = 0; p < r->n; p++) {
            const ds4_json *row = &blocks->elems[p];
            const int32_t *ours = r->sel.blocks + ((uint64_t)l * r->n + p) * r->sel.topk;
            bool eq = true;
            for (uint32_t i = 0; i < r->sel.topk; i++) {
                int32_t want = i < row->n ? (int32_t)row->elems[i].num : -1;
                eq &= ours[i] == want;
            }
            same += eq;
            total++;
        }
    }
    ds4_json_free(doc);
    free(buf);
    *checked = total;
    return (double)same / total;
}

static void official(void **state, bool qat) {
    (void)state;
    char *dir = tu_shared("oracle/official");
    if (!dir) skip();
    char *model = tu_path(dir, "model.gguf"), *tokens = tu_path(dir, "tokens.txt");
    char *prefill = tu_path(dir, qat ? "logits_prefill.qat_on.f64" : "logits_prefill.qat_off.f64");
    char *decode = tu_path(dir, qat ? "logits_decode.qat_on.f32" : "logits_decode.qat_off.f32");
    char *debug = tu_path(dir, qat ? "debug.qat_on.json" : "debug.qat_off.json");
    run pre, dec;
    run_model(model, tokens, qat, 512, &pre);
    run_model(model, tokens, qat, 1, &dec);
    uint32_t n = pre.n, V = pre.n_vocab;
    /* Prefill and one-token decode are the same arithmetic. */
    assert_memory_equal(pre.logits, dec.logits, sizeof(float) * n * V);

    double *ref = read_f64(prefill, (size_t)n * V);
    float *ref_dec32 = read_f32(decode, (size_t)n * V);
    double *ref_dec = widen(ref_dec32, (size_t)n * V);
    figures f = compare(pre.logits, ref, n, V), fd = compare(pre.logits, ref_dec, n, V);
    print_figures(qat ? "official qat on, prefill (f64)" : "official qat off, prefill (f64)", &f);
    print_figures(qat ? "official qat on, decode (f32)" : "official qat off, decode (f32)", &fd);
    uint32_t checked;
    double agree = selection_agreement(&pre, debug, &checked);
    printf("  selections equal to the official dump: %.4f of %u\n", agree, checked);
    if (!qat) {
        assert_true(f.max_abs <= 1e-4);
        assert_true(fd.max_abs <= 1e-4);
        assert_int_equal(f.argmax_agree, n);
        assert_true(agree == 1.0);
    } else {
        double ss = 0, ssr = 0;
        for (size_t i = 0; i < (size_t)n * V; i++) {
            double d = pre.logits[i] - ref[i];
            ss += d * d;
            ssr += ref[i] * ref[i];
        }
        printf("  rms(d)/rms(logits) %.4g, first position over 1e-4: %u\n", sqrt(ss / ssr),
               f.first_over_1e4);
        assert_true((double)f.argmax_agree / n >= 0.98);
        assert_true(sqrt(ss / ssr) <= 0.03);
        assert_true(f.max_abs <= 1.5);
        assert_true(agree >= 0.90);
    }
    free(ref);
    free(ref_dec32);
    free(ref_dec);
    run_free(&pre);
    run_free(&dec);
    free(model);
    free(tokens);
    free(prefill);
    free(decode);
    free(debug);
    free(dir);
}

static void test_official_qat_off(void **state) { official(state, false); }
static void test_official_qat_on(void **state) { official(state, true); }

/* ---- llama.cpp, exact math ---- */

static void test_llama_tiny_f32(void **state) {
    (void)state;
    char *dir = tu_shared("oracle/tiny-f32");
    if (!dir) skip();
    char *model = tu_path(dir, "model.gguf"), *tokens = tu_path(dir, "tokens.txt");
    char *ref_path = tu_path(dir, "llama_logits.f32");
    run r;
    run_model(model, tokens, false, 512, &r);
    uint32_t n = r.n, V = r.n_vocab;
    float *ref32 = read_f32(ref_path, (size_t)n * V);
    double *ref = widen(ref32, (size_t)n * V);
    /* Position 28 is the first token whose hash-routed layer-0 experts
     * include a router logit below -20 (docs/ORACLES.md): llama.cpp's f32
     * log(1+exp(x)) returns 0 there, the official log1p does not.  Before
     * it, the two implementations compute the same exact-math model. */
    const uint32_t first_softplus_underflow = 28;
    figures head = compare(r.logits, ref, first_softplus_underflow, V);
    figures all = compare(r.logits, ref, n, V);
    print_figures("llama tiny-f32, positions 0..27", &head);
    print_figures("llama tiny-f32, all positions", &all);
    assert_true(head.rms_max <= 1e-4);
    assert_true(head.max_abs <= 1e-3);
    assert_int_equal(head.argmax_agree, first_softplus_underflow);
    /* Measured: median 1.5e-4, argmax 298/300; with llama.cpp's f32 softplus
     * emulated the median drops to 1.2e-6 and every remaining spike sits at
     * an exact indexer tie (score 0 from all-negative heads). */
    assert_true(all.rms_median <= 1e-3);
    assert_true(all.argmax_agree >= 295);
    free(ref32);
    free(ref);
    run_free(&r);
    free(model);
    free(tokens);
    free(ref_path);
    free(dir);
}

/* ---- llama.cpp and ds4.c with activation quantization ---- */

static void against(const run *r, const char *dir, const char *file, double max_median,
                    uint32_t min_argmax, const char *label) {
    char *path = tu_path(dir, file);
    float *ref32 = read_f32(path, (size_t)r->n * r->n_vocab);
    double *ref = widen(ref32, (size_t)r->n * r->n_vocab);
    figures f = compare(r->logits, ref, r->n, r->n_vocab);
    print_figures(label, &f);
    assert_true(f.rms_median <= max_median);
    assert_true(f.argmax_agree >= min_argmax);
    free(ref32);
    free(ref);
    free(path);
}

static void test_tiny_ds4types(void **state) {
    (void)state;
    char *dir = tu_shared("oracle/tiny-ds4types");
    if (!dir) skip();
    char *model = tu_path(dir, "model.gguf"), *tokens = tu_path(dir, "tokens.txt");
    run off, on;
    run_model(model, tokens, false, 512, &off);
    run_model(model, tokens, true, 512, &on);
    /* The oracles' mutual agreement (README §6): llama vs ds4 QAT off median
     * 0.059, argmax 255/300; llama vs ds4 QAT on 0.10, 228/300. */
    against(&off, dir, "llama_logits.f32", 0.059, 255, "qat off vs llama.cpp");
    against(&off, dir, "ds4_qat_off_logits.f32", 0.059, 255, "qat off vs ds4.c qat off");
    against(&on, dir, "ds4_qat_on_logits.f32", 0.10, 228, "qat on vs ds4.c qat on");
    run_free(&off);
    run_free(&on);
    free(model);
    free(tokens);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_official_qat_off),
        cmocka_unit_test(test_official_qat_on),
        cmocka_unit_test(test_llama_tiny_f32),
        cmocka_unit_test(test_tiny_ds4types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
