/* Model identity: which GGUF file a golden was made from, in a form that
 * survives renames and tells two builds of "the same" model apart.
 *
 *   file                base name of the path (informational only)
 *   size                file size in bytes
 *   metadata_sha256     SHA-256 of the file bytes [0, data_off): header,
 *                       every metadata record and the tensor directory
 *                       (names, types, shapes, offsets), with its padding
 *   tensor_data_sha256  SHA-256 over the tensors in directory order of
 *                           name bytes || 0x00 || SHA-256(tensor data bytes)
 *                       where the data bytes are exactly the tensor's nbytes
 *                       at its offset (alignment padding excluded)
 *   tensors[]           the per-tensor SHA-256s themselves, so a comparison
 *                       can name the tensors that differ
 *
 * Why not one SHA-256 of the whole data section: one stream over 81-153 GB
 * runs for minutes on one core.  Per-tensor hashes are independent, so they
 * are computed in parallel (OpenMP, one tensor per task, largest first) and
 * combined in file order: the digest is the same for any thread count. */
#ifndef DS4_MODELID_H
#define DS4_MODELID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "quant/gguf.h"

typedef struct ds4_tensor_hash {
    char *name;
    uint8_t sha256[32];
} ds4_tensor_hash;

typedef struct ds4_modelid {
    char *file;
    uint64_t size;
    uint8_t metadata_sha256[32];
    uint8_t tensor_data_sha256[32];
    uint64_t n_tensors;
    ds4_tensor_hash *tensors;   /* [n_tensors], directory order */
} ds4_modelid;

/* Identity of an open (validated) GGUF file.  Reads every tensor byte. */
int ds4_modelid_of(const ds4_gguf_file *g, ds4_modelid *id, ds4err *err);


/* Identity of a model's file: its GGUF (mtp: its MTP GGUF's), or its
 * checkpoint, which holds the MTP layer too (mtp then gives the same; what
 * a checkpoint's identity holds: modelid.c, of_ckpt). */
struct ds4_model;
int ds4_modelid_of_model(const struct ds4_model *m, bool mtp, ds4_modelid *id, ds4err *err);

/* The combined tensor digest of a list of per-tensor hashes (the definition
 * above); used by the golden reader to check a recorded list. */
void ds4_modelid_combine(const ds4_tensor_hash *t, uint64_t n, uint8_t out[32]);

int ds4_modelid_copy(ds4_modelid *dst, const ds4_modelid *src, ds4err *err);
void ds4_modelid_free(ds4_modelid *id);

/* Same model: equal size and both digests.  The file name is not compared. */
bool ds4_modelid_same(const ds4_modelid *a, const ds4_modelid *b);

/* One line describing how b differs from a: "" when they are the same model,
 * otherwise which digests differ and which tensors (by name: changed, only in
 * a, only in b; the first few of each, then a count).  Always NUL-terminated,
 * cut to cap bytes. */
void ds4_modelid_describe_diff(const ds4_modelid *a, const ds4_modelid *b, char *out,
                               size_t cap);

#endif
