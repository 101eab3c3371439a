#include "quant/gguf_twin.h"

#include <stdlib.h>
#include <string.h>

#include "quant/types.h"
#include "quant/gguf.h"
#include "quant/gguf_write.h"

/* Every metadata value, copied as its encoded bytes (general.alignment
 * included, which the writer then keeps). */
static int copy_metadata(const ds4_gguf_file *g, ds4_gguf_writer *w, ds4err *err) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const ds4_gguf_kv *kv = &g->kv[i];
        uint64_t end;
        if (ds4_gguf_skip_value(g, kv->type, kv->value_off, &end, err))
            return ds4_err_prefix(err, "%s: key %s", g->path, kv->key);
        if (ds4_gguf_write_raw(w, kv->key, kv->type, g->map + kv->value_off, end - kv->value_off))
            return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    return 0;
}

/* Tensor t as F32 into a new buffer (*out), or its own bytes (NULL) when it
 * is F32 or I32 already. */
static int dequant_tensor(const ds4_gguf_tensor *t, float **out, ds4err *err) {
    *out = NULL;
    if (t->type == DS4_TYPE_F32 || t->type == DS4_TYPE_I32) return 0;
    float *v = malloc(sizeof(float) * (t->n_elem ? t->n_elem : 1));
    if (!v) return ds4_err_set(err, DS4_E_NOMEM, "out of memory for tensor %s (%llu values)",
                               t->name, (unsigned long long)t->n_elem);
    uint64_t rows = t->n_elem / t->ne[0];
    uint64_t row_bytes = ds4_types_row_bytes(t->type, t->ne[0]);
    for (uint64_t r = 0; r < rows; r++)
        ds4_types_dequant_row(t->type, t->data + r * row_bytes, v + r * t->ne[0], t->ne[0]);
    *out = v;
    return 0;
}

int ds4_gguf_twin_write(const char *in_path, const char *out_path, ds4err *err) {
    ds4_gguf_file g;
    if (ds4_gguf_open(&g, in_path, err)) return -1;
    ds4_gguf_writer *w = ds4_gguf_writer_new((uint32_t)g.alignment);
    float **bufs = calloc(g.n_tensors ? g.n_tensors : 1, sizeof(float *));
    int rc = !w || !bufs ? ds4_err_set(err, DS4_E_NOMEM, "out of memory") : 0;
    if (rc == 0) rc = copy_metadata(&g, w, err);
    for (uint64_t i = 0; rc == 0 && i < g.n_tensors; i++) {
        const ds4_gguf_tensor *t = &g.tensors[i];
        rc = dequant_tensor(t, &bufs[i], err);
        if (rc) break;
        const void *data = bufs[i] ? (const void *)bufs[i] : (const void *)t->data;
        uint32_t type = bufs[i] ? DS4_TYPE_F32 : t->type;
        uint64_t nbytes = bufs[i] ? sizeof(float) * t->n_elem : t->nbytes;
        if (ds4_gguf_write_tensor(w, t->name, type, t->n_dims, t->ne, data, nbytes))
            rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    if (rc == 0) rc = ds4_gguf_writer_save(w, out_path, err);
    for (uint64_t i = 0; bufs && i < g.n_tensors; i++) free(bufs[i]);
    free(bufs);
    ds4_gguf_writer_free(w);
    ds4_gguf_close(&g);
    return rc;
}
