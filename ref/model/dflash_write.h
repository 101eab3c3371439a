/* A model GGUF with a DSpark drafter (DeepSeek-V4-Flash-0731, tiny-dspark)
 * written as llama.cpp ships it: the trunk alone, and the drafter as a file
 * of general.architecture "dflash" (src/models/dflash.cpp; the file of
 * llama-server -md --spec-type draft-dspark), which ds4_model_load_dspark
 * reads back.  The drafter file's keys are dflash.block_count, block_size,
 * target_layers (each DSpark target layer + 1: llama.cpp taps a layer's
 * input), embedding_length, hyper_connection.count,
 * attention.sliding_window, expert_count, expert_used_count,
 * swiglu_clamp_exp / _shexp and tokenizer.ggml.mask_token_id (the noise
 * token); its tensors are the stages' as blk.S.* and the heads under
 * llama.cpp's names (fc, enc.output_norm, output_norm, output_hc_*,
 * markov_w1, markov_w2, conf_proj), bytes unchanged. */
#ifndef DS4_DFLASH_WRITE_H
#define DS4_DFLASH_WRITE_H

#include "base/err.h"

int ds4_dflash_write_split(const char *path, const char *trunk_path, const char *draft_path,
                           ds4err *err);

#endif
