/* The file part of the public API (ds4ref.h): base/fileio.h's whole-file
 * reader and atomic writer, with the API's errors. */
#include "ds4ref.h"

#include <stdlib.h>

#include "api/apierr.h"
#include "base/fileio.h"

/* The same limit as a golden's: anything a program reads whole is small. */
#define READ_LIMIT ((size_t)1 << 30)

struct ds4ref_output {
    ds4_afile f;
};

int ds4ref_read_file(const char *path, char **data, size_t *len, ds4ref_error *err) {
    ds4err e = {0};
    if (!path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_read_file: no path");
    return api_result(err, ds4_read_file(path, READ_LIMIT, data, len, &e), &e);
}

int ds4ref_output_open(const char *path, ds4ref_output **out, ds4ref_error *err) {
    *out = NULL;
    if (!path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_output_open: no path");
    ds4ref_output *o = malloc(sizeof(*o));
    if (!o) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    ds4err e = {0};
    if (ds4_afile_open(&o->f, path, &e)) {
        free(o);
        return api_fail(err, &e);
    }
    *out = o;
    api_ok(err);
    return 0;
}

int ds4ref_output_write(ds4ref_output *o, const void *data, size_t n, ds4ref_error *err) {
    ds4err e = {0};
    return api_result(err, ds4_afile_write(&o->f, data, n, &e), &e);
}

int ds4ref_output_commit(ds4ref_output *o, ds4ref_error *err) {
    ds4err e = {0};
    int rc = ds4_afile_commit(&o->f, &e);
    free(o);
    return api_result(err, rc, &e);
}

void ds4ref_output_abort(ds4ref_output *o) {
    if (!o) return;
    ds4_afile_abort(&o->f);
    free(o);
}
