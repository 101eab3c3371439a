/* config.json's hyper-parameters (hfconfig.h). */
#include "ref/model/hfconfig.h"

#include <math.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/model/hparams.h"

static int missing(const char *path, const char *key, const char *what, ds4err *err) {
    return ds4_err_set(err, DS4_E_MODEL, "%s: \"%s\" must be %s", path, key, what);
}

/* A count: a JSON integer written in plain digits, below 2^32 (4.0, 4e0
 * and -0 are not counts). */
static bool read_u32(const ds4_json *v, uint32_t *out) {
    uint64_t x;
    if (!ds4_json_uint(v, UINT32_MAX, &x)) return false;
    *out = (uint32_t)x;
    return true;
}

/* A required count. */
static int get_u32(const ds4_json *root, const char *key, uint32_t *out, const char *path,
                   ds4err *err) {
    const ds4_json *v = ds4_json_get(root, key);
    if (!v) return ds4_err_set(err, DS4_E_MODEL, "%s: \"%s\" is missing", path, key);
    if (!read_u32(v, out)) return missing(path, key, "an integer from 0 to 2^32 - 1", err);
    return 0;
}

/* A required float: a finite JSON number that stays finite as an f32. */
static int get_f32(const ds4_json *root, const char *key, float *out, const char *path,
                   ds4err *err) {
    const ds4_json *v = ds4_json_get(root, key);
    if (!v) return ds4_err_set(err, DS4_E_MODEL, "%s: \"%s\" is missing", path, key);
    if (v->type != DS4_JSON_NUMBER || !isfinite((float)v->num))
        return missing(path, key, "a finite number", err);
    *out = (float)v->num;
    return 0;
}

/* A string key that, when present, must have the one value ds4ref runs. */
static int want_str(const ds4_json *root, const char *key, const char *want, const char *path,
                    ds4err *err) {
    const ds4_json *v = ds4_json_get(root, key);
    if (!v || ds4_json_is_str(v, want)) return 0;
    if (v->type != DS4_JSON_STRING) return missing(path, key, "text", err);
    return ds4_err_set(err, DS4_E_UNSUPPORTED, "%s: \"%s\" is \"%.40s\": only \"%s\" is DeepSeek V4",
                       path, key, v->str, want);
}

/* An integer that must have one value. */
static int want_u32(const ds4_json *root, const char *key, uint32_t want, const char *path,
                    ds4err *err) {
    uint32_t v = 0;
    if (get_u32(root, key, &v, path, err)) return -1;
    if (v == want) return 0;
    return ds4_err_set(err, DS4_E_UNSUPPORTED, "%s: \"%s\" is %u: DeepSeek V4 has %u", path, key,
                       v, want);
}

/* Row h of the table (hparams.h) from the object `obj`: a DS4_HP_ONE row
 * must be 1, an optional row left out keeps its default. */
static int read_hparam(ds4_config *c, const ds4_json *obj, const ds4_hparam *h, const char *path,
                       ds4err *err) {
    if (h->json_optional && !ds4_json_get(obj, h->json)) return 0;
    switch (h->kind) {
    case DS4_HP_U32: return get_u32(obj, h->json, ds4_hparams_field(h, c), path, err);
    case DS4_HP_F32: return get_f32(obj, h->json, ds4_hparams_field(h, c), path, err);
    case DS4_HP_ONE: return want_u32(obj, h->json, 1, path, err);
    }
    return ds4_err_set(err, DS4_E_INTERNAL, "bad kind of hyper-parameter %s", h->json);
}

/* The table's rows of one group, from `obj`. */
static int read_hparams(ds4_config *c, const ds4_json *obj, uint8_t group, const char *path,
                        ds4err *err) {
    for (uint32_t i = 0; i < ds4_hparams_n; i++)
        if (ds4_hparams[i].group == group && read_hparam(c, obj, &ds4_hparams[i], path, err))
            return -1;
    return 0;
}

/* "rope_scaling": null or absent leaves YaRN off (the YaRN rows keep their
 * defaults); an object must say yarn and holds the YaRN rows. */
static int read_rope_scaling(ds4_config *c, const ds4_json *root, const char *path, ds4err *err) {
    const ds4_json *rs = ds4_json_get(root, "rope_scaling");
    c->yarn = false;
    if (!rs || rs->type == DS4_JSON_NULL) return 0;
    if (rs->type != DS4_JSON_OBJECT) return missing(path, "rope_scaling", "an object or null", err);
    const ds4_json *t = ds4_json_get(rs, "type");
    if (!t) t = ds4_json_get(rs, "rope_type");
    if (!ds4_json_is_str(t, "yarn"))
        return ds4_err_set(err, DS4_E_UNSUPPORTED,
                           "%s: \"rope_scaling\": only {\"type\": \"yarn\", ...} is supported",
                           path);
    c->yarn = true;
    char in[512];
    snprintf(in, sizeof(in), "%s: in \"rope_scaling\"", path);
    return read_hparams(c, rs, DS4_HP_YARN, in, err);
}

/* DeepSeek-V4-Flash-0731's DSpark drafter: its rows and target layers, when
 * the file has "dspark_block_size". */
static int read_dspark(ds4_config *c, const ds4_json *root, const char *path, ds4err *err) {
    const ds4_hparam *first = ds4_hparams_find(offsetof(ds4_config, dspark_block));
    if (!ds4_json_get(root, first->json)) return 0;
    if (read_hparams(c, root, DS4_HP_DSPARK, path, err)) return -1;
    const ds4_json *t = ds4_json_get(root, "dspark_target_layer_ids");
    if (!t || t->type != DS4_JSON_ARRAY || t->n < 1 || t->n > DS4_MAX_DSPARK_TARGET)
        return ds4_err_set(err, DS4_E_MODEL, "%s: \"dspark_target_layer_ids\" must be an array "
                           "of 1 to %d layer numbers", path, DS4_MAX_DSPARK_TARGET);
    for (size_t i = 0; i < t->n; i++)
        if (!read_u32(&t->elems[i], &c->dspark_target[i]))
            return ds4_err_set(err, DS4_E_MODEL, "%s: \"dspark_target_layer_ids\"[%zu] is not a "
                               "layer number", path, i);
    c->n_dspark_target = (uint32_t)t->n;
    return 0;
}

/* How many compress_ratios entries follow the layers': one per MTP layer,
 * or with DSpark one per stage (0731 keeps num_nextn_predict_layers 1 and
 * ships no NextN layer), 0 from 1 to DS4_MAX_DSPARK_STAGE. */
static bool tail_ok(const ds4_config *c, size_t n_tail, uint32_t n_mtp) {
    if (c->n_dspark_target) return n_tail >= 1 && n_tail <= DS4_MAX_DSPARK_STAGE;
    return n_tail == n_mtp;
}

/* compress_ratios: n_layer entries, then one per MTP layer or DSpark stage. */
static int read_ratios(ds4_config *c, const ds4_json *root, uint32_t n_mtp, const char *path,
                       ds4err *err) {
    const ds4_json *r = ds4_json_get(root, "compress_ratios");
    if (!r || r->type != DS4_JSON_ARRAY || r->n < c->n_layer ||
        !tail_ok(c, r->n - c->n_layer, n_mtp)) {
        if (c->n_dspark_target)
            return ds4_err_set(err, DS4_E_MODEL,
                               "%s: \"compress_ratios\" must be an array of %u integers (one "
                               "per layer), then one per DSpark stage (1 to %d)", path, c->n_layer,
                               DS4_MAX_DSPARK_STAGE);
        return ds4_err_set(err, DS4_E_MODEL,
                           "%s: \"compress_ratios\" must be an array of %u integers (one per "
                           "layer, then one per MTP layer)", path, c->n_layer + n_mtp);
    }
    if (!(c->ratio = malloc(sizeof(uint32_t) * c->n_layer)))
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    for (size_t l = 0; l < r->n; l++) {
        uint32_t v;
        if (!read_u32(&r->elems[l], &v))
            return ds4_err_set(err, DS4_E_MODEL, "%s: \"compress_ratios\"[%zu] is not a count",
                               path, l);
        if (l < c->n_layer) c->ratio[l] = v;
        else if (c->n_dspark_target && v)
            return ds4_err_set(err, DS4_E_MODEL, "%s: \"compress_ratios\"[%zu] is %u: a DSpark "
                               "stage attends to its window only (0)", path, l, v);
    }
    if (c->n_dspark_target) c->dspark_stages = (uint32_t)(r->n - c->n_layer);
    return 0;
}

static int load(ds4_config *c, const ds4_json *root, const char *path, ds4err *err) {
    uint32_t n_mtp = 0;
    float limit = 0;
    if (root->type != DS4_JSON_OBJECT)
        return ds4_err_set(err, DS4_E_MODEL, "%s: not a JSON object", path);
    ds4_hparams_defaults(c);
    if (read_hparams(c, root, DS4_HP_PLAIN, path, err) ||
        get_f32(root, "swiglu_limit", &limit, path, err) ||
        want_str(root, "scoring_func", "sqrtsoftplus", path, err) ||
        want_str(root, "topk_method", "noaux_tc", path, err) ||
        want_str(root, "hidden_act", "silu", path, err))
        return -1;
    /* Group-limited routing (DeepSeek V3's n_group / topk_group, which also
     * says "noaux_tc") is not V4's: present, it must be one group. */
    if ((ds4_json_get(root, "n_group") && want_u32(root, "n_group", 1, path, err)) ||
        (ds4_json_get(root, "topk_group") && want_u32(root, "topk_group", 1, path, err)))
        return -1;
    if (ds4_json_get(root, "num_nextn_predict_layers") &&
        get_u32(root, "num_nextn_predict_layers", &n_mtp, path, err))
        return -1;
    if (n_mtp > 1)
        return ds4_err_set(err, DS4_E_UNSUPPORTED,
                           "%s: \"num_nextn_predict_layers\" is %u: ds4ref runs one MTP layer", path,
                           n_mtp);
    const ds4_json *norm = ds4_json_get(root, "norm_topk_prob");
    if (norm && norm->type != DS4_JSON_TRUE)
        return ds4_err_set(err, DS4_E_UNSUPPORTED,
                           "%s: \"norm_topk_prob\" must be true: DeepSeek V4 renormalizes its "
                           "routing weights", path);
    /* The arrays below are as long as num_hidden_layers says: its range first. */
    const ds4_hparam *layers = ds4_hparams_find(offsetof(ds4_config, n_layer));
    if (!ds4_hparams_in_range(layers, c))
        return ds4_err_set(err, DS4_E_MODEL, "%s: \"%s\" must be in [%u, %u]", path, layers->json,
                           layers->min, layers->max);
    if (read_rope_scaling(c, root, path, err) || read_dspark(c, root, path, err) ||
        read_ratios(c, root, n_mtp, path, err))
        return -1;
    c->clamp_exp = malloc(sizeof(float) * (c->n_layer + 1));
    c->clamp_shexp = malloc(sizeof(float) * (c->n_layer + 1));
    if (!c->clamp_exp || !c->clamp_shexp) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    for (uint32_t l = 0; l <= c->n_layer; l++) c->clamp_exp[l] = c->clamp_shexp[l] = limit;
    return ds4_model_config_validate(c, path, err);
}

int ds4_hfconfig_load(ds4_config *c, const ds4_json *root, const char *path, ds4err *err) {
    memset(c, 0, sizeof(*c));
    if (load(c, root, path, err)) {
        ds4_model_config_free(c);
        return -1;
    }
    return 0;
}

/* v as a JSON number that reads back as a float, not an integer ("10.0",
 * not "10"): transformers' DeepseekV4Config refuses an integer in its
 * float fields (swiglu_limit), and the release writes 10.0 there. */
static const char *float_text(double v, char out[32]) {
    snprintf(out, 32, "%.9g", v);
    if (!strpbrk(out, ".eEni")) strcat(out, ".0");
    return out;
}

/* Row h's value in c as config.json writes it: a count in digits, a float
 * as float_text. */
static const char *hparam_text(const ds4_hparam *h, const ds4_config *c, char out[32]) {
    if (h->kind == DS4_HP_F32) return float_text(ds4_hparams_get(h, c), out);
    snprintf(out, 32, "%u", (uint32_t)ds4_hparams_get(h, c));
    return out;
}

/* The DSpark rows and target layers, as 0731's config.json has them (its
 * num_nextn_predict_layers stays 1, without a NextN layer). */
static void put_dspark(const ds4_config *c, ds4_buf *b) {
    char t[32];
    for (uint32_t i = 0; i < ds4_hparams_n; i++)
        if (ds4_hparams[i].group == DS4_HP_DSPARK)
            ds4_buf_printf(b, "  \"%s\": %s,\n", ds4_hparams[i].json,
                           hparam_text(&ds4_hparams[i], c, t));
    ds4_buf_puts(b, "  \"dspark_target_layer_ids\": [");
    for (uint32_t i = 0; i < c->n_dspark_target; i++)
        ds4_buf_printf(b, "%s%u", i ? ", " : "", c->dspark_target[i]);
    ds4_buf_puts(b, "],\n");
}

int ds4_hfconfig_write(const ds4_config *c, bool mtp, bool quantized, ds4_buf *b, ds4err *err) {
    if (mtp && c->dspark_stages)
        return ds4_err_set(err, DS4_E_UNSUPPORTED, "config.json: a model with both an MTP layer "
                           "and a DSpark drafter has no release layout");
    const float limit = c->clamp_exp[0];
    for (uint32_t l = 0; l < c->n_layer + (mtp ? 1 : 0); l++)
        if (c->clamp_exp[l] != limit || c->clamp_shexp[l] != limit)
            return ds4_err_set(err, DS4_E_UNSUPPORTED,
                               "config.json has one swiglu_limit for every expert, and this model "
                               "clamps layer %u's routed experts at %g and its shared expert at %g, "
                               "not %g", l, c->clamp_exp[l], c->clamp_shexp[l], limit);
    char t[32];
    ds4_buf_puts(b, "{\n  \"architectures\": [\"DeepseekV4ForCausalLM\"],\n"
                    "  \"model_type\": \"deepseek_v4\",\n");
    for (uint32_t i = 0; i < ds4_hparams_n; i++)
        if (ds4_hparams[i].group == DS4_HP_PLAIN)
            ds4_buf_printf(b, "  \"%s\": %s,\n", ds4_hparams[i].json,
                           hparam_text(&ds4_hparams[i], c, t));
    ds4_buf_printf(b,
        "  \"swiglu_limit\": %s,\n"
        "  \"scoring_func\": \"sqrtsoftplus\",\n  \"topk_method\": \"noaux_tc\",\n"
        "  \"norm_topk_prob\": true,\n  \"hidden_act\": \"silu\",\n"
        "  \"tie_word_embeddings\": false,\n  \"num_nextn_predict_layers\": %u,\n",
        float_text(limit, t), mtp || c->dspark_stages ? 1u : 0u);
    if (c->dspark_stages) put_dspark(c, b);
    if (c->yarn) {
        ds4_buf_puts(b, "  \"rope_scaling\": {\"type\": \"yarn\"");
        for (uint32_t i = 0; i < ds4_hparams_n; i++)
            if (ds4_hparams[i].group == DS4_HP_YARN)
                ds4_buf_printf(b, ", \"%s\": %s", ds4_hparams[i].json,
                               hparam_text(&ds4_hparams[i], c, t));
        ds4_buf_puts(b, "},\n");
    }
    if (quantized)
        ds4_buf_puts(b, "  \"expert_dtype\": \"fp4\",\n  \"quantization_config\": "
                        "{\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
                        "\"quant_method\": \"fp8\", \"scale_fmt\": \"ue8m0\", "
                        "\"weight_block_size\": [128, 128]},\n");
    ds4_buf_puts(b, "  \"compress_ratios\": [");
    for (uint32_t l = 0; l < c->n_layer; l++) ds4_buf_printf(b, "%s%u", l ? ", " : "", c->ratio[l]);
    for (uint32_t s = 0; s < c->dspark_stages; s++) ds4_buf_puts(b, ", 0");
    ds4_buf_puts(b, mtp ? ", 0]\n}\n" : "]\n}\n");
    return b->failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory") : 0;
}
