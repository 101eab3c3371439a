/* Model validation: a file that is valid GGUF but not a valid DS4 model must
 * be refused with a message that names the tensor or key and what was
 * expected; the published files' quirks must load.  Each case rewrites the
 * synthetic tiny model with one change (a key replaced or dropped, a tensor
 * dropped, renamed, re-typed, re-shaped or with altered data). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ref/decode/session.h"
#include "ref/forward/forward.h"
#include "ref/model/model.h"
#include "ref/model/synth.h"
#include "quant/types.h"
#include "quant/gguf_write.h"
#include "testutil.h"

typedef struct fixture {
    char *dir, *base, *variant;
    ds4_gguf_file src;
} fixture;

static int setup_config(void **state, const char *config) {
    fixture *f = calloc(1, sizeof(*f));
    f->dir = tu_tmpdir();
    f->base = tu_path(f->dir, "tiny.gguf");
    f->variant = tu_path(f->dir, "variant.gguf");
    ds4err err = {0};
    ds4_synth_opts o = {.config = config, .seed = 3};
    if (ds4_synth_write(&o, f->base, NULL, &err)) fail_msg("%s", err.msg);
    if (ds4_gguf_open(&f->src, f->base, &err)) fail_msg("%s", err.msg);
    *state = f;
    return 0;
}

static int setup(void **state) {
    return setup_config(state, "tiny");
}

static int setup_0731(void **state) {
    return setup_config(state, "tiny-0731");
}

static int teardown(void **state) {
    fixture *f = *state;
    ds4_gguf_close(&f->src);
    remove(f->base);
    remove(f->variant);
    free(f->base);
    free(f->variant);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* One change to apply while copying. */
typedef struct change {
    const char *key;           /* metadata key to replace (with u32 value) or drop */
    bool drop_key;
    uint32_t u32;
    const uint32_t *arr;       /* or replace it with this u32 array of arr_n */
    uint32_t arr_n;
    const char *tensor;        /* tensor to drop, rename, retype or reshape */
    bool drop_tensor;
    const char *rename;
    uint32_t type;             /* retype (0 = keep; DS4_TYPE_F32 is 0, so use type_set) */
    bool type_set;
    bool swap_dims;            /* reshape [a, b] -> [b, a] */
    void (*patch)(uint8_t *data, uint64_t nbytes);   /* alter a copy of the data */
} change;

/* Copies the fixture's model with change c.  The key and the tensor c names
 * must exist: a change that edits nothing would let the test pass on the
 * unmodified model. */
static void write_variant(fixture *f, const change *c) {
    const ds4_gguf_file *g = &f->src;
    ds4_gguf_writer *w = ds4_gguf_writer_new((uint32_t)g->alignment);
    ds4err err = {0};
    assert_non_null(w);
    bool key_seen = false, tensor_seen = false;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const ds4_gguf_kv *kv = &g->kv[i];
        if (c->key && !strcmp(kv->key, c->key)) {
            key_seen = true;
            if (c->arr) assert_int_equal(ds4_gguf_write_arr_u32(w, kv->key, c->arr, c->arr_n), 0);
            else if (!c->drop_key) assert_int_equal(ds4_gguf_write_u32(w, kv->key, c->u32), 0);
            continue;
        }
        uint64_t next;
        assert_int_equal(ds4_gguf_skip_value(g, kv->type, kv->value_off, &next, &err), 0);
        assert_int_equal(ds4_gguf_write_raw(w, kv->key, kv->type, g->map + kv->value_off,
                                    (size_t)(next - kv->value_off)), 0);
    }
    uint8_t *patched = NULL;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const ds4_gguf_tensor *t = &g->tensors[i];
        uint64_t ne[GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof(ne));
        const char *name = t->name;
        uint32_t type = t->type;
        const uint8_t *data = t->data;
        if (c->tensor && !strcmp(name, c->tensor)) {
            tensor_seen = true;
            if (c->drop_tensor) continue;
            if (c->rename) name = c->rename;
            if (c->type_set) type = c->type;
            if (c->swap_dims) {
                ne[0] = t->ne[1];
                ne[1] = t->ne[0];
            }
            if (c->patch) {
                patched = malloc(t->nbytes);
                memcpy(patched, t->data, t->nbytes);
                c->patch(patched, t->nbytes);
                data = patched;
            }
        }
        assert_int_equal(ds4_gguf_write_tensor(w, name, type, t->n_dims, ne, data, t->nbytes), 0);
    }
    if (c->key && !key_seen) fail_msg("the model has no key %s to change", c->key);
    if (c->tensor && !tensor_seen) fail_msg("the model has no tensor %s to change", c->tensor);
    if (ds4_gguf_writer_save(w, f->variant, &err)) fail_msg("%s", err.msg);
    ds4_gguf_writer_free(w);
    free(patched);
}

/* The variant must fail with every substring of `want` in the message. */
static void refused(fixture *f, const change *c, const char *want1, const char *want2) {
    write_variant(f, c);
    ds4_model m;
    ds4err err = {0};
    assert_int_equal(ds4_model_open(&m, f->variant, &err), -1);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, want1));
    if (want2) assert_non_null(strstr(err.msg, want2));
    assert_non_null(strstr(err.msg, "variant.gguf"));
    assert_null(strchr(err.msg, '\n'));
}

/* The variant must load; the caller checks what it loaded and closes m. */
static void loads(fixture *f, const change *c, ds4_model *m) {
    write_variant(f, c);
    ds4err err = {0};
    if (ds4_model_open(m, f->variant, &err)) fail_msg("%s", err.msg);
}

static void test_missing_tensor(void **state) {
    change c = {.tensor = "blk.2.indexer.proj.weight", .drop_tensor = true};
    refused(*state, &c, "required tensor is missing: blk.2.indexer.proj.weight", "[256 (n_embd), 32 (indexer heads)]");
}

/* The alternative spelling binds the same weights as the usual one. */
static void test_indexer_underscore_spelling(void **state) {
    fixture *f = *state;
    change c = {.tensor = "blk.2.indexer.proj.weight", .rename = "blk.2.indexer_proj.weight"};
    ds4_model m;
    loads(f, &c, &m);
    const ds4_gguf_tensor *t = ds4_gguf_find_tensor(&f->src, "blk.2.indexer.proj.weight");
    const ds4_mat *p = &m.layers[2].idx_proj;
    assert_non_null(ds4_gguf_find_tensor(&m.file, "blk.2.indexer_proj.weight"));
    assert_null(ds4_gguf_find_tensor(&m.file, "blk.2.indexer.proj.weight"));
    assert_int_equal(p->type, t->type);
    assert_int_equal(p->cols, t->ne[0]);
    assert_int_equal(p->rows, t->ne[1]);
    assert_memory_equal(p->data, t->data, t->nbytes);
    ds4_model_close(&m);
}

/* A score-routed layer without its bias routes with a zero bias. */
static void test_optional_router_bias(void **state) {
    fixture *f = *state;
    ds4_model m;
    ds4err err = {0};
    /* In the unmodified model the bias is not all zero, so zeros below come
     * from the default. */
    if (ds4_model_open(&m, f->base, &err)) fail_msg("%s", err.msg);
    assert_false(m.layers[3].hash);
    bool nonzero = false;
    for (uint32_t x = 0; x < m.layers[3].exp_bias.n; x++) nonzero |= m.layers[3].exp_bias.v[x] != 0;
    assert_true(nonzero);
    ds4_model_close(&m);
    change c = {.tensor = "blk.3.exp_probs_b.bias", .drop_tensor = true};
    loads(f, &c, &m);
    assert_false(m.layers[3].hash);
    assert_int_equal(m.layers[3].exp_bias.n, m.cfg.n_expert);
    for (uint32_t x = 0; x < m.cfg.n_expert; x++) assert_true(m.layers[3].exp_bias.v[x] == 0.0f);
    ds4_model_close(&m);
}

static void test_wrong_shape(void **state) {
    change c = {.tensor = "blk.1.attn_q_a.weight", .swap_dims = true};
    refused(*state, &c, "tensor blk.1.attn_q_a.weight has shape [64, 256]",
            "expected [256 (n_embd), 64 (q_lora_rank)]");
}

static void test_wrong_type(void **state) {
    /* Same byte size (4 per element), a type no norm weight can have. */
    change c = {.tensor = "blk.0.attn_norm.weight", .type = DS4_TYPE_I32, .type_set = true};
    refused(*state, &c, "tensor blk.0.attn_norm.weight has type i32", "expected f32, f16 or bf16");
}

static void test_wrong_i32_table_type(void **state) {
    change c = {.tensor = "blk.0.ffn_gate_tid2eid.weight", .type = DS4_TYPE_F32, .type_set = true};
    refused(*state, &c, "tensor blk.0.ffn_gate_tid2eid.weight has type f32", "expected i32");
}

static void test_metadata_kv_heads(void **state) {
    change c = {.key = "deepseek4.attention.head_count_kv", .u32 = 2};
    refused(*state, &c, "deepseek4.attention.head_count_kv = 2", "one shared KV head");
}

static void test_metadata_missing_key(void **state) {
    change c = {.key = "deepseek4.expert_count", .drop_key = true};
    refused(*state, &c, "deepseek4.expert_count", NULL);
}

static void test_metadata_ratios_wrong_type(void **state) {
    change c = {.key = "deepseek4.attention.compress_ratios", .u32 = 4};
    refused(*state, &c, "deepseek4.attention.compress_ratios", "one per layer");
}

static void test_metadata_inconsistent_dims(void **state) {
    /* The tensors still say 256: every shape check names the mismatch. */
    change c = {.key = "deepseek4.embedding_length", .u32 = 512};
    refused(*state, &c, "has shape", "(n_embd)");
}

static void bad_expert_id(uint8_t *data, uint64_t nbytes) {
    int32_t v = 99;
    assert_true(nbytes >= 12);
    memcpy(data + 8, &v, 4);
}

static void test_hash_table_range(void **state) {
    change c = {.tensor = "blk.1.ffn_gate_tid2eid.weight", .patch = bad_expert_id};
    refused(*state, &c, "routes to expert 99", "expected 0..7");
}

static void nan_first(uint8_t *data, uint64_t nbytes) {
    float v = NAN;
    assert_true(nbytes >= 4);
    memcpy(data, &v, 4);
}

static void test_non_finite_norm(void **state) {
    change c = {.tensor = "output_norm.weight", .patch = nan_first};
    refused(*state, &c, "output_norm.weight: element 0 is not finite", NULL);
}

/* Heads of 64 with RoPE on 16 (the tiny-k64 config): llama.cpp and the
 * official code with QAT off run it, so it loads, and evaluates the same
 * bits in any chunking with QAT off; only QAT, whose FP8 blocks of 64 do
 * not divide the 48 other dimensions, is refused, with the way out. */
static void test_qat_off_only_shape(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny-k64", 1, true, &err);
    if (!t) fail_msg("%s", err.msg);
    assert_int_equal(t->m.cfg.head_dim, 64);
    assert_int_equal(t->m.cfg.n_rot, 16);
    assert_int_equal(ds4_model_config_check_qat(&t->m.cfg, t->path, &err), -1);
    assert_int_equal(err.code, DS4_E_UNSUPPORTED);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, t->path));
    assert_non_null(strstr(err.msg, "key_length 64 - rope.dimension_count 16 = 48"));
    assert_non_null(strstr(err.msg, "--qat off"));

    enum { N = 12 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = 256 + 7 * i;
    uint32_t V = t->m.cfg.n_vocab;
    float *lg[2] = {malloc(sizeof(float) * N * V), malloc(sizeof(float) * N * V)};
    ds4_fwd_opts fo = {.qat = false};
    for (int k = 0; k < 2; k++) {
        ds4_engine e;
        ds4_session s;
        ds4_session_opts so = {.ctx = 64, .chunk = k ? 1 : N};
        if (ds4_engine_init(&e, &t->m, &fo, N, &err) || ds4_session_init(&s, &e, &so, &err) ||
            ds4_session_eval(&s, ids, N, lg[k], NULL, &err))
            fail_msg("%s", err.msg);
        ds4_session_free(&s);
        ds4_engine_free(&e);
    }
    for (uint64_t i = 0; i < (uint64_t)N * V; i++) assert_true(isfinite(lg[0][i]));
    assert_memory_equal(lg[0], lg[1], sizeof(float) * N * V);
    free(lg[0]);
    free(lg[1]);
    tu_model_free(t);

    /* The tiny model's 128 - 64 is whole blocks. */
    t = tu_model_new("tiny", 1, false, &err);
    if (!t) fail_msg("%s", err.msg);
    assert_int_equal(ds4_model_config_check_qat(&t->m.cfg, t->path, &err), 0);
    tu_model_free(t);
}

/* DeepSeek-V4-Flash-0731's configuration in a GGUF (tiny-0731): the trunk
 * loads with its DSpark fields; each broken one is refused by name. */
static void test_dspark_loads(void **state) {
    ds4_model m;
    loads(*state, &(change){0}, &m);
    assert_int_equal(m.cfg.dspark_stages, 3);
    assert_int_equal(m.cfg.dspark_block, 5);
    assert_int_equal(m.cfg.dspark_noise, 511);
    assert_int_equal(m.cfg.dspark_rank, 16);
    assert_int_equal(m.cfg.n_dspark_target, 3);
    assert_int_equal(m.cfg.dspark_target[2], 3);
    assert_null(m.mtp);
    /* Its tensors, by the shapes of 0731's (main_proj 12288 -> 4096,
     * Markov [V, r], confidence 4096 + r -> 1, stages as window-only
     * score-routed layers). */
    const ds4_dspark *d = m.dspark;
    assert_non_null(d);
    assert_int_equal(d->main_proj.cols, 3 * 256);
    assert_int_equal(d->main_proj.rows, 256);
    assert_int_equal(d->markov_w1.cols, 16);
    assert_int_equal(d->markov_w1.rows, 512);
    assert_int_equal(d->markov_w2.rows, 512);
    assert_int_equal(d->conf_proj.cols, 256 + 16);
    assert_int_equal(d->conf_proj.rows, 1);
    assert_int_equal(d->hc_head_base.n, 4);
    for (uint32_t s = 0; s < 3; s++) {
        assert_int_equal(d->stage[s].ratio, 0);
        assert_false(d->stage[s].hash);
        assert_non_null(d->stage[s].exp_bias.v);
        assert_non_null(d->stage[s].down_exps.data);
        assert_null(d->stage[s].comp_kv.data);
    }
    ds4_model_close(&m);
}

static void test_dspark_refusals(void **state) {
    static const uint32_t stage4[] = {0, 0, 4, 128, 0, 4, 0}, none[] = {0, 0, 4, 128},
                          many[] = {0, 0, 4, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint32_t late[] = {1, 4}, backwards[] = {2, 1};
    const char *ratios = "deepseek4.attention.compress_ratios";
    const char *targets = "deepseek4.dspark.target_layer_ids";
    refused(*state, &(change){.key = ratios, .arr = stage4, .arr_n = 7},
            "compress_ratios[5] = 4", "a DSpark stage attends to its window only");
    refused(*state, &(change){.key = ratios, .arr = none, .arr_n = 4},
            "then one per DSpark stage (1 to 8), not 4 entries", NULL);
    refused(*state, &(change){.key = ratios, .arr = many, .arr_n = 13},
            "one per DSpark stage", "not 13 entries");
    refused(*state, &(change){.key = targets, .arr = late, .arr_n = 2},
            "DSpark target layer 4 (entry 1)", "below 4");
    refused(*state, &(change){.key = targets, .arr = backwards, .arr_n = 2},
            "DSpark target layer 1 (entry 1): expected increasing", NULL);
    refused(*state, &(change){.key = targets, .u32 = 2},
            "deepseek4.dspark.target_layer_ids must be an array of 1 to 8", NULL);
    refused(*state, &(change){.key = "deepseek4.dspark.noise_token_id", .u32 = 512},
            "the DSpark noise token must be in the vocabulary", NULL);
    refused(*state, &(change){.key = "deepseek4.dspark.markov_rank", .drop_key = true},
            "deepseek4.dspark.markov_rank", NULL);
    refused(*state, &(change){.tensor = "mtp.2.markov_head.markov_w1.weight", .drop_tensor = true},
            "mtp.2.markov_head.markov_w1.weight", NULL);
    refused(*state, &(change){.tensor = "mtp.1.exp_probs_b.bias", .drop_tensor = true},
            "required tensor is missing: mtp.1.exp_probs_b.bias", NULL);
    refused(*state, &(change){.tensor = "mtp.0.main_proj.weight", .swap_dims = true},
            "mtp.0.main_proj.weight", "dspark targets*n_embd");
}

int main(void) {
    const struct CMUnitTest dspark[] = {
        cmocka_unit_test(test_dspark_loads),
        cmocka_unit_test(test_dspark_refusals),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qat_off_only_shape),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_indexer_underscore_spelling),
        cmocka_unit_test(test_optional_router_bias),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_wrong_type),
        cmocka_unit_test(test_wrong_i32_table_type),
        cmocka_unit_test(test_metadata_kv_heads),
        cmocka_unit_test(test_metadata_missing_key),
        cmocka_unit_test(test_metadata_ratios_wrong_type),
        cmocka_unit_test(test_metadata_inconsistent_dims),
        cmocka_unit_test(test_hash_table_range),
        cmocka_unit_test(test_non_finite_norm),
    };
    return cmocka_run_group_tests(tests, setup, teardown) |
           cmocka_run_group_tests(dspark, setup_0731, teardown);
}
