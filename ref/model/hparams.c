/* The hyper-parameter table (hparams.h).
 *
 * Rows are in the order config.json has them (ds4_hfconfig_write writes
 * them so, and the release's file, whose bytes the official oracle pins,
 * has that order); the YaRN rows last, as config.json's "rope_scaling"
 * object comes after the plain keys.  The synthetic GGUF files order their
 * keys otherwise (synth.c says how). */
#include "ref/model/hparams.h"

#include <stdio.h>
#include <string.h>

#define F(field) ((uint32_t)offsetof(ds4_config, field))

const ds4_hparam ds4_hparams[] = {
    {F(n_layer), DS4_HP_U32, DS4_HP_PLAIN, "block_count", "num_hidden_layers", false, false, 0, 1,
     DS4_MAX_LAYER, NULL},
    {F(n_embd), DS4_HP_U32, DS4_HP_PLAIN, "embedding_length", "hidden_size", false, false, 0, 1,
     DS4_MAX_EMBD, NULL},
    {F(n_vocab), DS4_HP_U32, DS4_HP_PLAIN, "vocab_size", "vocab_size", false, false, 0, 1,
     DS4_MAX_VOCAB, NULL},
    {F(n_head), DS4_HP_U32, DS4_HP_PLAIN, "attention.head_count", "num_attention_heads", false,
     false, 0, 1, DS4_MAX_HEAD, NULL},
    {0, DS4_HP_ONE, DS4_HP_PLAIN, "attention.head_count_kv", "num_key_value_heads", false, false,
     1, 0, 0, "DeepSeek4 attention has exactly one shared KV head"},
    /* key_length and rope.dimension_count: relations (config_validate). */
    {F(head_dim), DS4_HP_U32, DS4_HP_PLAIN, "attention.key_length", "head_dim", false, false, 0, 0,
     0, NULL},
    {F(n_rot), DS4_HP_U32, DS4_HP_PLAIN, "rope.dimension_count", "qk_rope_head_dim", false, false,
     0, 0, 0, NULL},
    {F(q_lora), DS4_HP_U32, DS4_HP_PLAIN, "attention.q_lora_rank", "q_lora_rank", false, false, 0,
     1, DS4_MAX_LORA, NULL},
    {F(o_lora), DS4_HP_U32, DS4_HP_PLAIN, "attention.output_lora_rank", "o_lora_rank", false,
     false, 0, 1, DS4_MAX_LORA, NULL},
    {F(o_groups), DS4_HP_U32, DS4_HP_PLAIN, "attention.output_group_count", "o_groups", false,
     false, 0, 0, 0, NULL},
    {F(n_expert), DS4_HP_U32, DS4_HP_PLAIN, "expert_count", "n_routed_experts", false, false, 0, 1,
     DS4_MAX_EXPERT, NULL},
    {F(n_expert_used), DS4_HP_U32, DS4_HP_PLAIN, "expert_used_count", "num_experts_per_tok", false,
     false, 0, 0, 0, NULL},
    {F(n_ff), DS4_HP_U32, DS4_HP_PLAIN, "expert_feed_forward_length", "moe_intermediate_size",
     false, false, 0, 1, DS4_MAX_FF, NULL},
    {0, DS4_HP_ONE, DS4_HP_PLAIN, "expert_shared_count", "n_shared_experts", false, false, 1, 0, 0,
     "expected exactly 1 shared expert"},
    {F(n_hash_layer), DS4_HP_U32, DS4_HP_PLAIN, "hash_layer_count", "num_hash_layers", false, false,
     0, 0, 0, NULL},
    {F(swa), DS4_HP_U32, DS4_HP_PLAIN, "attention.sliding_window", "sliding_window", false, false,
     0, 1, DS4_MAX_WINDOW, NULL},
    /* The indexer's: a GGUF without ratio-4 layers may have none, and their
     * ranges apply only where a layer has an indexer (config_validate). */
    {F(idx_head), DS4_HP_U32, DS4_HP_PLAIN, "attention.indexer.head_count", "index_n_heads", true,
     false, 0, 0, 0, NULL},
    {F(idx_dim), DS4_HP_U32, DS4_HP_PLAIN, "attention.indexer.key_length", "index_head_dim", true,
     false, 0, 0, 0, NULL},
    {F(idx_topk), DS4_HP_U32, DS4_HP_PLAIN, "attention.indexer.top_k", "index_topk", true, false,
     0, 0, 0, NULL},
    {F(n_hc), DS4_HP_U32, DS4_HP_PLAIN, "hyper_connection.count", "hc_mult", false, false, 0, 1,
     DS4_MAX_HC, NULL},
    {F(sinkhorn_iter), DS4_HP_U32, DS4_HP_PLAIN, "hyper_connection.sinkhorn_iterations",
     "hc_sinkhorn_iters", false, false, 0, 1, DS4_MAX_SINKHORN_ITER, NULL},
    /* The release's config.json leaves hc_eps out: model.py's default. */
    {F(hc_eps), DS4_HP_F32, DS4_HP_PLAIN, "hyper_connection.epsilon", "hc_eps", false, true, 1e-6,
     0, 0, NULL},
    /* Informational only, so a GGUF may leave it out. */
    {F(context_length), DS4_HP_U32, DS4_HP_PLAIN, "context_length", "max_position_embeddings",
     true, false, 0, 0, 0, NULL},
    {F(rms_eps), DS4_HP_F32, DS4_HP_PLAIN, "attention.layer_norm_rms_epsilon", "rms_norm_eps",
     false, false, 0, 0, 0, NULL},
    {F(expert_scale), DS4_HP_F32, DS4_HP_PLAIN, "expert_weights_scale", "routed_scaling_factor",
     false, false, 0, 0, 0, NULL},
    {F(rope_base), DS4_HP_F32, DS4_HP_PLAIN, "rope.freq_base", "rope_theta", false, false, 0, 0, 0,
     NULL},
    {F(compress_rope_base), DS4_HP_F32, DS4_HP_PLAIN, "attention.compress_rope_freq_base",
     "compress_rope_theta", false, false, 0, 0, 0, NULL},
    /* YaRN off: factor 1, and the betas model.py defaults to. */
    {F(yarn_factor), DS4_HP_F32, DS4_HP_YARN, "rope.scaling.factor", "factor", false, false, 1, 0,
     0, NULL},
    {F(yarn_orig_ctx), DS4_HP_U32, DS4_HP_YARN, "rope.scaling.original_context_length",
     "original_max_position_embeddings", false, false, 0, 0, 0, NULL},
    {F(yarn_beta_fast), DS4_HP_F32, DS4_HP_YARN, "rope.scaling.yarn_beta_fast", "beta_fast", true,
     true, 32, 0, 0, NULL},
    {F(yarn_beta_slow), DS4_HP_F32, DS4_HP_YARN, "rope.scaling.yarn_beta_slow", "beta_slow", true,
     true, 1, 0, 0, NULL},
    /* DSpark (0731's config.json keys; the GGUF keys are ds4ref's own until
     * a published GGUF names them).  Their ranges depend on the model
     * (the noise token on the vocabulary): config_validate. */
    {F(dspark_block), DS4_HP_U32, DS4_HP_DSPARK, "dspark.block_size", "dspark_block_size", false,
     false, 0, 0, 0, NULL},
    {F(dspark_noise), DS4_HP_U32, DS4_HP_DSPARK, "dspark.noise_token_id", "dspark_noise_token_id",
     false, false, 0, 0, 0, NULL},
    {F(dspark_rank), DS4_HP_U32, DS4_HP_DSPARK, "dspark.markov_rank", "dspark_markov_rank", false,
     false, 0, 0, 0, NULL},
};
const uint32_t ds4_hparams_n = sizeof(ds4_hparams) / sizeof(ds4_hparams[0]);

const ds4_hparam *ds4_hparams_find(uint32_t offset) {
    for (uint32_t i = 0; i < ds4_hparams_n; i++)
        if (ds4_hparams[i].kind != DS4_HP_ONE && ds4_hparams[i].offset == offset)
            return &ds4_hparams[i];
    return NULL;
}

void *ds4_hparams_field(const ds4_hparam *h, ds4_config *c) {
    return h->kind == DS4_HP_ONE ? NULL : (char *)c + h->offset;
}

double ds4_hparams_get(const ds4_hparam *h, const ds4_config *c) {
    const char *p = (const char *)c + h->offset;
    switch (h->kind) {
    case DS4_HP_U32: return *(const uint32_t *)(const void *)p;
    case DS4_HP_F32: return *(const float *)(const void *)p;
    }
    return 1;
}

void ds4_hparams_defaults(ds4_config *c) {
    for (uint32_t i = 0; i < ds4_hparams_n; i++) {
        const ds4_hparam *h = &ds4_hparams[i];
        void *f = ds4_hparams_field(h, c);
        if (h->kind == DS4_HP_U32) *(uint32_t *)f = (uint32_t)h->dflt;
        else if (h->kind == DS4_HP_F32) *(float *)f = (float)h->dflt;
    }
}

bool ds4_hparams_in_range(const ds4_hparam *h, const ds4_config *c) {
    if (!h->max) return true;
    double v = ds4_hparams_get(h, c);
    return v >= h->min && v <= h->max;
}

const char *ds4_hparams_gguf_key(const ds4_hparam *h, char *buf, size_t cap) {
    snprintf(buf, cap, "deepseek4.%s", h->gguf);
    return buf;
}
