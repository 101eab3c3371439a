/* libFuzzer target: the GGUF reader and the DS4 model validation, on
 * arbitrary bytes.
 *
 * Whatever the input, ds4_gguf_parse must either refuse it with an error or
 * accept it; and what it accepts must keep every promise of gguf.h: each key
 * and tensor found by name, each value readable and skippable, each tensor's
 * bytes inside the file, sized as its type and shape say, overlapping no
 * other.  The target checks those promises itself (fz_check aborts when one
 * fails), dequantizes the first row of every float tensor, and hands
 * accepted files to the model validation (ds4_model_from_gguf), which must
 * in turn accept or refuse without a sanitizer report.
 *
 * Seeds (tests/fuzz/seeds.c): the malformed-file catalogue, the small valid
 * file, nested arrays, the synthetic tiny model's metadata alone.  Inputs
 * stay small (64 KiB) so that millions of them run; whole models are the
 * business of fuzz_model. */
#include <stdlib.h>
#include <string.h>

#include "fuzzutil.h"
#include "ref/model/model.h"
#include "quant/types.h"
#include "quant/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_SHOWN = 4, DEQUANT_BUDGET = 1 << 18 };

/* Read what a value holds the way a consumer would: scalars through
 * ds4_gguf_read_scalar, arrays through ds4_gguf_read_arr, a few elements each and
 * the rest skipped.  Returns the offset past the value. */
static uint64_t walk_value(const ds4_gguf_file *g, uint32_t type, uint64_t off, int depth) {
    ds4err err = {0};
    uint64_t next = 0;
    if (type != GGUF_ARR) {
        ds4_gguf_scalar s;
        fz_check(!ds4_gguf_read_scalar(g, type, off, &s, &next, &err), "an accepted scalar reads");
        if (type == GGUF_STR) fz_check(s.v.s.len <= g->size && s.v.s.ptr >= (const char *)g->map &&
                                           s.v.s.ptr + s.v.s.len <= (const char *)g->map + g->size,
                                       "a string lies inside the file");
        return next;
    }
    uint32_t et;
    uint64_t n, pos;
    fz_check(depth < GGUF_MAX_ARRAY_DEPTH, "array depth is limited");
    fz_check(!ds4_gguf_read_arr(g, off, &et, &n, &pos, &err), "an accepted array reads");
    for (uint64_t i = 0; i < n; i++) {
        if (i < MAX_SHOWN) {
            pos = walk_value(g, et, pos, depth + 1);
        } else {
            fz_check(!ds4_gguf_skip_value(g, et, pos, &pos, &err), "an accepted element skips");
        }
        fz_check(pos <= g->size, "elements lie inside the file");
    }
    return pos;
}

static void check_kv(const ds4_gguf_file *g, const ds4_gguf_kv *kv) {
    const ds4_gguf_kv *found = ds4_gguf_find_kv(g, kv->key);
    fz_check(found && !strcmp(found->key, kv->key), "every key is found by name");
    uint64_t end = walk_value(g, kv->type, kv->value_off, 0), skipped;
    ds4err err = {0};
    fz_check(!ds4_gguf_skip_value(g, kv->type, kv->value_off, &skipped, &err) && skipped == end,
             "skipping a value ends where reading it does");
    fz_check(end <= g->data_off, "values lie before the tensor data");
    /* The typed getters may refuse (wrong type, out of range), never crash. */
    uint32_t u32;
    uint64_t u64, cnt;
    float f;
    bool b;
    ds4_gguf_str s;
    ds4_gguf_get_u32(g, kv->key, &u32, &err);
    ds4_gguf_get_u64(g, kv->key, &u64, &err);
    ds4_gguf_get_f32(g, kv->key, &f, &err);
    ds4_gguf_get_bool(g, kv->key, &b, &err);
    ds4_gguf_get_str(g, kv->key, &s, &err);
    if (kv->type == GGUF_ARR && kv->arr_n <= 64) {
        uint32_t au[64];
        float af[64];
        int32_t ai[64];
        ds4_gguf_str as[64];
        ds4_gguf_get_arr_u32(g, kv->key, au, kv->arr_n, &err);
        ds4_gguf_get_arr_f32(g, kv->key, af, kv->arr_n, &err);
        ds4_gguf_get_arr_i32(g, kv->key, ai, kv->arr_n, &err);
        if (!ds4_gguf_get_arr_str(g, kv->key, as, 64, &cnt, &err)) fz_check(cnt == kv->arr_n,
            "string count");
    }
}

static int by_offset(const void *a, const void *b) {
    const ds4_gguf_tensor *x = *(const ds4_gguf_tensor *const *)a,
          *y = *(const ds4_gguf_tensor *const *)b;
    return x->rel_off < y->rel_off ? -1 : x->rel_off > y->rel_off;
}

static void check_tensors(const ds4_gguf_file *g) {
    uint64_t budget = DEQUANT_BUDGET;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const ds4_gguf_tensor *t = &g->tensors[i];
        const ds4_gguf_tensor *found = ds4_gguf_find_tensor(g, t->name);
        fz_check(found && !strcmp(found->name, t->name), "every tensor is found by name");
        const ds4_type_info *ti = ds4_types_info(t->type);
        fz_check(ti != NULL, "an accepted tensor has a known type");
        fz_check(t->ne[0] % ti->blck == 0, "rows are whole blocks");
        fz_check(t->nbytes == ds4_types_row_bytes(t->type, t->ne[0]) * (t->n_elem / t->ne[0]),
                 "size = row bytes x rows");
        fz_check(t->rel_off <= g->size - g->data_off &&
                     t->nbytes <= g->size - g->data_off - t->rel_off,
                 "tensor data lies inside the file");
        fz_check(t->data == g->map + g->data_off + t->rel_off, "data points at the offset");
        fz_check(t->rel_off % g->alignment == 0, "tensor data is aligned");
        /* The first row, at most 1024 elements, while the budget lasts. */
        uint64_t n = t->ne[0] < 1024 ? t->ne[0] : 1024 / ti->blck * ti->blck;
        if (!ti->is_float || !n || n > budget) continue;
        budget -= n;
        float *row = malloc(sizeof(float) * n);
        fz_check(row != NULL, "malloc");
        fz_check(!ds4_types_dequant_row(t->type, t->data, row, n), "a float tensor dequantizes");
        free(row);
    }
    if (g->n_tensors < 2) return;
    const ds4_gguf_tensor **order = malloc(sizeof(*order) * g->n_tensors);
    fz_check(order != NULL, "malloc");
    for (uint64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof(*order), by_offset);
    for (uint64_t i = 1; i < g->n_tensors; i++)
        fz_check(order[i - 1]->rel_off + order[i - 1]->nbytes <= order[i]->rel_off ||
                     !order[i - 1]->nbytes,
                 "tensors do not overlap");
    free(order);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ds4_gguf_file g;
    ds4err err = {0};
    if (ds4_gguf_parse(&g, data, size, "fuzz.gguf", &err)) {
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
        return 0;
    }
    /* A file without tensors may end before its (empty) data section. */
    fz_check((g.data_off <= g.size || !g.n_tensors) && g.alignment > 0, "header fields are sane");
    for (uint64_t i = 0; i < g.n_kv; i++) check_kv(&g, &g.kv[i]);
    check_tensors(&g);
    ds4_model m;
    if (ds4_model_from_gguf(&m, &g, &err)) {   /* closes g */
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
        return 0;
    }
    ds4_model_close(&m);
    return 0;
}
