#include "xzvocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

/* `xz -dc` of path into b; the path goes to the shell quoted. */
static int read_xz(const char *path, ds4_buf *b, ds4err *err) {
    if (strchr(path, '\''))
        return ds4_err_set(err, DS4_E_ARG, "%s: a quote in the path", path);
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "xz -dc -- '%s' 2>/dev/null", path);
    FILE *f = popen(cmd, "r");
    if (!f) return ds4_err_set(err, DS4_E_IO, "%s: cannot run xz", path);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) ds4_buf_put(b, chunk, n);
    const int status = pclose(f);
    if (status != 0 || b->failed)
        return ds4_err_set(err, DS4_E_IO, "%s: xz -dc failed (status %d)", path, status);
    return 0;
}

int xz_hf_vocab(ds4_vocab *v, const char *path, ds4err *err) {
    const size_t n = strlen(path);
    if (n < 3 || strcmp(path + n - 3, ".xz")) return ds4_hf_vocab_from_json(v, path, err);
    memset(v, 0, sizeof(*v));
    ds4_buf b = {0};
    int rc = read_xz(path, &b, err);
    if (!rc) rc = ds4_hf_vocab_from_text(v, b.p ? b.p : "", b.len, path, err);
    ds4_buf_free(&b);
    return rc;
}
