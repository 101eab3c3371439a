/* Loading a DS4 model: configuration from metadata, tensors bound through the
 * layout table (layout.c) and validated before any forward pass can run. */
#include "ref/model/model.h"

#include "ref/ckpt/checkpoint.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/reslimit.h"
#include "ref/model/bind.h"
#include "ref/model/hparams.h"
#include "quant/types.h"

/* ---------------------------------------------------------------------------
 * Configuration
 * ------------------------------------------------------------------------- */

#define KEY(k) "deepseek4." k

static int get_u32(const ds4_gguf_file *g, const char *key, uint32_t *out, ds4err *err) {
    return ds4_gguf_get_u32(g, key, out, err);
}

/* Optional u32: absent keeps *out; present with a bad type is an error. */
static int opt_u32(const ds4_gguf_file *g, const char *key, uint32_t *out, ds4err *err) {
    if (!ds4_gguf_find_kv(g, key)) return 0;
    return ds4_gguf_get_u32(g, key, out, err);
}

/* A per-layer f32 array with at least n_layer entries.  Entry n_layer (the MTP
 * block) is taken from the file when present, else repeats the last layer's
 * value: the official model has a single swiglu_limit for every block. */
static int load_layer_floats(const ds4_gguf_file *g, const char *key, uint32_t n_layer,
                             float **out, ds4err *err) {
    const ds4_gguf_kv *kv = ds4_gguf_find_kv(g, key);
    if (!kv)
        return ds4_err_set(err, DS4_E_MODEL, "%s: required metadata key is missing: %s",
                          g->path, key);
    if (kv->type != GGUF_ARR || kv->arr_n < n_layer)
        return ds4_err_set(err, DS4_E_MODEL,
                          "%s: metadata key %s must be an array of at least %u numbers "
                          "(one per layer)", g->path, key, n_layer);
    uint64_t n = kv->arr_n;
    float *v = malloc(sizeof(float) * (n > n_layer ? n : n_layer + 1));
    if (!v) return ds4_err_set(err, DS4_E_NOMEM, "out of memory reading %s", key);
    if (ds4_gguf_get_arr_f32(g, key, v, n, err) < 0) {
        free(v);
        return -1;
    }
    if (n == n_layer) v[n_layer] = v[n_layer - 1];
    *out = v;
    return 0;
}

/* 0 when ok; otherwise the error, "what" naming the rule (its %d the bound
 * of model.h it names, when it has one). */
static int check(ds4err *err, const char *path, bool ok, const char *what, int bound) {
    if (ok) return 0;
    char rule[256];
    snprintf(rule, sizeof(rule), what, bound);
    return ds4_err_set(err, DS4_E_MODEL, "%s: inconsistent DeepSeek4 configuration: %s",
                      path, rule);
}

/* 0 when row h of the table is within its range in c; otherwise the error. */
static int check_range(ds4err *err, const char *path, const ds4_hparam *h, const ds4_config *c) {
    if (ds4_hparams_in_range(h, c)) return 0;
    return ds4_err_set(err, DS4_E_MODEL,
                      "%s: inconsistent DeepSeek4 configuration: %s must be in [%u, %u]", path,
                      h->gguf, h->min, h->max);
}

static int is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

/* Relations the forward pass relies on.  Each failure says which rule broke,
 * so a hand-made or converted file gets a precise diagnosis. */
/* A DSpark drafter's configuration: its ranges and the layers it reads. */
static int dspark_validate(const ds4_config *c, const char *p, ds4err *err) {
    if (check(err, p, c->dspark_block >= 2 && c->dspark_block <= DS4_MAX_DSPARK_BLOCK, "the DSpark block size must be in [2, %d]", DS4_MAX_DSPARK_BLOCK) ||
        check(err, p, c->dspark_noise < c->n_vocab, "the DSpark noise token must be in the vocabulary", 0) ||
        check(err, p, c->dspark_rank >= 1 && c->dspark_rank <= DS4_MAX_DSPARK_RANK, "the DSpark Markov rank must be in [1, %d]", DS4_MAX_DSPARK_RANK))
        return -1;
    for (uint32_t i = 0; i < c->n_dspark_target; i++)
        if (c->dspark_target[i] >= c->n_layer || (i && c->dspark_target[i] <= c->dspark_target[i - 1]))
            return ds4_err_set(err, DS4_E_MODEL, "%s: DSpark target layer %u (entry %u): expected "
                               "increasing layer numbers below %u", p, c->dspark_target[i], i,
                               c->n_layer);
    return 0;
}

static int config_validate(const ds4_config *c, const char *p, ds4err *err) {
    for (uint32_t i = 0; i < ds4_hparams_n; i++)
        if (check_range(err, p, &ds4_hparams[i], c)) return -1;
    /* The relations between fields, and the ranges that go with them. */
    if (check(err, p, c->n_rot >= 2 && c->n_rot % 2 == 0 && c->n_rot <= DS4_MAX_ROT, "rope.dimension_count must be even, in [2, %d]", DS4_MAX_ROT) ||
        check(err, p, c->head_dim > c->n_rot && c->head_dim <= DS4_MAX_HEAD_DIM, "key_length must exceed rope.dimension_count (and be <= %d)", DS4_MAX_HEAD_DIM) ||
        check(err, p, c->o_groups >= 1 && c->n_head % c->o_groups == 0, "attention.head_count must be a multiple of output_group_count", 0) ||
        check(err, p, c->n_expert_used >= 1 && c->n_expert_used <= c->n_expert && c->n_expert_used <= DS4_MAX_EXPERT_USED, "expert_used_count must be in [1, min(expert_count, %d)]", DS4_MAX_EXPERT_USED) ||
        check(err, p, c->n_hash_layer <= c->n_layer, "hash_layer_count must not exceed block_count", 0) ||
        check(err, p, c->rms_eps > 0 && c->hc_eps > 0, "epsilons must be positive", 0) ||
        check(err, p, c->rope_base > 1 && c->compress_rope_base > 1, "RoPE bases must be > 1", 0) ||
        check(err, p, !c->yarn || (c->yarn_factor >= 1 && c->yarn_orig_ctx >= 1 && c->yarn_beta_fast > 0 && c->yarn_beta_slow > 0), "YaRN needs factor >= 1, original_context_length >= 1 and positive betas", 0))
        return -1;
    if (c->n_dspark_target && dspark_validate(c, p, err)) return -1;
    bool has_indexer = false;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        uint32_t r = c->ratio[l];
        if (r == 1 || r > DS4_MAX_RATIO) {
            return ds4_err_set(err, DS4_E_MODEL,
                              "%s: compress_ratios[%u] = %u: expected 0 (window only) or a ratio in [2, %d]",
                              p, l, r, DS4_MAX_RATIO);
        }
        if (r == 4) has_indexer = true;
    }
    if (has_indexer &&
        (check(err, p, c->idx_head >= 1 && c->idx_head <= DS4_MAX_IDX_HEAD, "attention.indexer.head_count must be in [1, %d]", DS4_MAX_IDX_HEAD) ||
         check(err, p, is_pow2(c->idx_dim) && c->idx_dim >= 32 && c->idx_dim <= DS4_MAX_IDX_DIM && c->idx_dim > c->n_rot, "attention.indexer.key_length must be a power of two in [32, %d] and > rope.dimension_count (Hadamard, FP4 blocks)", DS4_MAX_IDX_DIM) ||
         check(err, p, c->idx_topk >= 1, "attention.indexer.top_k must be >= 1", 0)))
        return -1;
    return 0;
}

int ds4_model_config_validate(const ds4_config *c, const char *path, ds4err *err) {
    return config_validate(c, path, err);
}

/* The official QAT simulation rounds the non-RoPE part of each KV row to FP8
 * in blocks of 64 (act_quant(kv[..., :-rd], 64)), which the official code
 * asserts divides it.  A model where it does not runs with QAT off, in the
 * official code as here; nothing else depends on it. */
int ds4_model_config_check_qat(const ds4_config *c, const char *path, ds4err *err) {
    uint32_t nope = c->head_dim - c->n_rot;
    if (nope % 64 == 0) return 0;
    return ds4_err_set(err, DS4_E_UNSUPPORTED,
                      "%s: QAT simulates the official FP8 KV cache in blocks of 64, and this "
                      "model's key_length %u - rope.dimension_count %u = %u is not a multiple "
                      "of 64: run it with QAT off (--qat off), as the official code does",
                      path, c->head_dim, c->n_rot, nope);
}

/* Row h of the table (hparams.h) from the GGUF: a DS4_HP_ONE row is checked
 * to be 1, an optional row left out keeps its default. */
static int load_hparam(ds4_config *c, const ds4_gguf_file *g, const ds4_hparam *h, ds4err *err) {
    char key[128];
    ds4_hparams_gguf_key(h, key, sizeof(key));
    if (h->gguf_optional && !ds4_gguf_find_kv(g, key)) return 0;
    if (h->kind == DS4_HP_F32) return ds4_gguf_get_f32(g, key, ds4_hparams_field(h, c), err);
    if (h->kind == DS4_HP_U32) return get_u32(g, key, ds4_hparams_field(h, c), err);
    uint32_t one = 0;
    if (get_u32(g, key, &one, err)) return -1;
    if (one == 1) return 0;
    return ds4_err_set(err, DS4_E_MODEL, "%s: %s = %u: %s", g->path, key, one, h->one_why);
}

/* The table's rows of one group. */
static int load_hparams(ds4_config *c, const ds4_gguf_file *g, uint8_t group, ds4err *err) {
    for (uint32_t i = 0; i < ds4_hparams_n; i++)
        if (ds4_hparams[i].group == group && load_hparam(c, g, &ds4_hparams[i], err)) return -1;
    return 0;
}

/* The DSpark drafter's rows and target layers, when the file has its first
 * row's key (ds4ref's own GGUF keys: hparams.c). */
static int load_dspark(ds4_config *c, const ds4_gguf_file *g, ds4err *err) {
    char key[128];
    ds4_hparams_gguf_key(ds4_hparams_find(offsetof(ds4_config, dspark_block)), key, sizeof(key));
    if (!ds4_gguf_find_kv(g, key)) return 0;
    if (load_hparams(c, g, DS4_HP_DSPARK, err)) return -1;
    const ds4_gguf_kv *t = ds4_gguf_find_kv(g, KEY("dspark.target_layer_ids"));
    if (!t || t->type != GGUF_ARR || t->arr_n < 1 || t->arr_n > DS4_MAX_DSPARK_TARGET)
        return ds4_err_set(err, DS4_E_MODEL, "%s: %s must be an array of 1 to %d layer numbers",
                           g->path, KEY("dspark.target_layer_ids"), DS4_MAX_DSPARK_TARGET);
    c->n_dspark_target = (uint32_t)t->arr_n;
    return ds4_gguf_get_arr_u32(g, KEY("dspark.target_layer_ids"), c->dspark_target,
                                t->arr_n, err);
}

/* compress_ratios past the layers: a DSpark model's stages, window-only
 * (the official config.json's layout); ignored without DSpark, as ds4's
 * files may carry the MTP layer's. */
static int dspark_stages(ds4_config *c, const uint32_t *ratios, uint64_t n, const char *path,
                         ds4err *err) {
    if (!c->n_dspark_target) return 0;
    if (n <= c->n_layer || n - c->n_layer > DS4_MAX_DSPARK_STAGE)
        return ds4_err_set(err, DS4_E_MODEL, "%s: %s must have the %u layers' ratios and then "
                           "one per DSpark stage (1 to %d), not %llu entries", path,
                           KEY("attention.compress_ratios"), c->n_layer, DS4_MAX_DSPARK_STAGE,
                           (unsigned long long)n);
    for (uint64_t l = c->n_layer; l < n; l++)
        if (ratios[l])
            return ds4_err_set(err, DS4_E_MODEL, "%s: %s[%llu] = %u: a DSpark stage attends to "
                               "its window only (0)", path, KEY("attention.compress_ratios"),
                               (unsigned long long)l, ratios[l]);
    c->dspark_stages = (uint32_t)(n - c->n_layer);
    return 0;
}

/* Read and validate the configuration from a GGUF's metadata. */
static int config_load(ds4_config *c, const ds4_gguf_file *g, ds4err *err) {
    memset(c, 0, sizeof(*c));
    ds4_hparams_defaults(c);
    uint32_t value_len = 0;
    if (load_hparams(c, g, DS4_HP_PLAIN, err) ||
        get_u32(g, KEY("attention.value_length"), &value_len, err))
        return -1;

    if (value_len != c->head_dim)
        return ds4_err_set(err, DS4_E_MODEL, "%s: value_length %u != key_length %u: K and V are one row in DeepSeek4",
                          g->path, value_len, c->head_dim);

    /* Group-limited routing and other gating functions are not DeepSeek V4. */
    uint32_t groups = 0, groups_used = 0, gating = 4;
    bool wnorm = true;
    if (opt_u32(g, KEY("expert_group_count"), &groups, err) ||
        opt_u32(g, KEY("expert_group_used_count"), &groups_used, err) ||
        opt_u32(g, KEY("expert_gating_func"), &gating, err))
        return -1;
    if (groups > 1 || groups_used > 1)
        return ds4_err_set(err, DS4_E_UNSUPPORTED, "%s: group-limited expert routing (expert_group_count=%u) is not supported",
                          g->path, groups);
    if (gating != 4)
        return ds4_err_set(err, DS4_E_UNSUPPORTED, "%s: %s = %u: only 4 (sqrt(softplus) scoring) is DeepSeek V4",
                          g->path, KEY("expert_gating_func"), gating);
    if (ds4_gguf_find_kv(g, KEY("expert_weights_norm"))) {
        if (ds4_gguf_get_bool(g, KEY("expert_weights_norm"), &wnorm, err)) return -1;
        if (!wnorm)
            return ds4_err_set(err, DS4_E_UNSUPPORTED,
                              "%s: expert_weights_norm = false: DeepSeek V4 always renormalizes routing weights",
                              g->path);
    }

    /* YaRN: the official model applies it to every compressed layer when its
     * original_seq_len is set.  A file that states a scaling type other than
     * yarn (or none) is something we do not implement. */
    char orig_key[128];
    ds4_hparams_gguf_key(ds4_hparams_find(offsetof(ds4_config, yarn_orig_ctx)), orig_key,
                         sizeof(orig_key));
    c->yarn = ds4_gguf_find_kv(g, orig_key) != NULL;
    if (ds4_gguf_find_kv(g, KEY("rope.scaling.type"))) {
        ds4_gguf_str t;
        if (ds4_gguf_get_str(g, KEY("rope.scaling.type"), &t, err)) return -1;
        if (t.len == 4 && !memcmp(t.ptr, "none", 4)) {
            c->yarn = false;
        } else if (!(t.len == 4 && !memcmp(t.ptr, "yarn", 4))) {
            return ds4_err_set(err, DS4_E_UNSUPPORTED, "%s: rope.scaling.type '%.*s': only yarn is supported",
                              g->path, (int)(t.len > 32 ? 32 : t.len), t.ptr);
        }
    }
    if (c->yarn && load_hparams(c, g, DS4_HP_YARN, err)) return -1;
    if (load_dspark(c, g, err)) return -1;

    /* The arrays below are as long as block_count says: its range first. */
    if (check_range(err, g->path, ds4_hparams_find(offsetof(ds4_config, n_layer)), c)) return -1;
    c->ratio = malloc(sizeof(uint32_t) * c->n_layer);
    if (!c->ratio) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    const ds4_gguf_kv *rk = ds4_gguf_find_kv(g, KEY("attention.compress_ratios"));
    if (!rk || rk->type != GGUF_ARR || rk->arr_n < c->n_layer) {
        ds4_model_config_free(c);
        return ds4_err_set(err, DS4_E_MODEL,
                          "%s: %s must be an array of %u integers (one per layer)",
                          g->path, KEY("attention.compress_ratios"), c->n_layer);
    }
    uint32_t *ratios = malloc(sizeof(uint32_t) * rk->arr_n);
    if (!ratios) {
        ds4_model_config_free(c);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    if (ds4_gguf_get_arr_u32(g, KEY("attention.compress_ratios"), ratios, rk->arr_n, err)) {
        free(ratios);
        ds4_model_config_free(c);
        return -1;
    }
    memcpy(c->ratio, ratios, sizeof(uint32_t) * c->n_layer);
    int bad = dspark_stages(c, ratios, rk->arr_n, g->path, err);
    free(ratios);
    if (bad) {
        ds4_model_config_free(c);
        return -1;
    }

    if (load_layer_floats(g, KEY("swiglu_clamp_exp"), c->n_layer, &c->clamp_exp, err)) {
        ds4_model_config_free(c);
        return -1;
    }
    /* Older conversions carry only the routed clamp; the official model uses
     * one swiglu_limit for routed and shared experts. */
    const char *shkey = ds4_gguf_find_kv(g, KEY("swiglu_clamp_shexp")) ? KEY("swiglu_clamp_shexp")
                                                                   : KEY("swiglu_clamp_exp");
    if (load_layer_floats(g, shkey, c->n_layer, &c->clamp_shexp, err)) {
        ds4_model_config_free(c);
        return -1;
    }
    if (config_validate(c, g->path, err)) {
        ds4_model_config_free(c);
        return -1;
    }
    return 0;
}

void ds4_model_config_free(ds4_config *c) {
    free(c->ratio);
    free(c->clamp_exp);
    free(c->clamp_shexp);
    c->ratio = NULL;
    c->clamp_exp = c->clamp_shexp = NULL;
}

/* ---------------------------------------------------------------------------
 * Tensor binding
 * ------------------------------------------------------------------------- */

static const char *dim_name(uint8_t d) {
    static const char *const names[] = {
        "1", "3", "n_embd", "n_vocab", "n_hc", "n_hc*n_embd", "(2+n_hc)*n_hc",
        "q_lora_rank", "n_head*head_dim", "head_dim", "n_head", "head_dim*n_head/groups",
        "groups*o_lora_rank", "compressor width", "ratio", "indexer heads*dim",
        "indexer heads", "2*indexer dim", "indexer dim", "n_expert", "n_expert_used",
        "n_ff", "dspark targets*n_embd", "dspark rank", "n_embd+dspark rank"};
    return d < sizeof(names) / sizeof(names[0]) ? names[d] : "?";
}

static int describe_shape(char *buf, size_t cap, const ds4_config *c, uint32_t ratio,
                          const ds4_tensor_spec *s) {
    size_t used = 0;
    for (uint8_t i = 0; i < s->n_dims && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%llu (%s)", i ? ", " : "[",
                                 (unsigned long long)ds4_layout_dim(c, ratio, s->dims[i]),
                                 dim_name(s->dims[i]));
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return 0;
}

static int type_allowed(uint8_t tclass, uint32_t type) {
    const ds4_type_info *ti = ds4_types_info(type);
    if (!ti) return 0;
    switch (tclass) {
    case DS4_TC_VEC:
        return type == DS4_TYPE_F32 || type == DS4_TYPE_F16 || type == DS4_TYPE_BF16;
    case DS4_TC_MAT: return ti->is_float;
    case DS4_TC_I32: return type == DS4_TYPE_I32;
    }
    return 0;
}

static const char *class_types(uint8_t tclass) {
    switch (tclass) {
    case DS4_TC_VEC: return "f32, f16 or bf16";
    case DS4_TC_MAT: return "a float type (f32, f16, bf16, q8_0, q2_K, q4_K, iq2_xxs)";
    case DS4_TC_I32: return "i32";
    }
    return "?";
}

static int copy_vec(ds4_vec *v, const ds4_gguf_tensor *t, ds4err *err) {
    v->n = (uint32_t)t->n_elem;
    v->v = malloc(sizeof(float) * t->n_elem);
    if (!v->v) return ds4_err_set(err, DS4_E_NOMEM, "out of memory copying %s", t->name);
    if (ds4_types_dequant_row(t->type, t->data, v->v, t->n_elem) < 0)
        return ds4_err_set(err, DS4_E_MODEL, "tensor %s: cannot read type %s", t->name,
                          ds4_types_name(t->type));
    for (uint64_t i = 0; i < t->n_elem; i++) {
        /* Inf/NaN in a norm weight or bias poisons every output; say where. */
        float x = v->v[i];
        if (!(x == x) || x > 3.4e38f || x < -3.4e38f)
            return ds4_err_set(err, DS4_E_MODEL, "tensor %s: element %llu is not finite",
                              t->name, (unsigned long long)i);
    }
    return 0;
}

static int copy_tid2eid(int32_t **out, const ds4_gguf_tensor *t, const ds4_config *c, ds4err *err) {
    int32_t *tab = malloc(sizeof(int32_t) * t->n_elem);
    if (!tab) return ds4_err_set(err, DS4_E_NOMEM, "out of memory copying %s", t->name);
    memcpy(tab, t->data, sizeof(int32_t) * t->n_elem);
    for (uint64_t i = 0; i < t->n_elem; i++) {
        if (tab[i] < 0 || (uint32_t)tab[i] >= c->n_expert) {
            int32_t bad = tab[i];
            free(tab);
            return ds4_err_set(err, DS4_E_MODEL,
                              "tensor %s: token %llu routes to expert %d, expected 0..%u",
                              t->name, (unsigned long long)(i / c->n_expert_used), bad,
                              c->n_expert - 1);
        }
    }
    *out = tab;
    return 0;
}

/* Bind one tensor described by spec s into the struct at `base` (the GGUF's
 * ds4_bind_format.bind; ctx is the ds4_gguf_file). */
static int bind_one(const void *ctx, const ds4_config *c, uint32_t ratio, const ds4_tensor_spec *s,
                    const char *prefix, void *base, ds4err *err) {
    const ds4_gguf_file *g = ctx;
    char name[256], alt[256];
    snprintf(name, sizeof(name), "%s%s", prefix, s->name);
    const ds4_gguf_tensor *t = ds4_gguf_find_tensor(g, name);
    if (!t && s->alt) {
        snprintf(alt, sizeof(alt), "%s%s", prefix, s->alt);
        t = ds4_gguf_find_tensor(g, alt);
    }
    char shape[256];
    describe_shape(shape, sizeof(shape), c, ratio, s);
    if (!t) {
        if (s->optional) return 0;
        return ds4_err_set(err, DS4_E_MODEL, "%s: required tensor is missing: %s (expected %s %s)",
                          g->path, name, class_types(s->tclass), shape);
    }
    if (!type_allowed(s->tclass, t->type))
        return ds4_err_set(err, DS4_E_MODEL, "%s: tensor %s has type %s, expected %s",
                          g->path, t->name, ds4_types_name(t->type), class_types(s->tclass));
    bool ok = t->n_dims == s->n_dims;
    for (uint8_t i = 0; ok && i < s->n_dims; i++)
        ok = t->ne[i] == ds4_layout_dim(c, ratio, s->dims[i]);
    if (!ok) {
        char got[128];
        size_t used = 0;
        for (uint32_t i = 0; i < t->n_dims && used < sizeof(got); i++)
            used += (size_t)snprintf(got + used, sizeof(got) - used, "%s%llu", i ? ", " : "[",
                                     (unsigned long long)t->ne[i]);
        if (used < sizeof(got)) snprintf(got + used, sizeof(got) - used, "]");
        return ds4_err_set(err, DS4_E_MODEL, "%s: tensor %s has shape %s, expected %s",
                          g->path, t->name, got, shape);
    }
    void *field = (char *)base + s->offset;
    switch (s->tclass) {
    case DS4_TC_VEC:
        if (copy_vec(field, t, err)) return ds4_err_prefix(err, "%s", g->path);
        return 0;
    case DS4_TC_I32:
        if (copy_tid2eid(field, t, c, err)) return ds4_err_prefix(err, "%s", g->path);
        return 0;
    case DS4_TC_MAT: {
        ds4_mat *m = field;
        m->type = t->type;
        m->cols = t->ne[0];
        m->rows = t->ne[1];
        m->row_bytes = ds4_types_row_bytes(t->type, t->ne[0]);
        m->data = t->data;
        return 0;
    }
    }
    return ds4_err_set(err, DS4_E_INTERNAL, "bad tensor class for %s", name);
}

/* A spec's GGUF name (ds4_bind_format.name). */
static void tensor_name(const void *ctx, const ds4_tensor_spec *s, const char *prefix, char *out,
                        size_t cap) {
    snprintf(out, cap, "%s%s", prefix, s->name);
}

/* The GGUF g as a format of bind.h. */
static ds4_bind_format gguf_format(const ds4_gguf_file *g) {
    return (ds4_bind_format){g->path, "blk.", g, bind_one, tensor_name};
}

/* tokenizer.ggml.tokens / token_type / merges -> a tokenizer whose strings
 * point into the mapping. */
static int load_tokenizer(ds4_model *m, ds4err *err) {
    const ds4_gguf_file *g = &m->file;
    if (!ds4_gguf_find_kv(g, "tokenizer.ggml.tokens")) return 0;
    uint64_t n_tok, n_merge = 0;
    if (ds4_gguf_get_arr_str(g, "tokenizer.ggml.tokens", NULL, 0, &n_tok, err)) return -1;
    if (n_tok > m->cfg.n_vocab)
        return ds4_err_set(err, DS4_E_MODEL, "%s: tokenizer.ggml.tokens has %llu entries, more than vocab_size %u",
                          g->path, (unsigned long long)n_tok, m->cfg.n_vocab);
    if (ds4_gguf_find_kv(g, "tokenizer.ggml.merges") &&
        ds4_gguf_get_arr_str(g, "tokenizer.ggml.merges", NULL, 0, &n_merge, err))
        return -1;
    m->tok_strs = malloc(sizeof(ds4_strref) * (n_tok + n_merge + 1));
    int32_t *types = NULL;
    if (!m->tok_strs) return ds4_err_set(err, DS4_E_NOMEM, "out of memory loading the tokenizer");
    ds4_strref *merges = m->tok_strs + n_tok;
    if (ds4_gguf_get_arr_str(g, "tokenizer.ggml.tokens", m->tok_strs, n_tok, &n_tok, err) ||
        (n_merge && ds4_gguf_get_arr_str(g, "tokenizer.ggml.merges", merges, n_merge, &n_merge,
         err)))
        return -1;
    if (ds4_gguf_find_kv(g, "tokenizer.ggml.token_type")) {
        types = malloc(sizeof(int32_t) * (n_tok ? n_tok : 1));
        if (!types) return ds4_err_set(err, DS4_E_NOMEM, "out of memory loading the tokenizer");
        if (ds4_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", types, n_tok, err)) {
            free(types);
            return -1;
        }
    }
    int rc = ds4_tok_init(&m->tok, m->tok_strs, (uint32_t)n_tok, types, merges, (uint32_t)n_merge, err);
    free(types);
    if (rc) return ds4_err_prefix(err, "%s", g->path);
    m->has_tok = true;
    return 0;
}

int ds4_model_tokenizer(const ds4_model *m, const ds4_tokenizer **out, ds4err *err) {
    if (!m->has_tok)
        return ds4_err_set(err, DS4_E_MODEL, m->ckpt ? "%s: the checkpoint's folder has no tokenizer.json: give token ids instead of text"
                                                     : "%s has no tokenizer (tokenizer.ggml.tokens): give token ids instead of text",
                          m->file.path);
    if (ds4_tok_require_specials(&m->tok, err)) return ds4_err_prefix(err, "%s", m->file.path);
    *out = &m->tok;
    return 0;
}

int ds4_model_open(ds4_model *m, const char *path, ds4err *err) {
    ds4_gguf_file g;
    memset(m, 0, sizeof(*m));
    if (ds4_gguf_open(&g, path, err)) return -1;
    return ds4_model_from_gguf(m, &g, err);
}

int ds4_model_from_gguf(ds4_model *m, const ds4_gguf_file *g, ds4err *err) {
    memset(m, 0, sizeof(*m));
    m->file = *g;
    /* A SIGBUS handler the program installed names this file. */
    if (m->file.mapped) ds4_reslimit_sigbus_watch(m->file.map, m->file.size, m->file.path);
    if (config_load(&m->cfg, &m->file, err)) goto fail;
    ds4_bind_format f = gguf_format(&m->file);
    if (ds4_bind_model(&f, m, err)) goto fail;
    if (load_tokenizer(m, err)) goto fail;
    return 0;
fail:
    ds4_model_close(m);
    return -1;
}

int ds4_model_load_mtp(ds4_model *m, const char *path, ds4err *err) {
    ds4_mtp *mtp = calloc(1, sizeof(*mtp));
    if (!mtp) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (ds4_gguf_open(&mtp->file, path, err)) {
        free(mtp);
        return -1;
    }
    const ds4_gguf_file *g = &mtp->file;
    if (g->mapped) ds4_reslimit_sigbus_watch(g->map, g->size, g->path);
    ds4_bind_format f = gguf_format(g);
    if (ds4_bind_mtp(&f, &m->cfg, mtp, err)) goto fail;
    m->mtp = mtp;
    return 0;
fail:
    ds4_bind_free_mtp(mtp);
    ds4_reslimit_sigbus_unwatch(mtp->file.map);
    ds4_gguf_close(&mtp->file);
    free(mtp);
    return -1;
}

/* llama.cpp's drafter keys (src/models/dflash.cpp), under "dflash.". */
#define DFLASH(k) "dflash." k

/* A u32 key of the drafter that must equal the model's value. */
static int dflash_same(const ds4_gguf_file *g, const char *key, uint32_t want, const char *what,
                       ds4err *err) {
    uint32_t v;
    if (ds4_gguf_get_u32(g, key, &v, err)) return -1;
    if (v != want)
        return ds4_err_set(err, DS4_E_MODEL, "%s: %s = %u, but the model's %s is %u", g->path, key,
                           v, what, want);
    return 0;
}

/* What ds4ref does not implement, refused by name rather than guessed. */
static int dflash_refuse(const ds4_gguf_file *g, ds4err *err) {
    static const char *const tensors[][2] = {
        {"fc.scale", "a scale of the main projection"},
        {"markov_w2.scale", "a scale of the Markov head"},
        {"conf_proj.bias", "a bias of the confidence head (the official head has none)"},
        {"token_embd.weight", "an embedding of its own (the drafter borrows the model's)"},
        {"output.weight", "an LM head of its own (the drafter borrows the model's)"},
        {"d2t", "a draft vocabulary"},
    };
    for (size_t i = 0; i < sizeof(tensors) / sizeof(tensors[0]); i++)
        if (ds4_gguf_find_tensor(g, tensors[i][0]))
            return ds4_err_set(err, DS4_E_MODEL, "%s: tensor %s (%s) is not supported", g->path,
                               tensors[i][0], tensors[i][1]);
    const ds4_gguf_kv *kv = ds4_gguf_find_kv(g, DFLASH("attention.causal"));
    bool causal = false;
    if (kv && ds4_gguf_get_bool(g, DFLASH("attention.causal"), &causal, err)) return -1;
    if (causal)
        return ds4_err_set(err, DS4_E_MODEL, "%s: %s is true: DSpark's block attends both ways",
                           g->path, DFLASH("attention.causal"));
    bool anchor = true;
    if (ds4_gguf_find_kv(g, DFLASH("sample_from_anchor")) &&
        ds4_gguf_get_bool(g, DFLASH("sample_from_anchor"), &anchor, err))
        return -1;
    if (!anchor)
        return ds4_err_set(err, DS4_E_MODEL, "%s: %s is false: DSpark drafts from the anchor's "
                           "slot on", g->path, DFLASH("sample_from_anchor"));
    return 0;
}

/* The drafter's configuration into c (a copy of the model's). */
static int dflash_config(ds4_config *c, const ds4_gguf_file *g, ds4err *err) {
    ds4_gguf_str arch;
    if (ds4_gguf_get_str(g, "general.architecture", &arch, err)) return -1;
    if (arch.len != 6 || memcmp(arch.ptr, "dflash", 6))
        return ds4_err_set(err, DS4_E_MODEL, "%s: general.architecture is '%.*s', expected "
                           "'dflash' (llama.cpp's DSpark drafter file)", g->path,
                           (int)(arch.len > 40 ? 40 : arch.len), arch.ptr);
    if (dflash_same(g, DFLASH("hyper_connection.count"), c->n_hc, "hyper-connection count", err) ||
        dflash_same(g, DFLASH("embedding_length"), c->n_embd, "embedding length", err) ||
        dflash_same(g, DFLASH("attention.sliding_window"), c->swa, "sliding window", err) ||
        dflash_same(g, DFLASH("expert_count"), c->n_expert, "expert count", err) ||
        dflash_same(g, DFLASH("expert_used_count"), c->n_expert_used, "experts used", err) ||
        get_u32(g, DFLASH("block_count"), &c->dspark_stages, err) ||
        get_u32(g, DFLASH("block_size"), &c->dspark_block, err) ||
        get_u32(g, "tokenizer.ggml.mask_token_id", &c->dspark_noise, err))
        return -1;
    if (c->dspark_stages < 1 || c->dspark_stages > DS4_MAX_DSPARK_STAGE)
        return ds4_err_set(err, DS4_E_MODEL, "%s: %s = %u: expected 1 to %d stages", g->path,
                           DFLASH("block_count"), c->dspark_stages, DS4_MAX_DSPARK_STAGE);
    const ds4_gguf_kv *t = ds4_gguf_find_kv(g, DFLASH("target_layers"));
    if (!t || t->type != GGUF_ARR || t->arr_n < 1 || t->arr_n > DS4_MAX_DSPARK_TARGET)
        return ds4_err_set(err, DS4_E_MODEL, "%s: %s must be an array of 1 to %d layer numbers",
                           g->path, DFLASH("target_layers"), DS4_MAX_DSPARK_TARGET);
    c->n_dspark_target = (uint32_t)t->arr_n;
    if (ds4_gguf_get_arr_u32(g, DFLASH("target_layers"), c->dspark_target, t->arr_n, err))
        return -1;
    /* llama.cpp taps layer t's input, the output of layer t - 1 (t = the
     * layer count: the last layer's output). */
    for (uint32_t i = 0; i < c->n_dspark_target; i++) {
        if (c->dspark_target[i] < 1 || c->dspark_target[i] > c->n_layer)
            return ds4_err_set(err, DS4_E_MODEL, "%s: %s[%u] = %u: expected a layer's input in "
                               "[1, %u]", g->path, DFLASH("target_layers"), i, c->dspark_target[i],
                               c->n_layer);
        c->dspark_target[i]--;
    }
    const ds4_gguf_tensor *w1 = ds4_gguf_find_tensor(g, "markov_w1.weight");
    if (!w1 || w1->n_dims != 2)
        return ds4_err_set(err, DS4_E_MODEL, "%s: required tensor is missing: markov_w1.weight "
                           "(its rank is the Markov head's)", g->path);
    c->dspark_rank = w1->ne[0] > UINT32_MAX ? UINT32_MAX : (uint32_t)w1->ne[0];
    return ds4_model_config_validate(c, g->path, err);
}

/* The stages' SwiGLU limits: dflash.swiglu_clamp_exp / _shexp, one number
 * or one per stage; without them the model's MTP-layer entry stays. */
static int dflash_clamps(const ds4_gguf_file *g, const ds4_config *c, ds4_dspark *d, bool shared,
                         ds4err *err) {
    const char *key = shared && ds4_gguf_find_kv(g, DFLASH("swiglu_clamp_shexp"))
                          ? DFLASH("swiglu_clamp_shexp") : DFLASH("swiglu_clamp_exp");
    const ds4_gguf_kv *kv = ds4_gguf_find_kv(g, key);
    if (!kv) return 0;
    float v[DS4_MAX_DSPARK_STAGE];
    if (kv->type == GGUF_ARR) {
        if (ds4_gguf_get_arr_f32(g, key, v, c->dspark_stages, err)) return -1;
    } else {
        if (ds4_gguf_get_f32(g, key, &v[0], err)) return -1;
        for (uint32_t s = 1; s < c->dspark_stages; s++) v[s] = v[0];
    }
    for (uint32_t s = 0; s < c->dspark_stages; s++) {
        if (shared) d->stage[s].clamp_shexp = v[s];
        else d->stage[s].clamp_exp = v[s];
    }
    return 0;
}

static void dspark_file_free(ds4_dspark *d) {
    ds4_bind_free_dspark(d);
    ds4_reslimit_sigbus_unwatch(d->file.map);
    ds4_gguf_close(&d->file);
    free(d);
}

int ds4_model_load_dspark(ds4_model *m, const char *path, ds4err *err) {
    ds4_gguf_file g;
    if (ds4_gguf_open(&g, path, err)) return -1;
    return ds4_model_load_dspark_gguf(m, &g, err);
}

int ds4_model_load_dspark_gguf(ds4_model *m, const ds4_gguf_file *file, ds4err *err) {
    ds4_dspark *d = calloc(1, sizeof(*d));
    if (!d) {
        ds4_gguf_file g = *file;
        ds4_gguf_close(&g);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    d->file = *file;
    const ds4_gguf_file *g = &d->file;
    if (g->mapped) ds4_reslimit_sigbus_watch(g->map, g->size, g->path);
    if (m->dspark) {
        ds4_err_set(err, DS4_E_ARG, "%s: the model has a DSpark drafter of its own; a second one "
                    "is not loaded", g->path);
        dspark_file_free(d);
        return -1;
    }
    ds4_config c = m->cfg;
    ds4_bind_format f = gguf_format(g);
    if (dflash_config(&c, g, err) || dflash_refuse(g, err) ||
        ds4_bind_dspark(&f, &c, d, "blk.", true, err) || dflash_clamps(g, &c, d, false, err) ||
        dflash_clamps(g, &c, d, true, err)) {
        dspark_file_free(d);
        return -1;
    }
    m->cfg = c;
    m->dspark = d;
    return 0;
}

void ds4_model_close(ds4_model *m) {
    if (m->dspark && m->dspark->file.map) {
        dspark_file_free(m->dspark);
        m->dspark = NULL;
    }
    if (m->mtp) {
        ds4_bind_free_mtp(m->mtp);
        ds4_reslimit_sigbus_unwatch(m->mtp->file.map);
        ds4_gguf_close(&m->mtp->file);
        free(m->mtp);
        m->mtp = NULL;
    }
    ds4_bind_free_model(m);
    if (m->has_tok) ds4_tok_free(&m->tok);
    m->has_tok = false;
    if (m->vocab) {
        ds4_hf_vocab_free(m->vocab);
        free(m->vocab);
        m->vocab = NULL;
    }
    free(m->tok_strs);
    m->tok_strs = NULL;
    ds4_model_config_free(&m->cfg);
    ds4_reslimit_sigbus_unwatch(m->file.map);
    ds4_gguf_close(&m->file);
    if (m->ckpt) {
        ds4_checkpoint_close(m->ckpt);
        free(m->ckpt);
        m->ckpt = NULL;
    }
}

uint64_t ds4_model_file_bytes(const ds4_model *m) {
    uint64_t n = m->file.size + (m->mtp ? m->mtp->file.size : 0) +
                 (m->dspark && m->dspark->file.map ? m->dspark->file.size : 0);
    for (size_t s = 0; m->ckpt && s < m->ckpt->n_shards; s++) n += m->ckpt->shards[s].size;
    return n;
}
