/* A model from a path, GGUF or checkpoint (modelopen.h). */
#include "ref/model/modelopen.h"

#include <string.h>
#include <sys/stat.h>

#include "ref/model/hfbind.h"
#include "ref/model/numerics.h"

/* Is `path` a checkpoint (a folder, or a name ending in .safetensors)?
 * Anything else is taken for a GGUF. */
static bool is_checkpoint(const char *path) {
    struct stat st;
    const size_t n = strlen(path), k = strlen(".safetensors");
    return (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) ||
           (n > k && !strcmp(path + n - k, ".safetensors"));
}

/* A checkpoint's own rules (modelopen.h), once it is bound. */
static int checkpoint_rules(ds4_model *m, const char *path, const char *mtp_path,
                            uint32_t numerics, bool qat, ds4err *err) {
    if (mtp_path && strcmp(mtp_path, path))
        return ds4_err_set(err, DS4_E_ARG, "%s is a checkpoint, which holds its MTP layer: give "
                           "the MTP head as the same path (%s), not %s", path, path, mtp_path);
    if (mtp_path && !m->mtp)
        return ds4_err_set(err, DS4_E_MODEL, "%s: the checkpoint has no MTP layer (mtp.0.*)", path);
    if (numerics)
        return ds4_err_set(err, DS4_E_ARG, "%s: the numerics profiles are other engines' "
                           "roundings of ds4's GGUF types; a checkpoint runs the official "
                           "numerics only", path);
    return qat ? ds4_numerics_check_official(m, path, err) : 0;
}

int ds4_modelopen(ds4_model *m, const char *path, const char *mtp_path, const char *dspark_path,
                  uint32_t numerics, bool qat, ds4err *err) {
    int rc;
    if (is_checkpoint(path)) {
        if (ds4_hfbind_open(m, path, err)) return -1;
        rc = checkpoint_rules(m, path, mtp_path, numerics, qat, err);
        if (!rc && dspark_path)
            rc = ds4_err_set(err, DS4_E_ARG, "%s is a checkpoint, which holds its DSpark stages: "
                             "no drafter file (%s) goes with it", path, dspark_path);
    } else {
        if (ds4_model_open(m, path, err)) return -1;
        rc = mtp_path ? ds4_model_load_mtp(m, mtp_path, err) : 0;
        if (!rc && dspark_path) rc = ds4_model_load_dspark(m, dspark_path, err);
    }
    if (rc) {
        ds4_model_close(m);
        return -1;
    }
    ds4_numerics_apply(m, numerics, qat);
    return 0;
}
