/* A model from the official checkpoint (hfbind.h). */
#include "ref/model/hfbind.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/model/bind.h"
#include "ref/model/hfconfig.h"
#include "quant/blockfp.h"
#include "quant/types.h"

/* How the release may store a tensor. */
enum store {
    PLAIN,      /* F32, BF16 or F16 */
    LINEAR,     /* FP8 with its scales, or plain */
    EXPERTS     /* one tensor an expert: FP4 or FP8 with scales, or plain */
};

/* A GGUF name of layout.c and the release's, the latter with "%u" for the
 * expert where the GGUF stacks them.  Names without ".weight" are the
 * release's parameters that model.py registers bare. */
typedef struct hfname {
    const char *gguf, *hf;
    uint8_t store;
    uint8_t form;    /* how the release stores it (enum ds4_hf_form) */
} hfname;

static const hfname names[] = {
    /* global */
    {"token_embd.weight", "embed.weight", PLAIN, DS4_HF_BF16},
    {"output_norm.weight", "norm.weight", PLAIN, DS4_HF_BF16},
    {"output.weight", "head.weight", PLAIN, DS4_HF_BF16},
    {"output_hc_fn.weight", "hc_head_fn", PLAIN, DS4_HF_F32},
    {"output_hc_base.weight", "hc_head_base", PLAIN, DS4_HF_F32},
    {"output_hc_scale.weight", "hc_head_scale", PLAIN, DS4_HF_F32},
    /* a block */
    {"hc_attn_fn.weight", "hc_attn_fn", PLAIN, DS4_HF_F32},
    {"hc_attn_scale.weight", "hc_attn_scale", PLAIN, DS4_HF_F32},
    {"hc_attn_base.weight", "hc_attn_base", PLAIN, DS4_HF_F32},
    {"attn_norm.weight", "attn_norm.weight", PLAIN, DS4_HF_BF16},
    {"attn_q_a.weight", "attn.wq_a.weight", LINEAR, DS4_HF_FP8},
    {"attn_q_a_norm.weight", "attn.q_norm.weight", PLAIN, DS4_HF_BF16},
    {"attn_q_b.weight", "attn.wq_b.weight", LINEAR, DS4_HF_FP8},
    {"attn_kv.weight", "attn.wkv.weight", LINEAR, DS4_HF_FP8},
    {"attn_kv_a_norm.weight", "attn.kv_norm.weight", PLAIN, DS4_HF_BF16},
    {"attn_sinks.weight", "attn.attn_sink", PLAIN, DS4_HF_F32},
    {"attn_output_a.weight", "attn.wo_a.weight", LINEAR, DS4_HF_FP8},
    {"attn_output_b.weight", "attn.wo_b.weight", LINEAR, DS4_HF_FP8},
    {"attn_compressor_ape.weight", "attn.compressor.ape", PLAIN, DS4_HF_F32},
    {"attn_compressor_kv.weight", "attn.compressor.wkv.weight", PLAIN, DS4_HF_BF16},
    {"attn_compressor_gate.weight", "attn.compressor.wgate.weight", PLAIN, DS4_HF_BF16},
    {"attn_compressor_norm.weight", "attn.compressor.norm.weight", PLAIN, DS4_HF_BF16},
    {"indexer.attn_q_b.weight", "attn.indexer.wq_b.weight", LINEAR, DS4_HF_FP8},
    {"indexer.proj.weight", "attn.indexer.weights_proj.weight", PLAIN, DS4_HF_BF16},
    {"indexer_compressor_ape.weight", "attn.indexer.compressor.ape", PLAIN, DS4_HF_F32},
    {"indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight", PLAIN, DS4_HF_BF16},
    {"indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight", PLAIN, DS4_HF_BF16},
    {"indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight", PLAIN, DS4_HF_BF16},
    {"hc_ffn_fn.weight", "hc_ffn_fn", PLAIN, DS4_HF_F32},
    {"hc_ffn_scale.weight", "hc_ffn_scale", PLAIN, DS4_HF_F32},
    {"hc_ffn_base.weight", "hc_ffn_base", PLAIN, DS4_HF_F32},
    {"ffn_norm.weight", "ffn_norm.weight", PLAIN, DS4_HF_BF16},
    {"ffn_gate_inp.weight", "ffn.gate.weight", PLAIN, DS4_HF_BF16},
    {"exp_probs_b.bias", "ffn.gate.bias", PLAIN, DS4_HF_F32},
    {"ffn_gate_tid2eid.weight", "ffn.gate.tid2eid", PLAIN, DS4_HF_I64},
    {"ffn_gate_exps.weight", "ffn.experts.%u.w1.weight", EXPERTS, DS4_HF_FP4},
    {"ffn_up_exps.weight", "ffn.experts.%u.w3.weight", EXPERTS, DS4_HF_FP4},
    {"ffn_down_exps.weight", "ffn.experts.%u.w2.weight", EXPERTS, DS4_HF_FP4},
    {"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight", LINEAR, DS4_HF_FP8},
    {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight", LINEAR, DS4_HF_FP8},
    {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight", LINEAR, DS4_HF_FP8},
    /* the MTP head's own */
    {"e_proj.weight", "e_proj.weight", LINEAR, DS4_HF_FP8},
    {"h_proj.weight", "h_proj.weight", LINEAR, DS4_HF_FP8},
    {"enorm.weight", "enorm.weight", PLAIN, DS4_HF_BF16},
    {"hnorm.weight", "hnorm.weight", PLAIN, DS4_HF_BF16},
    {"norm.weight", "norm.weight", PLAIN, DS4_HF_BF16},
    {"hc_head_fn.weight", "hc_head_fn", PLAIN, DS4_HF_F32},
    {"hc_head_base.weight", "hc_head_base", PLAIN, DS4_HF_F32},
    {"hc_head_scale.weight", "hc_head_scale", PLAIN, DS4_HF_F32},
    /* the DSpark drafter's own (0731: mtp.0's adapter, the last stage's
     * heads; norm and hc_head_* are named as the MTP head's) */
    {"main_proj.weight", "main_proj.weight", LINEAR, DS4_HF_FP8},
    {"main_norm.weight", "main_norm.weight", PLAIN, DS4_HF_BF16},
    {"markov_head.markov_w1.weight", "markov_head.markov_w1.weight", PLAIN, DS4_HF_BF16},
    {"markov_head.markov_w2.weight", "markov_head.markov_w2.weight", PLAIN, DS4_HF_BF16},
    {"confidence_head.proj.weight", "confidence_head.proj.weight", PLAIN, DS4_HF_BF16},
};

static const hfname *hf_of(const char *gguf) {
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(names[i].gguf, gguf)) return &names[i];
    return NULL;
}

const char *ds4_hfbind_release_name(const char *gguf) {
    const hfname *h = hf_of(gguf);
    return h ? h->hf : NULL;
}

int ds4_hfbind_release_form(const char *gguf) {
    const hfname *h = hf_of(gguf);
    return h ? h->form : -1;
}

/* What one binding works on: the checkpoint, where the names go, the
 * config and the layer's ratio. */
typedef struct binder {
    const ds4_ckpt *ck;
    const char *path;
    const ds4_config *c;
    uint32_t ratio;
    const char *prefix;      /* "", "layers.N." or "mtp.0." */
} binder;

/* A tensor's shape as text, "[a, b]". */
static void shape_text(const uint64_t *shape, uint32_t n, char *out, size_t cap) {
    size_t used = (size_t)snprintf(out, cap, "[");
    for (uint32_t i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%" PRIu64, i ? ", " : "", shape[i]);
    if (used < cap) snprintf(out + used, cap - used, "]");
}

/* The tensor `name` with the torch shape `want` (n dims) and one of the
 * dtypes `ok` (a bit per ds4_st_dtype; 0 when the caller checks). */
static int find(const binder *b, const char *name, const uint64_t *want, uint32_t n, uint32_t ok,
                const char *ok_text, const ds4_st_tensor **out, ds4err *err) {
    const ds4_st_tensor *t = ds4_checkpoint_find(b->ck, name);
    char w[96], g[96];
    shape_text(want, n, w, sizeof(w));
    if (!t)
        return ds4_err_set(err, DS4_E_MODEL, "%s: required tensor is missing: %s (expected %s %s)",
                           b->path, name, ok_text, w);
    if (ok && !(ok >> t->dtype & 1))
        return ds4_err_set(err, DS4_E_MODEL, "%s: tensor %s has dtype %s, expected %s", b->path,
                           name, ds4_safetensors_dtype_name(t->dtype), ok_text);
    bool same = t->n_dims == n;
    for (uint32_t i = 0; same && i < n; i++) same = t->shape[i] == want[i];
    if (!same) {
        shape_text(t->shape, t->n_dims, g, sizeof(g));
        return ds4_err_set(err, DS4_E_MODEL, "%s: tensor %s has shape %s, expected %s", b->path,
                           name, g, w);
    }
    *out = t;
    return 0;
}

#define BIT(d) (1u << (d))
static const uint32_t float_dtypes = BIT(DS4_ST_F32) | BIT(DS4_ST_BF16) | BIT(DS4_ST_F16);

static uint32_t plain_type(ds4_st_dtype d) {
    return d == DS4_ST_F32 ? DS4_TYPE_F32 : d == DS4_ST_BF16 ? DS4_TYPE_BF16 : DS4_TYPE_F16;
}

/* The torch shape of spec s: GGUF's reversed. */
static uint32_t torch_shape(const binder *b, const ds4_tensor_spec *s, uint64_t *shape) {
    for (uint8_t i = 0; i < s->n_dims; i++)
        shape[s->n_dims - 1 - i] = ds4_layout_dim(b->c, b->ratio, s->dims[i]);
    return s->n_dims;
}

static int copy_vec(const binder *b, const ds4_tensor_spec *s, const char *name, ds4_vec *v,
                    ds4err *err) {
    uint64_t shape[3];
    const uint32_t n = torch_shape(b, s, shape);
    const ds4_st_tensor *t;
    if (find(b, name, shape, n, float_dtypes, "F32, BF16 or F16", &t, err)) return -1;
    v->n = (uint32_t)t->n_elem;
    v->v = malloc(sizeof(float) * (t->n_elem ? t->n_elem : 1));
    if (!v->v) return ds4_err_set(err, DS4_E_NOMEM, "out of memory copying %s", name);
    ds4_types_dequant_row(plain_type(t->dtype), t->data, v->v, t->n_elem);
    for (uint64_t i = 0; i < t->n_elem; i++)
        /* Inf/NaN in a norm weight or bias poisons every output; say where. */
        if (!(v->v[i] == v->v[i]) || v->v[i] > 3.4e38f || v->v[i] < -3.4e38f)
            return ds4_err_set(err, DS4_E_MODEL, "%s: tensor %s: element %" PRIu64 " is not finite",
                               b->path, name, i);
    return 0;
}

/* tid2eid: I64 in the release (model.py's int32 parameter, widened by the
 * conversion), I32 accepted; every entry an expert. */
static int copy_tid2eid(const binder *b, const ds4_tensor_spec *s, const char *name, int32_t **out,
                        ds4err *err) {
    uint64_t shape[3];
    const uint32_t n = torch_shape(b, s, shape);
    const ds4_st_tensor *t;
    if (find(b, name, shape, n, BIT(DS4_ST_I64) | BIT(DS4_ST_I32), "I64 or I32", &t, err)) return -1;
    int32_t *tab = malloc(sizeof(int32_t) * (t->n_elem ? t->n_elem : 1));
    if (!tab) return ds4_err_set(err, DS4_E_NOMEM, "out of memory copying %s", name);
    for (uint64_t i = 0; i < t->n_elem; i++) {
        int64_t e;
        if (t->dtype == DS4_ST_I64) {
            memcpy(&e, t->data + 8 * i, 8);
        } else {
            int32_t e32;
            memcpy(&e32, t->data + 4 * i, 4);
            e = e32;
        }
        if (e < 0 || e >= (int64_t)b->c->n_expert) {
            free(tab);
            return ds4_err_set(err, DS4_E_MODEL,
                               "%s: tensor %s: token %" PRIu64 " routes to expert %" PRId64
                               ", expected 0..%u", b->path, name, i / b->c->n_expert_used, e,
                               b->c->n_expert - 1);
        }
        tab[i] = (int32_t)e;
    }
    *out = tab;
    return 0;
}

/* The scales of a block-scaled weight `name` ("….weight" -> "….scale"):
 * F8_E8M0 of the shape blockfp.h gives, none NaN, none so large that the
 * format's largest value times it leaves f32 (E4M3's 448 = 2^8 * 1.75:
 * byte 247 and up; E2M1's 6 = 2^2 * 1.5: 253 and up). */
static int find_scales(const binder *b, const char *name, int fp4, uint64_t rows, uint64_t cols,
                       const ds4_st_tensor **out, ds4err *err) {
    char sname[256];
    const size_t stem = strlen(name) - strlen(".weight");
    snprintf(sname, sizeof(sname), "%.*s.scale", (int)stem, name);
    uint64_t shape[2];
    ds4_blockfp_scale_shape(fp4, rows, cols, shape);
    if (find(b, sname, shape, 2, BIT(DS4_ST_F8_E8M0), "F8_E8M0", out, err)) return -1;
    const unsigned limit = fp4 ? 253 : 247;
    for (uint64_t i = 0; i < (*out)->n_elem; i++)
        if ((*out)->data[i] >= limit)
            return ds4_err_set(err, DS4_E_MODEL,
                               "%s: tensor %s: scale [%" PRIu64 ", %" PRIu64 "] is %s "
                               "(byte %u), expected below 2^%d so that every weight stays an f32",
                               b->path, sname, i / shape[1], i % shape[1],
                               (*out)->data[i] == 255 ? "NaN" : "too large",
                               (*out)->data[i], (int)limit - 127);
    return 0;
}

/* One matrix of rows x cols named `name`, as `store` allows: its type
 * into *type, its weights into *data, its scales (NULL for a plain type)
 * into *scale. */
static int bind_matrix(const binder *b, const char *name, uint8_t store, uint64_t rows,
                       uint64_t cols, uint32_t *type, const uint8_t **data, const uint8_t **scale,
                       ds4err *err) {
    const ds4_st_tensor *t = ds4_checkpoint_find(b->ck, name);
    const bool fp4 = store == EXPERTS && t && t->dtype == DS4_ST_I8;
    const bool fp8 = store != PLAIN && t && t->dtype == DS4_ST_F8_E4M3;
    const char *ok = store == PLAIN    ? "F32, BF16 or F16"
                     : store == LINEAR ? "F8_E4M3 (with .scale), F32, BF16 or F16"
                                       : "I8 (FP4, with .scale), F8_E4M3 (with .scale), F32, BF16 or F16";
    uint32_t dtypes = float_dtypes;
    if (store != PLAIN) dtypes |= BIT(DS4_ST_F8_E4M3);
    if (store == EXPERTS) dtypes |= BIT(DS4_ST_I8);
    if (fp4 && cols % DS4_BLOCKFP_FP4_BLOCK)
        return ds4_err_set(err, DS4_E_MODEL, "%s: tensor %s: FP4 needs rows of whole 32-blocks, "
                           "these have %" PRIu64 " columns", b->path, name, cols);
    const uint64_t shape[2] = {rows, fp4 ? cols / 2 : cols};
    if (find(b, name, shape, 2, dtypes, ok, &t, err)) return -1;
    const ds4_st_tensor *st = NULL;
    if ((fp4 || fp8) && find_scales(b, name, fp4, rows, cols, &st, err)) return -1;
    *type = fp4 ? DS4_TYPE_FP4_B32 : fp8 ? DS4_TYPE_FP8_B128 : plain_type(t->dtype);
    *data = t->data;
    *scale = st ? st->data : NULL;
    return 0;
}

/* A 2-D matrix of spec s. */
static int bind_mat(const binder *b, const ds4_tensor_spec *s, const hfname *h, const char *name,
                    ds4_mat *m, ds4err *err) {
    const uint64_t cols = ds4_layout_dim(b->c, b->ratio, s->dims[0]);
    const uint64_t rows = ds4_layout_dim(b->c, b->ratio, s->dims[1]);
    uint32_t type = 0;
    const uint8_t *data = NULL, *scale = NULL;
    if (bind_matrix(b, name, h->store, rows, cols, &type, &data, &scale, err)) return -1;
    *m = ds4_dot_scaled(type, cols, rows, data, scale, 0);
    if (!scale) m->scale_stride = 0;
    return 0;
}

/* The experts of spec s (GGUF's stacked [cols, rows, E]), one tensor each
 * in the release, all of one type. */
static int bind_experts(const binder *b, const ds4_tensor_spec *s, const hfname *h, ds4_mat *m,
                        ds4err *err) {
    const uint64_t cols = ds4_layout_dim(b->c, b->ratio, s->dims[0]);
    const uint64_t rows = ds4_layout_dim(b->c, b->ratio, s->dims[1]);
    const uint64_t E = ds4_layout_dim(b->c, b->ratio, s->dims[2]);
    const uint8_t **parts = calloc(2 * E, sizeof(*parts));
    if (!parts) return ds4_err_set(err, DS4_E_NOMEM, "out of memory binding %s%s", b->prefix, h->hf);
    uint32_t first = 0;
    char name[256], fmt[256];
    snprintf(fmt, sizeof(fmt), "%s%s", b->prefix, h->hf);
    for (uint64_t e = 0; e < E; e++) {
        uint32_t type = 0;
        const uint8_t *scale = NULL;
        snprintf(name, sizeof(name), fmt, (unsigned)e);
        if (bind_matrix(b, name, EXPERTS, rows, cols, &type, &parts[e], &scale, err)) goto fail;
        if (e && type != first) {
            ds4_err_set(err, DS4_E_MODEL, "%s: tensor %s is %s, but expert 0's is %s: "
                        "the experts of a layer must be stored alike", b->path, name,
                        ds4_types_name(type), ds4_types_name(first));
            goto fail;
        }
        first = type;
        parts[E + e] = scale;
    }
    *m = ds4_dot_scaled(first, cols, rows, parts[0], parts[E], 0);
    if (!parts[E]) m->scale_stride = 0;
    m->parts = parts;
    m->n_parts = E;
    return 0;
fail:
    free(parts);
    return -1;
}

/* Bind spec s into the struct at `base`. */
static int bind_one(const binder *b, const ds4_tensor_spec *s, void *base, ds4err *err) {
    const hfname *h = hf_of(s->name);
    if (!h) return ds4_err_set(err, DS4_E_INTERNAL, "no checkpoint name for %s", s->name);
    char name[256];
    snprintf(name, sizeof(name), "%s%s", b->prefix, h->hf);
    void *field = (char *)base + s->offset;
    if (s->optional && !ds4_checkpoint_find(b->ck, name)) return 0;
    switch (s->tclass) {
    case DS4_TC_VEC: return copy_vec(b, s, name, field, err);
    case DS4_TC_I32: return copy_tid2eid(b, s, name, field, err);
    case DS4_TC_MAT:
        if (s->n_dims == 3) return bind_experts(b, s, h, field, err);
        if (s->n_dims == 2) return bind_mat(b, s, h, name, field, err);
        /* A 1-D matrix is a vector kept as a matrix: not in DS4's layout. */
        break;
    }
    return ds4_err_set(err, DS4_E_INTERNAL, "bad tensor class for %s", name);
}

/* Bind spec s (ds4_bind_format.bind; ctx is a binder naming the checkpoint). */
static int bind_spec(const void *ctx, const ds4_config *c, uint32_t ratio,
                     const ds4_tensor_spec *s, const char *prefix, void *base, ds4err *err) {
    const binder *ck = ctx;
    const binder b = {ck->ck, ck->path, c, ratio, prefix};
    return bind_one(&b, s, base, err);
}

/* A spec's name in the release (ds4_bind_format.name). */
static void release_name(const void *ctx, const ds4_tensor_spec *s, const char *prefix,
                         char *out, size_t cap) {
    const hfname *h = hf_of(s->name);
    snprintf(out, cap, "%s%s", prefix, h ? h->hf : s->name);
}

/* The folder's tokenizer.json, when it has one: the same vocabulary in the
 * same layout as a GGUF's tokenizer.ggml.* (text/tokenizer.h), so the same
 * text gives the same ids on either path. */
static int load_tokenizer(ds4_model *m, const char *dir, ds4err *err) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    if (access(path, F_OK) != 0) return 0;
    m->vocab = calloc(1, sizeof(*m->vocab));
    if (!m->vocab) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (ds4_hf_vocab_from_json(m->vocab, path, err)) return -1;
    if (m->vocab->n_tokens > m->cfg.n_vocab)
        return ds4_err_set(err, DS4_E_MODEL, "%s has %u tokens, more than vocab_size %u", path,
                           m->vocab->n_tokens, m->cfg.n_vocab);
    if (ds4_tok_init(&m->tok, m->vocab->tokens, m->vocab->n_tokens, m->vocab->types,
                     m->vocab->merges, m->vocab->n_merges, err))
        return ds4_err_prefix(err, "%s", path);
    m->has_tok = true;
    return 0;
}

/* Bind the checkpoint at ck, which the model takes over (ds4_model_close,
 * or a failure here, closes it), into *m: config.json's hyper-parameters,
 * every tensor checked for its name, dtype, shape and scales, and the MTP
 * layer when the checkpoint holds mtp.0.e_proj.weight (then all of it).  `path`
 * names the checkpoint in messages; an error also names the tensor, what
 * was expected and what was found. */
static int bind_model(ds4_model *m, ds4_ckpt *ck, const char *path, ds4err *err) {
    memset(m, 0, sizeof(*m));
    m->ckpt = ck;
    /* Messages about the model (the engine's, the API's) name the folder. */
    m->file.path = strdup(path);
    if (!m->file.path) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        goto fail;
    }
    if (ds4_hfconfig_load(&m->cfg, ds4_checkpoint_config(ck), path, err)) goto fail;
    const binder b = {ck, path, NULL, 0, ""};
    const ds4_bind_format f = {path, "layers.", &b, bind_spec, release_name};
    if (ds4_bind_model(&f, m, err)) goto fail;
    if (ds4_checkpoint_find(ck, "mtp.0.e_proj.weight")) {
        /* ds4_model_close frees what is bound so far. */
        if (!(m->mtp = calloc(1, sizeof(*m->mtp)))) {
            ds4_err_set(err, DS4_E_NOMEM, "out of memory");
            goto fail;
        }
        if (ds4_bind_mtp(&f, &m->cfg, m->mtp, err)) goto fail;
    }
    if (load_tokenizer(m, ck->dir, err)) goto fail;
    return 0;
fail:
    ds4_model_close(m);
    return -1;
}

int ds4_hfbind_open(ds4_model *m, const char *path, ds4err *err) {
    memset(m, 0, sizeof(*m));
    ds4_ckpt *ck = malloc(sizeof(*ck));
    if (!ck) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (ds4_checkpoint_open(ck, path, err)) {
        free(ck);
        return -1;
    }
    return bind_model(m, ck, path, err);
}
