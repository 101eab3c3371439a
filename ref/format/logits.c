#include "ref/format/logits.h"

#include <string.h>

int ds4_logits_open(ds4_logits_file *lf, const char *path, uint32_t n_vocab, ds4err *err) {
    lf->n_vocab = n_vocab;
    return ds4_file_atomic_open(&lf->f, path, err);
}

int ds4_logits_write(ds4_logits_file *lf, const float *rows, size_t n_rows, ds4err *err) {
    uint8_t buf[4096];
    size_t n = n_rows * lf->n_vocab, used = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &rows[i], 4);
        for (int k = 0; k < 4; k++) buf[used++] = (uint8_t)(b >> (8 * k));
        if (used == sizeof(buf) || i + 1 == n) {
            if (ds4_file_atomic_write(&lf->f, buf, used, err)) return -1;
            used = 0;
        }
    }
    return 0;
}

int ds4_logits_commit(ds4_logits_file *lf, ds4err *err) {
    return ds4_file_atomic_commit(&lf->f, err);
}

void ds4_logits_abort(ds4_logits_file *lf) {
    ds4_file_atomic_abort(&lf->f);
}
