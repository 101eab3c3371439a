/* The DeepSeek V4 Flash model as ds4ref loads it: hyper-parameters read from
 * GGUF metadata, and every weight tensor bound and validated against the DS4
 * layout (the table of layout.c).
 *
 * Nothing is hard-coded to the 284B configuration: the real 43-layer files and
 * tiny synthetic models go through the same code.  Large matrices stay in the
 * mmapped file; small vectors (norm weights, HC bases and scales, sinks, router
 * biases) and the hash-routing tables are copied into owned f32/i32 arrays so
 * they are validated once and read without alignment concerns. */
#ifndef DS4_MODEL_H
#define DS4_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "quant/dot.h"
#include "quant/gguf.h"
#include "ref/text/tokenizer.h"

/* The largest hyper-parameters a model may have.  The loader refuses a file
 * past any of them (config_validate in model.c), and the forward pass sizes
 * its per-token arrays on the stack by them, so both read these names and
 * cannot drift apart.  The real model is far inside every one. */
enum {
    DS4_MAX_LAYER = 1024,
    DS4_MAX_EMBD = 65536,
    DS4_MAX_VOCAB = 1 << 24,
    DS4_MAX_HEAD = 1024,
    DS4_MAX_ROT = 256,
    DS4_MAX_HEAD_DIM = 4096,            /* attention's accumulator (attention.c) */
    DS4_MAX_LORA = 65536,
    DS4_MAX_EXPERT = 4096,              /* router scores (moe.c) */
    DS4_MAX_EXPERT_USED = 64,           /* top-k and the combine order (moe.c) */
    DS4_MAX_FF = 65536,
    DS4_MAX_WINDOW = 65536,
    DS4_MAX_HC = 16,                    /* hyper-connection mixes (hyperconn.c) */
    DS4_MAX_SINKHORN_ITER = 1000,
    DS4_MAX_RATIO = 65536,
    DS4_MAX_IDX_HEAD = 1024,
    DS4_MAX_IDX_DIM = 1024,
    /* A compressor row: twice the head on ratio-4 layers (layout.c's
     * DS4_D_COMP_W), the compressor's position bias (compressor.c). */
    DS4_MAX_COMP_WIDTH = 2 * DS4_MAX_HEAD_DIM,
    /* The DSpark drafter's (0731: 3 stages, blocks of 5, 3 target layers,
     * rank 256; Pro: rank 512). */
    DS4_MAX_DSPARK_STAGE = 8,
    DS4_MAX_DSPARK_BLOCK = 64,
    DS4_MAX_DSPARK_TARGET = 8,
    DS4_MAX_DSPARK_RANK = 65536,
};

typedef struct ds4_config {
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_vocab;
    uint32_t n_head;
    uint32_t head_dim;          /* key_length == value_length */
    uint32_t n_rot;             /* RoPE dims at the tail of each head */
    uint32_t q_lora;
    uint32_t o_lora;
    uint32_t o_groups;
    uint32_t n_expert;
    uint32_t n_expert_used;
    uint32_t n_ff;              /* routed and shared expert width */
    uint32_t n_hash_layer;
    uint32_t swa;               /* sliding window */
    uint32_t idx_head;
    uint32_t idx_dim;
    uint32_t idx_topk;
    uint32_t n_hc;
    uint32_t sinkhorn_iter;
    uint32_t context_length;    /* the model's declared context (informational) */
    float rms_eps;
    float hc_eps;
    float expert_scale;         /* route_scale */
    float rope_base;            /* ratio-0 layers */
    float compress_rope_base;   /* ratio>0 layers */
    bool yarn;                  /* YaRN on ratio>0 layers */
    float yarn_factor;
    uint32_t yarn_orig_ctx;
    float yarn_beta_fast;
    float yarn_beta_slow;
    /* The DSpark drafter of DeepSeek-V4-Flash-0731 and V4-Pro-0813
     * (docs/SPECULATIVE.md): dspark_stages 0 when the model has none.  Its stages
     * are window-only blocks stored as mtp.0 ... mtp.N-1; ds4ref reads the
     * configuration and decodes the trunk plainly. */
    uint32_t dspark_stages;
    uint32_t dspark_block;      /* slots of a draft block: the anchor, then noise */
    uint32_t dspark_noise;      /* the noise slots' token id */
    uint32_t dspark_rank;       /* the Markov head's rank */
    uint32_t n_dspark_target;
    uint32_t dspark_target[DS4_MAX_DSPARK_TARGET];   /* trunk layers whose outputs it reads */
    uint32_t *ratio;            /* [n_layer] compress ratio (0, 4, 128, ...) */
    float *clamp_exp;           /* [n_layer + 1] SwiGLU limit, routed; [n_layer] = MTP */
    float *clamp_shexp;         /* [n_layer + 1] SwiGLU limit, shared */
} ds4_config;

/* A small float vector copied out of the file. */
typedef struct ds4_vec {
    float *v;
    uint32_t n;
} ds4_vec;

typedef struct ds4_layer {
    uint32_t ratio;             /* 0: window only; 4: overlapping compressor + indexer */
    bool hash;                  /* route by tid2eid[token] */

    ds4_mat hc_attn_fn, hc_ffn_fn;          /* [n_hc*n_embd, (2+n_hc)*n_hc] */
    ds4_vec hc_attn_scale, hc_attn_base;    /* [3], [(2+n_hc)*n_hc] */
    ds4_vec hc_ffn_scale, hc_ffn_base;

    ds4_vec attn_norm, ffn_norm;            /* [n_embd] */
    ds4_mat q_a;                            /* [n_embd, q_lora] */
    ds4_vec q_a_norm;                       /* [q_lora] */
    ds4_mat q_b;                            /* [q_lora, n_head*head_dim] */
    ds4_mat kv;                             /* [n_embd, head_dim] */
    ds4_vec kv_norm;                        /* [head_dim] */
    ds4_vec sinks;                          /* [n_head] */
    ds4_mat out_a;                          /* [head_dim*n_head/o_groups, o_groups*o_lora] */
    ds4_mat out_b;                          /* [o_groups*o_lora, n_embd] */

    /* ratio > 0: KV compressor; width = (ratio == 4 ? 2 : 1) * head_dim */
    ds4_mat comp_kv, comp_gate;             /* [n_embd, width] */
    ds4_mat comp_ape;                       /* [width, ratio] */
    ds4_vec comp_norm;                      /* [head_dim] */

    /* ratio == 4: lightning indexer with its own compressor (width 2*idx_dim) */
    ds4_mat idx_q_b;                        /* [q_lora, idx_head*idx_dim] */
    ds4_mat idx_proj;                       /* [n_embd, idx_head] */
    ds4_mat idx_comp_kv, idx_comp_gate;     /* [n_embd, 2*idx_dim] */
    ds4_mat idx_comp_ape;                   /* [2*idx_dim, ratio] */
    ds4_vec idx_comp_norm;                  /* [idx_dim] */

    /* MoE */
    ds4_mat gate_inp;                       /* [n_embd, n_expert] router */
    ds4_vec exp_bias;                       /* [n_expert], zeros when absent */
    ds4_mat gate_exps, up_exps;             /* [n_embd, n_ff, n_expert] */
    ds4_mat down_exps;                      /* [n_ff, n_embd, n_expert] */
    ds4_mat sh_gate, sh_up;                 /* [n_embd, n_ff] */
    ds4_mat sh_down;                        /* [n_ff, n_embd] */
    int32_t *tid2eid;                       /* hash layers: [n_vocab][n_expert_used] */
    float clamp_exp, clamp_shexp;
} ds4_layer;

/* The MTP draft head (separate GGUF, tensors mtp.0.*): one ratio-0,
 * score-routed block plus its own input projections and HC output head. */
typedef struct ds4_mtp {
    ds4_gguf_file file;
    ds4_mat e_proj, h_proj;                 /* [n_embd, n_embd] */
    ds4_vec enorm, hnorm, norm;             /* [n_embd] */
    ds4_mat hc_head_fn;                     /* [n_hc*n_embd, n_hc] */
    ds4_vec hc_head_base, hc_head_scale;    /* [n_hc], [1] */
    ds4_layer block;
} ds4_mtp;

/* The DSpark drafter of DeepSeek-V4-Flash-0731 (cfg.dspark_stages > 0):
 * its stages and the tensors of stage 0 and of the last stage; the token
 * embedding and the LM head are the trunk's. */
typedef struct ds4_dspark {
    ds4_gguf_file file;                     /* its own file (ds4_model_load_dspark), or unmapped */
    ds4_mat main_proj;                      /* [n_target*n_embd, n_embd] */
    ds4_vec main_norm;                      /* [n_embd] */
    ds4_vec norm;                           /* [n_embd] */
    ds4_mat hc_head_fn;                     /* [n_hc*n_embd, n_hc] */
    ds4_vec hc_head_base, hc_head_scale;    /* [n_hc], [1] */
    ds4_mat markov_w1, markov_w2;           /* [rank, n_vocab] */
    ds4_mat conf_proj;                      /* [n_embd + rank, 1] */
    ds4_layer stage[DS4_MAX_DSPARK_STAGE];
} ds4_dspark;

typedef struct ds4_model {
    ds4_gguf_file file;
    ds4_config cfg;
    ds4_mat token_embd;                     /* [n_embd, n_vocab] */
    ds4_mat output;                         /* [n_embd, n_vocab] */
    ds4_vec output_norm;                    /* [n_embd] */
    ds4_mat output_hc_fn;                   /* [n_hc*n_embd, n_hc] */
    ds4_vec output_hc_base, output_hc_scale;/* [n_hc], [1] */
    ds4_layer *layers;                      /* [n_layer] */
    /* A model read from the official checkpoint (hfbind.h) rather than a
     * GGUF: its files, whose mappings the matrices point into, and the
     * arrays of its experts' tensors (ds4_mat.parts).  NULL otherwise. */
    struct ds4_ckpt *ckpt;
    ds4_vocab *vocab;                       /* its tokenizer.json, which tok borrows */
    ds4_mtp *mtp;                           /* NULL unless an MTP file was loaded */
    ds4_dspark *dspark;                     /* NULL unless cfg.dspark_stages */
    /* The tokenizer, when the file has tokenizer.ggml.* keys (has_tok). */
    bool has_tok;
    ds4_tokenizer tok;
    ds4_strref *tok_strs;                   /* borrowed by tok */
} ds4_model;

/* The relations between hyper-parameters the forward pass relies on, for a
 * configuration read from elsewhere (hfconfig.h); a GGUF's is checked so as
 * it is read.  The error names `path` and the rule that broke. */
int ds4_model_config_validate(const ds4_config *c, const char *path, ds4err *err);

void ds4_model_config_free(ds4_config *cfg);

/* Whether the official FP8 KV / FP4 indexer simulation (QAT on) applies to
 * this model: its FP8 blocks of 64 must divide key_length -
 * rope.dimension_count.  DS4_E_UNSUPPORTED, naming path and suggesting QAT
 * off, when they do not; such a model loads and runs with QAT off. */
int ds4_model_config_check_qat(const ds4_config *cfg, const char *path, ds4err *err);

/* Open a base model file: metadata, every tensor bound and checked. */
int ds4_model_open(ds4_model *m, const char *path, ds4err *err);

/* The same from a GGUF already opened or parsed (ds4_gguf_parse: fuzzers, tests).
 * The model takes *g over: ds4_model_close, or a failure here, closes it. */
int ds4_model_from_gguf(ds4_model *m, const ds4_gguf_file *g, ds4err *err);

/* The model's tokenizer, or an error saying the file has none. */
int ds4_model_tokenizer(const ds4_model *m, const ds4_tokenizer **out, ds4err *err);

/* Open and bind llama.cpp's DSpark drafter GGUF (general.architecture
 * "dflash", the file llama.cpp takes with -md --spec-type draft-dspark;
 * src/models/dflash.cpp) against an open base model that has no drafter of
 * its own: its stages blk.N.*, fc / enc.output_norm (main_proj, main_norm),
 * output_norm / output_hc_* (the last stage's head), markov_w1/w2 and
 * conf_proj.  dflash.target_layers name the layers whose INPUT llama.cpp
 * taps, so DSpark's target layer is each minus one; the noise token is the
 * file's tokenizer.ggml.mask_token_id.  What the file has that ds4ref would
 * have to guess at (fc.scale, markov_w2.scale, conf_proj.bias, an embedding
 * or head of its own, a causal block) is refused, naming it. */
int ds4_model_load_dspark(ds4_model *m, const char *path, ds4err *err);

/* The same from a GGUF already opened or parsed (the fuzzer); the model
 * takes *g over, as ds4_model_from_gguf does. */
int ds4_model_load_dspark_gguf(ds4_model *m, const ds4_gguf_file *g, ds4err *err);

/* Open and bind an MTP file (tensors mtp.0.*) against an open base model. */
int ds4_model_load_mtp(ds4_model *m, const char *path, ds4err *err);

void ds4_model_close(ds4_model *m);

/* The bytes of the model's files: its GGUF and MTP GGUF, or its
 * checkpoint's shards. */
uint64_t ds4_model_file_bytes(const ds4_model *m);

/* ---- The DS4 tensor layout, shared by the loader and the generator ---- */

/* Dimensions a tensor shape is made of, evaluated against a config and the
 * layer's compress ratio by ds4_layout_dim(). */
enum ds4_dim {
    DS4_D_1, DS4_D_3, DS4_D_EMBD, DS4_D_VOCAB, DS4_D_HC, DS4_D_HC_DIM, DS4_D_HC_MIX,
    DS4_D_QLORA, DS4_D_QDIM, DS4_D_HEAD_DIM, DS4_D_N_HEAD, DS4_D_OUT_A_IN,
    DS4_D_OUT_LOW, DS4_D_COMP_W, DS4_D_RATIO, DS4_D_IDX_Q, DS4_D_IDX_HEAD,
    DS4_D_IDX_W, DS4_D_IDX_DIM, DS4_D_EXPERT, DS4_D_EXPERT_USED, DS4_D_FF,
    DS4_D_DSPARK_IN,   /* the DSpark input: n_target * n_embd */
    DS4_D_DSPARK_RANK, /* the Markov head's rank */
    DS4_D_DSPARK_CONF  /* the confidence head's input: n_embd + rank */
};

/* When a per-layer tensor exists. */
enum ds4_when { DS4_W_ALWAYS, DS4_W_COMPRESS, DS4_W_INDEXER, DS4_W_HASH, DS4_W_SCORE };

/* What a tensor may be stored as. */
enum ds4_tclass {
    DS4_TC_VEC,      /* 1-D float (F32/F16/BF16), copied into a ds4_vec */
    DS4_TC_MAT,      /* any float type (F32, F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS) */
    DS4_TC_I32       /* I32 table */
};

/* How the synthetic generator fills a tensor (ignored by the loader). */
enum ds4_init {
    DS4_I_MAT, DS4_I_EMBD, DS4_I_NORM, DS4_I_HC_FN, DS4_I_HC_SCALE, DS4_I_HC_BASE,
    DS4_I_SINK, DS4_I_APE, DS4_I_BIAS, DS4_I_ROUTER, DS4_I_EXPERT, DS4_I_TID2EID,
    DS4_I_OUT_HC_SCALE, DS4_I_OUT_HC_BASE
};

typedef struct ds4_tensor_spec {
    const char *name;        /* global name, or suffix after "blk.N." / "mtp.0." */
    const char *alt;         /* an accepted alternative spelling, or NULL */
    uint8_t when;            /* enum ds4_when (per-layer specs only) */
    uint8_t tclass;          /* enum ds4_tclass */
    uint8_t n_dims;
    uint8_t dims[3];         /* enum ds4_dim, ne0 first */
    uint32_t ds4_type;       /* the type in ds4's published quant mix */
    uint8_t init;            /* enum ds4_init */
    bool optional;
    uint32_t offset;         /* offset of the ds4_mat / ds4_vec / int32_t* field */
} ds4_tensor_spec;

extern const ds4_tensor_spec ds4_layout_global[];   /* into ds4_model */
extern const uint32_t ds4_layout_n_global;
extern const ds4_tensor_spec ds4_layout_layer[];    /* into ds4_layer */
extern const uint32_t ds4_layout_n_layer;
extern const ds4_tensor_spec ds4_layout_mtp[];      /* into ds4_mtp (head only) */
extern const uint32_t ds4_layout_n_mtp;
/* A DSpark drafter's own tensors, into ds4_dspark: stage 0's input adapter
 * (under "mtp.0.") and the last stage's heads (under "mtp.S-1."); its
 * stages are layers of ratio 0, score-routed, bias required. */
extern const ds4_tensor_spec ds4_layout_dspark_in[];
extern const uint32_t ds4_layout_n_dspark_in;
extern const ds4_tensor_spec ds4_layout_dspark_out[];
extern const uint32_t ds4_layout_n_dspark_out;

uint64_t ds4_layout_dim(const ds4_config *c, uint32_t ratio, uint8_t dim);

/* Does a per-layer spec apply to a layer with this ratio / routing?  The MTP
 * block is a layer with ratio 0 and score routing whose bias is required. */
bool ds4_layout_applies(const ds4_tensor_spec *s, uint32_t ratio, bool hash);

#endif
