/* The DS4 tensor directory as a table: every tensor of ds4's GGUF files.
 *
 * One table drives both the loader (bind + validate every tensor of a file)
 * and the synthetic generator (write every tensor of a file), so the two can
 * never disagree about names, shapes or which layers carry what.  Shapes are
 * GGUF order: ne0 (the input width of a matrix) first. */
#include <stddef.h>

#include "ref/model/model.h"
#include "quant/types.h"

#define F(type, field) ((uint32_t)offsetof(type, field))
#define L(field) F(ds4_layer, field)

const ds4_tensor_spec ds4_layout_global[] = {
    {"token_embd.weight", NULL, 0, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_VOCAB}, DS4_TYPE_F16, DS4_I_EMBD, false, F(ds4_model, token_embd)},
    {"output_norm.weight", NULL, 0, DS4_TC_VEC, 1, {DS4_D_EMBD}, DS4_TYPE_F32, DS4_I_NORM, false, F(ds4_model, output_norm)},
    {"output.weight", NULL, 0, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_VOCAB}, DS4_TYPE_Q8_0, DS4_I_MAT, false, F(ds4_model, output)},
    {"output_hc_fn.weight", NULL, 0, DS4_TC_MAT, 2, {DS4_D_HC_DIM, DS4_D_HC}, DS4_TYPE_F16, DS4_I_HC_FN, false, F(ds4_model, output_hc_fn)},
    {"output_hc_base.weight", NULL, 0, DS4_TC_VEC, 1, {DS4_D_HC}, DS4_TYPE_F32, DS4_I_OUT_HC_BASE, false, F(ds4_model, output_hc_base)},
    {"output_hc_scale.weight", NULL, 0, DS4_TC_VEC, 1, {DS4_D_1}, DS4_TYPE_F32, DS4_I_OUT_HC_SCALE, false, F(ds4_model, output_hc_scale)},
};
const uint32_t ds4_layout_n_global = sizeof(ds4_layout_global) / sizeof(ds4_layout_global[0]);

const ds4_tensor_spec ds4_layout_layer[] = {
    {"hc_attn_fn.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_HC_DIM, DS4_D_HC_MIX}, DS4_TYPE_F16, DS4_I_HC_FN, false, L(hc_attn_fn)},
    {"hc_attn_scale.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_3}, DS4_TYPE_F32, DS4_I_HC_SCALE, false, L(hc_attn_scale)},
    {"hc_attn_base.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_HC_MIX}, DS4_TYPE_F32, DS4_I_HC_BASE, false, L(hc_attn_base)},
    {"attn_norm.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_EMBD}, DS4_TYPE_F32, DS4_I_NORM, false, L(attn_norm)},
    {"attn_q_a.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_QLORA}, DS4_TYPE_Q8_0, DS4_I_MAT, false, L(q_a)},
    {"attn_q_a_norm.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_QLORA}, DS4_TYPE_F32, DS4_I_NORM, false, L(q_a_norm)},
    {"attn_q_b.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_QLORA, DS4_D_QDIM}, DS4_TYPE_Q8_0, DS4_I_MAT, false, L(q_b)},
    {"attn_kv.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_HEAD_DIM}, DS4_TYPE_Q8_0, DS4_I_MAT, false, L(kv)},
    {"attn_kv_a_norm.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_HEAD_DIM}, DS4_TYPE_F32, DS4_I_NORM, false, L(kv_norm)},
    {"attn_sinks.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_N_HEAD}, DS4_TYPE_F32, DS4_I_SINK, false, L(sinks)},
    {"attn_output_a.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_OUT_A_IN, DS4_D_OUT_LOW}, DS4_TYPE_Q8_0, DS4_I_MAT, false, L(out_a)},
    {"attn_output_b.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_OUT_LOW, DS4_D_EMBD}, DS4_TYPE_Q8_0, DS4_I_MAT, false, L(out_b)},

    {"attn_compressor_ape.weight", NULL, DS4_W_COMPRESS, DS4_TC_MAT, 2, {DS4_D_COMP_W, DS4_D_RATIO}, DS4_TYPE_F16, DS4_I_APE, false, L(comp_ape)},
    {"attn_compressor_kv.weight", NULL, DS4_W_COMPRESS, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_COMP_W}, DS4_TYPE_F16, DS4_I_MAT, false, L(comp_kv)},
    {"attn_compressor_gate.weight", NULL, DS4_W_COMPRESS, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_COMP_W}, DS4_TYPE_F16, DS4_I_MAT, false, L(comp_gate)},
    {"attn_compressor_norm.weight", NULL, DS4_W_COMPRESS, DS4_TC_VEC, 1, {DS4_D_HEAD_DIM}, DS4_TYPE_F32, DS4_I_NORM, false, L(comp_norm)},

    /* ds4's file mixes "indexer." and "indexer_"; accept either spelling. */
    {"indexer.attn_q_b.weight", "indexer_attn_q_b.weight", DS4_W_INDEXER, DS4_TC_MAT, 2, {DS4_D_QLORA, DS4_D_IDX_Q}, DS4_TYPE_F16, DS4_I_MAT, false, L(idx_q_b)},
    {"indexer.proj.weight", "indexer_proj.weight", DS4_W_INDEXER, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_IDX_HEAD}, DS4_TYPE_F16, DS4_I_MAT, false, L(idx_proj)},
    {"indexer_compressor_ape.weight", "indexer.compressor_ape.weight", DS4_W_INDEXER, DS4_TC_MAT, 2, {DS4_D_IDX_W, DS4_D_RATIO}, DS4_TYPE_F16, DS4_I_APE, false, L(idx_comp_ape)},
    {"indexer_compressor_kv.weight", "indexer.compressor_kv.weight", DS4_W_INDEXER, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_IDX_W}, DS4_TYPE_F16, DS4_I_MAT, false, L(idx_comp_kv)},
    {"indexer_compressor_gate.weight", "indexer.compressor_gate.weight", DS4_W_INDEXER, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_IDX_W}, DS4_TYPE_F16, DS4_I_MAT, false, L(idx_comp_gate)},
    {"indexer_compressor_norm.weight", "indexer.compressor_norm.weight", DS4_W_INDEXER, DS4_TC_VEC, 1, {DS4_D_IDX_DIM}, DS4_TYPE_F32, DS4_I_NORM, false, L(idx_comp_norm)},

    {"hc_ffn_fn.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_HC_DIM, DS4_D_HC_MIX}, DS4_TYPE_F16, DS4_I_HC_FN, false, L(hc_ffn_fn)},
    {"hc_ffn_scale.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_3}, DS4_TYPE_F32, DS4_I_HC_SCALE, false, L(hc_ffn_scale)},
    {"hc_ffn_base.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_HC_MIX}, DS4_TYPE_F32, DS4_I_HC_BASE, false, L(hc_ffn_base)},
    {"ffn_norm.weight", NULL, DS4_W_ALWAYS, DS4_TC_VEC, 1, {DS4_D_EMBD}, DS4_TYPE_F32, DS4_I_NORM, false, L(ffn_norm)},
    {"ffn_gate_inp.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_EXPERT}, DS4_TYPE_F16, DS4_I_ROUTER, false, L(gate_inp)},
    /* The router bias only steers top-k selection; ds4 treats it as optional. */
    {"exp_probs_b.bias", NULL, DS4_W_SCORE, DS4_TC_VEC, 1, {DS4_D_EXPERT}, DS4_TYPE_F32, DS4_I_BIAS, true, L(exp_bias)},
    {"ffn_gate_tid2eid.weight", NULL, DS4_W_HASH, DS4_TC_I32, 2, {DS4_D_EXPERT_USED, DS4_D_VOCAB}, DS4_TYPE_I32, DS4_I_TID2EID, false, L(tid2eid)},
    {"ffn_gate_exps.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 3, {DS4_D_EMBD, DS4_D_FF, DS4_D_EXPERT}, DS4_TYPE_IQ2_XXS, DS4_I_EXPERT, false, L(gate_exps)},
    {"ffn_up_exps.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 3, {DS4_D_EMBD, DS4_D_FF, DS4_D_EXPERT}, DS4_TYPE_IQ2_XXS, DS4_I_EXPERT, false, L(up_exps)},
    {"ffn_down_exps.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 3, {DS4_D_FF, DS4_D_EMBD, DS4_D_EXPERT}, DS4_TYPE_Q2_K, DS4_I_EXPERT, false, L(down_exps)},
    {"ffn_gate_shexp.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_FF}, DS4_TYPE_Q8_0, DS4_I_MAT, false, L(sh_gate)},
    {"ffn_up_shexp.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_FF}, DS4_TYPE_Q8_0, DS4_I_MAT, false, L(sh_up)},
    {"ffn_down_shexp.weight", NULL, DS4_W_ALWAYS, DS4_TC_MAT, 2, {DS4_D_FF, DS4_D_EMBD}, DS4_TYPE_Q8_0, DS4_I_MAT, false, L(sh_down)},
};
const uint32_t ds4_layout_n_layer = sizeof(ds4_layout_layer) / sizeof(ds4_layout_layer[0]);

#define M(field) F(ds4_mtp, field)
const ds4_tensor_spec ds4_layout_mtp[] = {
    {"e_proj.weight", NULL, 0, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_EMBD}, DS4_TYPE_Q8_0, DS4_I_MAT, false, M(e_proj)},
    {"h_proj.weight", NULL, 0, DS4_TC_MAT, 2, {DS4_D_EMBD, DS4_D_EMBD}, DS4_TYPE_Q8_0, DS4_I_MAT, false, M(h_proj)},
    {"enorm.weight", NULL, 0, DS4_TC_VEC, 1, {DS4_D_EMBD}, DS4_TYPE_F32, DS4_I_NORM, false, M(enorm)},
    {"hnorm.weight", NULL, 0, DS4_TC_VEC, 1, {DS4_D_EMBD}, DS4_TYPE_F32, DS4_I_NORM, false, M(hnorm)},
    {"norm.weight", NULL, 0, DS4_TC_VEC, 1, {DS4_D_EMBD}, DS4_TYPE_F32, DS4_I_NORM, false, M(norm)},
    {"hc_head_fn.weight", NULL, 0, DS4_TC_MAT, 2, {DS4_D_HC_DIM, DS4_D_HC}, DS4_TYPE_F16, DS4_I_HC_FN, false, M(hc_head_fn)},
    {"hc_head_base.weight", NULL, 0, DS4_TC_VEC, 1, {DS4_D_HC}, DS4_TYPE_F32, DS4_I_OUT_HC_BASE, false, M(hc_head_base)},
    {"hc_head_scale.weight", NULL, 0, DS4_TC_VEC, 1, {DS4_D_1}, DS4_TYPE_F32, DS4_I_OUT_HC_SCALE, false, M(hc_head_scale)},
};
const uint32_t ds4_layout_n_mtp = sizeof(ds4_layout_mtp) / sizeof(ds4_layout_mtp[0]);

#define D(field) F(ds4_dspark, field)
const ds4_tensor_spec ds4_layout_dspark_in[] = {
    {"main_proj.weight", "fc.weight", 0, DS4_TC_MAT, 2, {DS4_D_DSPARK_IN, DS4_D_EMBD}, DS4_TYPE_Q8_0, DS4_I_MAT, false, D(main_proj)},
    {"main_norm.weight", "enc.output_norm.weight", 0, DS4_TC_VEC, 1, {DS4_D_EMBD}, DS4_TYPE_F32, DS4_I_NORM, false, D(main_norm)},
};
const uint32_t ds4_layout_n_dspark_in = sizeof(ds4_layout_dspark_in) / sizeof(ds4_layout_dspark_in[0]);

const ds4_tensor_spec ds4_layout_dspark_out[] = {
    {"norm.weight", "output_norm.weight", 0, DS4_TC_VEC, 1, {DS4_D_EMBD}, DS4_TYPE_F32, DS4_I_NORM, false, D(norm)},
    {"hc_head_fn.weight", "output_hc_fn.weight", 0, DS4_TC_MAT, 2, {DS4_D_HC_DIM, DS4_D_HC}, DS4_TYPE_F16, DS4_I_HC_FN, false, D(hc_head_fn)},
    {"hc_head_base.weight", "output_hc_base.weight", 0, DS4_TC_VEC, 1, {DS4_D_HC}, DS4_TYPE_F32, DS4_I_OUT_HC_BASE, false, D(hc_head_base)},
    {"hc_head_scale.weight", "output_hc_scale.weight", 0, DS4_TC_VEC, 1, {DS4_D_1}, DS4_TYPE_F32, DS4_I_OUT_HC_SCALE, false, D(hc_head_scale)},
    /* The Markov head: w1's rows are embeddings (by the previous token),
     * w2 a head of the rank's width.  Named as ds4's DSpark support GGUF
     * names them (ds4 #468), which are the checkpoint's.  The second names
     * (here and above) are llama.cpp's drafter file's (src/models/dflash.cpp):
     * its heads carry no stage prefix. */
    {"markov_head.markov_w1.weight", "markov_w1.weight", 0, DS4_TC_MAT, 2, {DS4_D_DSPARK_RANK, DS4_D_VOCAB}, DS4_TYPE_F16, DS4_I_EMBD, false, D(markov_w1)},
    {"markov_head.markov_w2.weight", "markov_w2.weight", 0, DS4_TC_MAT, 2, {DS4_D_DSPARK_RANK, DS4_D_VOCAB}, DS4_TYPE_F16, DS4_I_MAT, false, D(markov_w2)},
    {"confidence_head.proj.weight", "conf_proj.weight", 0, DS4_TC_MAT, 2, {DS4_D_DSPARK_CONF, DS4_D_1}, DS4_TYPE_F32, DS4_I_MAT, false, D(conf_proj)},
};
const uint32_t ds4_layout_n_dspark_out = sizeof(ds4_layout_dspark_out) / sizeof(ds4_layout_dspark_out[0]);

/* Compressor width of a layer: (ratio == 4 ? 2 : 1) * head_dim. */
static uint32_t comp_width(const ds4_config *c, uint32_t ratio) {
    return (ratio == 4 ? 2u : 1u) * c->head_dim;
}

uint64_t ds4_layout_dim(const ds4_config *c, uint32_t ratio, uint8_t dim) {
    switch (dim) {
    case DS4_D_1: return 1;
    case DS4_D_3: return 3;
    case DS4_D_EMBD: return c->n_embd;
    case DS4_D_VOCAB: return c->n_vocab;
    case DS4_D_HC: return c->n_hc;
    case DS4_D_HC_DIM: return (uint64_t)c->n_hc * c->n_embd;
    case DS4_D_HC_MIX: return (uint64_t)(2 + c->n_hc) * c->n_hc;
    case DS4_D_QLORA: return c->q_lora;
    case DS4_D_QDIM: return (uint64_t)c->n_head * c->head_dim;
    case DS4_D_HEAD_DIM: return c->head_dim;
    case DS4_D_N_HEAD: return c->n_head;
    case DS4_D_OUT_A_IN: return (uint64_t)c->head_dim * (c->n_head / c->o_groups);
    case DS4_D_OUT_LOW: return (uint64_t)c->o_groups * c->o_lora;
    case DS4_D_COMP_W: return comp_width(c, ratio);
    case DS4_D_RATIO: return ratio;
    case DS4_D_IDX_Q: return (uint64_t)c->idx_head * c->idx_dim;
    case DS4_D_IDX_HEAD: return c->idx_head;
    case DS4_D_IDX_W: return 2ull * c->idx_dim;
    case DS4_D_IDX_DIM: return c->idx_dim;
    case DS4_D_EXPERT: return c->n_expert;
    case DS4_D_EXPERT_USED: return c->n_expert_used;
    case DS4_D_FF: return c->n_ff;
    case DS4_D_DSPARK_IN: return (uint64_t)c->n_dspark_target * c->n_embd;
    case DS4_D_DSPARK_RANK: return c->dspark_rank;
    case DS4_D_DSPARK_CONF: return (uint64_t)c->n_embd + c->dspark_rank;
    }
    return 0;
}

bool ds4_layout_applies(const ds4_tensor_spec *s, uint32_t ratio, bool hash) {
    switch (s->when) {
    case DS4_W_ALWAYS: return true;
    case DS4_W_COMPRESS: return ratio != 0;
    case DS4_W_INDEXER: return ratio == 4;
    case DS4_W_HASH: return hash;
    case DS4_W_SCORE: return !hash;
    }
    return false;
}
