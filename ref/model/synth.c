/* Synthetic DS4 models (see synth.h).
 *
 * Every tensor of the layout table (layout.c) is generated from its own
 * random stream, seeded by the model seed and the tensor name, so adding or
 * reordering tensors never changes the others.  Magnitudes are chosen so the
 * forward pass stays O(1) everywhere: matrices have standard deviation
 * ~1/sqrt(input width), norms ~1, routed-expert gate/up are 3x wider so the
 * SwiGLU clamp (10) is reached now and then, and the router spreads its
 * scores so top-k choices have clear margins.  Quantized tensors are built
 * directly as random blocks of the target format (scales chosen for the same
 * spread), which makes their exact f32 values whatever the blocks say. */
#include "ref/model/synth.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/model/hparams.h"
#include "ref/model/synth_vocab.h"
#include "quant/formats.h"
#include "quant/types.h"
#include "quant/gguf_write.h"
#include "ref/text/tokenizer.h"

/* ---------------------------------------------------------------------------
 * Configurations
 * ------------------------------------------------------------------------- */

/* The most layers a configuration has (fulldepth has the real 43). */
#define SYNTH_MAX_LAYER 64

/* How a configuration departs from the plain random weights, to make a
 * model whose MTP head (tiny-spec) or DSpark drafter (tiny-dspark) drafts
 * what the trunk will decode. */
typedef struct synth_drafty {
    double branch;         /* the spread of every branch's output projection, times this */
    double mtp_h;          /* the spread of the MTP's h_proj, times this */
    double head;           /* the spread of output.weight (the logits), times this */
    double dspark_norm;    /* DSpark: the gain of its last norm (the base logits' scale) */
} synth_drafty;

/* A DSpark drafter's configuration (0731: 3 stages, blocks of 5, the
 * noise token 128799, the last 3 layers, rank 256). */
typedef struct synth_dspark {
    uint32_t stages, block, noise, rank, n_target;
    uint32_t target[DS4_MAX_DSPARK_TARGET];
} synth_dspark;

typedef struct synth_cfg {
    const char *name;
    uint32_t n_layer, n_embd, n_vocab, n_head, head_dim, n_rot, q_lora, o_lora, o_groups;
    uint32_t n_expert, n_used, n_ff, n_hash, swa, idx_head, idx_dim, idx_topk, ctx;
    uint32_t ratios[SYNTH_MAX_LAYER];
    const synth_drafty *drafty;   /* NULL: plain random weights */
    float route_scale;            /* expert_weights_scale (Flash 1.5, Pro 2.5) */
    const synth_dspark *dspark;   /* NULL: none (the first release's NextN MTP layer instead) */
} synth_cfg;

/* tiny: 4 layers covering window-only (hash-routed), ratio 4 with the indexer
 * (hash-routed, like the real layer 2) and ratio 128 (score-routed); widths
 * just large enough for every block format (256 = one K-quant block).  The
 * window (16) and indexer top-k (4) are small so that both are exercised by
 * sequences of a few dozen tokens; 32 indexer heads keep exact ties out of
 * the indexer (a score is exactly 0 when every head's q.k is negative).
 * tiny-spec: tiny whose MTP head mostly drafts what the trunk decodes, so
 * that speculative decoding accepts deep drafts (ds4ref-conform's default
 * model; with plain random weights the MTP head is unrelated to its trunk
 * and about 2% of drafts are accepted).  Every branch's output projection is
 * damped, so a token's own embedding dominates the residual stream and the
 * next greedy token is mostly a function of the current one, with the
 * context still deciding the close calls; norms are exactly 1, the MTP's
 * e_proj is the identity and its h_proj is damped, so the MTP block maps the
 * embedding of the token it is given through the same head.
 * tiny-k64: tiny with heads of 64 and RoPE on 16 of them, a shape the
 * official code runs with QAT off only (its FP8 blocks of 64 do not divide
 * the 48 non-RoPE dimensions): ds4ref loads it and refuses QAT on.
 * tiny-ckpt: tiny with q_lora_rank 128 and o_lora_rank 64, so that the
 * input of every product the official checkpoint stores as FP8 or FP4 is
 * whole blocks of 128, as the official FP8 activations need: the model the
 * checkpoint tests write in the release's layout.
 * tiny-0731: tiny-ckpt with DeepSeek-V4-Flash-0731's configuration: a
 * DSpark drafter of 3 window-only stages in blocks of 5 reading the last 3
 * layers, the last token as noise, rank 16, and no NextN MTP layer.
 * tiny-dspark: tiny-0731 whose DSpark drafter mostly drafts what the trunk
 * decodes, as tiny-spec does for MTP: the trunk is damped as tiny-spec's,
 * so its next token is mostly a function of the current one; the Markov
 * head, of rank n_embd, draws the token embedding's numbers (w1) and the LM
 * head's (w2), so markov(prev) is about the trunk's logits after prev; and
 * the drafter's last norm is small, so its block only decides close calls.
 * tiny-pro: DeepSeek-V4-Pro's shape at tiny size, where it departs from
 * Flash: its first two layers compress at ratio 128 and are hash-routed
 * (Flash's are window-only), so a hash-routed layer has a compressor; 8
 * heads in 4 output groups (Pro: 128 in 16; Flash 64 in 8); 12 experts
 * hash-routed over all of them; route scale 2.5; the last layer at ratio
 * 4.  Ranks as tiny-ckpt's, so that its checkpoint runs QAT on.
 * fullwidth: DeepSeek V4 Flash's real per-layer dimensions and vocabulary
 * size, with 3 layers and 16 experts: for benchmarks.
 * fulldepth: the same with all 43 layers, their ratio pattern (window-only
 * layers 0 and 1, then ratio 4 on even and 128 on odd layers) and the 3
 * hash-routed layers of the real model, still 16 experts instead of 256
 * (about 13 GB): the real model's per-token cost, measured end to end. */
static const synth_cfg configs[] = {
    {"tiny", 4, 256, 512, 4, 128, 64, 64, 32, 2, 8, 2, 256, 3, 16, 32, 128, 4, 4096,
     {0, 0, 4, 128}, NULL, 1.5f, NULL},
    {"tiny-k64", 4, 256, 512, 4, 64, 16, 64, 32, 2, 8, 2, 256, 3, 16, 32, 128, 4, 4096,
     {0, 0, 4, 128}, NULL, 1.5f, NULL},
    {"tiny-ckpt", 4, 256, 512, 4, 128, 64, 128, 64, 2, 8, 2, 256, 3, 16, 32, 128, 4, 4096,
     {0, 0, 4, 128}, NULL, 1.5f, NULL},
    {"tiny-spec", 4, 256, 512, 4, 128, 64, 64, 32, 2, 8, 2, 256, 3, 16, 32, 128, 4, 4096,
     {0, 0, 4, 128}, &(const synth_drafty){.branch = 0.02, .mtp_h = 0.1, .head = 4}, 1.5f, NULL},
    {"tiny-0731", 4, 256, 512, 4, 128, 64, 128, 64, 2, 8, 2, 256, 3, 16, 32, 128, 4, 4096,
     {0, 0, 4, 128}, NULL, 1.5f,
     &(const synth_dspark){.stages = 3, .block = 5, .noise = 511, .rank = 16, .n_target = 3,
                           .target = {1, 2, 3}}},
    {"tiny-dspark", 4, 256, 512, 4, 128, 64, 128, 64, 2, 8, 2, 256, 3, 16, 32, 128, 4, 4096,
     {0, 0, 4, 128},
     &(const synth_drafty){.branch = 0.02, .mtp_h = 0.1, .head = 4, .dspark_norm = 0.05}, 1.5f,
     &(const synth_dspark){.stages = 3, .block = 5, .noise = 511, .rank = 256, .n_target = 3,
                           .target = {1, 2, 3}}},
    {"tiny-pro", 4, 256, 512, 8, 128, 64, 128, 64, 4, 12, 2, 256, 3, 16, 32, 128, 4, 4096,
     {128, 128, 4, 4}, NULL, 2.5f, NULL},
    {"fullwidth", 3, 4096, 129280, 64, 512, 64, 1024, 1024, 8, 16, 6, 2048, 1, 128, 64, 128,
     512, 65536, {0, 4, 128}, NULL, 1.5f, NULL},
    {"fulldepth", 43, 4096, 129280, 64, 512, 64, 1024, 1024, 8, 16, 6, 2048, 3, 128, 64, 128,
     512, 65536, {0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128,
                  4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4,
                  128, 4, 128, 4}, NULL, 1.5f, NULL},
};

static const synth_cfg *find_cfg(const char *name) {
    for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++)
        if (!strcmp(configs[i].name, name)) return &configs[i];
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Deterministic random numbers
 * ------------------------------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static rng rng_for(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a of the tensor name */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    rng r = {seed ^ h};
    rng_next(&r);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_unif(rng *r) {
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static uint32_t rng_below(rng *r, uint32_t n) {
    return (uint32_t)(rng_next(r) % n);
}

/* Approximately standard normal: sum of 4 uniforms (Irwin-Hall), rescaled.
 * Bounded (|x| < 3.47), smooth enough, and free of libm. */
static double rng_normal(rng *r) {
    double s = rng_unif(r) + rng_unif(r) + rng_unif(r) + rng_unif(r);
    return (s - 2.0) * 1.7320508075688772;
}

/* ---------------------------------------------------------------------------
 * Tensor contents
 * ------------------------------------------------------------------------- */

static void put_f16(uint8_t *p, float v) {
    uint16_t h = ds4_formats_f32_to_f16(v);
    memcpy(p, &h, 2);
}

static int clampi(long v, long lo, long hi) {
    return (int)(v < lo ? lo : v > hi ? hi : v);
}

static long round_half_away(double x) {
    return (long)(x < 0 ? -floor(-x + 0.5) : floor(x + 0.5));
}

/* One block of `type` whose values have standard deviation ~sd. */
static void fill_block(uint32_t type, uint8_t *b, double sd, rng *r) {
    switch (type) {
    case DS4_TYPE_Q8_0: {
        put_f16(b, (float)(sd / 42.0));
        for (int i = 0; i < 32; i++)
            b[2 + i] = (uint8_t)(int8_t)clampi(round_half_away(rng_normal(r) * 42.0), -127, 127);
        break;
    }
    case DS4_TYPE_Q2_K: {
        /* w = d*sc*q - dmin*m; dmin = 1.6 d centres the distribution. */
        double d = sd / 14.6;
        for (int i = 0; i < 16; i++) b[i] = (uint8_t)((1 + rng_below(r, 15)) | rng_below(r, 16) << 4);
        for (int i = 0; i < 64; i++) b[16 + i] = (uint8_t)rng_next(r);
        put_f16(b + 80, (float)d);
        put_f16(b + 82, (float)(1.6 * d));
        break;
    }
    case DS4_TYPE_Q4_K: {
        double d = sd / 280.0;
        put_f16(b, (float)d);
        put_f16(b + 2, (float)(7.6 * d));
        for (int i = 0; i < 12; i++) b[4 + i] = (uint8_t)rng_next(r);
        for (int i = 0; i < 128; i++) b[16 + i] = (uint8_t)rng_next(r);
        break;
    }
    case DS4_TYPE_IQ2_XXS: {
        put_f16(b, (float)(sd / 70.0));
        for (int g = 0; g < 8; g++) {
            uint8_t *q = b + 2 + 8 * g;
            for (int l = 0; l < 4; l++) q[l] = (uint8_t)rng_next(r);
            uint32_t aux = 0;
            for (int l = 0; l < 4; l++) aux |= rng_below(r, 128) << (7 * l);
            aux |= rng_below(r, 16) << 28;
            memcpy(q + 4, &aux, 4);
        }
        break;
    }
    }
}

/* Fill n elements (a multiple of the block size) of a float type. */
static void fill_values(uint32_t type, uint8_t *data, uint64_t n, double mean, double sd, rng *r) {
    const ds4_type_info *ti = ds4_types_info(type);
    for (uint64_t i = 0; i < n / ti->blck; i++) {
        uint8_t *b = data + i * ti->bytes;
        float v = (float)(mean + sd * rng_normal(r));
        if (type == DS4_TYPE_F32) memcpy(b, &v, 4);
        else if (type == DS4_TYPE_F16) put_f16(b, v);
        else if (type == DS4_TYPE_BF16) {
            uint16_t h = ds4_formats_f32_to_bf16(v);
            memcpy(b, &h, 2);
        } else fill_block(type, b, sd, r);
    }
}

/* Each token's n_used distinct experts. */
static void fill_tid2eid(int32_t *tab, uint32_t n_vocab, uint32_t n_used, uint32_t n_expert, rng *r) {
    for (uint32_t t = 0; t < n_vocab; t++) {
        int32_t *row = tab + (uint64_t)t * n_used;
        for (uint32_t i = 0; i < n_used; i++) {
            int32_t x;
            uint32_t j;
            do {
                x = (int32_t)rng_below(r, n_expert);
                for (j = 0; j < i && row[j] != x; j++) {}
            } while (j < i);
            row[i] = x;
        }
    }
}

/* Mean and spread of a tensor by its role; cols = input width. */
static void init_params(const ds4_tensor_spec *s, uint64_t cols, double *mean, double *sd) {
    double inv = 1.0 / sqrt((double)cols);
    *mean = 0;
    switch (s->init) {
    case DS4_I_MAT: *sd = inv; break;
    case DS4_I_EMBD: *sd = 1.0; break;
    case DS4_I_NORM: *mean = 1.0; *sd = 0.1; break;
    case DS4_I_HC_FN: *sd = inv; break;
    case DS4_I_HC_SCALE: case DS4_I_OUT_HC_SCALE: *mean = 0.6; *sd = 0.15; break;
    case DS4_I_HC_BASE: case DS4_I_OUT_HC_BASE: *sd = 0.5; break;
    case DS4_I_SINK: *sd = 1.0; break;
    case DS4_I_APE: *sd = 0.5; break;
    case DS4_I_BIAS: *sd = 0.1; break;
    case DS4_I_ROUTER: *sd = 2.0 * inv; break;
    case DS4_I_EXPERT: *sd = (strstr(s->name, "down") ? 1.0 : 3.0) * inv; break;
    default: *sd = inv; break;
    }
}

/* ---------------------------------------------------------------------------
 * Writing a file
 * ------------------------------------------------------------------------- */

typedef struct synth_buf {
    void **ptrs;
    size_t n, cap;
} synth_buf;

static void *keep(synth_buf *b, void *p) {
    if (!p) return NULL;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        void **np = realloc(b->ptrs, cap * sizeof(void *));
        if (!np) {
            free(p);
            return NULL;
        }
        b->ptrs = np;
        b->cap = cap;
    }
    b->ptrs[b->n++] = p;
    return p;
}

static void release(synth_buf *b) {
    for (size_t i = 0; i < b->n; i++) free(b->ptrs[i]);
    free(b->ptrs);
    memset(b, 0, sizeof(*b));
}

static uint32_t tensor_type(const ds4_synth_opts *o, const ds4_tensor_spec *s, bool mtp) {
    if (s->tclass == DS4_TC_I32) return DS4_TYPE_I32;
    if (o->f32) return DS4_TYPE_F32;
    /* The published MTP head: Q4_K experts and an F32 router. */
    if (mtp && s->init == DS4_I_EXPERT) return DS4_TYPE_Q4_K;
    if (mtp && s->init == DS4_I_ROUTER) return DS4_TYPE_F32;
    return s->ds4_type;
}

/* A square identity matrix of n rows in `type` (Q8_0: 64 x 2^-6, exact). */
static int fill_identity(uint32_t type, uint8_t *data, uint64_t n) {
    uint64_t row = ds4_types_row_bytes(type, n);
    memset(data, 0, row * n);
    for (uint64_t i = 0; i < n; i++) {
        uint8_t *p = data + i * row;
        if (type == DS4_TYPE_F32) {
            float one = 1.0f;
            memcpy(p + 4 * i, &one, 4);
        } else if (type == DS4_TYPE_F16) {
            put_f16(p + 2 * i, 1.0f);
        } else if (type == DS4_TYPE_Q8_0) {
            uint8_t *b = p + (i / 32) * 34;
            put_f16(b, 1.0f / 64);
            b[2 + i % 32] = 64;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Whose values tensor `name` copies in a configuration that drafts (NULL:
 * its own): the DSpark Markov head's are the token embedding's and the LM
 * head's. */
static const char *drafty_source(const synth_drafty *dr, const char *name) {
    if (!dr || strncmp(name, "mtp.", 4)) return NULL;
    if (strstr(name, ".markov_head.markov_w1.")) return "token_embd.weight";
    if (strstr(name, ".markov_head.markov_w2.")) return "output.weight";
    return NULL;
}

/* The spread (and a norm's mean) of tensor `name` in a configuration that
 * drafts (synth_drafty). */
static void drafty_params(const synth_drafty *dr, const ds4_tensor_spec *s, const char *name,
                          double *mean, double *sd) {
    if (s->init == DS4_I_NORM) *sd = 0;
    if (dr->dspark_norm > 0 && !strncmp(name, "mtp.", 4) && !strcmp(s->name, "norm.weight"))
        *mean = dr->dspark_norm;
    if (!strcmp(s->name, "attn_output_b.weight") || !strcmp(s->name, "ffn_down_exps.weight") ||
        !strcmp(s->name, "ffn_down_shexp.weight"))
        *sd *= dr->branch;
    if (!strcmp(name, "mtp.0.h_proj.weight")) *sd *= dr->mtp_h;
    if (!strcmp(name, "output.weight")) *sd *= dr->head;
}

/* Tensor src of the trunk's globals regenerated (the same bytes as the
 * file's, seeds being per name) and written as n values of `type` (F32,
 * F16 or BF16) into data. */
static int fill_copy(const ds4_synth_opts *o, const synth_cfg *sc, const ds4_config *c,
                     const char *src, uint32_t type, uint8_t *data, uint64_t n, ds4err *err) {
    const ds4_tensor_spec *s = NULL;
    for (uint32_t i = 0; i < ds4_layout_n_global; i++)
        if (!strcmp(ds4_layout_global[i].name, src)) s = &ds4_layout_global[i];
    uint64_t cols = s ? ds4_layout_dim(c, 0, s->dims[0]) : 0;
    uint64_t src_n = s ? cols * ds4_layout_dim(c, 0, s->dims[1]) : 0;
    if (!s || src_n != n)
        return ds4_err_set(err, DS4_E_ARG, "a copy of %s needs a tensor of its shape", src);
    uint32_t st = tensor_type(o, s, false);
    uint8_t *raw = malloc(ds4_types_row_bytes(st, cols) * (n / cols));
    float *v = malloc(sizeof(float) * n);
    if (!raw || !v) {
        free(raw);
        free(v);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory copying %s", src);
    }
    rng r = rng_for(o->seed, src);
    double mean, sd;
    init_params(s, cols, &mean, &sd);
    drafty_params(sc->drafty, s, src, &mean, &sd);
    fill_values(st, raw, n, mean, sd, &r);
    int rc = ds4_types_dequant_row(st, raw, v, n);
    for (uint64_t i = 0; !rc && i < n; i++) {
        if (type == DS4_TYPE_F32) memcpy(data + 4 * i, &v[i], 4);
        else if (type == DS4_TYPE_F16) put_f16(data + 2 * i, v[i]);
        else if (type == DS4_TYPE_BF16) {
            uint16_t h = ds4_formats_f32_to_bf16(v[i]);
            memcpy(data + 2 * i, &h, 2);
        } else rc = -1;
    }
    free(raw);
    free(v);
    if (rc) return ds4_err_set(err, DS4_E_ARG, "a copy of %s as %s", src, ds4_types_name(type));
    return 0;
}

static int add_tensor(ds4_gguf_writer *w, synth_buf *keepbuf, const ds4_synth_opts *o,
                      const synth_cfg *sc, const ds4_config *c, uint32_t ratio,
                      const ds4_tensor_spec *s, const char *prefix, bool mtp, ds4err *err) {
    char name[256];
    snprintf(name, sizeof(name), "%s%s", prefix, s->name);
    uint64_t ne[3] = {1, 1, 1}, n = 1;
    for (uint8_t i = 0; i < s->n_dims; i++) {
        ne[i] = ds4_layout_dim(c, ratio, s->dims[i]);
        n *= ne[i];
    }
    uint32_t type = tensor_type(o, s, mtp);
    uint64_t bytes = ds4_types_row_bytes(type, ne[0]) * (n / ne[0]);
    if (!bytes)
        return ds4_err_set(err, DS4_E_ARG, "tensor %s: width %llu is not a multiple of the %s block",
                          name, (unsigned long long)ne[0], ds4_types_name(type));
    uint8_t *data = keep(keepbuf, malloc(bytes));
    if (!data) return ds4_err_set(err, DS4_E_NOMEM, "out of memory generating %s", name);
    rng r = rng_for(o->seed, name);
    const char *src = drafty_source(sc->drafty, name);
    if (type == DS4_TYPE_I32) {
        fill_tid2eid((int32_t *)(void *)data, c->n_vocab, c->n_expert_used, c->n_expert, &r);
    } else if (src) {
        if (fill_copy(o, sc, c, src, type, data, n, err)) return -1;
    } else if (sc->drafty && !strcmp(name, "mtp.0.e_proj.weight")) {
        if (fill_identity(type, data, ne[0]))
            return ds4_err_set(err, DS4_E_ARG, "tensor %s: no identity in %s", name,
                              ds4_types_name(type));
    } else {
        double mean, sd;
        init_params(s, ne[0], &mean, &sd);
        if (sc->drafty) drafty_params(sc->drafty, s, name, &mean, &sd);
        fill_values(type, data, n, mean, sd, &r);
    }
    if (ds4_gguf_write_tensor(w, name, type, s->n_dims, ne, data, bytes))
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory adding %s", name);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Metadata
 * ------------------------------------------------------------------------- */

static void cfg_to_config(const synth_cfg *s, ds4_config *c, uint32_t n_vocab) {
    memset(c, 0, sizeof(*c));
    c->n_layer = s->n_layer;
    c->n_embd = s->n_embd;
    c->n_vocab = n_vocab;
    c->n_head = s->n_head;
    c->head_dim = s->head_dim;
    c->n_rot = s->n_rot;
    c->q_lora = s->q_lora;
    c->o_lora = s->o_lora;
    c->o_groups = s->o_groups;
    c->n_expert = s->n_expert;
    c->n_expert_used = s->n_used;
    c->n_ff = s->n_ff;
    c->n_hash_layer = s->n_hash;
    c->swa = s->swa;
    c->idx_head = s->idx_head;
    c->idx_dim = s->idx_dim;
    c->idx_topk = s->idx_topk;
    c->n_hc = 4;
    c->sinkhorn_iter = 20;
    c->context_length = s->ctx;
    c->hc_eps = 1e-6f;
    c->rms_eps = 1e-6f;
    c->expert_scale = s->route_scale;
    if (s->dspark) {
        c->dspark_stages = s->dspark->stages;
        c->dspark_block = s->dspark->block;
        c->dspark_noise = s->dspark->noise;
        c->dspark_rank = s->dspark->rank;
        c->n_dspark_target = s->dspark->n_target;
        memcpy(c->dspark_target, s->dspark->target, sizeof(c->dspark_target));
    }
    c->rope_base = 10000.0f;
    c->compress_rope_base = 160000.0f;
    c->yarn = true;
    c->yarn_factor = 16.0f;
    c->yarn_orig_ctx = 65536;
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
}

#define K(k) "deepseek4." k
#define OFF(field) ((uint32_t)offsetof(ds4_config, field))

/* Row h of the table (hparams.h) as a GGUF key. */
static int put_hparam(ds4_gguf_writer *w, const ds4_config *c, const ds4_hparam *h) {
    char key[128];
    ds4_hparams_gguf_key(h, key, sizeof(key));
    if (h->kind == DS4_HP_F32) return ds4_gguf_write_f32(w, key, (float)ds4_hparams_get(h, c));
    return ds4_gguf_write_u32(w, key, (uint32_t)ds4_hparams_get(h, c));
}

/* The rows the synthetic files place elsewhere than the table does (its
 * order is config.json's), written before the row that follows them. */
static bool placed_elsewhere(const ds4_hparam *h) {
    return h->kind != DS4_HP_ONE &&
           (h->offset == OFF(context_length) || h->offset == OFF(expert_scale));
}

/* What the synthetic files hold before table row h, beyond the row itself:
 * the keys that are not rows, and the rows placed elsewhere.  The files'
 * bytes, and so this order, are pinned by vectors/manifest.txt's
 * model_sha256. */
static int put_before(ds4_gguf_writer *w, const ds4_config *c, const ds4_hparam *h) {
    if (h->kind == DS4_HP_ONE) return 0;
    int rc = 0;
    switch (h->offset) {
    case OFF(n_embd):
        return put_hparam(w, c, ds4_hparams_find(OFF(context_length)));
    case OFF(n_rot):
        return ds4_gguf_write_u32(w, K("attention.value_length"), c->head_dim);
    case OFF(n_hash_layer):
        rc |= ds4_gguf_write_u32(w, K("expert_group_count"), 0);
        rc |= ds4_gguf_write_u32(w, K("expert_group_used_count"), 0);
        rc |= ds4_gguf_write_u32(w, K("expert_gating_func"), 4);
        rc |= put_hparam(w, c, ds4_hparams_find(OFF(expert_scale)));
        rc |= ds4_gguf_write_bool(w, K("expert_weights_norm"), true);
        return rc;
    case OFF(compress_rope_base):
        rc |= ds4_gguf_write_str(w, K("rope.scaling.type"), "yarn");
        for (uint32_t i = 0; i < ds4_hparams_n; i++)
            if (ds4_hparams[i].group == DS4_HP_YARN) rc |= put_hparam(w, c, &ds4_hparams[i]);
        return rc;
    }
    return 0;
}

/* compress_ratios, and with DSpark its stages' (0), then its rows and
 * target layers, as config.json has them. */
static int write_ratios(ds4_gguf_writer *w, const synth_cfg *s, const ds4_config *c) {
    uint32_t r[SYNTH_MAX_LAYER + DS4_MAX_DSPARK_STAGE] = {0};
    memcpy(r, s->ratios, sizeof(uint32_t) * s->n_layer);
    int rc = ds4_gguf_write_arr_u32(w, K("attention.compress_ratios"), r,
                                    s->n_layer + c->dspark_stages);
    if (!c->dspark_stages) return rc;
    for (uint32_t i = 0; i < ds4_hparams_n; i++)
        if (ds4_hparams[i].group == DS4_HP_DSPARK) rc |= put_hparam(w, c, &ds4_hparams[i]);
    return rc | ds4_gguf_write_arr_u32(w, K("dspark.target_layer_ids"), c->dspark_target,
                                       c->n_dspark_target);
}

static int write_metadata(ds4_gguf_writer *w, const synth_cfg *s, const ds4_config *c,
                          const char *name, bool mtp) {
    float clamp[SYNTH_MAX_LAYER];
    for (uint32_t l = 0; l < s->n_layer; l++) clamp[l] = 10.0f;
    int rc = 0;
    rc |= ds4_gguf_write_str(w, "general.architecture", "deepseek4");
    rc |= ds4_gguf_write_str(w, "general.name", name);
    rc |= ds4_gguf_write_u32(w, "general.alignment", 32);
    for (uint32_t i = 0; i < ds4_hparams_n; i++) {
        const ds4_hparam *h = &ds4_hparams[i];
        if (h->group != DS4_HP_PLAIN || placed_elsewhere(h)) continue;
        rc |= put_before(w, c, h);
        rc |= put_hparam(w, c, h);
    }
    rc |= write_ratios(w, s, c);
    rc |= ds4_gguf_write_arr_f32(w, K("swiglu_clamp_exp"), clamp, s->n_layer);
    rc |= ds4_gguf_write_arr_f32(w, K("swiglu_clamp_shexp"), clamp, s->n_layer);
    if (mtp) rc |= ds4_gguf_write_u32(w, K("nextn_predict_layers"), 1);
    return rc ? -1 : 0;
}

static int write_tokenizer(ds4_gguf_writer *w, const ds4_synth_vocab *v) {
    float *scores = calloc(v->n, sizeof(float));
    if (!scores) return -1;
    int rc = 0;
    rc |= ds4_gguf_write_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= ds4_gguf_write_str(w, "tokenizer.ggml.pre", "joyai-llm");
    rc |= ds4_gguf_write_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok,
                                 v->tok_len, v->n);
    rc |= ds4_gguf_write_arr_i32(w, "tokenizer.ggml.token_type", v->type, v->n);
    rc |= ds4_gguf_write_arr_f32(w, "tokenizer.ggml.scores", scores, v->n);
    rc |= ds4_gguf_write_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merge,
                                 v->merge_len,
                         v->n_merge);
    uint32_t bos = 0, eos = 0;
    for (uint32_t i = 0; i < v->n; i++) {
        if (!strcmp(v->tok[i], ds4_tok_special_str(DS4_SPECIAL_BOS))) bos = i;
        if (!strcmp(v->tok[i], ds4_tok_special_str(DS4_SPECIAL_EOS))) eos = i;
    }
    /* (Strings are NUL-terminated copies, so strcmp sees them whole unless a
     * token contains a NUL byte, which no special token does.) */
    rc |= ds4_gguf_write_u32(w, "tokenizer.ggml.bos_token_id", bos);
    rc |= ds4_gguf_write_u32(w, "tokenizer.ggml.eos_token_id", eos);
    rc |= ds4_gguf_write_bool(w, "tokenizer.ggml.add_bos_token", true);
    rc |= ds4_gguf_write_bool(w, "tokenizer.ggml.add_eos_token", false);
    free(scores);
    return rc ? -1 : 0;
}

/* ---------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------- */

/* The DSpark drafter's tensors, in the base file as the checkpoint has
 * them (mtp.0 ... mtp.S-1: stage 0's adapter, the stages, the last one's
 * heads). */
static int write_dspark(ds4_gguf_writer *w, synth_buf *kb, const ds4_synth_opts *o,
                        const synth_cfg *s, const ds4_config *c, ds4err *err) {
    char prefix[32];
    for (uint32_t i = 0; i < ds4_layout_n_dspark_in; i++)
        if (add_tensor(w, kb, o, s, c, 0, &ds4_layout_dspark_in[i], "mtp.0.", false, err))
            return -1;
    for (uint32_t st = 0; st < c->dspark_stages; st++) {
        snprintf(prefix, sizeof(prefix), "mtp.%u.", st);
        for (uint32_t i = 0; i < ds4_layout_n_layer; i++) {
            const ds4_tensor_spec *sp = &ds4_layout_layer[i];
            if (ds4_layout_applies(sp, 0, false) &&
                add_tensor(w, kb, o, s, c, 0, sp, prefix, false, err))
                return -1;
        }
    }
    for (uint32_t i = 0; i < ds4_layout_n_dspark_out; i++)
        if (add_tensor(w, kb, o, s, c, 0, &ds4_layout_dspark_out[i], prefix, false, err))
            return -1;
    return 0;
}

static int write_base(const ds4_synth_opts *o, const synth_cfg *s, const ds4_config *c,
                      const ds4_synth_vocab *v, const char *path, ds4err *err) {
    ds4_gguf_writer *w = ds4_gguf_writer_new(32);
    synth_buf kb = {0};
    int rc = -1;
    char name[64];
    snprintf(name, sizeof(name), "ds4ref-synth-%s", s->name);
    if (!w || write_metadata(w, s, c, name, false) || write_tokenizer(w, v)) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory writing metadata");
        goto done;
    }
    for (uint32_t i = 0; i < ds4_layout_n_global; i++)
        if (add_tensor(w, &kb, o, s, c, 0, &ds4_layout_global[i], "", false, err)) goto done;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "blk.%u.", l);
        for (uint32_t i = 0; i < ds4_layout_n_layer; i++) {
            const ds4_tensor_spec *sp = &ds4_layout_layer[i];
            if (!ds4_layout_applies(sp, s->ratios[l], l < c->n_hash_layer)) continue;
            if (add_tensor(w, &kb, o, s, c, s->ratios[l], sp, prefix, false, err)) goto done;
        }
    }
    if (c->dspark_stages && write_dspark(w, &kb, o, s, c, err)) goto done;
    rc = ds4_gguf_writer_save(w, path, err);
done:
    ds4_gguf_writer_free(w);
    release(&kb);
    return rc;
}

static int write_mtp(const ds4_synth_opts *o, const synth_cfg *s, const ds4_config *c,
                     const char *path, ds4err *err) {
    ds4_gguf_writer *w = ds4_gguf_writer_new(32);
    synth_buf kb = {0};
    int rc = -1;
    char name[64];
    snprintf(name, sizeof(name), "ds4ref-synth-%s-mtp", s->name);
    if (!w || write_metadata(w, s, c, name, true)) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory writing metadata");
        goto done;
    }
    for (uint32_t i = 0; i < ds4_layout_n_mtp; i++)
        if (add_tensor(w, &kb, o, s, c, 0, &ds4_layout_mtp[i], "mtp.0.", true, err)) goto done;
    for (uint32_t i = 0; i < ds4_layout_n_layer; i++) {
        const ds4_tensor_spec *sp = &ds4_layout_layer[i];
        if (!ds4_layout_applies(sp, 0, false)) continue;
        if (add_tensor(w, &kb, o, s, c, 0, sp, "mtp.0.", true, err)) goto done;
    }
    rc = ds4_gguf_writer_save(w, path, err);
done:
    ds4_gguf_writer_free(w);
    release(&kb);
    return rc;
}

int ds4_synth_write(const ds4_synth_opts *o, const char *path, const char *mtp_path,
                    ds4err *err) {
    const synth_cfg *s = find_cfg(o->config);
    if (!s) return ds4_err_set(err, DS4_E_ARG, "unknown synthetic config '%s' (expected tiny, tiny-k64, tiny-ckpt, tiny-spec, tiny-0731, tiny-dspark, tiny-pro, fullwidth or fulldepth)",
                              o->config);
    if (s->dspark && mtp_path)
        return ds4_err_set(err, DS4_E_ARG, "synthetic config '%s' has no MTP layer (it drafts "
                           "with DSpark, as DeepSeek-V4-Flash-0731 does): write it without one "
                           "(ds4ref-mkmodel --no-mtp)", o->config);
    ds4_synth_vocab v;
    if (o->vocab_from ? ds4_synth_vocab_hf(&v, o->vocab_from, err)
                      : ds4_synth_vocab_tiny(&v, s->n_vocab, err))
        return -1;
    ds4_config c;
    cfg_to_config(s, &c, v.n);
    int rc = write_base(o, s, &c, &v, path, err);
    if (!rc && mtp_path) rc = write_mtp(o, s, &c, mtp_path, err);
    ds4_synth_vocab_free(&v);
    return rc;
}

char *ds4_synth_mtp_path(const char *path) {
    size_t n = strlen(path);
    const char *ext = n >= 5 && !strcmp(path + n - 5, ".gguf") ? ".gguf" : "";
    size_t base = n - strlen(ext);
    char *out = malloc(base + strlen("-mtp.gguf") + 1);
    if (!out) return NULL;
    memcpy(out, path, base);
    strcpy(out + base, "-mtp.gguf");
    return out;
}
