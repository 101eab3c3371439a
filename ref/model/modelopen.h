/* A model from the path a user gives: a DS4 GGUF (and its MTP GGUF), or the
 * official checkpoint (a folder, or one .safetensors with config.json
 * beside it: model/hfbind.h), with the numerics it is to run under.  The
 * one way the public API, ds4_test and the benchmark open a model, so that
 * a checkpoint's rules hold wherever a GGUF works. */
#ifndef DS4_MODELOPEN_H
#define DS4_MODELOPEN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/model/model.h"


/* Open the model at path into *m, its MTP head from mtp_path (NULL: none),
 * a DSpark drafter from llama.cpp's drafter file dspark_path (NULL: none;
 * ds4_model_load_dspark), and mark its matrices for the numerics set
 * (model/numerics.h) and qat.
 * A checkpoint holds its MTP layer, so mtp_path, if given, must be path
 * itself; the numerics profiles describe engines that run ds4's GGUF types
 * and are refused for one; with qat its official linears must take FP8
 * inputs (ds4_numerics_check_official).  On failure nothing stays open. */
int ds4_modelopen(ds4_model *m, const char *path, const char *mtp_path, const char *dspark_path,
                  uint32_t numerics, bool qat, ds4err *err);

#endif
