/* The logits file (ds4ref --logits-out): rows of n_vocab f32, little-endian,
 * row-major, no header, written atomically (base/file.h) so that a reader
 * never sees a truncated one. */
#ifndef DS4_LOGITS_H
#define DS4_LOGITS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/file.h"

typedef struct ds4_logits_file {
    ds4_afile f;
    uint32_t n_vocab;
} ds4_logits_file;

/* Open the temporary file beside path (the error names path). */
int ds4_logits_open(ds4_logits_file *lf, const char *path, uint32_t n_vocab, ds4err *err);

/* Append n_rows rows of n_vocab values, each as its little-endian bytes
 * whatever the host's order. */
int ds4_logits_write(ds4_logits_file *lf, const float *rows, size_t n_rows, ds4err *err);

/* Rename the complete file over path; on failure path keeps its content. */
int ds4_logits_commit(ds4_logits_file *lf, ds4err *err);

/* Remove the temporary file. */
void ds4_logits_abort(ds4_logits_file *lf);

#endif
