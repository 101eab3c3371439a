/* A model from the official checkpoint: DeepSeek V4's published safetensors
 * (ckpt/checkpoint.h) bound to the same ds4_model a GGUF gives.
 *
 * The release keeps inference/model.py's names ("layers.3.attn.wq_a.weight",
 * "ffn.experts.17.w2.scale", "mtp.0.e_proj.weight"); ds4's GGUF holds the
 * same tensors renamed, each with its torch shape reversed over the same
 * row-major bytes, the experts stacked.  So binding is a table from one
 * name to the other (hfbind.c) over the GGUF layout (layout.c), with the
 * shapes read in torch order and every expert a tensor of its own.
 *
 * What a tensor may be stored as follows the release: the matrices model.py
 * makes FP8 Linears (wq_a, wq_b, wkv, wo_a, wo_b, the indexer's wq_b, the
 * shared experts, e_proj, h_proj) are F8_E4M3 with an F8_E8M0 ".scale" per
 * 128x128 block, or a plain float type; the routed experts are FP4 (I8 of
 * two codes, an F8_E8M0 ".scale" per 32), FP8, or a plain float type, all
 * experts of a tensor alike; every other matrix and vector is F32, BF16 or
 * F16; tid2eid is I64 or I32.  Scales that are NaN, or large enough that
 * a product could leave f32, are refused here, so the kernels' exact
 * dequantization never meets one. */
#ifndef DS4_HFBIND_H
#define DS4_HFBIND_H

#include "base/err.h"
#include "ref/ckpt/checkpoint.h"
#include "ref/model/model.h"

/* The release's name of the GGUF layout's tensor `gguf` (a name of
 * layout.c, without "blk.N."), with "%u" for the expert where the release
 * stores one tensor an expert; NULL for a name layout.c does not have. */
const char *ds4_hfbind_release_name(const char *gguf);

/* How the release stores that tensor (its safetensors dtype): F32, BF16,
 * FP8 (F8_E4M3 with .scale), FP4 (I8 with .scale) or I64; -1 for a name
 * layout.c does not have. */
enum ds4_hf_form { DS4_HF_F32, DS4_HF_BF16, DS4_HF_FP8, DS4_HF_FP4, DS4_HF_I64 };
int ds4_hfbind_release_form(const char *gguf);

/* The checkpoint at path opened (ckpt/checkpoint.h) and bound, into *m:
 * config.json's hyper-parameters, every tensor checked for its name,
 * dtype, shape and scales, and the MTP layer when the checkpoint holds
 * mtp.0.e_proj.weight (then all of it).  An error names the checkpoint,
 * the tensor, what was expected and what was found. */
int ds4_hfbind_open(ds4_model *m, const char *path, ds4err *err);

#endif
