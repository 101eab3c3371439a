/* The public API of GGUF inspection (ds4ref_gguf_*, include/ds4ref.h): the
 * listing `ds4ref-gguf info` prints and the f32 stream `ds4ref-gguf dequant`
 * writes, for any GGUF file (src/quant/gguf_inspect.c), and the unquantized
 * twin of `ds4ref-gguf twin` (src/quant/gguf_twin.c); this file only
 * converts arguments and errors. */
#include "ds4ref.h"

#include <stdio.h>

#include "api/apierr.h"
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
