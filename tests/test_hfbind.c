/* Tests of ref/model/hfbind.c: a model from the official checkpoint's
 * layout.
 *
 * The checkpoints are written here from the tiny synthetic GGUF model by a
 * writer with its own transcription of the release's names (inference/
 * model.py's state_dict: "layers.N.attn.wq_a.weight", one tensor an expert,
 * tid2eid as I64), not hfbind.c's table.  The evidence:
 *   - every tensor F32, holding the GGUF's dequantized values: the same
 *     logits and MTP logits as the GGUF, bit for bit (the canonical order
 *     makes a quantized row and its f32 values give the same bits), so
 *     every name lands in the field the GGUF's does;
 *   - the release's formats (FP8 Linears with 128x128 scales, FP4 experts
 *     with scales per 32, BF16 norms), quantized here: the same logits as
 *     an F32 checkpoint of their dequantized values;
 *   - broken checkpoints, refused with the tensor and what was expected. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "ref/text/json.h"
#include "ref/text/tokenizer.h"
#include "base/sha256.h"
#include "ds4ref.h"
#include "ref/model/modelid.h"
#include "ref/forward/engine.h"
#include "ref/forward/forward.h"
#include "ref/forward/kvstate.h"
#include "ref/model/hfbind.h"
#include "ref/model/hfwrite.h"
#include "ref/model/numerics.h"
#include "quant/actround.h"
#include "quant/blockfp.h"
#include "quant/formats.h"
#include "quant/types.h"
#include "testutil.h"

/* ---- The writer ---- */

/* GGUF names to the release's, a block's and the MTP head's. */
static const char *const renames[][2] = {
    {"token_embd.weight", "embed.weight"}, {"output_norm.weight", "norm.weight"},
    {"output.weight", "head.weight"}, {"output_hc_fn.weight", "hc_head_fn"},
    {"output_hc_base.weight", "hc_head_base"}, {"output_hc_scale.weight", "hc_head_scale"},
    {"hc_head_fn.weight", "hc_head_fn"}, {"hc_head_base.weight", "hc_head_base"},
    {"hc_head_scale.weight", "hc_head_scale"},
    {"hc_attn_fn.weight", "hc_attn_fn"}, {"hc_attn_scale.weight", "hc_attn_scale"},
    {"hc_attn_base.weight", "hc_attn_base"}, {"hc_ffn_fn.weight", "hc_ffn_fn"},
    {"hc_ffn_scale.weight", "hc_ffn_scale"}, {"hc_ffn_base.weight", "hc_ffn_base"},
    {"attn_q_a.weight", "attn.wq_a.weight"}, {"attn_q_a_norm.weight", "attn.q_norm.weight"},
    {"attn_q_b.weight", "attn.wq_b.weight"}, {"attn_kv.weight", "attn.wkv.weight"},
    {"attn_kv_a_norm.weight", "attn.kv_norm.weight"}, {"attn_sinks.weight", "attn.attn_sink"},
    {"attn_output_a.weight", "attn.wo_a.weight"}, {"attn_output_b.weight", "attn.wo_b.weight"},
    {"attn_compressor_ape.weight", "attn.compressor.ape"},
    {"attn_compressor_kv.weight", "attn.compressor.wkv.weight"},
    {"attn_compressor_gate.weight", "attn.compressor.wgate.weight"},
    {"attn_compressor_norm.weight", "attn.compressor.norm.weight"},
    {"indexer.attn_q_b.weight", "attn.indexer.wq_b.weight"},
    {"indexer_attn_q_b.weight", "attn.indexer.wq_b.weight"},
    {"indexer.proj.weight", "attn.indexer.weights_proj.weight"},
    {"indexer_proj.weight", "attn.indexer.weights_proj.weight"},
    {"indexer_compressor_ape.weight", "attn.indexer.compressor.ape"},
    {"indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight"},
    {"indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight"},
    {"indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight"},
    {"ffn_gate_inp.weight", "ffn.gate.weight"}, {"exp_probs_b.bias", "ffn.gate.bias"},
    {"ffn_gate_tid2eid.weight", "ffn.gate.tid2eid"},
    {"ffn_gate_exps.weight", "ffn.experts.%u.w1.weight"},
    {"ffn_up_exps.weight", "ffn.experts.%u.w3.weight"},
    {"ffn_down_exps.weight", "ffn.experts.%u.w2.weight"},
    {"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight"},
    {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight"},
    {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight"},
};

/* "blk.3.attn_q_a.weight" -> "layers.3.attn.wq_a.weight"; names model.py
 * keeps ("attn_norm.weight", "e_proj.weight") stay. */
static void release_name(const char *gguf, char *out, size_t cap) {
    char prefix[32] = "";
    const char *rest = gguf;
    unsigned l;
    int used;
    if (sscanf(gguf, "blk.%u.%n", &l, &used) == 1) {
        snprintf(prefix, sizeof(prefix), "layers.%u.", l);
        rest = gguf + used;
    } else if (!strncmp(gguf, "mtp.0.", 6)) {
        strcpy(prefix, "mtp.0.");
        rest = gguf + 6;
    }
    for (size_t i = 0; i < sizeof(renames) / sizeof(renames[0]); i++)
        if (!strcmp(rest, renames[i][0])) {
            snprintf(out, cap, "%s%s", prefix, renames[i][1]);
            return;
        }
    snprintf(out, cap, "%s%s", prefix, rest);
}

/* The release's FP8 Linears. */
static bool is_linear(const char *name) {
    static const char *const ends[] = {"wq_a.weight", "wq_b.weight", "wkv.weight", "wo_a.weight",
                                       "wo_b.weight", "shared_experts.w1.weight",
                                       "shared_experts.w2.weight", "shared_experts.w3.weight",
                                       "e_proj.weight", "h_proj.weight"};
    const size_t n = strlen(name);
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        const size_t k = strlen(ends[i]);
        /* the compressors' wkv are BF16 in the release */
        if (n >= k && !strcmp(name + n - k, ends[i]) && !strstr(name, "compressor.")) return true;
    }
    return false;
}

enum mode { ALL_F32, RELEASE, RELEASE_TWIN };

/* One tensor to write. */
typedef struct out_t {
    char name[128];
    const char *dtype;
    uint32_t n_dims;
    uint64_t shape[3];
    uint8_t *bytes;
    uint64_t n;
} out_t;

typedef struct writer {
    out_t *t;
    size_t n, cap;
    /* One tensor stored as BF16 (its twin: F32 of the BF16 values). */
    const char *bf16;
    bool tokenizer;   /* write tokenizer.json too */
} writer;

static out_t *add(writer *w, const char *name, const char *dtype, uint32_t n_dims,
                  const uint64_t *shape, uint64_t nbytes) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->t = realloc(w->t, sizeof(out_t) * w->cap);
        assert_non_null(w->t);
    }
    out_t *o = &w->t[w->n++];
    snprintf(o->name, sizeof(o->name), "%s", name);
    o->dtype = dtype;
    o->n_dims = n_dims;
    memcpy(o->shape, shape, sizeof(uint64_t) * n_dims);
    o->n = nbytes;
    o->bytes = calloc(1, nbytes ? nbytes : 1);
    assert_non_null(o->bytes);
    return o;
}

/* The GGUF's vocabulary (tokenizer.ggml.*) as a Hugging Face tokenizer.json:
 * normal tokens in model.vocab, the others in added_tokens (control ones
 * "special"), the merges as "left right". */
static void write_tokenizer(const ds4_gguf_file *g, const char *dir) {
    ds4err err = {0};
    uint64_t n_tok, n_merge;
    assert_int_equal(ds4_gguf_get_arr_str(g, "tokenizer.ggml.tokens", NULL, 0, &n_tok, &err), 0);
    assert_int_equal(ds4_gguf_get_arr_str(g, "tokenizer.ggml.merges", NULL, 0, &n_merge, &err), 0);
    ds4_gguf_str *tok = malloc(sizeof(ds4_gguf_str) * n_tok),
                 *merge = malloc(sizeof(ds4_gguf_str) * n_merge);
    int32_t *type = malloc(sizeof(int32_t) * n_tok);
    assert_true(tok && merge && type);
    assert_int_equal(ds4_gguf_get_arr_str(g, "tokenizer.ggml.tokens", tok, n_tok, &n_tok, &err), 0);
    assert_int_equal(ds4_gguf_get_arr_str(g, "tokenizer.ggml.merges", merge, n_merge, &n_merge,
                     &err), 0);
    assert_int_equal(ds4_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", type, n_tok, &err), 0);
    ds4_buf b = {0};
    ds4_buf_puts(&b, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    bool first = true;
    for (uint64_t i = 0; i < n_tok; i++) {
        if (type[i] != DS4_TOKTYPE_NORMAL) continue;
        ds4_buf_puts(&b, first ? "" : ", ");
        ds4_json_put_str(&b, tok[i].ptr, tok[i].len);
        ds4_buf_printf(&b, ": %llu", (unsigned long long)i);
        first = false;
    }
    ds4_buf_puts(&b, "}, \"merges\": [");
    for (uint64_t i = 0; i < n_merge; i++) {
        ds4_buf_puts(&b, i ? ", " : "");
        ds4_json_put_str(&b, merge[i].ptr, merge[i].len);
    }
    ds4_buf_puts(&b, "]}, \"added_tokens\": [");
    first = true;
    for (uint64_t i = 0; i < n_tok; i++) {
        if (type[i] == DS4_TOKTYPE_NORMAL) continue;
        assert_true(type[i] == DS4_TOKTYPE_CONTROL || type[i] == DS4_TOKTYPE_USER_DEFINED);
        ds4_buf_printf(&b, "%s{\"id\": %llu, \"content\": ", first ? "" : ", ",
                       (unsigned long long)i);
        ds4_json_put_str(&b, tok[i].ptr, tok[i].len);
        ds4_buf_printf(&b, ", \"special\": %s}", type[i] == DS4_TOKTYPE_CONTROL ? "true" : "false");
        first = false;
    }
    ds4_buf_puts(&b, "]}");
    assert_false(b.failed);
    char *path = tu_path(dir, "tokenizer.json");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(b.p, 1, b.len, f);
    assert_int_equal(fclose(f), 0);
    free(path);
    ds4_buf_free(&b);
    free(tok), free(merge), free(type);
}

static void writer_free(writer *w) {
    for (size_t i = 0; i < w->n; i++) free(w->t[i].bytes);
    free(w->t);
}

/* The formats' values by code, built once from blockfp's definitions. */
static double e4m3_val[256], e2m1_val[16];

static void code_tables(void) {
    if (e2m1_val[1] != 0) return;
    for (int c = 0; c < 256; c++) e4m3_val[c] = ds4_blockfp_e4m3((uint8_t)c);
    for (int c = 0; c < 16; c++) e2m1_val[c] = ds4_blockfp_e2m1((uint8_t)c);
}

/* The E4M3 or E2M1 code nearest to v, ties to the even code: the
 * positive codes' values increase with the code, so a bisection finds the
 * neighbours of |v| and the sign bit comes last. */
static uint8_t nearest(double v, int fp4) {
    const double *val = fp4 ? e2m1_val : e4m3_val;
    const int top = fp4 ? 7 : 126;
    const double a = fabs(v);
    int lo = 0, hi = top;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (val[mid] <= a) lo = mid;
        else hi = mid;
    }
    int c = a - val[lo] < val[hi] - a ? lo : a - val[lo] > val[hi] - a ? hi : (lo & 1 ? hi : lo);
    if (a >= val[hi]) c = hi;
    const int sign = v < 0 ? (fp4 ? 8 : 0x80) : 0;
    return (uint8_t)(c | sign);
}

/* The power-of-two scale byte that brings amax within the format's max:
 * frexp's exponent, then the exact comparison. */
static uint8_t scale_for(double amax, double max) {
    int e;
    frexp(amax / max, &e);
    if (e < -126) e = -126;
    while (e > -126 && amax <= max * ldexp(1, e - 1)) e--;
    while (amax > max * ldexp(1, e)) e++;
    return (uint8_t)(127 + e);
}

/* rows x cols of f32 values v as FP8 (128x128 blocks) or FP4 (32 a row)
 * with their scales; v receives the dequantized values. */
static void quantize(writer *w, const char *name, float *v, uint64_t rows, uint64_t cols, int fp4) {
    code_tables();
    uint64_t ss[2];
    ds4_blockfp_scale_shape(fp4, rows, cols, ss);
    char sname[160];
    snprintf(sname, sizeof(sname), "%.*s.scale", (int)(strlen(name) - 7), name);
    const uint64_t wshape[2] = {rows, fp4 ? cols / 2 : cols};
    add(w, name, fp4 ? "I8" : "F8_E4M3", 2, wshape, wshape[0] * wshape[1]);
    out_t *s = add(w, sname, "F8_E8M0", 2, ss, ss[0] * ss[1]);
    out_t *o = s - 1;   /* the second add may have moved the first */
    const uint64_t br = fp4 ? 1 : 128, bc = fp4 ? 32 : 128;
    const double max = fp4 ? 6 : 448;
    for (uint64_t i = 0; i < ss[0]; i++)
        for (uint64_t j = 0; j < ss[1]; j++) {
            double amax = 1e-30;
            for (uint64_t r = i * br; r < rows && r < (i + 1) * br; r++)
                for (uint64_t c = j * bc; c < cols && c < (j + 1) * bc; c++)
                    amax = fmax(amax, fabs(v[r * cols + c]));
            const uint8_t sb = scale_for(amax, max);
            s->bytes[i * ss[1] + j] = sb;
            const double sc = ldexp(1, (int)sb - 127);
            for (uint64_t r = i * br; r < rows && r < (i + 1) * br; r++)
                for (uint64_t c = j * bc; c < cols && c < (j + 1) * bc; c++) {
                    const uint8_t code = nearest(v[r * cols + c] / sc, fp4);
                    const double q = fp4 ? e2m1_val[code] : e4m3_val[code];
                    v[r * cols + c] = (float)(q * sc);
                    if (!fp4) o->bytes[r * cols + c] = code;
                    else o->bytes[r * (cols / 2) + c / 2] |= (uint8_t)(c & 1 ? code << 4 : code);
                }
        }
}

static void put_f32(writer *w, const char *name, uint32_t n_dims, const uint64_t *shape,
                    const float *v, uint64_t n) {
    out_t *o = add(w, name, "F32", n_dims, shape, 4 * n);
    memcpy(o->bytes, v, 4 * n);
}

static void put_bf16(writer *w, const char *name, uint32_t n_dims, const uint64_t *shape,
                     const float *v, uint64_t n) {
    out_t *o = add(w, name, "BF16", n_dims, shape, 2 * n);
    for (uint64_t i = 0; i < n; i++) {
        const uint16_t h = ds4_formats_f32_to_bf16(v[i]);
        memcpy(o->bytes + 2 * i, &h, 2);
    }
}

/* Values of a tensor w->bf16 names: BF16 in the release's formats, their
 * BF16 roundings as F32 in the twin; F32 otherwise. */
static void put_values(writer *w, enum mode mode, const char *name, uint32_t n_dims,
                       const uint64_t *shape, float *v, uint64_t n) {
    if (mode == ALL_F32 || !w->bf16 || strcmp(name, w->bf16)) {
        put_f32(w, name, n_dims, shape, v, n);
    } else if (mode == RELEASE) {
        put_bf16(w, name, n_dims, shape, v, n);
    } else {
        for (uint64_t i = 0; i < n; i++) v[i] = ds4_formats_bf16_to_f32(ds4_formats_f32_to_bf16(v[i]));
        put_f32(w, name, n_dims, shape, v, n);
    }
}

/* A matrix (or one expert) of rows x cols values: F32 in ALL_F32; in the
 * release's formats otherwise, the twin writing their values as F32. */
static void put_matrix(writer *w, enum mode mode, const char *name, float *v, uint64_t rows,
                       uint64_t cols, bool expert) {
    const uint64_t shape[2] = {rows, cols};
    const bool plain = w->bf16 && !strcmp(name, w->bf16);
    if (mode != ALL_F32 && !plain && (expert || is_linear(name))) {
        if (mode == RELEASE) {
            quantize(w, name, v, rows, cols, expert);
            return;
        }
        writer scratch = {0};   /* the twin keeps the values only */
        quantize(&scratch, name, v, rows, cols, expert);
        writer_free(&scratch);
    }
    put_values(w, mode, name, 2, shape, v, rows * cols);
}

static void add_tensor(writer *w, enum mode mode, const ds4_gguf_tensor *t) {
    char name[128];
    release_name(t->name, name, sizeof(name));
    if (t->type == DS4_TYPE_I32) {   /* tid2eid, widened as the release */
        const uint64_t shape[2] = {t->ne[1], t->ne[0]};
        out_t *o = add(w, name, "I64", 2, shape, 8 * t->n_elem);
        for (uint64_t i = 0; i < t->n_elem; i++) {
            int32_t v32;
            memcpy(&v32, t->data + 4 * i, 4);
            const int64_t v = v32;
            memcpy(o->bytes + 8 * i, &v, 8);
        }
        return;
    }
    float *v = malloc(sizeof(float) * t->n_elem);
    assert_non_null(v);
    assert_int_equal(ds4_types_dequant_row(t->type, t->data, v, t->n_elem), 0);
    if (t->n_dims == 3) {
        const uint64_t per = t->ne[0] * t->ne[1];
        for (uint64_t e = 0; e < t->ne[2]; e++) {
            char en[128];
            snprintf(en, sizeof(en), name, (unsigned)e);
            put_matrix(w, mode, en, v + e * per, t->ne[1], t->ne[0], true);
        }
    } else if (t->n_dims == 2) {
        put_matrix(w, mode, name, v, t->ne[1], t->ne[0], false);
    } else {
        const uint64_t shape[1] = {t->ne[0]};
        put_values(w, mode, name, 1, shape, v, t->n_elem);
    }
    free(v);
}

static void write_all(const writer *w, const char *dir, const ds4_config *c) {
    ds4_buf h = {0};
    uint64_t off = 0;
    ds4_buf_putc(&h, '{');
    for (size_t i = 0; i < w->n; i++) {
        const out_t *o = &w->t[i];
        ds4_buf_printf(&h, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", o->name, o->dtype);
        for (uint32_t d = 0; d < o->n_dims; d++)
            ds4_buf_printf(&h, "%s%llu", d ? "," : "", (unsigned long long)o->shape[d]);
        ds4_buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                       (unsigned long long)(off + o->n));
        off += o->n;
    }
    ds4_buf_putc(&h, '}');
    while (h.len % 8) ds4_buf_putc(&h, ' ');
    char *path = tu_path(dir, "model.safetensors");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const uint64_t n = h.len;
    fwrite(&n, 8, 1, f);
    fwrite(h.p, 1, h.len, f);
    for (size_t i = 0; i < w->n; i++) fwrite(w->t[i].bytes, 1, w->t[i].n, f);
    assert_int_equal(fclose(f), 0);
    free(path);
    ds4_buf_free(&h);
    char text[8192];
    tu_hf_config(c, text, sizeof(text));
    path = tu_path(dir, "config.json");
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    free(path);
}

/* Model t (its MTP file too) as a checkpoint folder in mode, with w's edits. */
static char *write_checkpoint(const tu_model *t, enum mode mode, writer w) {
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    for (uint64_t i = 0; i < t->m.file.n_tensors; i++) add_tensor(&w, mode, &t->m.file.tensors[i]);
    for (uint64_t i = 0; t->m.mtp && i < t->m.mtp->file.n_tensors; i++)
        add_tensor(&w, mode, &t->m.mtp->file.tensors[i]);
    write_all(&w, dir, &t->m.cfg);
    if (w.tokenizer) write_tokenizer(&t->m.file, dir);
    writer_free(&w);
    return dir;
}

static void remove_checkpoint(char *dir) {
    char *p = tu_path(dir, "model.safetensors");
    remove(p);
    free(p);
    p = tu_path(dir, "config.json");
    remove(p);
    free(p);
    p = tu_path(dir, "tokenizer.json");
    remove(p);
    free(p);
    tu_rmdir(dir);
}

/* ---- Running them ---- */

/* Under valgrind (make test's pass) the binding is what is checked: fewer
 * tokens, fewer cases. */
static bool under_valgrind(void) { return getenv("DS4REF_VALGRIND") != NULL; }

static uint32_t n_tok(void) { return under_valgrind() ? 6 : 24; }

/* The logits of every token of `tok` (one pass) and, with MTP, the MTP
 * head's logits of each final state with the next token. */
static float *run(const ds4_model *m, const int32_t *tok, bool qat, float **mtp_logits) {
    const uint32_t n = n_tok();
    const uint32_t V = m->cfg.n_vocab, H = m->cfg.n_hc * m->cfg.n_embd;
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts o = {.qat = qat};
    if (ds4_engine_init(&e, m, &o, n, &err)) fail_msg("%s", err.msg);
    ds4_kv kv;
    assert_int_equal(ds4_kv_init(&kv, &m->cfg, m->cfg.ratio, m->cfg.n_layer, 1024, n, 0, &err), 0);
    float *logits = malloc(sizeof(float) * n * V), *h = malloc(sizeof(float) * n * H);
    assert_true(logits && h);
    ds4_fwd_seq q = {.kv = &kv, .tokens = tok, .n = n, .logits = logits, .hc_out = h};
    if (ds4_forward(&e, &q, 1, &err)) fail_msg("%s", err.msg);
    if (mtp_logits && m->mtp) {
        ds4_kv mk;
        uint32_t zero = 0;
        assert_int_equal(ds4_kv_init(&mk, &m->cfg, &zero, 1, 1024, n, 0, &err), 0);
        *mtp_logits = malloc(sizeof(float) * (n - 1) * V);
        assert_non_null(*mtp_logits);
        ds4_mtp_seq ms = {.kv = &mk, .h = h, .tokens = tok + 1, .n = n - 1, .logits = *mtp_logits};
        if (ds4_forward_mtp(&e, &ms, 1, &err)) fail_msg("%s", err.msg);
        ds4_kv_free(&mk);
    }
    ds4_kv_free(&kv);
    ds4_engine_free(&e);
    free(h);
    return logits;
}

/* The checkpoint is one model.safetensors with config.json beside it. */
static int open_in(ds4_model *m, const char *dir, ds4err *err) {
    char *p = tu_path(dir, "model.safetensors");
    const int rc = ds4_hfbind_open(m, p, err);
    free(p);
    return rc;
}

static void open_ok(ds4_model *m, const char *dir) {
    ds4err err = {0};
    if (open_in(m, dir, &err)) fail_msg("%s", err.msg);
}

/* Every tensor F32: the GGUF's logits and MTP logits, bit for bit, QAT on
 * and off. */
static void test_f32_same_as_gguf(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny", 3, true, &err);
    if (!t) fail_msg("%s", err.msg);
    char *dir = write_checkpoint(t, ALL_F32, (writer){0});
    ds4_model m;
    open_ok(&m, dir);
    assert_non_null(m.mtp);
    assert_int_equal(m.layers[0].gate_exps.n_parts, t->m.cfg.n_expert);
    assert_int_equal(m.layers[0].q_a.type, DS4_TYPE_F32);
    const uint32_t n = n_tok();
    int32_t *tok = tu_random_tokens(n, t->m.cfg.n_vocab, 5);
    const size_t V = t->m.cfg.n_vocab;
    for (int qat = 0; qat <= 1; qat++) {
        float *mg = NULL, *mc = NULL;
        float *g = run(&t->m, tok, qat, &mg), *c = run(&m, tok, qat, &mc);
        assert_memory_equal(g, c, sizeof(float) * n * V);
        assert_memory_equal(mg, mc, sizeof(float) * (n - 1) * V);
        free(g), free(c), free(mg), free(mc);
    }
    free(tok);
    ds4_model_close(&m);
    remove_checkpoint(dir);
    tu_model_free(t);
}

/* Mark the twin's matrices that are FP8 or FP4 in the release (a's) with
 * the official linears' roundings, field by field: what
 * ds4_numerics_apply must do to a with QAT on. */
static void mark_like(const ds4_mat *a, ds4_mat *b, int *n) {
    if (a->type == DS4_TYPE_FP8_B128 || a->type == DS4_TYPE_FP4_B32) {
        b->act = a->act;
        b->out = a->out;
        *n += a->act == DS4_ACT_FP8_B128 && a->out == DS4_OUT_BF16;
    }
}

static void mark_layer(const ds4_layer *a, ds4_layer *b, int *n) {
    const ds4_mat *am[] = {&a->q_a, &a->q_b, &a->kv, &a->out_a, &a->out_b, &a->idx_q_b,
                           &a->gate_exps, &a->up_exps, &a->down_exps, &a->sh_gate, &a->sh_up,
                           &a->sh_down};
    ds4_mat *bm[] = {&b->q_a, &b->q_b, &b->kv, &b->out_a, &b->out_b, &b->idx_q_b,
                     &b->gate_exps, &b->up_exps, &b->down_exps, &b->sh_gate, &b->sh_up,
                     &b->sh_down};
    for (size_t i = 0; i < sizeof(am) / sizeof(am[0]); i++) mark_like(am[i], bm[i], n);
}

/* The release's formats: FP8 Linears, FP4 experts and a BF16 norm give the
 * logits of the F32 checkpoint of their values, QAT off and on, and not the
 * GGUF's.  Then QAT on with the official numerics: every FP8 and FP4
 * linear but wo_a quantizes its input to FP8 and writes BF16 (each
 * rounding has its own tests: test_actround, test_dot); the checkpoint
 * gives the logits of its twin with the same roundings on the same
 * matrices, marked here field by field, and not those without them.  The
 * model is tiny-ckpt, whose low ranks make every input whole blocks of 128
 * (tiny's 64 is refused: test_refusals). */
static void test_release_formats_same_as_twin(void **state) {
    (void)state;
    if (under_valgrind()) {
        tu_skipping("too slow under valgrind; the plain run covers it");
        skip();
    }
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny-ckpt", 4, true, &err);
    if (!t) fail_msg("%s", err.msg);
    /* The norms, router and compressors are BF16 in the release; one of
     * them BF16 here and its values as F32 in the twin shows BF16 binds. */
    char *rel = write_checkpoint(t, RELEASE, (writer){.bf16 = "layers.2.attn_norm.weight"});
    char *twin = write_checkpoint(t, RELEASE_TWIN, (writer){.bf16 = "layers.2.attn_norm.weight"});
    ds4_model a, b;
    open_ok(&a, rel);
    open_ok(&b, twin);
    assert_int_equal(a.layers[2].q_a.type, DS4_TYPE_FP8_B128);
    assert_int_equal(a.layers[2].idx_q_b.type, DS4_TYPE_FP8_B128);
    assert_int_equal(a.layers[2].comp_kv.type, DS4_TYPE_F32);
    assert_int_equal(a.layers[1].down_exps.type, DS4_TYPE_FP4_B32);
    assert_int_equal(a.mtp->e_proj.type, DS4_TYPE_FP8_B128);
    assert_int_equal(b.layers[1].down_exps.type, DS4_TYPE_F32);
    assert_int_equal(a.layers[2].attn_norm.n, t->m.cfg.n_embd);
    const uint32_t n = n_tok();
    int32_t *tok = tu_random_tokens(n, t->m.cfg.n_vocab, 6);
    const size_t V = t->m.cfg.n_vocab;
    float *plain = NULL;   /* QAT on without the official linears */
    for (int qat = 0; qat <= 1; qat++) {
        float *ma = NULL, *mb = NULL;
        float *la = run(&a, tok, qat, &ma), *lb = run(&b, tok, qat, &mb);
        assert_memory_equal(la, lb, sizeof(float) * n * V);
        assert_memory_equal(ma, mb, sizeof(float) * (n - 1) * V);
        float *g = run(&t->m, tok, qat, NULL);
        assert_memory_not_equal(g, la, sizeof(float) * n * V);
        free(la), free(ma), free(mb), free(g);
        if (qat) plain = lb;
        else free(lb);
    }
    if (ds4_numerics_check_official(&a, rel, &err)) fail_msg("%s", err.msg);
    ds4_numerics_apply(&a, 0, true);
    assert_int_equal(a.layers[2].q_b.act, DS4_ACT_FP8_B128);
    assert_int_equal(a.layers[2].q_b.out, DS4_OUT_BF16);
    assert_int_equal(a.layers[2].out_a.act, DS4_ACT_NONE);   /* wo_a: BF16 einsum, f32 here */
    assert_int_equal(a.layers[2].out_a.out, DS4_OUT_NONE);
    assert_int_equal(a.layers[2].comp_kv.act, DS4_ACT_NONE);
    int marked = 0;
    for (uint32_t l = 0; l < a.cfg.n_layer; l++) mark_layer(&a.layers[l], &b.layers[l], &marked);
    mark_layer(&a.mtp->block, &b.mtp->block, &marked);
    mark_like(&a.mtp->e_proj, &b.mtp->e_proj, &marked);
    mark_like(&a.mtp->h_proj, &b.mtp->h_proj, &marked);
    /* 4 layers and the MTP block: wq_a, wq_b, wkv, wo_b, 3 shared and 3
     * routed; the ratio-4 layer's indexer wq_b; e_proj and h_proj. */
    assert_int_equal(marked, 5 * 10 + 1 + 2);
    float *ma = NULL, *mb = NULL;
    float *la = run(&a, tok, true, &ma), *lb = run(&b, tok, true, &mb);
    assert_memory_equal(la, lb, sizeof(float) * n * V);
    assert_memory_equal(ma, mb, sizeof(float) * (n - 1) * V);
    assert_memory_not_equal(la, plain, sizeof(float) * n * V);
    free(la), free(lb), free(ma), free(mb), free(plain), free(tok);
    ds4_model_close(&a);
    ds4_model_close(&b);
    remove_checkpoint(rel);
    remove_checkpoint(twin);
    tu_model_free(t);
}

/* Broken checkpoints: each refused, the message naming the folder, the
 * tensor and what was expected.  One release checkpoint is written; each
 * case edits its shard's bytes (a tensor renamed out of the way by its last
 * letter, or a scale tensor's first byte made 255, NaN) and puts them back;
 * the last case writes one expert as BF16. */
static void write_bytes(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void expect_refusal(const char *dir, const char *expect) {
    ds4_model m;
    ds4err err = {0};
    if (open_in(&m, dir, &err) == 0) fail_msg("opened, expected \"%s\"", expect);
    if (!strstr(err.msg, expect)) fail_msg("got \"%s\", expected \"%s\"", err.msg, expect);
    if (!strstr(err.msg, dir)) fail_msg("\"%s\" does not name %s", err.msg, dir);
}

static void test_refusals(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny", 5, true, &err);
    if (!t) fail_msg("%s", err.msg);
    static const struct {
        const char *rename, *nan_scale, *expect;
    } cases[] = {
        {"layers.2.attn.indexer.wq_b.weight", NULL,
         "required tensor is missing: layers.2.attn.indexer.wq_b.weight (expected F8_E4M3"},
        {"layers.1.attn.wq_a.scale", NULL,
         "required tensor is missing: layers.1.attn.wq_a.scale (expected F8_E8M0 [1, 2])"},
        {"mtp.0.ffn.experts.7.w2.weight", NULL, "required tensor is missing: mtp.0.ffn.experts.7.w2.weight"},
        {"layers.0.ffn.gate.tid2eid", NULL, "required tensor is missing: layers.0.ffn.gate.tid2eid"},
        {NULL, "layers.3.ffn.experts.0.w1.scale",
         "tensor layers.3.ffn.experts.0.w1.scale: scale [0, 0] is NaN (byte 255)"},
        {NULL, "layers.0.attn.wo_b.scale", "tensor layers.0.attn.wo_b.scale: scale [0, 0] is NaN"},
    };
    char *dir = write_checkpoint(t, RELEASE, (writer){0});
    char *st = tu_path(dir, "model.safetensors");
    uint8_t *orig, *b;
    size_t len;
    assert_int_equal(tu_read_file(st, &orig, &len), 0);
    b = malloc(len);
    assert_non_null(b);
    uint64_t hlen;
    memcpy(&hlen, orig, 8);
    ds4_st_file f;
    if (ds4_safetensors_parse(&f, orig, len, "shard", &err)) fail_msg("%s", err.msg);
    const size_t n_cases = under_valgrind() ? 2 : sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n_cases; i++) {
        memcpy(b, orig, len);
        if (cases[i].rename) {
            char quoted[160];
            snprintf(quoted, sizeof(quoted), "\"%s\"", cases[i].rename);
            uint8_t *at = memmem(b + 8, hlen, quoted, strlen(quoted));
            assert_non_null(at);
            at[strlen(quoted) - 2] = 'X';
        } else {
            const ds4_st_tensor *s = ds4_safetensors_find(&f, cases[i].nan_scale);
            assert_non_null(s);
            b[8 + hlen + s->begin] = 255;
        }
        write_bytes(st, b, len);
        expect_refusal(dir, cases[i].expect);
    }
    ds4_safetensors_close(&f);
    /* Restored, the checkpoint opens; tiny's q_lora_rank of 64 is not
     * whole blocks of 128 for the official FP8 activations. */
    write_bytes(st, orig, len);
    ds4_model m;
    open_ok(&m, dir);
    assert_int_equal(ds4_numerics_check_official(&m, dir, &err), -1);
    assert_int_equal(err.code, DS4_E_UNSUPPORTED);
    if (!strstr(err.msg, "layers.0.attn.wq_b.weight has an input of 64, not whole blocks of 128"))
        fail_msg("%s", err.msg);
    ds4_model_close(&m);
    free(orig), free(b), free(st);
    remove_checkpoint(dir);
    if (!under_valgrind()) {
        dir = write_checkpoint(t, RELEASE, (writer){.bf16 = "layers.2.ffn.experts.3.w3.weight"});
        expect_refusal(dir, "tensor layers.2.ffn.experts.3.w3.weight is bf16, but expert 0's is fp4_e2m1_b32");
        remove_checkpoint(dir);
    }
    tu_model_free(t);
}



/* Through the public API: a path to a checkpoint opens it, with QAT off
 * and on, and its MTP layer when asked for by the same path; an F32
 * checkpoint's logits are the GGUF's; another --mtp path, a numerics
 * profile and text (no tokenizer yet) are refused by name.  And the
 * identity a golden records: config.json's bytes, the shard's name and
 * header (recomputed here from the definition), every tensor. */
static void eval_api(const char *path, const char *mtp, int qat, const int32_t *tok, uint32_t n,
                     float *logits) {
    ds4ref_model_options o;
    ds4ref_model_options_init(&o);
    o.path = path;
    o.mtp_path = mtp;
    o.qat = qat;
    ds4ref_model *m;
    ds4ref_error err;
    if (ds4ref_model_open(&o, &m, &err)) fail_msg("%s", err.message);
    ds4ref_session_options so = {0};
    ds4ref_session *s;
    if (ds4ref_session_new(m, &so, &s, &err)) fail_msg("%s", err.message);
    if (ds4ref_session_eval(s, tok, n, logits, &err)) fail_msg("%s", err.message);
    ds4ref_session_free(s);
    ds4ref_model_close(m);
}

static void refused(const char *path, const char *mtp, const char *numerics, const char *expect) {
    ds4ref_model_options o;
    ds4ref_model_options_init(&o);
    o.path = path;
    o.mtp_path = mtp;
    o.numerics = numerics;
    ds4ref_model *m = NULL;
    ds4ref_error err;
    assert_int_not_equal(ds4ref_model_open(&o, &m, &err), 0);
    assert_null(m);
    if (!strstr(err.message, expect)) fail_msg("got \"%s\", expected \"%s\"", err.message, expect);
}

static void test_public_api(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny", 9, true, &err);
    if (!t) fail_msg("%s", err.msg);
    char *dir = write_checkpoint(t, ALL_F32, (writer){0});
    char *st = tu_path(dir, "model.safetensors");
    const uint32_t n = n_tok(), V = t->m.cfg.n_vocab;
    int32_t *tok = tu_random_tokens(n, V, 10);
    float *a = malloc(sizeof(float) * n * V), *b = malloc(sizeof(float) * n * V);
    assert_true(a && b);
    for (int qat = 0; qat <= 1; qat++) {
        eval_api(t->path, t->mtp_path, qat, tok, n, a);
        eval_api(st, qat ? st : NULL, qat, tok, n, b);
        assert_memory_equal(a, b, sizeof(float) * n * V);
    }
    refused(st, t->mtp_path, NULL, "holds its MTP layer: give the MTP head as the same path");
    refused(st, NULL, "ggml-act", "a checkpoint runs the official numerics only");

    ds4_model m;
    open_ok(&m, dir);
    const ds4_tokenizer *tk;
    assert_int_equal(ds4_model_tokenizer(&m, &tk, &err), -1);
    assert_non_null(strstr(err.msg, "the checkpoint's folder has no tokenizer.json"));
    ds4_modelid id, id2;
    if (ds4_modelid_of_model(&m, false, &id, &err)) fail_msg("%s", err.msg);
    if (ds4_modelid_of_model(&m, true, &id2, &err)) fail_msg("%s", err.msg);
    assert_true(ds4_modelid_same(&id, &id2));   /* the MTP layer is the checkpoint's */
    assert_string_equal(id.file, "model.safetensors");
    assert_int_equal(id.n_tensors, m.ckpt->n_tensors);
    uint8_t *cfg, *shard;
    size_t cfg_len, shard_len;
    char *cp = tu_path(dir, "config.json");
    assert_int_equal(tu_read_file(cp, &cfg, &cfg_len), 0);
    assert_int_equal(tu_read_file(st, &shard, &shard_len), 0);
    assert_int_equal(id.size, cfg_len + shard_len);
    uint64_t hlen;
    memcpy(&hlen, shard, 8);
    ds4_sha256 h;
    uint8_t want[32];
    ds4_sha256_init(&h);
    ds4_sha256_update(&h, cfg, cfg_len);
    ds4_sha256_update(&h, "model.safetensors", sizeof("model.safetensors"));
    ds4_sha256_update(&h, shard, 8 + hlen);
    ds4_sha256_final(&h, want);
    assert_memory_equal(id.metadata_sha256, want, 32);
    /* One tensor's first byte changed: another model, that tensor named. */
    ds4_model_close(&m);
    const ds4_st_tensor *first = NULL;
    ds4_ckpt ck;
    assert_int_equal(ds4_checkpoint_open(&ck, st, &err), 0);
    first = ds4_checkpoint_find(&ck, "layers.1.attn.wkv.weight");
    assert_non_null(first);
    const uint64_t at = 8 + hlen + first->begin;
    ds4_checkpoint_close(&ck);
    FILE *f = fopen(st, "r+b");
    assert_non_null(f);
    fseek(f, (long)at, SEEK_SET);
    fputc(shard[at] ^ 1, f);
    fclose(f);
    open_ok(&m, dir);
    ds4_modelid id3;
    if (ds4_modelid_of_model(&m, false, &id3, &err)) fail_msg("%s", err.msg);
    assert_false(ds4_modelid_same(&id, &id3));
    assert_memory_equal(id.metadata_sha256, id3.metadata_sha256, 32);
    char d[512];
    ds4_modelid_describe_diff(&id, &id3, d, sizeof(d));
    if (!strstr(d, "layers.1.attn.wkv.weight")) fail_msg("%s", d);
    ds4_model_close(&m);
    ds4_modelid_free(&id);
    ds4_modelid_free(&id2);
    ds4_modelid_free(&id3);
    free(cfg), free(shard), free(cp), free(a), free(b), free(tok), free(st);
    remove_checkpoint(dir);
    tu_model_free(t);
}

/* The folder's tokenizer.json: the GGUF's vocabulary written in Hugging
 * Face's layout gives every token the same string and the same ids for
 * text with and without the chat's special tokens. */
static void test_tokenizer(void **state) {
    (void)state;
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny", 11, false, &err);
    if (!t) fail_msg("%s", err.msg);
    char *dir = write_checkpoint(t, ALL_F32, (writer){.tokenizer = true});
    ds4_model m;
    open_ok(&m, dir);
    const ds4_tokenizer *a, *b;
    if (ds4_model_tokenizer(&t->m, &a, &err) || ds4_model_tokenizer(&m, &b, &err))
        fail_msg("%s", err.msg);
    for (int32_t id = 0; id < (int32_t)t->m.cfg.n_vocab; id++) {
        ds4_strref sa, sb;
        if (ds4_tok_text(a, id, &sa, &err)) continue;   /* ids the GGUF has no string for */
        assert_int_equal(ds4_tok_text(b, id, &sb, &err), 0);
        assert_int_equal(sa.len, sb.len);
        assert_memory_equal(sa.ptr, sb.ptr, sa.len);
    }
    static const char *const texts[] = {
        "Hello, world! The capital of Italy is Rome.",
        "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>You are a helpful assistant<\xef\xbd\x9cUser\xef\xbd\x9c>hi<\xef\xbd\x9c" "Assistant\xef\xbd\x9c></think>",
        "  spaces\tand\nnewlines 12345 \xc3\xa9\xe4\xb8\xad",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        for (unsigned flags = 0; flags <= DS4_TOK_ADDED; flags += DS4_TOK_ADDED) {
            ds4_tokens x = {0}, y = {0};
            assert_int_equal(ds4_tok_encode(a, texts[i], strlen(texts[i]), flags, &x, &err), 0);
            assert_int_equal(ds4_tok_encode(b, texts[i], strlen(texts[i]), flags, &y, &err), 0);
            assert_int_equal(x.n, y.n);
            assert_memory_equal(x.ids, y.ids, sizeof(int32_t) * x.n);
            ds4_tokens_free(&x);
            ds4_tokens_free(&y);
        }
    ds4_model_close(&m);
    remove_checkpoint(dir);
    tu_model_free(t);
}

/* The library's writer (ds4ref-mkmodel --format hf): its release folder
 * (two shards and their index, FP8, FP4, BF16, tokenizer.json) binds, gives
 * the logits of its F32 twin with QAT off, tokenizes as the GGUF does, and
 * each FP8 weight it wrote is its twin's value exactly. */
static void test_library_writer(void **state) {
    (void)state;
    if (under_valgrind()) {
        tu_skipping("too slow under valgrind; the plain run covers it");
        skip();
    }
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny-ckpt", 12, true, &err);
    if (!t) fail_msg("%s", err.msg);
    char *rel = tu_tmpdir(), *twin = tu_tmpdir();
    if (ds4_hfwrite(&t->m, rel, DS4_HFWRITE_RELEASE, 2, &err) ||
        ds4_hfwrite(&t->m, twin, DS4_HFWRITE_F32_TWIN, 2, &err))
        fail_msg("%s", err.msg);
    ds4_model a, b;
    if (ds4_hfbind_open(&a, rel, &err) || ds4_hfbind_open(&b, twin, &err)) fail_msg("%s", err.msg);
    assert_int_equal(a.ckpt->n_shards, 2);
    assert_int_equal(a.layers[2].q_b.type, DS4_TYPE_FP8_B128);
    assert_int_equal(a.layers[3].up_exps.type, DS4_TYPE_FP4_B32);
    assert_int_equal(b.layers[3].up_exps.type, DS4_TYPE_F32);
    assert_non_null(a.mtp);
    const uint32_t n = n_tok(), V = a.cfg.n_vocab;
    int32_t *tok = tu_random_tokens(n, V, 13);
    float *ma = NULL, *mb = NULL;
    float *la = run(&a, tok, false, &ma), *lb = run(&b, tok, false, &mb);
    assert_memory_equal(la, lb, sizeof(float) * n * V);
    assert_memory_equal(ma, mb, sizeof(float) * (n - 1) * V);
    /* wq_b of layer 1, row by row: blockfp's dequantization of what was
     * written equals the twin's F32. */
    const ds4_mat *q = &a.layers[1].q_b, *f = &b.layers[1].q_b;
    float *row = malloc(sizeof(float) * q->cols);
    for (uint64_t r = 0; r < q->rows; r++) {
        uint64_t bad;
        assert_int_equal(ds4_blockfp_fp8_row(q->data, q->scale, q->cols, r, row, &bad), 0);
        assert_memory_equal(row, f->data + r * f->row_bytes, sizeof(float) * q->cols);
    }
    /* Through the public API, QAT on is the official linears as well as
     * the KV and indexer roundings: the profile it applies keeps them. */
    float *api = malloc(sizeof(float) * n * V);
    assert_non_null(api);
    eval_api(rel, NULL, 1, tok, n, api);
    if (ds4_numerics_check_official(&a, rel, &err)) fail_msg("%s", err.msg);
    ds4_numerics_apply(&a, 0, true);
    float *own = run(&a, tok, true, NULL);
    assert_memory_equal(api, own, sizeof(float) * n * V);
    free(api), free(own);
    const ds4_tokenizer *ta, *tg;
    if (ds4_model_tokenizer(&a, &ta, &err) || ds4_model_tokenizer(&t->m, &tg, &err)) fail_msg("%s", err.msg);
    const char *text = "<\xef\xbd\x9cUser\xef\xbd\x9c>Hello, world!<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";
    ds4_tokens x = {0}, y = {0};
    assert_int_equal(ds4_tok_encode(ta, text, strlen(text), DS4_TOK_ADDED, &x, &err), 0);
    assert_int_equal(ds4_tok_encode(tg, text, strlen(text), DS4_TOK_ADDED, &y, &err), 0);
    assert_int_equal(x.n, y.n);
    assert_memory_equal(x.ids, y.ids, sizeof(int32_t) * x.n);
    ds4_tokens_free(&x), ds4_tokens_free(&y);
    free(row), free(la), free(lb), free(ma), free(mb), free(tok);
    ds4_model_close(&a);
    ds4_model_close(&b);
    static const char *const files[] = {"config.json", "model.safetensors.index.json", "tokenizer.json",
                                        "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    for (int k = 0; k < 2; k++) {
        char *d = k ? twin : rel;
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            char *p = tu_path(d, files[i]);
            remove(p);
            free(p);
        }
        tu_rmdir(d);
    }
    tu_model_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_same_as_gguf),
        cmocka_unit_test(test_release_formats_same_as_twin),
        cmocka_unit_test(test_public_api),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_library_writer),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
