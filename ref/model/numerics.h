/* Numerics profiles: another engine's intended approximations, which ds4ref
 * can reproduce exactly on request (docs/NUMERICS.md, "Profiles").  The
 * default, none of them, is the official numerics.
 *
 * A profile is a set of roundings, named by a comma list:
 *   ggml-act  each matrix product's input converted as ggml's x86-64 CPU
 *             backend converts it for the weight's type (its vec_dot_type):
 *             Q8_0 weights get Q8_0 inputs (its AVX quantizer), Q2_K/Q4_K/
 *             IQ2_XXS weights Q8_K, F16 and BF16 weights F16 and BF16, F32
 *             weights f32 (quant/actround.h); and the hyper-connection
 *             mixes made as llama.cpp's deepseek4 graph makes them, from the
 *             normalized state (forward/hyperconn.c);
 *   ds4-act   as ds4.c's CPU path: Q8_0 weights get its own Q8_0 inputs
 *             (an f32 scale), K-quant and IQ2_XXS weights Q8_K, float
 *             weights f32;
 *   f16-kv    every stored KV row (the window's raw rows, the compressed
 *             rows, the indexer's keys) rounded to binary16 as ds4.c
 *             stores it, after the FP8/FP4 simulation;
 *   jitter    not an engine's: every matrix product's f32 output (of the
 *             matrix kernels: not the hyper-connection mixes) moved one
 *             unit in the last place, up or down as a hash of the value and
 *             its row says (quant/dot.h, ds4_dot_jitter), before the
 *             official BF16 output rounding: what another order of the same
 *             sums does to a product, so that the roundings downstream show
 *             what such noise becomes (ds4ref-conform's expected noise of a
 *             profile, docs/CONFORM.md §3.6).
 * "official" is the empty set; "ds4" is ds4-act,f16-kv, ds4.c's CPU path as
 * a whole. */
#ifndef DS4_NUMERICS_H
#define DS4_NUMERICS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/model/model.h"

/* Raised whenever a profile's roundings change, so that what was kept
 * under the old ones (ds4ref-conform's cache) is not taken for the new. */
#define DS4_NUMERICS_REVISION 2

enum {
    DS4_NUMERICS_GGML_ACT = 1u << 0,
    DS4_NUMERICS_DS4_ACT = 1u << 1,
    DS4_NUMERICS_F16_KV = 1u << 2,
    DS4_NUMERICS_JITTER = 1u << 3,
};

/* The set a name gives (NULL and "" are "official"); DS4_E_ARG naming the
 * known names for anything else, or for both activation roundings. */
int ds4_numerics_parse(const char *name, uint32_t *set, ds4err *err);

/* The canonical name of a set: "official", or its members in the order
 * above, comma-separated ("ggml-act,f16-kv"). */
void ds4_numerics_name(uint32_t set, char *out, size_t cap);

/* Mark every matrix of the model (and its MTP head, when loaded) with the
 * input rounding the set gives its type.  The official checkpoint's FP8
 * and FP4 linears take the official numerics instead (kernel.py and
 * model.py's linear()): with qat, a product whose weight is FP8 or FP4
 * quantizes its input to FP8 in blocks of 128 (act_quant, UE8M0 scales)
 * and writes BF16 (fp8_gemm, fp4_gemm); without it, neither.  Not wo_a
 * (attn_output_a): model.py dequantizes it to BF16 and multiplies with
 * einsum, which ds4ref keeps in f32 as the other activations.  The engine's
 * qat (KV and indexer roundings) must be the same qat. */
void ds4_numerics_apply(ds4_model *m, uint32_t set, bool qat);

/* Can the official linears run with QAT on?  An inner width that is not
 * whole blocks of 128 cannot be quantized so (the official kernel
 * asserts): DS4_E_UNSUPPORTED, naming `path`, the tensor and --qat off. */
int ds4_numerics_check_official(ds4_model *m, const char *path, ds4err *err);

#endif
