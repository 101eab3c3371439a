/* The file part of the public API (ds4ref.h): base/file.h's whole-file
 * reader and the logits file (ref/format/logits.h), with the API's errors. */
#include "ds4ref.h"

#include <stdlib.h>

#include "ref/api/apierr.h"
#include "base/file.h"
#include "ref/format/logits.h"

/* The same limit as a golden's: anything a program reads whole is small. */
#define READ_LIMIT ((size_t)1 << 30)

struct ds4ref_logits_file {
    ds4_logits_file lf;
};

int ds4ref_read_file(const char *path, char **data, size_t *len, ds4ref_error *err) {
    ds4err e = {0};
    if (!path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_read_file: no path");
    return api_result(err, ds4_file_read(path, READ_LIMIT, data, len, &e), &e);
}

int ds4ref_file_sha256(const char *path, char hex[65], const volatile int *cancel,
                       ds4ref_error *err) {
    ds4err e = {0};
    if (!path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_file_sha256: no path");
    return api_result(err, ds4_file_sha256(path, hex, cancel, &e), &e);
}

int ds4ref_logits_open(const char *path, uint32_t n_vocab, ds4ref_logits_file **out,
                       ds4ref_error *err) {
    *out = NULL;
    if (!path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_logits_open: no path");
    if (!n_vocab) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_logits_open: n_vocab is 0");
    ds4ref_logits_file *o = malloc(sizeof(*o));
    if (!o) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    ds4err e = {0};
    if (ds4_logits_open(&o->lf, path, n_vocab, &e)) {
        free(o);
        return api_fail(err, &e);
    }
    *out = o;
    api_ok(err);
    return 0;
}

int ds4ref_logits_write(ds4ref_logits_file *f, const float *logits, size_t n_rows,
                        ds4ref_error *err) {
    ds4err e = {0};
    return api_result(err, ds4_logits_write(&f->lf, logits, n_rows, &e), &e);
}

int ds4ref_logits_commit(ds4ref_logits_file *f, ds4ref_error *err) {
    ds4err e = {0};
    int rc = ds4_logits_commit(&f->lf, &e);
    free(f);
    return api_result(err, rc, &e);
}

void ds4ref_logits_abort(ds4ref_logits_file *f) {
    if (!f) return;
    ds4_logits_abort(&f->lf);
    free(f);
}
