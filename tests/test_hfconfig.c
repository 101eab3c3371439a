/* config.json's hyper-parameters.
 *
 * The release's own config.json (DeepSeek V4 Flash, as published) must give
 * the values its keys say, spelled out here; a config.json written from
 * the tiny model's GGUF metadata must give the configuration the GGUF path
 * reads; each broken key must be refused by name. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "ref/model/hfconfig.h"
#include "ref/model/hparams.h"
#include "testutil.h"

static const char release[] =
    "{\"architectures\": [\"DeepseekV4ForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 0, \"eos_token_id\": 1,"
    " \"expert_dtype\": \"fp4\", \"hc_eps\": 1e-06, \"hc_mult\": 4, \"hc_sinkhorn_iters\": 20,"
    " \"head_dim\": 512, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"index_head_dim\": 128,"
    " \"index_n_heads\": 64, \"index_topk\": 512, \"initializer_range\": 0.02,"
    " \"max_position_embeddings\": 1048576, \"model_type\": \"deepseek_v4\","
    " \"moe_intermediate_size\": 2048, \"n_routed_experts\": 256, \"n_shared_experts\": 1,"
    " \"norm_topk_prob\": true, \"num_attention_heads\": 64, \"num_experts_per_tok\": 6,"
    " \"num_hidden_layers\": 43, \"num_hash_layers\": 3, \"num_key_value_heads\": 1,"
    " \"num_nextn_predict_layers\": 1, \"o_groups\": 8, \"o_lora_rank\": 1024,"
    " \"q_lora_rank\": 1024, \"qk_rope_head_dim\": 64, \"quantization_config\":"
    " {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\","
    " \"scale_fmt\": \"ue8m0\", \"weight_block_size\": [128, 128]}, \"rms_norm_eps\": 1e-06,"
    " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 16,"
    " \"original_max_position_embeddings\": 65536, \"type\": \"yarn\"}, \"rope_theta\": 10000,"
    " \"routed_scaling_factor\": 1.5, \"scoring_func\": \"sqrtsoftplus\", \"sliding_window\": 128,"
    " \"swiglu_limit\": 10.0, \"tie_word_embeddings\": false, \"topk_method\": \"noaux_tc\","
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.57.1\", \"use_cache\": true,"
    " \"vocab_size\": 129280, \"compress_rope_theta\": 160000, \"compress_ratios\": [0, 0,"
    " 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128,"
    " 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0]}";

static int load_text(ds4_config *c, const char *text, ds4err *err) {
    ds4_json_doc *doc;
    if (ds4_json_parse(text, strlen(text), "config.json", &doc, err)) return -1;
    int rc = ds4_hfconfig_load(c, ds4_json_root(doc), "config.json", err);
    ds4_json_free(doc);
    return rc;
}

static void test_release(void **state) {
    (void)state;
    ds4_config c;
    ds4err err = {0};
    if (load_text(&c, release, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.n_layer, 43);
    assert_int_equal(c.n_embd, 4096);
    assert_int_equal(c.n_vocab, 129280);
    assert_int_equal(c.n_head, 64);
    assert_int_equal(c.head_dim, 512);
    assert_int_equal(c.n_rot, 64);
    assert_int_equal(c.q_lora, 1024);
    assert_int_equal(c.o_lora, 1024);
    assert_int_equal(c.o_groups, 8);
    assert_int_equal(c.n_expert, 256);
    assert_int_equal(c.n_expert_used, 6);
    assert_int_equal(c.n_ff, 2048);
    assert_int_equal(c.n_hash_layer, 3);
    assert_int_equal(c.swa, 128);
    assert_int_equal(c.idx_head, 64);
    assert_int_equal(c.idx_dim, 128);
    assert_int_equal(c.idx_topk, 512);
    assert_int_equal(c.n_hc, 4);
    assert_int_equal(c.sinkhorn_iter, 20);
    assert_int_equal(c.context_length, 1048576);
    assert_true(c.rms_eps == 1e-6f && c.hc_eps == 1e-6f && c.expert_scale == 1.5f);
    assert_true(c.rope_base == 10000.0f && c.compress_rope_base == 160000.0f);
    assert_true(c.yarn && c.yarn_factor == 16.0f && c.yarn_orig_ctx == 65536);
    assert_true(c.yarn_beta_fast == 32.0f && c.yarn_beta_slow == 1.0f);
    assert_int_equal(c.ratio[0], 0);
    assert_int_equal(c.ratio[1], 0);
    assert_int_equal(c.ratio[2], 4);
    assert_int_equal(c.ratio[3], 128);
    assert_int_equal(c.ratio[41], 128);
    assert_int_equal(c.ratio[42], 4);
    for (uint32_t l = 0; l <= 43; l++) assert_true(c.clamp_exp[l] == 10.0f && c.clamp_shexp[l] == 10.0f);
    ds4_model_config_free(&c);
}

/* The tiny model's GGUF configuration, written as a config.json, reads back
 * field for field. */
static void test_same_as_gguf(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny", 1, false, &err);
    if (!t) fail_msg("%s", err.msg);
    const ds4_config *g = &t->m.cfg;
    char text[8192];
    tu_hf_config(g, text, sizeof(text));
    ds4_config c;
    if (load_text(&c, text, &err)) fail_msg("%s\n%s", err.msg, text);
    /* Every scalar field, then the arrays. */
    assert_memory_equal(&c, g, offsetof(ds4_config, ratio));
    assert_memory_equal(c.ratio, g->ratio, sizeof(uint32_t) * g->n_layer);
    for (uint32_t l = 0; l <= g->n_layer; l++) {
        assert_true(c.clamp_exp[l] == g->clamp_exp[l]);
        assert_true(c.clamp_shexp[l] == g->clamp_shexp[l]);
    }
    ds4_model_config_free(&c);
    tu_model_free(t);
}

/* The library's writer: what it writes reads back as the model's
 * configuration, and its float fields are JSON floats as in the release
 * ("swiglu_limit": 10.0): transformers' DeepseekV4Config refuses an
 * integer there. */
static void test_writer(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny-ckpt", 1, false, &err);
    if (!t) fail_msg("%s", err.msg);
    const ds4_config *g = &t->m.cfg;
    ds4_buf b = {0};
    if (ds4_hfconfig_write(g, false, true, &b, &err)) fail_msg("%s", err.msg);
    static const char *const floats[] = {
        "\"swiglu_limit\": 10.0,", "\"rope_theta\": 10000.0,", "\"compress_rope_theta\": 160000.0,",
        "\"routed_scaling_factor\": 1.5,", "\"factor\": 16.0,", "\"beta_fast\": 32.0,",
        "\"beta_slow\": 1.0}", "\"rms_norm_eps\": 9.99999997e-07,"};
    for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++)
        if (!strstr(b.p, floats[i])) fail_msg("no %s in\n%s", floats[i], b.p);
    ds4_config c;
    if (load_text(&c, b.p, &err)) fail_msg("%s\n%s", err.msg, b.p);
    assert_memory_equal(&c, g, offsetof(ds4_config, ratio));
    assert_memory_equal(c.ratio, g->ratio, sizeof(uint32_t) * g->n_layer);
    ds4_model_config_free(&c);
    ds4_buf_free(&b);
    tu_model_free(t);
}

typedef struct edit {
    const char *from, *to;     /* the release's text with one substring replaced */
    const char *expect;
} edit;

/* DeepSeek-V4-Flash-0731's config.json: the first release's with the DSpark
 * keys and compress_ratios' 3 stages (0) where the NextN layer's was. */
static void release_0731(char *out, size_t cap, const char *from, const char *to) {
    char text[sizeof(release) + 256];
    const char *end = strstr(release, "4, 0]}");
    snprintf(text, sizeof(text), "%.*s4, 0, 0, 0], \"dspark_block_size\": 5, "
             "\"dspark_noise_token_id\": 128799, \"dspark_target_layer_ids\": [40, 41, 42], "
             "\"dspark_markov_rank\": 256}", (int)(end - release), release);
    const char *at = from ? strstr(text, from) : NULL;
    if (from && !at) fail_msg("no %s in the 0731 text", from);
    if (!at) snprintf(out, cap, "%s", text);
    else snprintf(out, cap, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
}

static void test_release_0731(void **state) {
    (void)state;
    char text[sizeof(release) + 512];
    release_0731(text, sizeof(text), NULL, NULL);
    ds4_config c;
    ds4err err = {0};
    if (load_text(&c, text, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.n_layer, 43);
    assert_int_equal(c.ratio[42], 4);
    assert_int_equal(c.dspark_stages, 3);
    assert_int_equal(c.dspark_block, 5);
    assert_int_equal(c.dspark_noise, 128799);
    assert_int_equal(c.dspark_rank, 256);
    assert_int_equal(c.n_dspark_target, 3);
    assert_int_equal(c.dspark_target[0], 40);
    assert_int_equal(c.dspark_target[2], 42);
    ds4_model_config_free(&c);
    static const edit edits[] = {
        {"4, 0, 0, 0]", "4, 0, 4, 0]", "\"compress_ratios\"[44] is 4: a DSpark stage"},
        {"4, 0, 0, 0]", "4]", "then one per DSpark stage (1 to 8)"},
        {"[40, 41, 42]", "[40, 41, 43]", "DSpark target layer 43 (entry 2)"},
        {"[40, 41, 42]", "[41, 40]", "DSpark target layer 40 (entry 1): expected increasing"},
        {"[40, 41, 42]", "[]", "\"dspark_target_layer_ids\" must be an array of 1 to 8"},
        {"\"dspark_noise_token_id\": 128799", "\"dspark_noise_token_id\": 129280",
         "the DSpark noise token must be in the vocabulary"},
        {"\"dspark_block_size\": 5", "\"dspark_block_size\": 1", "block size must be in [2, 64]"},
        {"\"dspark_markov_rank\": 256", "\"dspark_markov_rank\": 0", "Markov rank must be in"},
        {", \"dspark_markov_rank\": 256", "", "\"dspark_markov_rank\" is missing"},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        release_0731(text, sizeof(text), edits[i].from, edits[i].to);
        if (!load_text(&c, text, &err)) fail_msg("0731 edit %zu was accepted", i);
        if (!strstr(err.msg, edits[i].expect) || !strstr(err.msg, "config.json"))
            fail_msg("0731 edit %zu: '%s'\nwanted '%s'", i, err.msg, edits[i].expect);
    }
}

/* tiny-0731's GGUF and the config.json written from it read back as one
 * configuration, its DSpark fields included. */
static void test_0731_same_as_gguf(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny-0731", 1, false, &err);
    if (!t) fail_msg("%s", err.msg);
    const ds4_config *g = &t->m.cfg;
    assert_int_equal(g->dspark_stages, 3);
    assert_int_equal(g->n_dspark_target, 3);
    ds4_buf b = {0};
    if (ds4_hfconfig_write(g, false, true, &b, &err)) fail_msg("%s", err.msg);
    if (!strstr(b.p, "\"compress_ratios\": [0, 0, 4, 128, 0, 0, 0]") ||
        !strstr(b.p, "\"dspark_target_layer_ids\": [1, 2, 3]"))
        fail_msg("%s", b.p);
    ds4_config c;
    if (load_text(&c, b.p, &err)) fail_msg("%s\n%s", err.msg, b.p);
    assert_memory_equal(&c, g, offsetof(ds4_config, ratio));
    assert_int_equal(ds4_hfconfig_write(g, true, true, &b, &err), -1);
    assert_non_null(strstr(err.msg, "both an MTP layer and a DSpark drafter"));
    ds4_model_config_free(&c);
    ds4_buf_free(&b);
    tu_model_free(t);
}

static void test_refusals(void **state) {
    (void)state;
    const edit edits[] = {
        {"\"head_dim\": 512, ", "", "config.json: \"head_dim\" is missing"},
        {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "\"hidden_act\" is \"gelu\""},
        {"\"noaux_tc\",", "\"noaux_tc\", \"n_group\": 8, \"topk_group\": 4,",
         "\"n_group\" is 8: DeepSeek V4 has 1"},
        {"4, 0]}", "4, \"x\"]}", "\"compress_ratios\"[43] is not a count"},
        {"[0, 0,", "[0, 4.0,", "\"compress_ratios\"[1] is not a count"},
        {"\"head_dim\": 512", "\"head_dim\": 512.0", "\"head_dim\" must be an integer"},
        {"\"head_dim\": 512", "\"head_dim\": \"512\"", "\"head_dim\" must be an integer"},
        {"\"vocab_size\": 129280", "\"vocab_size\": 4294967296", "\"vocab_size\" must be an integer"},
        {"\"num_key_value_heads\": 1", "\"num_key_value_heads\": 8",
         "\"num_key_value_heads\" is 8: DeepSeek V4 has 1"},
        {"\"n_shared_experts\": 1", "\"n_shared_experts\": 2", "\"n_shared_experts\" is 2"},
        {"\"sqrtsoftplus\"", "\"softmax\"", "\"scoring_func\" is \"softmax\": only \"sqrtsoftplus\""},
        {"\"noaux_tc\"", "\"greedy\"", "\"topk_method\" is \"greedy\""},
        {"\"norm_topk_prob\": true", "\"norm_topk_prob\": false", "\"norm_topk_prob\" must be true"},
        {"\"type\": \"yarn\"", "\"type\": \"linear\"", "only {\"type\": \"yarn\", ...}"},
        {"\"factor\": 16", "\"factor\": null", "in \"rope_scaling\": \"factor\" must be a finite"},
        {"\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 1e300", "\"rms_norm_eps\" must be a finite"},
        {"\"num_nextn_predict_layers\": 1", "\"num_nextn_predict_layers\": 2", "runs one MTP layer"},
        {"4, 0]}", "4]}", "\"compress_ratios\" must be an array of 44 integers"},
        {"[0, 0,", "[0, 0.5,", "\"compress_ratios\"[1] is not a count"},
        {"[0, 0,", "[0, 1,", "compress_ratios[1] = 1: expected 0"},
        {"\"o_groups\": 8", "\"o_groups\": 7", "head_count must be a multiple of output_group_count"},
        {"\"num_hidden_layers\": 43", "\"num_hidden_layers\": 0", "\"num_hidden_layers\" must be in [1,"},
    };
    char text[sizeof(release) + 64];
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        const char *at = strstr(release, edits[i].from);
        assert_non_null(at);
        snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - release), release, edits[i].to,
                 at + strlen(edits[i].from));
        ds4_config c;
        ds4err err = {0};
        if (!load_text(&c, text, &err)) fail_msg("edit %zu was accepted", i);
        if (!strstr(err.msg, edits[i].expect) || !strstr(err.msg, "config.json"))
            fail_msg("edit %zu: '%s'\nwanted '%s'", i, err.msg, edits[i].expect);
    }
    ds4_config c;
    ds4err err = {0};
    assert_int_equal(load_text(&c, "[]", &err), -1);
    assert_non_null(strstr(err.msg, "config.json: not a JSON object"));
}

/* Every hyper-parameter's keys, as llama.cpp's DeepSeek4 GGUF and the
 * release's config.json spell them (YaRN's inside "rope_scaling"): the
 * expectation the table of hparams.c is checked against, written out here
 * rather than read from it. */
typedef struct keyed {
    size_t offset;
    bool f32, yarn, dspark;
    const char *gguf, *json;
} keyed;

#define U(field, g, j) {offsetof(ds4_config, field), false, false, false, g, j}
#define R(field, g, j) {offsetof(ds4_config, field), true, false, false, g, j}
#define D(field, g, j) {offsetof(ds4_config, field), false, false, true, g, j}
static const keyed keys[] = {
    U(n_layer, "block_count", "num_hidden_layers"),
    U(n_embd, "embedding_length", "hidden_size"),
    U(n_vocab, "vocab_size", "vocab_size"),
    U(n_head, "attention.head_count", "num_attention_heads"),
    U(head_dim, "attention.key_length", "head_dim"),
    U(n_rot, "rope.dimension_count", "qk_rope_head_dim"),
    U(q_lora, "attention.q_lora_rank", "q_lora_rank"),
    U(o_lora, "attention.output_lora_rank", "o_lora_rank"),
    U(o_groups, "attention.output_group_count", "o_groups"),
    U(n_expert, "expert_count", "n_routed_experts"),
    U(n_expert_used, "expert_used_count", "num_experts_per_tok"),
    U(n_ff, "expert_feed_forward_length", "moe_intermediate_size"),
    U(n_hash_layer, "hash_layer_count", "num_hash_layers"),
    U(swa, "attention.sliding_window", "sliding_window"),
    U(idx_head, "attention.indexer.head_count", "index_n_heads"),
    U(idx_dim, "attention.indexer.key_length", "index_head_dim"),
    U(idx_topk, "attention.indexer.top_k", "index_topk"),
    U(n_hc, "hyper_connection.count", "hc_mult"),
    U(sinkhorn_iter, "hyper_connection.sinkhorn_iterations", "hc_sinkhorn_iters"),
    U(context_length, "context_length", "max_position_embeddings"),
    R(rms_eps, "attention.layer_norm_rms_epsilon", "rms_norm_eps"),
    R(hc_eps, "hyper_connection.epsilon", "hc_eps"),
    R(expert_scale, "expert_weights_scale", "routed_scaling_factor"),
    R(rope_base, "rope.freq_base", "rope_theta"),
    R(compress_rope_base, "attention.compress_rope_freq_base", "compress_rope_theta"),
    {offsetof(ds4_config, yarn_factor), true, true, false, "rope.scaling.factor", "factor"},
    {offsetof(ds4_config, yarn_orig_ctx), false, true, false,
     "rope.scaling.original_context_length", "original_max_position_embeddings"},
    {offsetof(ds4_config, yarn_beta_fast), true, true, false, "rope.scaling.yarn_beta_fast",
     "beta_fast"},
    {offsetof(ds4_config, yarn_beta_slow), true, true, false, "rope.scaling.yarn_beta_slow",
     "beta_slow"},
    /* 0731's config.json keys; the GGUF ones are ds4ref's. */
    D(dspark_block, "dspark.block_size", "dspark_block_size"),
    D(dspark_noise, "dspark.noise_token_id", "dspark_noise_token_id"),
    D(dspark_rank, "dspark.markov_rank", "dspark_markov_rank"),
};
#undef U
#undef R
#undef D
enum { N_KEYS = sizeof(keys) / sizeof(keys[0]), N_FIXED_AT_ONE = 2 };

/* Every row is complete (kind, group, both keys, a range that holds its
 * default), no key is another row's, and the rows are exactly the fields
 * above with their keys, plus the two counts fixed at 1. */
static void test_hparam_rows(void **state) {
    (void)state;
    assert_int_equal(ds4_hparams_n, N_KEYS + N_FIXED_AT_ONE);
    for (uint32_t i = 0; i < ds4_hparams_n; i++) {
        const ds4_hparam *h = &ds4_hparams[i];
        assert_true(h->kind == DS4_HP_U32 || h->kind == DS4_HP_F32 || h->kind == DS4_HP_ONE);
        assert_true(h->group == DS4_HP_PLAIN || h->group == DS4_HP_YARN ||
                    h->group == DS4_HP_DSPARK);
        if (!h->gguf || !*h->gguf || !h->json || !*h->json) fail_msg("row %u lacks a key", i);
        if (h->max && (h->min > h->max || h->dflt > h->max))
            fail_msg("row %s: range [%u, %u], default %g", h->gguf, h->min, h->max, h->dflt);
        if (h->kind == DS4_HP_ONE && (!h->one_why || !*h->one_why))
            fail_msg("row %s: no reason for 1", h->gguf);
        for (uint32_t j = 0; j < i; j++) {
            const ds4_hparam *o = &ds4_hparams[j];
            if (!strcmp(h->gguf, o->gguf) || (h->group == o->group && !strcmp(h->json, o->json)))
                fail_msg("rows %u and %u share a key (%s, %s)", j, i, h->gguf, h->json);
            if (h->kind != DS4_HP_ONE && o->kind != DS4_HP_ONE && h->offset == o->offset)
                fail_msg("rows %s and %s fill one field", o->gguf, h->gguf);
        }
    }
    for (size_t k = 0; k < N_KEYS; k++) {
        const ds4_hparam *h = ds4_hparams_find((uint32_t)keys[k].offset);
        if (!h) fail_msg("no row for %s", keys[k].json);
        if (strcmp(h->gguf, keys[k].gguf) || strcmp(h->json, keys[k].json))
            fail_msg("row (%s, %s), expected (%s, %s)", h->gguf, h->json, keys[k].gguf,
                     keys[k].json);
        assert_int_equal(h->kind, keys[k].f32 ? DS4_HP_F32 : DS4_HP_U32);
        assert_int_equal(h->group, keys[k].yarn     ? DS4_HP_YARN
                                   : keys[k].dspark ? DS4_HP_DSPARK
                                                    : DS4_HP_PLAIN);
    }
}

/* Field k of c, as a double. */
static double field(const ds4_config *c, size_t k) {
    const char *p = (const char *)c + keys[k].offset;
    return keys[k].f32 ? *(const float *)(const void *)p : *(const uint32_t *)(const void *)p;
}

/* Each field written under its own key: a configuration whose every field
 * differs from every other, written as config.json, holds each under the
 * key above; the tiny model's GGUF holds each under its key above, and the
 * GGUF reader gives those values. */
static void test_hparam_keys_written(void **state) {
    (void)state;
    ds4_config c = {0};
    for (size_t k = 0; k < N_KEYS; k++) {
        char *p = (char *)&c + keys[k].offset;
        if (keys[k].f32) *(float *)(void *)p = 0.5f + (float)k;
        else *(uint32_t *)(void *)p = 100 + (uint32_t)k;
    }
    c.yarn = true;
    c.dspark_stages = 1;
    c.n_dspark_target = 1;
    uint32_t ratio[128] = {0};
    float clamp[129];
    for (size_t l = 0; l < 129; l++) clamp[l] = 10.0f;
    assert_true(c.n_layer < 128);
    c.ratio = ratio;
    c.clamp_exp = c.clamp_shexp = clamp;
    ds4_buf b = {0};
    ds4err err = {0};
    if (ds4_hfconfig_write(&c, false, false, &b, &err)) fail_msg("%s", err.msg);
    ds4_json_doc *doc;
    if (ds4_json_parse(b.p, b.len, "config.json", &doc, &err)) fail_msg("%s\n%s", err.msg, b.p);
    const ds4_json *root = ds4_json_root(doc);
    for (size_t k = 0; k < N_KEYS; k++) {
        const ds4_json *obj = keys[k].yarn ? ds4_json_get(root, "rope_scaling") : root;
        const ds4_json *v = ds4_json_get(obj, keys[k].json);
        if (!v || v->type != DS4_JSON_NUMBER || (float)v->num != (float)field(&c, k))
            fail_msg("\"%s\" is not %g in\n%s", keys[k].json, field(&c, k), b.p);
    }
    ds4_json_free(doc);
    ds4_buf_free(&b);

    tu_model *t = tu_model_new("tiny-0731", 1, false, &err);
    if (!t) fail_msg("%s", err.msg);
    for (size_t k = 0; k < N_KEYS; k++) {
        char key[128];
        snprintf(key, sizeof(key), "deepseek4.%s", keys[k].gguf);
        double v;
        if (keys[k].f32) {
            float f;
            if (ds4_gguf_get_f32(&t->m.file, key, &f, &err)) fail_msg("%s", err.msg);
            v = f;
        } else {
            uint32_t u;
            if (ds4_gguf_get_u32(&t->m.file, key, &u, &err)) fail_msg("%s", err.msg);
            v = u;
        }
        if (v != field(&t->m.cfg, k)) fail_msg("%s is %g, read as %g", key, v, field(&t->m.cfg, k));
    }
    tu_model_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_same_as_gguf),
        cmocka_unit_test(test_writer),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_release_0731),
        cmocka_unit_test(test_0731_same_as_gguf),
        cmocka_unit_test(test_hparam_rows),
        cmocka_unit_test(test_hparam_keys_written),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
