/* The public API of GGUF inspection (ds4ref_gguf_*, include/ds4ref.h): the
 * listing `ds4ref-gguf info` prints and the f32 stream `ds4ref-gguf dequant`
 * writes, for any GGUF file (quant/gguf_inspect.c), the unquantized
 * twin of `ds4ref-gguf twin` (quant/gguf_twin.c), and a DS4 GGUF's model
 * written as a checkpoint in the official layout (ref/model/hfwrite.c);
 * this file only converts arguments and errors. */
#include "ds4ref.h"

#include <stdio.h>

#include "ref/api/apierr.h"
#include "ref/model/dflash_write.h"
#include "ref/model/hfwrite.h"
#include "ref/model/model.h"
#include "quant/gguf_inspect.h"
#include "quant/gguf_twin.h"

int ds4ref_gguf_describe(const char *path, FILE *out, ds4ref_error *err) {
    if (!path || !out) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_gguf_describe: no file or no output");
    ds4err e = {0};
    return api_result(err, ds4_gguf_inspect_describe(path, out, &e), &e);
}

int ds4ref_gguf_dequant(const char *path, const char *tensor, FILE *out, ds4ref_error *err) {
    if (!path || !tensor || !out)
        return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_gguf_dequant: no file, tensor or output");
    ds4err e = {0};
    return api_result(err, ds4_gguf_inspect_dequant(path, tensor, out, &e), &e);
}

int ds4ref_gguf_twin(const char *path, const char *out_path, ds4ref_error *err) {
    if (!path || !out_path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_gguf_twin: no file or no output");
    ds4err e = {0};
    return api_result(err, ds4_gguf_twin_write(path, out_path, &e), &e);
}

int ds4ref_gguf_dspark_split(const char *path, const char *trunk_path, const char *draft_path,
                             ds4ref_error *err) {
    if (!path || !trunk_path || !draft_path)
        return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_gguf_dspark_split: no file or no output");
    ds4err e = {0};
    return api_result(err, ds4_dflash_write_split(path, trunk_path, draft_path, &e), &e);
}

int ds4ref_gguf_to_checkpoint(const char *path, const char *mtp_path, const char *dir,
                              int f32_twin, ds4ref_error *err) {
    if (!path || !dir)
        return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_gguf_to_checkpoint: no model or no folder");
    ds4err e = {0};
    ds4_model m;
    if (ds4_model_open(&m, path, &e)) return api_fail(err, &e);
    int rc = mtp_path ? ds4_model_load_mtp(&m, mtp_path, &e) : 0;
    if (!rc) rc = ds4_hfwrite(&m, dir, f32_twin ? DS4_HFWRITE_F32_TWIN : DS4_HFWRITE_RELEASE, 2, &e);
    ds4_model_close(&m);
    return api_result(err, rc, &e);
}
