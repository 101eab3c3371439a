/* The unquantized twin of a GGUF file: the same metadata, value for value
 * and in the same order, and the same tensors in the same order, every
 * float tensor (F16, BF16, Q8_0, Q2_K, Q4_K, IQ2_XXS) stored as F32 holding
 * exactly the values it dequantizes to; F32 and I32 tensors as they are.
 *
 * An engine given the twin runs the model's own values with no quantized
 * product, so it keeps its activations unquantized too: ds4ref-conform's
 * {model_f32}, a sharp test for implementation bugs beside the test of a
 * quantized model under a numerics profile.  ds4ref itself gives the twin
 * the same logits, bit for bit, as the original: its products use the
 * dequantized weights in one canonical order whatever their type. */
#ifndef DS4_GGUF_TWIN_H
#define DS4_GGUF_TWIN_H

#include "base/err.h"

/* Write in_path's twin to out_path (atomically).  Errors name the file or
 * tensor: DS4_E_IO, DS4_E_FORMAT (a malformed input), DS4_E_NOMEM. */
int ds4_gguf_twin_write(const char *in_path, const char *out_path, ds4err *err);

#endif
