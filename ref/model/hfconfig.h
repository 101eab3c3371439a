/* The hyper-parameters of a checkpoint in the published layout, read from
 * its config.json (the Hugging Face names of DeepSeek V4's release; the
 * official inference/model.py reads the same values under other names).
 *
 * Every key the forward pass needs is required and checked for its type:
 * a count is a JSON integer that fits 32 bits, a float a finite number.
 * What selects behaviour ds4ref does not implement is refused by name:
 * another scoring function or top-k method, unnormalized routing weights,
 * more than one shared expert or KV head, a RoPE scaling other than YaRN.
 * compress_ratios holds one entry per layer and then one per MTP layer.
 * swiglu_limit clamps the routed and the shared experts of every block, the
 * MTP block included (the release's model.py as of 60d8d707).  The result
 * then passes the same relations a GGUF's configuration does
 * (ds4_model_config_validate). */
#ifndef DS4_HFCONFIG_H
#define DS4_HFCONFIG_H

#include "base/err.h"
#include "ref/model/model.h"
#include "ref/text/json.h"

/* Fill *c from config.json's root object; `path` labels the messages.  On
 * failure *c holds nothing to free. */
int ds4_hfconfig_load(ds4_config *c, const ds4_json *root, const char *path, ds4err *err);

/* config.json for configuration c, in the release's keys (what
 * ds4_hfconfig_load reads back as c), with num_nextn_predict_layers 1 and
 * the MTP layer's ratio 0 when `mtp`; `quantized` adds the release's
 * quantization_config and expert_dtype (FP8 linears, FP4 experts).  Floats
 * are written with 9 significant digits, which read back as the same f32.
 * DS4_E_UNSUPPORTED when the experts' clamps differ between layers or
 * between routed and shared experts (config.json has one swiglu_limit). */
int ds4_hfconfig_write(const ds4_config *c, bool mtp, bool quantized, ds4_buf *out, ds4err *err);

#endif
