/* The public API of synthetic models (ds4ref_synth_*, include/ds4ref.h) over
 * the generator in synth.c: what ds4ref-mkmodel runs. */
#include "ds4ref.h"

#include <stdlib.h>
#include <string.h>

#include "ref/api/apierr.h"
#include "ref/model/synth.h"

void ds4ref_synth_options_init(ds4ref_synth_options *o) {
    memset(o, 0, sizeof(*o));
    o->config = "tiny";
    o->seed = 1;
}

int ds4ref_synth_write(const ds4ref_synth_options *o, const char *path, const char *mtp_path,
                       ds4ref_error *err) {
    if (!o || !o->config)
        return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_synth_write: no synthetic config");
    if (!path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_synth_write: no output path");
    ds4_synth_opts so = {.config = o->config, .f32 = o->f32 != 0, .seed = o->seed,
                         .vocab_from = o->vocab_from};
    ds4err e = {0};
    return api_result(err, ds4_synth_write(&so, path, mtp_path, &e), &e);
}

int ds4ref_synth_mtp_path(const char *path, char **mtp_path, ds4ref_error *err) {
    *mtp_path = NULL;
    if (!path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_synth_mtp_path: no path");
    if (!(*mtp_path = ds4_synth_mtp_path(path)))
        return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    api_ok(err);
    return 0;
}
