/* A model written as a checkpoint in the official layout (hfwrite.h). */
#include "ref/model/hfwrite.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "ref/ckpt/safetensors.h"
#include "ref/model/hfbind.h"
#include "ref/model/hfconfig.h"
#include "quant/blockfp.h"
#include "quant/formats.h"
#include "quant/types.h"
#include "quant/qat.h"
#include "ref/text/json.h"
#include "ref/text/pretok.h"

/* The tensors being written: names and data owned here. */
typedef struct outs {
    ds4_st_out *t;
    size_t n, cap;
    int types;
} outs;

static ds4_st_out *add(outs *o, const char *name, ds4_st_dtype dtype, uint32_t n_dims,
                       const uint64_t *shape, uint64_t bytes, ds4err *err) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 512;
        ds4_st_out *t = realloc(o->t, sizeof(*t) * cap);
        if (!t) return ds4_err_set(err, DS4_E_NOMEM, "out of memory"), NULL;
        o->t = t;
        o->cap = cap;
    }
    ds4_st_out *t = &o->t[o->n];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    t->data = calloc(1, bytes ? bytes : 1);
    if (!t->name || !t->data) {
        free((void *)t->name);
        free((void *)t->data);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory"), NULL;
    }
    o->n++;
    t->dtype = dtype;
    t->n_dims = n_dims;
    memcpy(t->shape, shape, sizeof(uint64_t) * n_dims);
    return t;
}

static void outs_free(outs *o) {
    for (size_t i = 0; i < o->n; i++) {
        free((void *)o->t[i].name);
        free((void *)o->t[i].data);
    }
    free(o->t);
}

/* The E4M3 byte of a value on its grid (|v| <= 448). */
static uint8_t e4m3_code(double v) {
    const uint8_t sign = v < 0 ? 0x80 : 0;
    double a = fabs(v);
    if (a < 0x1p-6) return (uint8_t)(sign | (uint8_t)(a * 0x1p9));   /* subnormal: m * 2^-9 */
    int e;
    const double f = frexp(a, &e);   /* a = f * 2^e, f in [0.5, 1) */
    const int m = (int)((f * 2 - 1) * 8);
    return (uint8_t)(sign | (e - 1 + 7) << 3 | m);
}

/* The E2M1 code of a value on its grid (|v| <= 6). */
static uint8_t e2m1_code(double v) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    uint8_t c = 0;
    while (c < 7 && mag[c] != fabs(v)) c++;
    return (uint8_t)(c | (v < 0 ? 8 : 0));
}

/* The smallest power-of-two scale, as an E8M0 byte, that brings amax
 * within max; -1 when none below `limit` does (hfbind.c refuses those). */
static int scale_byte(double amax, double max, int limit) {
    int e = -127;
    while (e + 127 < limit && amax > max * ldexp(1, e)) e++;
    return e + 127 < limit ? e + 127 : -1;
}

/* Block [i, j] of rows x cols values v (FP8: 128x128, FP4: 1x32) onto its
 * format's grid: its codes into `codes`, its dequantized values back into
 * v.  Returns its scale byte, or -1 when no E8M0 scale brings it in range. */
static int quantize_block(float *v, uint64_t rows, uint64_t cols, uint64_t i, uint64_t j, int fp4,
                          uint8_t *codes) {
    const uint64_t br = fp4 ? 1 : 128, bc = fp4 ? 32 : 128;
    const double max = fp4 ? 6 : 448;
    const uint64_t r1 = (i + 1) * br < rows ? (i + 1) * br : rows;
    const uint64_t c1 = (j + 1) * bc < cols ? (j + 1) * bc : cols;
    double amax = 0;
    for (uint64_t r = i * br; r < r1; r++)
        for (uint64_t c = j * bc; c < c1; c++) amax = fmax(amax, fabs(v[r * cols + c]));
    const int sb = scale_byte(amax, max, fp4 ? 253 : 247);
    if (sb < 0) return -1;
    const double s = ldexp(1, sb - 127);
    for (uint64_t r = i * br; r < r1; r++)
        for (uint64_t c = j * bc; c < c1; c++) {
            double y = v[r * cols + c] / s;   /* exact: s is a power of two */
            y = y > max ? max : y < -max ? -max : y;
            const double q = fp4 ? ds4_qat_e2m1_round(y) : ds4_qat_e4m3_round(y);
            codes[r * cols + c] = fp4 ? e2m1_code(q) : e4m3_code(q);
            v[r * cols + c] = (float)(q * s);
        }
    return sb;
}

/* rows x cols values v as FP8 (128x128 blocks) or FP4 (32 a row), into
 * weight and scale tensors named `name` / its ".scale" (RELEASE), or as F32
 * of their dequantized values (the twin).  v receives those values. */
static int put_quantized(outs *o, const char *name, float *v, uint64_t rows, uint64_t cols,
                         int fp4, ds4err *err) {
    uint64_t ss[2];
    ds4_blockfp_scale_shape(fp4, rows, cols, ss);
    uint8_t *codes = calloc(1, rows * cols), *scales = calloc(1, ss[0] * ss[1]);
    if (!codes || !scales) {
        free(codes), free(scales);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    /* Blocks are independent: each thread takes whole block rows, so the
     * bytes are the same whatever the thread count (fulldepth's 26 billion
     * values take minutes on one core).  A scale that cannot be is marked
     * and the first such block, in order, reported after. */
    int16_t *sb = malloc(sizeof(int16_t) * ss[0] * ss[1]);
    if (!sb) {
        free(codes), free(scales);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (uint64_t i = 0; i < ss[0]; i++)
        for (uint64_t j = 0; j < ss[1]; j++)
            sb[i * ss[1] + j] = (int16_t)quantize_block(v, rows, cols, i, j, fp4, codes);
    for (uint64_t k = 0; k < ss[0] * ss[1]; k++) {
        if (sb[k] >= 0) {
            scales[k] = (uint8_t)sb[k];
            continue;
        }
        const uint64_t i = k / ss[1], j = k % ss[1];
        free(codes), free(scales), free(sb);
        return ds4_err_set(err, DS4_E_UNSUPPORTED, "%s: block [%" PRIu64 ", %" PRIu64
                           "] has a value too large for an E8M0 scale", name, i, j);
    }
    free(sb);
    int rc = 0;
    if (o->types == DS4_HFWRITE_F32_TWIN) {
        const uint64_t shape[2] = {rows, cols};
        ds4_st_out *t = add(o, name, DS4_ST_F32, 2, shape, 4 * rows * cols, err);
        if (!t) rc = -1;
        else memcpy((void *)t->data, v, 4 * rows * cols);
    } else {
        char sname[256];
        snprintf(sname, sizeof(sname), "%.*s.scale", (int)(strlen(name) - strlen(".weight")), name);
        const uint64_t wshape[2] = {rows, fp4 ? cols / 2 : cols};
        ds4_st_out *t = add(o, name, fp4 ? DS4_ST_I8 : DS4_ST_F8_E4M3, 2, wshape,
                            wshape[0] * wshape[1], err);
        ds4_st_out *s = t ? add(o, sname, DS4_ST_F8_E8M0, 2, ss, ss[0] * ss[1], err) : NULL;
        if (!s) {
            rc = -1;
        } else {
            t = s - 1;   /* the second add may have moved the first */
            uint8_t *w = (uint8_t *)t->data;
            for (uint64_t k = 0; k < rows * cols; k++)
                if (fp4) w[k / 2] |= (uint8_t)(k & 1 ? codes[k] << 4 : codes[k]);
                else w[k] = codes[k];
            memcpy((void *)s->data, scales, ss[0] * ss[1]);
        }
    }
    free(codes), free(scales);
    return rc;
}

/* n values v of a plain tensor as F32, or as BF16 when the release has it
 * so (the twin: F32 of the BF16 values). */
static int put_plain(outs *o, const char *name, int form, float *v, uint32_t n_dims,
                     const uint64_t *shape, uint64_t n, ds4err *err) {
    if (form == DS4_HF_BF16)
        for (uint64_t i = 0; i < n; i++) v[i] = ds4_formats_bf16_to_f32(ds4_formats_f32_to_bf16(v[i]));
    const bool bf16 = form == DS4_HF_BF16 && o->types == DS4_HFWRITE_RELEASE;
    ds4_st_out *t = add(o, name, bf16 ? DS4_ST_BF16 : DS4_ST_F32, n_dims, shape, (bf16 ? 2 : 4) * n, err);
    if (!t) return -1;
    for (uint64_t i = 0; i < n; i++) {
        if (!bf16) {
            memcpy((uint8_t *)t->data + 4 * i, &v[i], 4);
        } else {
            const uint16_t h = ds4_formats_f32_to_bf16(v[i]);
            memcpy((uint8_t *)t->data + 2 * i, &h, 2);
        }
    }
    return 0;
}

/* The rows of matrix m (one expert's, for a stack) as f32. */
static float *mat_values(const ds4_mat *m, ds4err *err) {
    float *v = malloc(sizeof(float) * m->rows * m->cols);
    uint8_t *bad = calloc(m->rows ? m->rows : 1, 1);   /* per row: no shared flag to race on */
    if (!v || !bad) {
        free(v), free(bad);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory"), NULL;
    }
#pragma omp parallel for schedule(static)
    for (uint64_t r = 0; r < m->rows; r++)
        bad[r] = ds4_types_dequant_row(m->type, m->data + r * m->row_bytes, v + r * m->cols,
                                         m->cols) != 0;
    int any = 0;
    for (uint64_t r = 0; r < m->rows; r++) any |= bad[r];
    free(bad);
    if (any) {
        free(v);
        return ds4_err_set(err, DS4_E_UNSUPPORTED, "a matrix of type %s cannot be written",
                           ds4_types_name(m->type)), NULL;
    }
    return v;
}

static int put_matrix(outs *o, const char *name, int form, const ds4_mat *m, ds4err *err) {
    float *v = mat_values(m, err);
    if (!v) return -1;
    const uint64_t shape[2] = {m->rows, m->cols};
    int rc = form == DS4_HF_FP8 || form == DS4_HF_FP4
                 ? put_quantized(o, name, v, m->rows, m->cols, form == DS4_HF_FP4, err)
                 : put_plain(o, name, form, v, 2, shape, m->rows * m->cols, err);
    free(v);
    return rc;
}

/* Spec s of the struct at base, named with prefix ("", "layers.N.",
 * "mtp.0."). */
static int put_spec(outs *o, const ds4_config *c, uint32_t ratio, const ds4_tensor_spec *s,
                    const void *base, const char *prefix, ds4err *err) {
    const char *hf = ds4_hfbind_release_name(s->name);
    const int form = ds4_hfbind_release_form(s->name);
    if (!hf) return ds4_err_set(err, DS4_E_INTERNAL, "no checkpoint name for %s", s->name);
    const void *field = (const char *)base + s->offset;
    char name[256];
    snprintf(name, sizeof(name), "%s%s", prefix, hf);
    if (s->tclass == DS4_TC_VEC) {
        const ds4_vec *v = field;
        float *copy = malloc(sizeof(float) * (v->n ? v->n : 1));
        if (!copy) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        memcpy(copy, v->v, sizeof(float) * v->n);
        const uint64_t shape[1] = {v->n};
        int rc = put_plain(o, name, form, copy, 1, shape, v->n, err);
        free(copy);
        return rc;
    }
    if (s->tclass == DS4_TC_I32) {
        const int32_t *tab = *(int32_t *const *)field;
        const uint64_t shape[2] = {c->n_vocab, c->n_expert_used};
        ds4_st_out *t = add(o, name, DS4_ST_I64, 2, shape, 8 * shape[0] * shape[1], err);
        if (!t) return -1;
        for (uint64_t i = 0; i < shape[0] * shape[1]; i++) {
            const int64_t e = tab[i];
            memcpy((uint8_t *)t->data + 8 * i, &e, 8);
        }
        return 0;
    }
    const ds4_mat *m = field;
    if (s->n_dims < 3) return put_matrix(o, name, form, m, err);
    const uint64_t E = ds4_layout_dim(c, ratio, s->dims[2]);
    for (uint64_t e = 0; e < E; e++) {
        const ds4_mat one = ds4_dot_expert(m, e);
        snprintf(name, sizeof(name), "%s", prefix);
        snprintf(name + strlen(name), sizeof(name) - strlen(name), hf, (unsigned)e);
        if (put_matrix(o, name, form, &one, err)) return -1;
    }
    return 0;
}

static int put_layer(outs *o, const ds4_config *c, const ds4_layer *L, const char *prefix,
                     ds4err *err) {
    for (uint32_t i = 0; i < ds4_layout_n_layer; i++) {
        const ds4_tensor_spec *s = &ds4_layout_layer[i];
        /* The router bias is written for every score-routed layer: the
         * model holds zeros where the GGUF had none, which select alike. */
        if (ds4_layout_applies(s, L->ratio, L->hash) && put_spec(o, c, L->ratio, s, L, prefix, err))
            return -1;
    }
    return 0;
}

/* The DSpark drafter, named as 0731's checkpoint has it: mtp.0's adapter,
 * the stages, the last stage's heads. */
static int put_dspark(outs *o, const ds4_config *c, const ds4_dspark *d, ds4err *err) {
    char prefix[32];
    for (uint32_t i = 0; i < ds4_layout_n_dspark_in; i++)
        if (put_spec(o, c, 0, &ds4_layout_dspark_in[i], d, "mtp.0.", err)) return -1;
    for (uint32_t s = 0; s < c->dspark_stages; s++) {
        snprintf(prefix, sizeof(prefix), "mtp.%u.", s);
        if (put_layer(o, c, &d->stage[s], prefix, err)) return -1;
    }
    for (uint32_t i = 0; i < ds4_layout_n_dspark_out; i++)
        if (put_spec(o, c, 0, &ds4_layout_dspark_out[i], d, prefix, err)) return -1;
    return 0;
}

static int put_model(outs *o, const ds4_model *m, ds4err *err) {
    for (uint32_t i = 0; i < ds4_layout_n_global; i++)
        if (put_spec(o, &m->cfg, 0, &ds4_layout_global[i], m, "", err)) return -1;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "layers.%u.", l);
        if (put_layer(o, &m->cfg, &m->layers[l], prefix, err)) return -1;
    }
    if (m->dspark && put_dspark(o, &m->cfg, m->dspark, err)) return -1;
    if (!m->mtp) return 0;
    for (uint32_t i = 0; i < ds4_layout_n_mtp; i++)
        if (put_spec(o, &m->cfg, 0, &ds4_layout_mtp[i], m->mtp, "mtp.0.", err)) return -1;
    return put_layer(o, &m->cfg, &m->mtp->block, "mtp.0.", err);
}

static char *join(const char *dir, const char *name) {
    const size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* The shards, tensors in order, split by bytes, and the index. */
static int write_shards(const outs *o, const char *dir, uint32_t shards, ds4err *err) {
    uint64_t total = 0;
    for (size_t i = 0; i < o->n; i++) {
        uint64_t b = ds4_safetensors_dtype_size(o->t[i].dtype);
        for (uint32_t d = 0; d < o->t[i].n_dims; d++) b *= o->t[i].shape[d];
        total += b;
    }
    if (shards < 1) shards = 1;
    if (shards > o->n) shards = (uint32_t)o->n;
    ds4_buf ix = {0};
    ds4_buf_printf(&ix, "{\n  \"metadata\": {\"total_size\": %" PRIu64 "},\n  \"weight_map\": {", total);
    size_t first = 0;
    uint64_t done = 0;
    int rc = 0;
    for (uint32_t k = 0; k < shards && !rc; k++) {
        char fname[64];
        snprintf(fname, sizeof(fname), "model-%05u-of-%05u.safetensors", k + 1, shards);
        /* Up to the k+1'th share of the bytes, leaving a tensor for each
         * shard still to come. */
        size_t last = first;
        while (last < o->n - (shards - 1 - k) &&
               (last == first || k + 1 == shards || done * shards < total * (k + 1))) {
            uint64_t b = ds4_safetensors_dtype_size(o->t[last].dtype);
            for (uint32_t d = 0; d < o->t[last].n_dims; d++) b *= o->t[last].shape[d];
            done += b;
            last++;
        }
        for (size_t i = first; i < last; i++) {
            ds4_buf_puts(&ix, i ? ",\n    " : "\n    ");
            ds4_json_put_str(&ix, o->t[i].name, strlen(o->t[i].name));
            ds4_buf_printf(&ix, ": \"%s\"", fname);
        }
        char *path = join(dir, fname);
        rc = path ? ds4_safetensors_write(path, o->t + first, last - first, err)
                  : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        free(path);
        first = last;
    }
    ds4_buf_puts(&ix, "\n  }\n}\n");
    char *path = join(dir, "model.safetensors.index.json");
    if (!rc && (ix.failed || !path)) rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (!rc) rc = ds4_file_write_atomic(path, ix.p, ix.len, err);
    free(path);
    ds4_buf_free(&ix);
    return rc;
}

/* tokenizer.json of the GGUF's vocabulary: normal tokens in model.vocab, the
 * others in added_tokens (control ones "special"), merges "left right". */
static int write_tokenizer(const ds4_model *m, const char *dir, ds4err *err) {
    const ds4_gguf_file *g = &m->file;
    uint64_t n_tok = 0, n_merge = 0;
    if (ds4_gguf_get_arr_str(g, "tokenizer.ggml.tokens", NULL, 0, &n_tok, err) ||
        (ds4_gguf_find_kv(g, "tokenizer.ggml.merges") &&
         ds4_gguf_get_arr_str(g, "tokenizer.ggml.merges", NULL, 0, &n_merge, err)))
        return -1;
    ds4_gguf_str *tok = malloc(sizeof(ds4_gguf_str) * (n_tok + n_merge + 1));
    int32_t *type = malloc(sizeof(int32_t) * (n_tok + 1));
    int rc = tok && type ? 0 : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    ds4_gguf_str *merge = tok + n_tok;
    if (!rc) rc = ds4_gguf_get_arr_str(g, "tokenizer.ggml.tokens", tok, n_tok, &n_tok, err);
    if (!rc && n_merge) rc = ds4_gguf_get_arr_str(g, "tokenizer.ggml.merges", merge, n_merge,
        &n_merge, err);
    for (uint64_t i = 0; !rc && i < n_tok; i++) type[i] = 1;
    if (!rc && ds4_gguf_find_kv(g, "tokenizer.ggml.token_type"))
        rc = ds4_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", type, n_tok, err);
    ds4_buf b = {0};
    /* The release's tokenizer.json around the vocabulary: its normalizer,
     * pre-tokenizer (the three official splits, then bytes), post-processor
     * and decoder, and BPE's fields, so that Hugging Face's tokenizers
     * library loads the file and splits text as ds4ref does. */
    ds4_buf_puts(&b, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, "
                     "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": []}, "
                     "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [");
    for (int i = 0; i < 3; i++) {
        ds4_buf_puts(&b, "{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
        ds4_json_put_str(&b, ds4_pretok_official[i], strlen(ds4_pretok_official[i]));
        ds4_buf_puts(&b, "}, \"behavior\": \"Isolated\", \"invert\": false}, ");
    }
    ds4_buf_puts(&b, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                     "\"use_regex\": false}]}, "
                     "\"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                     "\"trim_offsets\": false, \"use_regex\": true}, "
                     "\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                     "\"trim_offsets\": true, \"use_regex\": true}, "
                     "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                     "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
                     "\"fuse_unk\": false, \"byte_fallback\": false, \"vocab\": {");
    bool first = true;
    for (uint64_t i = 0; !rc && i < n_tok; i++) {
        if (type[i] != 1) continue;   /* NORMAL */
        ds4_buf_puts(&b, first ? "" : ", ");
        ds4_json_put_str(&b, tok[i].ptr, tok[i].len);
        ds4_buf_printf(&b, ": %" PRIu64, i);
        first = false;
    }
    ds4_buf_puts(&b, "}, \"merges\": [");
    for (uint64_t i = 0; !rc && i < n_merge; i++) {
        ds4_buf_puts(&b, i ? ", " : "");
        ds4_json_put_str(&b, merge[i].ptr, merge[i].len);
    }
    ds4_buf_puts(&b, "]}, \"added_tokens\": [");
    first = true;
    for (uint64_t i = 0; !rc && i < n_tok; i++) {
        if (type[i] == 1) continue;
        if (type[i] != 3 && type[i] != 4) {
            rc = ds4_err_set(err, DS4_E_UNSUPPORTED, "token %" PRIu64 " has type %d, which "
                             "tokenizer.json cannot say (normal, control or user-defined)", i, type[i]);
            break;
        }
        ds4_buf_printf(&b, "%s{\"id\": %" PRIu64 ", \"content\": ", first ? "" : ", ", i);
        ds4_json_put_str(&b, tok[i].ptr, tok[i].len);
        ds4_buf_printf(&b, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                           "\"normalized\": false, \"special\": %s}", type[i] == 3 ? "true" : "false");
        first = false;
    }
    ds4_buf_puts(&b, "]}\n");
    char *path = join(dir, "tokenizer.json");
    if (!rc && (b.failed || !path)) rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (!rc) rc = ds4_file_write_atomic(path, b.p, b.len, err);
    free(path);
    ds4_buf_free(&b);
    free(tok), free(type);
    return rc;
}

int ds4_hfwrite(const ds4_model *m, const char *dir, int types, uint32_t shards, ds4err *err) {
    outs o = {.types = types};
    ds4_buf cfg = {0};
    char *path = join(dir, "config.json");
    int rc = path ? ds4_file_make_dirs(dir, err) : ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (!rc) rc = ds4_hfconfig_write(&m->cfg, m->mtp != NULL, types == DS4_HFWRITE_RELEASE, &cfg, err);
    if (!rc) rc = ds4_file_write_atomic(path, cfg.p, cfg.len, err);
    if (!rc) rc = put_model(&o, m, err);
    if (!rc) rc = write_shards(&o, dir, shards, err);
    if (!rc && m->has_tok) rc = write_tokenizer(m, dir, err);
    if (rc) ds4_err_prefix(err, "%s", dir);
    outs_free(&o);
    ds4_buf_free(&cfg);
    free(path);
    return rc;
}
