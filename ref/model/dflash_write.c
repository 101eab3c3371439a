/* A DSpark model GGUF split as llama.cpp ships DeepSeek-V4-Flash-0731: the
 * trunk, and the drafter in a file of its own (dflash_write.h). */
#include "ref/model/dflash_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/gguf.h"
#include "quant/gguf_write.h"
#include "ref/model/model.h"

/* Does key belong to the drafter (ds4ref's deepseek4.dspark.* keys)? */
static bool dspark_key(const char *key) {
    return !strncmp(key, "deepseek4.dspark.", 17);
}

/* The trunk's metadata: every value but the drafter's, and compress_ratios
 * without the stages' entries. */
static int trunk_metadata(const ds4_model *m, ds4_gguf_writer *w, ds4err *err) {
    const ds4_gguf_file *g = &m->file;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const ds4_gguf_kv *kv = &g->kv[i];
        if (dspark_key(kv->key)) continue;
        int rc;
        if (!strcmp(kv->key, "deepseek4.attention.compress_ratios")) {
            rc = ds4_gguf_write_arr_u32(w, kv->key, m->cfg.ratio, m->cfg.n_layer);
        } else {
            uint64_t end;
            if (ds4_gguf_skip_value(g, kv->type, kv->value_off, &end, err))
                return ds4_err_prefix(err, "%s: key %s", g->path, kv->key);
            rc = ds4_gguf_write_raw(w, kv->key, kv->type, g->map + kv->value_off, end - kv->value_off);
        }
        if (rc) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    return 0;
}

/* The drafter's metadata in llama.cpp's keys (src/models/dflash.cpp). */
static int draft_metadata(const ds4_model *m, ds4_gguf_writer *w) {
    const ds4_config *c = &m->cfg;
    uint32_t inputs[DS4_MAX_DSPARK_TARGET];
    /* llama.cpp taps a layer's input: the output of layer t is the input
     * of layer t + 1. */
    for (uint32_t i = 0; i < c->n_dspark_target; i++) inputs[i] = c->dspark_target[i] + 1;
    return ds4_gguf_write_str(w, "general.architecture", "dflash") ||
           ds4_gguf_write_u32(w, "dflash.block_count", c->dspark_stages) ||
           ds4_gguf_write_u32(w, "dflash.block_size", c->dspark_block) ||
           ds4_gguf_write_arr_u32(w, "dflash.target_layers", inputs, c->n_dspark_target) ||
           ds4_gguf_write_u32(w, "dflash.embedding_length", c->n_embd) ||
           ds4_gguf_write_u32(w, "dflash.hyper_connection.count", c->n_hc) ||
           ds4_gguf_write_u32(w, "dflash.attention.sliding_window", c->swa) ||
           ds4_gguf_write_u32(w, "dflash.expert_count", c->n_expert) ||
           ds4_gguf_write_u32(w, "dflash.expert_used_count", c->n_expert_used) ||
           ds4_gguf_write_f32(w, "dflash.swiglu_clamp_exp", c->clamp_exp[c->n_layer]) ||
           ds4_gguf_write_f32(w, "dflash.swiglu_clamp_shexp", c->clamp_shexp[c->n_layer]) ||
           ds4_gguf_write_u32(w, "tokenizer.ggml.mask_token_id", c->dspark_noise);
}

static int copy_tensor(ds4_gguf_writer *w, const ds4_gguf_tensor *t, const char *name, ds4err *err) {
    if (ds4_gguf_write_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes))
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    return 0;
}

/* Tensor name's place in the drafter file: a head's llama.cpp name (the
 * specs' alt, under no stage), or blk.S.* for stage S's own; "" when it is
 * the trunk's. */
static void draft_name(const ds4_config *c, const char *name, char *out, size_t cap) {
    out[0] = '\0';
    unsigned s;
    int used = 0;
    if (sscanf(name, "mtp.%u.%n", &s, &used) != 1 || !used) return;
    const char *rest = name + used;
    const ds4_tensor_spec *heads[2] = {ds4_layout_dspark_in, ds4_layout_dspark_out};
    const uint32_t n_heads[2] = {ds4_layout_n_dspark_in, ds4_layout_n_dspark_out};
    const unsigned stage_of[2] = {0, c->dspark_stages - 1};
    for (int k = 0; k < 2; k++)
        for (uint32_t i = 0; i < n_heads[k]; i++)
            if (s == stage_of[k] && !strcmp(rest, heads[k][i].name)) {
                snprintf(out, cap, "%s", heads[k][i].alt);
                return;
            }
    snprintf(out, cap, "blk.%u.%s", s, rest);
}

int ds4_dflash_write_split(const char *path, const char *trunk_path, const char *draft_path,
                           ds4err *err) {
    ds4_model m;
    if (ds4_model_open(&m, path, err)) return -1;
    const ds4_gguf_file *g = &m.file;
    ds4_gguf_writer *tw = ds4_gguf_writer_new((uint32_t)g->alignment);
    ds4_gguf_writer *dw = ds4_gguf_writer_new((uint32_t)g->alignment);
    int rc = !tw || !dw ? ds4_err_set(err, DS4_E_NOMEM, "out of memory") : 0;
    if (rc == 0 && !m.dspark)
        rc = ds4_err_set(err, DS4_E_ARG, "%s: the model has no DSpark drafter to split off", path);
    if (rc == 0) rc = trunk_metadata(&m, tw, err);
    if (rc == 0 && draft_metadata(&m, dw)) rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    char name[256];
    for (uint64_t i = 0; rc == 0 && i < g->n_tensors; i++) {
        const ds4_gguf_tensor *t = &g->tensors[i];
        draft_name(&m.cfg, t->name, name, sizeof(name));
        rc = name[0] ? copy_tensor(dw, t, name, err) : copy_tensor(tw, t, t->name, err);
    }
    if (rc == 0) rc = ds4_gguf_writer_save(tw, trunk_path, err);
    /* Both files or neither: a trunk without its drafter is not what was
     * asked for. */
    if (rc == 0 && (rc = ds4_gguf_writer_save(dw, draft_path, err))) remove(trunk_path);
    ds4_gguf_writer_free(tw);
    ds4_gguf_writer_free(dw);
    ds4_model_close(&m);
    return rc;
}
