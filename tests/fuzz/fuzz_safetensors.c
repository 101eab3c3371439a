/* libFuzzer target: the official checkpoint's files on arbitrary bytes, as
 * a safetensors shard and as a shard index.
 *
 * Whatever the input, ds4_safetensors_parse must refuse it with a message
 * or accept it; and what it accepts must keep every promise of
 * safetensors.h: each tensor found by name, its byte count its type and
 * shape's, inside the data area, and the tensors tiling that area with no gap
 * or overlap.  The target checks those promises itself (fz_check aborts when
 * one fails) and reads every byte of every tensor, so that a wrong pointer
 * is a sanitizer report.
 *
 * ds4_checkpoint_index_parse, likewise, and what it accepts is sorted by tensor,
 * each named once, with shard names that stay in the folder.
 *
 * Seeds (tests/fuzz/seeds.c): the format's own test vectors, a header with
 * metadata, every type and an empty tensor, a few refused files, and
 * indexes. */
#include <stdlib.h>
#include <string.h>

#include "ref/ckpt/checkpoint.h"
#include "ref/ckpt/safetensors.h"
#include "fuzzutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Where the bytes read go, so that reading them is not optimized away. */
static volatile unsigned sink;

static int by_offset(const void *a, const void *b) {
    const ds4_st_tensor *x = *(const ds4_st_tensor *const *)a, *y = *(const ds4_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static void check_index(const uint8_t *data, size_t size) {
    ds4_ckpt_index ix;
    ds4err err = {0};
    if (ds4_checkpoint_index_parse(&ix, (const char *)data, size, "fuzz.index.json", &err)) {
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
        return;
    }
    for (size_t i = 0; i < ix.n; i++) {
        fz_check(ix.tensors[i][0] && ix.shards[i][0], "names are not empty");
        fz_check(i == 0 || strcmp(ix.tensors[i - 1], ix.tensors[i]) < 0,
                 "tensors sorted, each once");
        fz_check(!strchr(ix.shards[i], '/') && strcmp(ix.shards[i], "..") &&
                     strcmp(ix.shards[i], "."), "shards stay in the folder");
    }
    ds4_checkpoint_index_free(&ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_index(data, size);
    ds4_st_file f;
    ds4err err = {0};
    if (ds4_safetensors_parse(&f, data, size, "fuzz.safetensors", &err)) {
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
        return 0;
    }
    fz_check(f.header_len <= size - 8, "the header lies inside the file");
    const uint8_t *area = data + 8 + f.header_len, *end = data + size;
    const ds4_st_tensor **order = malloc(sizeof(*order) * (f.n_tensors ? f.n_tensors : 1));
    fz_check(order != NULL, "malloc");
    unsigned sum = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const ds4_st_tensor *t = &f.tensors[i];
        const ds4_st_tensor *found = ds4_safetensors_find(&f, t->name);
        fz_check(found == t, "every tensor is found by its name");
        fz_check(t->name[0] != 0, "names are not empty");
        fz_check(t->n_dims <= DS4_ST_MAX_DIMS, "dimensions are bounded");
        uint64_t n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) n *= t->shape[d];
        fz_check(n == t->n_elem, "n_elem is the shape's product");
        fz_check(t->end - t->begin == n * ds4_safetensors_dtype_size(t->dtype),
                 "bytes = elements x element size");
        fz_check(t->data == area + t->begin && t->data + (t->end - t->begin) <= end,
                 "tensor data lies inside the data area");
        for (uint64_t k = 0; k < t->end - t->begin; k++) sum += t->data[k];
        order[i] = t;
    }
    qsort(order, f.n_tensors, sizeof(*order), by_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        fz_check(order[i]->begin == at, "tensors tile the data area");
        at = order[i]->end;
    }
    fz_check(area + at == end, "the last tensor ends the file");
    for (size_t i = 0; i < f.n_meta; i++)
        fz_check(ds4_safetensors_meta(&f, f.meta_keys[i]) == f.meta_values[i],
                 "metadata keys are unique and found");
    free(order);
    ds4_safetensors_close(&f);
    sink = sum;
    return 0;
}
