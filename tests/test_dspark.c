/* The DSpark drafter of DeepSeek-V4-Flash-0731 (tiny-dspark: a tiny 0731
 * model whose drafter mostly drafts what it decodes).
 *
 *  - Its pieces against independent computations in double: the trunk's
 *    DSpark input (the mean of the HC streams the debug taps report after
 *    each target layer), the context rows (main_proj, main_norm, each
 *    stage's wkv, kv_norm and RoPE, written out here), the Markov term and
 *    the confidence logit (dot products of the dequantized rows).
 *  - The block's attention: bidirectional (slot 0 changes with the block's
 *    size), over the last swa context rows only, and the same bits in any
 *    batch.
 *  - The drafter: its drafts after a speculative run are those of a fresh
 *    state made from the committed tokens in one pass; misuse is refused.
 *  - Speculative decoding with it is plain greedy decoding record for record
 *    at every depth (beyond the block too), chunk size and confidence
 *    threshold, and with several rows decoded together. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "greedy.h"
#include "quant/types.h"
#include "ref/decode/dspark_drafter.h"
#include "ref/decode/sample.h"
#include "ref/decode/session.h"
#include "ref/decode/speculative.h"
#include "ref/forward/head.h"
#include "quant/gguf.h"
#include "quant/gguf_write.h"
#include "ref/model/dflash_write.h"
#include "ref/model/model.h"
#include "testutil.h"

static bool under_valgrind(void) { return getenv("DS4REF_VALGRIND") != NULL; }

typedef tu_model fixture;

static int group_setup(void **state) {
    ds4err err = {0};
    fixture *f = tu_model_new("tiny-dspark", 7, false, &err);
    if (!f) fail_msg("%s", err.msg);
    *state = f;
    return 0;
}

static int group_teardown(void **state) {
    tu_model_free(*state);
    return 0;
}

static void engine_new(const ds4_model *m, bool qat, uint32_t cap, ds4_engine *e) {
    ds4err err = {0};
    ds4_fwd_opts fo = {.qat = qat};
    if (ds4_engine_init(e, m, &fo, cap, &err)) fail_msg("%s", err.msg);
}

static void session_new(ds4_engine *e, uint32_t ctx, uint32_t chunk, uint32_t rollback,
                        ds4_session *s) {
    ds4err err = {0};
    ds4_session_opts so = {.ctx = ctx, .chunk = chunk, .rollback = rollback};
    if (ds4_session_init(s, e, &so, &err)) fail_msg("%s", err.msg);
}

static uint64_t in_width(const ds4_config *c) { return (uint64_t)c->n_dspark_target * c->n_embd; }

/* The DSpark input of tokens [0, n) evaluated in passes of `chunk`. */
static float *trunk_taps(const ds4_model *m, bool qat, const int32_t *toks, uint32_t n,
                         uint32_t chunk, ds4_tap_fn tap, void *ud) {
    ds4err err = {0};
    ds4_engine e;
    engine_new(m, qat, 64, &e);
    e.tap = tap;
    e.tap_ud = ud;
    ds4_session s;
    session_new(&e, n + 1, chunk, 0, &s);
    float *taps = malloc(sizeof(float) * n * in_width(&m->cfg));
    ds4_session_req r = {&s, toks, n, NULL, NULL, taps};
    if (ds4_session_eval_many(&r, 1, &err)) fail_msg("%s", err.msg);
    ds4_session_free(&s);
    ds4_engine_free(&e);
    return taps;
}

/* ---- the trunk's DSpark input ---- */

typedef struct tap_means {
    const ds4_config *c;
    float *rows;           /* [n][in_w]: what the hc_ffn taps say */
    uint32_t hits;
} tap_means;

static void on_tap(void *ud, const ds4_tap *t) {
    tap_means *tm = ud;
    const ds4_config *c = tm->c;
    if (strcmp(t->name, "hc_ffn") || t->layer >= c->n_layer) return;
    for (uint32_t k = 0; k < c->n_dspark_target; k++) {
        if (c->dspark_target[k] != t->layer) continue;
        const float *x = t->data;
        float *row = tm->rows + t->pos * in_width(c) + (uint64_t)k * c->n_embd;
        for (uint32_t d = 0; d < c->n_embd; d++) {
            double s = 0;
            for (uint32_t h = 0; h < c->n_hc; h++) s += x[(uint64_t)h * c->n_embd + d];
            row[d] = (float)(s / c->n_hc);
        }
        tm->hits++;
    }
}

static void test_taps(void **state) {
    fixture *f = *state;
    const ds4_config *c = &f->m.cfg;
    uint32_t n = 11;
    int32_t *toks = tu_random_tokens(n, c->n_vocab, 5);
    tap_means tm = {c, calloc((size_t)n * in_width(c), sizeof(float)), 0};
    float *whole = trunk_taps(&f->m, true, toks, n, 64, on_tap, &tm);
    assert_int_equal(tm.hits, n * c->n_dspark_target);
    assert_memory_equal(whole, tm.rows, sizeof(float) * n * in_width(c));
    float *chunked = trunk_taps(&f->m, true, toks, n, 3, NULL, NULL);
    assert_memory_equal(whole, chunked, sizeof(float) * n * in_width(c));
    free(whole);
    free(chunked);
    free(tm.rows);
    free(toks);
}

/* ---- the Markov and confidence heads ---- */

static double *dequant(const ds4_mat *W, uint64_t row, uint64_t n) {
    float *f = malloc(sizeof(float) * n);
    double *d = malloc(sizeof(double) * n);
    assert_int_equal(ds4_types_dequant_row(W->type, W->data + row * W->row_bytes, f, n), 0);
    for (uint64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

static void near(double got, double want, double tol) {
    if (fabs(got - want) > tol * (1 + fabs(want)))
        fail_msg("got %.9g, want %.9g (tolerance %g)", got, want, tol);
}

static void test_markov_confidence(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    const ds4_config *c = &m->cfg;
    uint32_t V = c->n_vocab, R = c->dspark_rank, n = c->n_embd;
    float *emb = malloc(sizeof(float) * R), *bias = malloc(sizeof(float) * V);
    float *pre = malloc(sizeof(float) * n), *tmp = malloc(sizeof(float) * (n + R));
    uint64_t seed = 3;
    for (uint32_t d = 0; d < n; d++) pre[d] = (float)tu_uniform(&seed, -2, 2);
    const int32_t prevs[] = {0, 17, (int32_t)V - 1};
    for (size_t i = 0; i < sizeof(prevs) / sizeof(prevs[0]); i++) {
        ds4_head_markov(m, prevs[i], emb, bias);
        double *w1 = dequant(&m->dspark->markov_w1, (uint64_t)prevs[i], R);
        for (uint32_t r = 0; r < R; r++) assert_true(emb[r] == (float)w1[r]);
        for (uint32_t v = 0; v < V; v += 7) {
            double *w2 = dequant(&m->dspark->markov_w2, v, R), s = 0;
            for (uint32_t r = 0; r < R; r++) s += w2[r] * w1[r];
            near(bias[v], s, 1e-6);
            free(w2);
        }
        double *proj = dequant(&m->dspark->conf_proj, 0, (uint64_t)n + R), s = 0;
        for (uint32_t d = 0; d < n; d++) s += proj[d] * pre[d];
        for (uint32_t r = 0; r < R; r++) s += proj[n + r] * w1[r];
        near(ds4_head_confidence(m, pre, emb, tmp), s, 1e-6);
        free(proj);
        free(w1);
    }
    free(emb);
    free(bias);
    free(pre);
    free(tmp);
}

/* ---- context rows ---- */

static void rms(double *x, uint32_t n, const float *w, double eps) {
    double s = 0;
    for (uint32_t i = 0; i < n; i++) s += x[i] * x[i];
    double r = 1 / sqrt(s / n + eps);
    for (uint32_t i = 0; i < n; i++) x[i] = x[i] * r * w[i];
}

/* Context row p of stage st written out: main_x = main_norm(main_proj .
 * taps), kv = kv_norm(wkv . main_x), RoPE at p on the last n_rot dims
 * (interleaved pairs, base rope_base, no YaRN); QAT off. */
static void ctx_row(const ds4_model *m, const float *taps, uint32_t st, uint32_t p, double *kv) {
    const ds4_config *c = &m->cfg;
    const ds4_dspark *d = m->dspark;
    uint32_t n = c->n_embd, hd = c->head_dim;
    uint64_t in_w = in_width(c);
    double *x = malloc(sizeof(double) * n);
    for (uint32_t i = 0; i < n; i++) {
        double *w = dequant(&d->main_proj, i, in_w), s = 0;
        for (uint64_t k = 0; k < in_w; k++) s += w[k] * taps[k];
        x[i] = (float)s;
        free(w);
    }
    rms(x, n, d->main_norm.v, c->rms_eps);
    for (uint32_t j = 0; j < hd; j++) {
        double *w = dequant(&d->stage[st].kv, j, n), s = 0;
        for (uint32_t i = 0; i < n; i++) s += w[i] * (float)x[i];
        kv[j] = (float)s;
        free(w);
    }
    rms(kv, hd, d->stage[st].kv_norm.v, c->rms_eps);
    double *r = kv + hd - c->n_rot;
    for (uint32_t j = 0; j < c->n_rot / 2; j++) {
        double a = p * pow(c->rope_base, -2.0 * j / c->n_rot);
        double x0 = r[2 * j], x1 = r[2 * j + 1];
        r[2 * j] = x0 * cos(a) - x1 * sin(a);
        r[2 * j + 1] = x0 * sin(a) + x1 * cos(a);
    }
    free(x);
}

static void test_ctx_rows(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    const ds4_config *c = &m->cfg;
    uint32_t n = 9;
    int32_t *toks = tu_random_tokens(n, c->n_vocab, 8);
    float *taps = trunk_taps(m, false, toks, n, 64, NULL, NULL);
    ds4err err = {0};
    ds4_engine e;
    engine_new(m, false, 64, &e);
    ds4_kv kv;
    assert_int_equal(ds4_forward_dspark_kv_init(&kv, m, 32, 4, 0, &err), 0);
    for (uint32_t done = 0; done < n;) {
        ds4_dspark_ctx q = {&kv, taps + done * in_width(c), n - done < 4 ? n - done : 4};
        assert_int_equal(ds4_forward_dspark_ctx(&e, &q, 1, &err), 0);
        done += q.n;
    }
    assert_int_equal(kv.pos, n);
    double *want = malloc(sizeof(double) * c->head_dim);
    for (uint32_t st = 0; st < c->dspark_stages; st++)
        for (uint32_t p = 0; p < n; p += 4) {
            ctx_row(m, taps + p * in_width(c), st, p, want);
            const float *got = ds4_kv_raw_row(&kv, st, p);
            for (uint32_t j = 0; j < c->head_dim; j++) near(got[j], want[j], 1e-5);
        }
    free(want);
    ds4_kv_free(&kv);
    ds4_engine_free(&e);
    free(taps);
    free(toks);
}

/* ---- the block ---- */

/* A DSpark state of n context rows from random inputs (seeded). */
static void random_ctx(ds4_engine *e, ds4_kv *kv, uint32_t n, uint64_t seed) {
    const ds4_config *c = &e->m->cfg;
    ds4err err = {0};
    if (ds4_forward_dspark_kv_init(kv, e->m, 256, n, 0, &err)) fail_msg("%s", err.msg);
    float *taps = malloc(sizeof(float) * n * in_width(c));
    for (uint64_t i = 0; i < n * in_width(c); i++) taps[i] = (float)tu_uniform(&seed, -1, 1);
    ds4_dspark_ctx q = {kv, taps, n};
    if (ds4_forward_dspark_ctx(e, &q, 1, &err)) fail_msg("%s", err.msg);
    free(taps);
}

/* The block's base logits after kv's context (B slots), and its HC head
 * outputs before the norm in pre (NULL: not wanted). */
static float *block_pre(ds4_engine *e, ds4_kv *kv, int32_t anchor, float *pre) {
    const ds4_config *c = &e->m->cfg;
    ds4err err = {0};
    float *lg = malloc(sizeof(float) * c->dspark_block * c->n_vocab);
    ds4_dspark_blk b = {kv, anchor, lg, pre};
    if (ds4_forward_dspark_block(e, &b, 1, &err)) fail_msg("%s", err.msg);
    return lg;
}

static float *block(ds4_engine *e, ds4_kv *kv, int32_t anchor) {
    return block_pre(e, kv, anchor, NULL);
}

static bool rows_equal(const float *a, const float *b, uint32_t n) {
    return !memcmp(a, b, sizeof(float) * n);
}

static void test_block_attention(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    const ds4_config *c = &m->cfg;
    uint32_t V = c->n_vocab, B = c->dspark_block, n = c->swa + 5;
    ds4_engine e;
    engine_new(m, true, 64, &e);
    /* Two contexts that differ only before the window of the block... */
    ds4_kv a, b, w;
    random_ctx(&e, &a, n, 1);
    random_ctx(&e, &b, n, 1);
    random_ctx(&e, &w, n, 1);
    for (uint32_t st = 0; st < c->dspark_stages; st++) {
        ds4_kv_raw_row(&b, st, n - c->swa - 1)[3] += 1.0f;
        ds4_kv_raw_row(&w, st, n - c->swa)[3] += 1.0f;
    }
    float *pre = malloc(sizeof(float) * B * c->n_embd);
    float *la = block_pre(&e, &a, 42, pre), *lb = block(&e, &b, 42), *lw = block(&e, &w, 42);
    assert_true(rows_equal(la, lb, B * V));
    /* The logits are the LM head of pre normed by the drafter's norm. */
    for (uint32_t k = 0; k < B; k += 2) {
        double *y = malloc(sizeof(double) * c->n_embd);
        for (uint32_t d = 0; d < c->n_embd; d++) y[d] = pre[(size_t)k * c->n_embd + d];
        rms(y, c->n_embd, m->dspark->norm.v, c->rms_eps);
        for (uint32_t v = 0; v < V; v += 5) {
            double *o = dequant(&m->output, v, c->n_embd), s = 0;
            for (uint32_t d = 0; d < c->n_embd; d++) s += o[d] * (float)y[d];
            near(la[(size_t)k * V + v], s, 1e-5);
            free(o);
        }
        free(y);
    }
    free(pre);
    /* ...and one that differs at the oldest row the window holds. */
    assert_false(rows_equal(la, lw, V));
    /* Any batch: both blocks in one pass give the same bits. */
    ds4_kv a2;
    random_ctx(&e, &a2, 7, 9);
    float *l2 = block(&e, &a2, 5);
    float *both = malloc(sizeof(float) * 2 * B * V);
    ds4_dspark_blk two[2] = {{&a, 42, both, NULL}, {&a2, 5, both + (size_t)B * V, NULL}};
    ds4err err = {0};
    assert_int_equal(ds4_forward_dspark_block(&e, two, 2, &err), 0);
    assert_true(rows_equal(both, la, B * V));
    assert_true(rows_equal(both + (size_t)B * V, l2, B * V));
    /* Bidirectional: slot 0 sees the slots after it, so a block of 2 gives
     * it other logits (a causal block would give the same). */
    ds4_model m2 = *m;
    m2.cfg.dspark_block = 2;
    ds4_engine e2;
    engine_new(&m2, true, 64, &e2);
    float *short_blk = block(&e2, &a, 42);
    assert_false(rows_equal(short_blk, la, V));
    ds4_engine_free(&e2);
    free(short_blk);
    free(both);
    free(l2);
    free(la);
    free(lb);
    free(lw);
    ds4_kv_free(&a);
    ds4_kv_free(&a2);
    ds4_kv_free(&b);
    ds4_kv_free(&w);
    ds4_engine_free(&e);
}

/* ---- llama.cpp's drafter file ---- */

/* The drafter file src written again to dst with dflash.target_layers[0]
 * set to target0 (when >= 0) and one more F32 tensor `extra` [1] (when
 * not NULL). */
static void rewrite_draft(const char *src, const char *dst, int64_t target0, const char *extra) {
    ds4err err = {0};
    ds4_gguf_file g;
    if (ds4_gguf_open(&g, src, &err)) fail_msg("%s", err.msg);
    ds4_gguf_writer *w = ds4_gguf_writer_new((uint32_t)g.alignment);
    for (uint64_t i = 0; i < g.n_kv; i++) {
        const ds4_gguf_kv *kv = &g.kv[i];
        if (target0 >= 0 && !strcmp(kv->key, "dflash.target_layers")) {
            uint32_t t[DS4_MAX_DSPARK_TARGET];
            assert_int_equal(ds4_gguf_get_arr_u32(&g, kv->key, t, kv->arr_n, &err), 0);
            t[0] = (uint32_t)target0;
            assert_int_equal(ds4_gguf_write_arr_u32(w, kv->key, t, kv->arr_n), 0);
            continue;
        }
        uint64_t end;
        assert_int_equal(ds4_gguf_skip_value(&g, kv->type, kv->value_off, &end, &err), 0);
        assert_int_equal(ds4_gguf_write_raw(w, kv->key, kv->type, g.map + kv->value_off,
                                            end - kv->value_off), 0);
    }
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const ds4_gguf_tensor *t = &g.tensors[i];
        assert_int_equal(ds4_gguf_write_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                               t->nbytes), 0);
    }
    const float one = 1;
    const uint64_t ne[1] = {1};
    if (extra) assert_int_equal(ds4_gguf_write_tensor(w, extra, DS4_TYPE_F32, 1, ne, &one, 4), 0);
    if (ds4_gguf_writer_save(w, dst, &err)) fail_msg("%s", err.msg);
    ds4_gguf_writer_free(w);
    ds4_gguf_close(&g);
}

/* Loading draft into the trunk fails with a message holding `what`, and
 * leaves the model as it was. */
static void refused(const char *trunk, const char *draft, const char *what) {
    ds4err err = {0};
    ds4_model m;
    if (ds4_model_open(&m, trunk, &err)) fail_msg("%s", err.msg);
    ds4_dspark *had = m.dspark;
    assert_int_not_equal(ds4_model_load_dspark(&m, draft, &err), 0);
    if (!strstr(err.msg, what)) fail_msg("expected '%s' in: %s", what, err.msg);
    assert_ptr_equal(m.dspark, had);
    ds4_model_close(&m);
}

/* The model split as llama.cpp ships it (ds4_dflash_write_split) reads back
 * as the same drafter: the configuration, and the same bits in a block;
 * what the file has that ds4ref does not implement, or a file that is not a
 * drafter, is refused by name. */
static void test_dflash_file(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    char *dir = tu_tmpdir(), *trunk = tu_path(dir, "trunk.gguf"), *draft = tu_path(dir, "draft.gguf");
    char *bad = tu_path(dir, "bad.gguf");
    ds4err err = {0};
    if (ds4_dflash_write_split(f->path, trunk, draft, &err)) fail_msg("%s", err.msg);
    ds4_model t;
    if (ds4_model_open(&t, trunk, &err)) fail_msg("%s", err.msg);
    assert_null(t.dspark);
    if (ds4_model_load_dspark(&t, draft, &err)) fail_msg("%s", err.msg);
    const ds4_config *a = &m->cfg, *b = &t.cfg;
    assert_int_equal(b->dspark_stages, a->dspark_stages);
    assert_int_equal(b->dspark_block, a->dspark_block);
    assert_int_equal(b->dspark_noise, a->dspark_noise);
    assert_int_equal(b->dspark_rank, a->dspark_rank);
    assert_int_equal(b->n_dspark_target, a->n_dspark_target);
    assert_memory_equal(b->dspark_target, a->dspark_target, sizeof(uint32_t) * a->n_dspark_target);
    assert_true(t.dspark->stage[0].clamp_exp == m->dspark->stage[0].clamp_exp);
    ds4_engine e1, e2;
    engine_new(m, true, 64, &e1);
    engine_new(&t, true, 64, &e2);
    ds4_kv k1, k2;
    random_ctx(&e1, &k1, 21, 4);
    random_ctx(&e2, &k2, 21, 4);
    float *l1 = block(&e1, &k1, 17), *l2 = block(&e2, &k2, 17);
    assert_true(rows_equal(l1, l2, m->cfg.dspark_block * m->cfg.n_vocab));
    free(l1), free(l2);
    ds4_kv_free(&k1), ds4_kv_free(&k2);
    ds4_engine_free(&e1), ds4_engine_free(&e2);
    ds4_model_close(&t);
    refused(f->path, draft, "has a DSpark drafter of its own");
    refused(trunk, trunk, "expected 'dflash'");
    rewrite_draft(draft, bad, -1, "conf_proj.bias");
    refused(trunk, bad, "conf_proj.bias");
    rewrite_draft(draft, bad, -1, "fc.scale");
    refused(trunk, bad, "fc.scale");
    rewrite_draft(draft, bad, 0, NULL);
    refused(trunk, bad, "target_layers[0] = 0");
    rewrite_draft(draft, bad, m->cfg.n_layer + 1, NULL);
    refused(trunk, bad, "expected a layer's input");
    remove(trunk), remove(draft), remove(bad);
    free(trunk), free(draft), free(bad);
    tu_rmdir(dir);
}

/* ---- the drafter ---- */

/* Drafts after committed tokens ids[0..n) and x, from a fresh state made of
 * the trunk's input of all n tokens in one pass, written out: the block,
 * then markov(prev) added slot by slot, argmax. */
static uint32_t fresh_drafts(const ds4_model *m, const int32_t *ids, uint32_t n, int32_t x,
                             uint32_t depth, double tau, int32_t *out, float *q) {
    const ds4_config *c = &m->cfg;
    uint32_t V = c->n_vocab;
    float *taps = trunk_taps(m, true, ids, n, 64, NULL, NULL);
    ds4err err = {0};
    ds4_engine e;
    engine_new(m, true, 64, &e);
    ds4_kv kv;
    assert_int_equal(ds4_forward_dspark_kv_init(&kv, m, n + 1, n, 0, &err), 0);
    ds4_dspark_ctx cx = {&kv, taps, n};
    assert_int_equal(ds4_forward_dspark_ctx(&e, &cx, 1, &err), 0);
    float *pre = malloc(sizeof(float) * c->dspark_block * c->n_embd);
    float *tmp = malloc(sizeof(float) * (c->n_embd + c->dspark_rank));
    float *lg = block_pre(&e, &kv, x, pre);
    float *emb = malloc(sizeof(float) * c->dspark_rank), *bias = malloc(sizeof(float) * V);
    uint32_t k;
    int32_t prev = x;
    for (k = 0; k < depth && k < c->dspark_block; k++) {
        ds4_head_markov(m, prev, emb, bias);
        double conf = ds4_head_confidence(m, pre + (size_t)k * c->n_embd, emb, tmp);
        if (tau > 0 && 1 / (1 + exp(-conf)) < tau) break;
        float *row = lg + (size_t)k * V;
        for (uint32_t v = 0; v < V; v++) row[v] += bias[v];
        if (q) memcpy(q + (size_t)k * V, row, sizeof(float) * V);
        out[k] = prev = ds4_sample_argmax(row, V);
    }
    free(emb);
    free(bias);
    free(lg);
    free(pre);
    free(tmp);
    ds4_kv_free(&kv);
    ds4_engine_free(&e);
    free(taps);
    return k;
}

static void test_drafter_state(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    uint32_t V = m->cfg.n_vocab, np = 6, steps = under_valgrind() ? 6 : 20;
    int32_t *prompt = tu_random_tokens(np, V, 21);
    ds4err err = {0};
    ds4_engine e;
    engine_new(m, true, 8, &e);
    ds4_session s;
    session_new(&e, 64, 8, 7, &s);
    ds4_drafter *d;
    /* Context passes of 3 rows: the state is caught up across several. */
    if (ds4_dspark_drafter_new(&d, &e, 1, 64, 3, 7, 0, &err)) fail_msg("%s", err.msg);
    ds4_session *rows[1] = {&s};
    const int32_t *pp[1] = {prompt};
    assert_int_equal(ds4_spec_prefill(d, rows, pp, &np, 1, &err), 0);
    ds4_spec_cfg sc = {d, 7, 0};
    ds4_gen_opts go = {.n_steps = steps, .top_k = 2, .eos = -1};
    ds4_spec_row sr = {.s = &s, .steps = calloc(steps, sizeof(ds4_gen_step))};
    ds4_spec_stats st = {0};
    if (ds4_spec_generate(&sc, &go, &sr, 1, &st, &err)) fail_msg("%s", err.msg);
    /* Commit the last record's token, then ask for drafts after another. */
    uint32_t n = s.kv.pos;
    int32_t last = sr.steps[sr.n_done - 1].token;
    float *taps = malloc(sizeof(float) * in_width(&m->cfg));
    ds4_session_req r = {&s, &last, 1, NULL, NULL, taps};
    assert_int_equal(ds4_session_eval_many(&r, 1, &err), 0);
    assert_int_equal(d->commit(d, 0, n, &last, taps, 1, &err), 0);
    int32_t x = ds4_sample_argmax(s.logits, V), got[7], want[7];
    float *q = malloc(sizeof(float) * 7 * V);
    ds4_draft_req req = {.row = 0, .pos = n + 1, .next = x, .n = 7, .drafts = got, .q_logits = q};
    ds4_draft_mode mode = {0, NULL, -1};
    if (d->propose(d, &req, 1, &mode, &err)) fail_msg("%s", err.msg);
    /* The distribution each draft came from (sampling's q) too. */
    float *qw = malloc(sizeof(float) * 7 * V);
    uint32_t nw = fresh_drafts(m, s.hist, n + 1, x, 7, 0, want, qw);
    assert_int_equal(req.n_out, nw);
    assert_int_equal(nw, m->cfg.dspark_block);
    assert_memory_equal(got, want, sizeof(int32_t) * nw);
    assert_memory_equal(q, qw, sizeof(float) * nw * V);
    free(qw);
    /* With a confidence threshold: the same drafts, cut where the first
     * slot's confidence falls below it. */
    ds4_drafter *dt;
    if (ds4_dspark_drafter_new(&dt, &e, 1, 64, 64, 7, 0.5, &err)) fail_msg("%s", err.msg);
    float *all = trunk_taps(m, true, s.hist, n + 1, 64, NULL, NULL);
    assert_int_equal(dt->commit(dt, 0, 0, s.hist, all, n + 1, &err), 0);
    uint32_t cut = 0, whole = 0;
    for (int32_t a = 0; a < (under_valgrind() ? 2 : 24); a++) {
        req = (ds4_draft_req){.row = 0, .pos = n + 1, .next = a, .n = 7, .drafts = got};
        if (dt->propose(dt, &req, 1, &mode, &err)) fail_msg("%s", err.msg);
        nw = fresh_drafts(m, s.hist, n + 1, a, 7, 0.5, want, NULL);
        assert_int_equal(req.n_out, nw);
        assert_memory_equal(got, want, sizeof(int32_t) * nw);
        cut += nw < m->cfg.dspark_block;
        whole += nw == m->cfg.dspark_block;
    }
    if (!under_valgrind()) assert_true(cut > 0 && whole > 0);
    free(all);
    ds4_spec_drafter_free(dt);
    const ds4_kv *dk = ds4_dspark_drafter_kv(d, 0, &err);
    assert_non_null(dk);
    assert_int_equal(dk->pos, n + 1);
    if (!under_valgrind()) assert_true(st.accepted > 0 && st.deepest >= 2);
    ds4_step_list_free(sr.steps, sr.n_done);
    free(sr.steps);
    free(q);
    free(taps);
    ds4_spec_drafter_free(d);
    ds4_session_free(&s);
    ds4_engine_free(&e);
    free(prompt);
}

static void test_drafter_misuse(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    ds4err err = {0};
    ds4_engine e;
    engine_new(m, true, 8, &e);
    ds4_drafter *d;
    assert_int_not_equal(ds4_dspark_drafter_new(&d, &e, 1, 64, 8, 3, 1.5, &err), 0);
    assert_non_null(strstr(err.msg, "confidence threshold"));
    assert_int_not_equal(ds4_dspark_drafter_new(&d, &e, 1, 64, 8, 17, 0, &err), 0);
    if (ds4_dspark_drafter_new(&d, &e, 2, 64, 8, 3, 0, &err)) fail_msg("%s", err.msg);
    int32_t drafts[3];
    ds4_draft_req req = {.row = 0, .pos = 4, .next = 1, .n = 3, .drafts = drafts};
    ds4_draft_mode mode = {0, NULL, -1};
    assert_int_not_equal(d->propose(d, &req, 1, &mode, &err), 0);
    assert_non_null(strstr(err.msg, "has seen positions [0, 0)"));
    float *taps = calloc(4 * in_width(&m->cfg), sizeof(float));
    int32_t ids[4] = {1, 2, 3, 4};
    assert_int_not_equal(d->commit(d, 0, 2, ids, taps, 4, &err), 0);
    assert_non_null(strstr(err.msg, "not 2"));
    assert_int_not_equal(d->commit(d, 0, 0, ids, NULL, 4, &err), 0);
    assert_non_null(strstr(err.msg, "DSpark input"));
    assert_int_not_equal(d->commit(d, 5, 0, ids, taps, 4, &err), 0);
    assert_non_null(strstr(err.msg, "row 5 of a 2-row"));
    /* A block needs context rows before it. */
    ds4_kv kv;
    assert_int_equal(ds4_forward_dspark_kv_init(&kv, m, 16, 4, 0, &err), 0);
    float lg[1];
    ds4_dspark_blk b = {&kv, 1, lg, NULL};
    assert_int_not_equal(ds4_forward_dspark_block(&e, &b, 1, &err), 0);
    assert_non_null(strstr(err.msg, "needs context rows"));
    b.anchor = -1;
    kv.pos = 1;
    assert_int_not_equal(ds4_forward_dspark_block(&e, &b, 1, &err), 0);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    ds4_kv_free(&kv);
    free(taps);
    ds4_spec_drafter_free(d);
    ds4_engine_free(&e);
}

/* ---- speculative decoding is plain greedy decoding ---- */

static void same_steps(const ds4_gen_step *a, const ds4_gen_step *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(a[i].token, b[i].token);
        assert_memory_equal(&a[i].logit, &b[i].logit, sizeof(float));
        assert_memory_equal(&a[i].logprob, &b[i].logprob, sizeof(double));
        assert_int_equal(a[i].n_top, b[i].n_top);
        assert_memory_equal(a[i].top_ids, b[i].top_ids, sizeof(int32_t) * a[i].n_top);
        assert_memory_equal(a[i].top_logits, b[i].top_logits, sizeof(float) * a[i].n_top);
    }
}

typedef struct outcome {
    ds4_gen_step *steps;
    uint32_t n;
    float *logits;         /* the session's after the run */
    ds4_spec_stats st;
} outcome;

static void outcome_free(outcome *o) {
    ds4_step_list_free(o->steps, o->n);
    free(o->steps);
    free(o->logits);
}

/* Rows decoded together (depth 0: plain greedy, one row at a time). */
static void decode(const ds4_model *m, int32_t *const *prompts, const uint32_t *np,
                   const uint32_t *steps, uint32_t n_rows, uint32_t depth, uint32_t chunk,
                   uint32_t cap, double tau, outcome *out) {
    ds4err err = {0};
    ds4_engine e;
    engine_new(m, true, cap, &e);
    ds4_session *s = calloc(n_rows, sizeof(ds4_session));
    ds4_session **rows = calloc(n_rows, sizeof(*rows));
    ds4_spec_row *sr = calloc(n_rows, sizeof(ds4_spec_row));
    ds4_drafter *d = NULL;
    if (depth && ds4_dspark_drafter_new(&d, &e, n_rows, 96, chunk, depth, tau, &err))
        fail_msg("%s", err.msg);
    for (uint32_t i = 0; i < n_rows; i++) {
        session_new(&e, 96, chunk, depth, &s[i]);
        rows[i] = &s[i];
        sr[i] = (ds4_spec_row){.s = &s[i], .n_steps = steps[i],
                               .steps = calloc(steps[i], sizeof(ds4_gen_step))};
    }
    if (ds4_spec_prefill(d, rows, (const int32_t *const *)prompts, np, n_rows, &err))
        fail_msg("%s", err.msg);
    ds4_gen_opts go = {.top_k = 3, .eos = -1};
    ds4_spec_cfg sc = {d, depth, 0};
    ds4_spec_stats st = {0};
    if (depth ? ds4_spec_generate(&sc, &go, sr, n_rows, &st, &err)
              : ds4_generate_greedy(&s[0], &(ds4_gen_opts){.n_steps = steps[0], .top_k = 3, .eos = -1},
                                    sr[0].steps, &sr[0].n_done, NULL, NULL, &err))
        fail_msg("%s", err.msg);
    for (uint32_t i = 0; i < n_rows; i++) {
        out[i] = (outcome){sr[i].steps, sr[i].n_done, malloc(sizeof(float) * m->cfg.n_vocab), st};
        memcpy(out[i].logits, s[i].logits, sizeof(float) * m->cfg.n_vocab);
        ds4_session_free(&s[i]);
    }
    ds4_spec_drafter_free(d);
    ds4_engine_free(&e);
    free(s);
    free(rows);
    free(sr);
}

static void same_outcome(const ds4_model *m, const outcome *ref, const outcome *got) {
    assert_int_equal(got->n, ref->n);
    same_steps(ref->steps, got->steps, ref->n);
    assert_memory_equal(got->logits, ref->logits, sizeof(float) * m->cfg.n_vocab);
}

static void test_spec_exact(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    uint32_t np = 7, steps = under_valgrind() ? 6 : 28;
    int32_t *prompt = tu_random_tokens(np, m->cfg.n_vocab, 2);
    outcome ref;
    decode(m, &prompt, &np, &steps, 1, 0, 64, 64, 0, &ref);
    const uint32_t depths[] = {1, 2, 3, 5, 7};
    const uint32_t chunks[] = {64, 3};
    const double taus[] = {0, 0.5};
    for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++)
        for (size_t j = 0; j < 2; j++)
            for (size_t k = 0; k < 2; k++) {
                if (under_valgrind() && (depths[i] != 5 || j != 1)) continue;
                outcome got;
                uint32_t cap = chunks[j] > m->cfg.dspark_block ? chunks[j] : m->cfg.dspark_block;
                decode(m, &prompt, &np, &steps, 1, depths[i], chunks[j], cap, taus[k], &got);
                same_outcome(m, &ref, &got);
                char line[160];
                ds4_spec_report(&got.st, line, sizeof(line));
                printf("  DSpark depth %u chunk %2u tau %.1f: %s\n", depths[i], chunks[j], taus[k],
                       line);
                /* A block drafts its size at most; positions add up. */
                assert_true(got.st.proposed <= got.st.iters * m->cfg.dspark_block);
                uint64_t pa = 0, aa = 0;
                for (uint32_t q = 0; q < DS4_SPEC_MAX_DRAFT; q++) {
                    pa += got.st.proposed_at[q];
                    aa += got.st.accepted_at[q];
                    if (q >= m->cfg.dspark_block) assert_int_equal(got.st.proposed_at[q], 0);
                }
                assert_int_equal(pa, got.st.proposed);
                assert_int_equal(aa, got.st.accepted);
                ds4_spec_report_positions(&got.st, line, sizeof(line));
                printf("    %s\n", line);
                if (!under_valgrind() && !taus[k]) {
                    /* Accepts of several lengths, not only the first draft. */
                    assert_true(got.st.accepted > 0 && got.st.accepted < got.st.proposed);
                    if (depths[i] >= 3) assert_true(got.st.deepest >= 3);
                    assert_true(got.st.deepest <= depths[i] && got.st.deepest <= m->cfg.dspark_block);
                }
                outcome_free(&got);
            }
    outcome_free(&ref);
    free(prompt);
}

/* Sampling: a run at temperature 0.8 commits a stream whose every record
 * is plain decoding's logits for that stream (teacher-forced), with drafts
 * both accepted and rejected; the same seed gives the same stream. */
static void test_spec_sampled(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    uint32_t V = m->cfg.n_vocab, np = 6, steps = under_valgrind() ? 6 : 24;
    int32_t *prompt = tu_random_tokens(np, V, 9);
    ds4_gen_step *runs[2];
    ds4_spec_stats st = {0};
    for (int k = 0; k < 2; k++) {
        ds4err err = {0};
        ds4_engine e;
        engine_new(m, true, 64, &e);
        ds4_session s;
        session_new(&e, 96, 64, 5, &s);
        ds4_drafter *d;
        if (ds4_dspark_drafter_new(&d, &e, 1, 96, 64, 5, 0, &err)) fail_msg("%s", err.msg);
        ds4_session *rows[1] = {&s};
        const int32_t *pp[1] = {prompt};
        assert_int_equal(ds4_spec_prefill(d, rows, pp, &np, 1, &err), 0);
        ds4_spec_cfg sc = {d, 5, 0.8};
        ds4_gen_opts go = {.n_steps = steps, .top_k = 2, .eos = -1};
        ds4_spec_row sr = {.s = &s, .seed = 12, .steps = calloc(steps, sizeof(ds4_gen_step))};
        if (ds4_spec_generate(&sc, &go, &sr, 1, &st, &err)) fail_msg("%s", err.msg);
        assert_int_equal(sr.n_done, steps);
        runs[k] = sr.steps;
        ds4_spec_drafter_free(d);
        ds4_session_free(&s);
        ds4_engine_free(&e);
    }
    /* Teacher-forced: the logits before each committed token. */
    int32_t *stream = malloc(sizeof(int32_t) * (np + steps));
    memcpy(stream, prompt, sizeof(int32_t) * np);
    for (uint32_t i = 0; i < steps; i++) {
        stream[np + i] = runs[0][i].token;
        assert_int_equal(runs[1][i].token, runs[0][i].token);
    }
    ds4err err = {0};
    ds4_engine e;
    engine_new(m, true, 64, &e);
    ds4_session s;
    session_new(&e, 96, 64, 0, &s);
    float *lg = malloc(sizeof(float) * (np + steps) * V);
    assert_int_equal(ds4_session_eval(&s, stream, np + steps - 1, lg, NULL, &err), 0);
    for (uint32_t i = 0; i < steps; i++) {
        const float *row = lg + (size_t)(np - 1 + i) * V;
        ds4_gen_step ref;
        assert_int_equal(ds4_step_from_logits(row, V, 2, &ref, &err), 0);
        assert_memory_equal(ref.digest, runs[0][i].digest, sizeof(ref.digest));
        assert_memory_equal(&row[runs[0][i].token], &runs[0][i].logit, sizeof(float));
        ds4_step_list_free(&ref, 1);
    }
    if (!under_valgrind()) assert_true(st.accepted > 0 && st.accepted < st.proposed);
    free(lg);
    ds4_session_free(&s);
    ds4_engine_free(&e);
    for (int k = 0; k < 2; k++) {
        ds4_step_list_free(runs[k], steps);
        free(runs[k]);
    }
    free(stream);
    free(prompt);
}

#define ROWS 3

static void test_spec_rows(void **state) {
    fixture *f = *state;
    const ds4_model *m = &f->m;
    const uint32_t np[ROWS] = {5, 9, 2};
    uint32_t steps[ROWS] = {17, 11, 21};
    int32_t *prompts[ROWS];
    outcome refs[ROWS], got[ROWS];
    for (uint32_t i = 0; i < ROWS; i++) {
        if (under_valgrind()) steps[i] = 4;
        prompts[i] = tu_random_tokens(np[i], m->cfg.n_vocab, 40 + i);
        decode(m, &prompts[i], &np[i], &steps[i], 1, 0, 64, 64, 0, &refs[i]);
    }
    /* An engine of 7 tokens: several passes a cycle, one block a pass. */
    decode(m, prompts, np, steps, ROWS, 4, 4, 7, 0, got);
    for (uint32_t i = 0; i < ROWS; i++) {
        same_outcome(m, &refs[i], &got[i]);
        outcome_free(&refs[i]);
        outcome_free(&got[i]);
        free(prompts[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_taps),
        cmocka_unit_test(test_markov_confidence),
        cmocka_unit_test(test_ctx_rows),
        cmocka_unit_test(test_block_attention),
        cmocka_unit_test(test_dflash_file),
        cmocka_unit_test(test_drafter_state),
        cmocka_unit_test(test_drafter_misuse),
        cmocka_unit_test(test_spec_exact),
        cmocka_unit_test(test_spec_rows),
        cmocka_unit_test(test_spec_sampled),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
