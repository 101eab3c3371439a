/* A model written as a checkpoint in the official layout (hfbind.h): the
 * release's names, config.json, the shard index, the shards and the
 * tokenizer.json of its vocabulary; ds4ref-mkmodel --format hf.
 *
 * DS4_HFWRITE_RELEASE stores each tensor as the release does: the FP8
 * Linears as F8_E4M3 with an F8_E8M0 scale per 128x128 block, the routed
 * experts as FP4 (two E2M1 codes a byte, the low nibble first) with a scale
 * per 32, norms, embeddings, the head, the router and the compressors as
 * BF16, the hyper-connections, sinks, APEs and router bias as F32, tid2eid
 * as I64.  The model's values are rounded to those formats: each block's
 * scale is the smallest power of two that brings its largest magnitude
 * within the format's range, each value then rounds to the nearest code,
 * ties to even.  DS4_HFWRITE_F32_TWIN writes the same names with every
 * float tensor F32, holding exactly the values RELEASE's tensors dequantize
 * to: the unquantized twin, which gives the same logits with QAT off. */
#ifndef DS4_HFWRITE_H
#define DS4_HFWRITE_H

#include <stdint.h>

#include "base/err.h"
#include "ref/model/model.h"

enum ds4_hfwrite_types { DS4_HFWRITE_RELEASE, DS4_HFWRITE_F32_TWIN };

/* Write model m (a GGUF's, its MTP head too when loaded) into the folder
 * dir (made if missing) as `shards` safetensors files (1 or more) with
 * their index, config.json and, when the model has a tokenizer,
 * tokenizer.json.  Each file is written atomically. */
int ds4_hfwrite(const ds4_model *m, const char *dir, int types, uint32_t shards, ds4err *err);

#endif
