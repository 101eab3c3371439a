#include "ref/model/modelid.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "ref/ckpt/checkpoint.h"
#include "ref/model/model.h"

static const char *base_name(const char *path) {
    if (!path) return "";
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void ds4_modelid_combine(const ds4_tensor_hash *t, uint64_t n, uint8_t out[32]) {
    ds4_sha256 h;
    ds4_sha256_init(&h);
    for (uint64_t i = 0; i < n; i++) {
        ds4_sha256_update(&h, t[i].name, strlen(t[i].name) + 1);   /* with its NUL */
        ds4_sha256_update(&h, t[i].sha256, 32);
    }
    ds4_sha256_final(&h, out);
}

/* A tensor to hash: its size and directory index. */
typedef struct job {
    uint64_t nbytes;
    uint64_t index;
} job;

/* Largest tensors first, so the last tasks handed out are the small ones. */
static int by_size_desc(const void *pa, const void *pb) {
    const job *a = pa, *b = pb;
    if (a->nbytes != b->nbytes) return a->nbytes > b->nbytes ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* The tensors to hash: names, bytes and sizes, n of them. */
typedef struct tensor_list {
    uint64_t n;
    const char *(*name)(const void *src, uint64_t i);
    const uint8_t *(*data)(const void *src, uint64_t i);
    uint64_t (*nbytes)(const void *src, uint64_t i);
    const void *src;
} tensor_list;

/* id's file name, size, tensors[] and tensor digest from the list; the
 * caller fills metadata_sha256. */
static int hash_tensors(const tensor_list *l, const char *name, uint64_t size, ds4_modelid *id,
                        ds4err *err) {
    memset(id, 0, sizeof(*id));
    if (l->n > SIZE_MAX / sizeof(ds4_tensor_hash))
        return ds4_err_set(err, DS4_E_NOMEM, "%s: too many tensors", name);
    id->file = strdup(name);
    id->tensors = calloc(l->n ? l->n : 1, sizeof(ds4_tensor_hash));
    job *order = malloc((l->n ? l->n : 1) * sizeof(job));
    if (!id->file || !id->tensors || !order) {
        free(order);
        ds4_modelid_free(id);
        return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
    }
    id->size = size;
    id->n_tensors = l->n;
    for (uint64_t i = 0; i < l->n; i++) {
        order[i].nbytes = l->nbytes(l->src, i);
        order[i].index = i;
        id->tensors[i].name = strdup(l->name(l->src, i));
        if (!id->tensors[i].name) {
            free(order);
            ds4_modelid_free(id);
            return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
        }
    }
    qsort(order, l->n, sizeof(job), by_size_desc);

    /* Each tensor is hashed by one thread; the results land in list
     * order, so the combined digest does not depend on the schedule. */
    int64_t n = (int64_t)l->n;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < n; k++) {
        const uint64_t i = order[k].index;
        ds4_sha256 h;
        ds4_sha256_init(&h);
        ds4_sha256_update(&h, l->data(l->src, i), (size_t)order[k].nbytes);
        ds4_sha256_final(&h, id->tensors[i].sha256);
    }
    free(order);
    ds4_modelid_combine(id->tensors, id->n_tensors, id->tensor_data_sha256);
    return 0;
}

static const char *gguf_name(const void *g, uint64_t i) {
    return ((const ds4_gguf_file *)g)->tensors[i].name;
}
static const uint8_t *gguf_data(const void *g, uint64_t i) {
    return ((const ds4_gguf_file *)g)->tensors[i].data;
}
static uint64_t gguf_nbytes(const void *g, uint64_t i) {
    return ((const ds4_gguf_file *)g)->tensors[i].nbytes;
}

int ds4_modelid_of(const ds4_gguf_file *g, ds4_modelid *id, ds4err *err) {
    const char *name = base_name(g->path);
    memset(id, 0, sizeof(*id));
    if (g->data_off > g->size)
        return ds4_err_set(err, DS4_E_INTERNAL, "%s: data offset %" PRIu64 " past end of file",
                          name, g->data_off);
    const tensor_list l = {g->n_tensors, gguf_name, gguf_data, gguf_nbytes, g};
    if (hash_tensors(&l, name, g->size, id, err)) return -1;
    ds4_sha256 h;
    ds4_sha256_init(&h);
    ds4_sha256_update(&h, g->map, (size_t)g->data_off);
    ds4_sha256_final(&h, id->metadata_sha256);
    return 0;
}

static const char *ckpt_name(const void *c, uint64_t i) {
    return ((const ds4_ckpt *)c)->tensors[i].t->name;
}
static const uint8_t *ckpt_data(const void *c, uint64_t i) {
    return ((const ds4_ckpt *)c)->tensors[i].t->data;
}
static uint64_t ckpt_nbytes(const void *c, uint64_t i) {
    const ds4_st_tensor *t = ((const ds4_ckpt *)c)->tensors[i].t;
    return t->end - t->begin;
}

/* Identity of an open checkpoint (ckpt/checkpoint.h), opened from `path`:
 *   file                base name of path (the folder, or the one shard)
 *   size                config.json's bytes plus every shard's file size
 *   metadata_sha256     SHA-256 of config.json's bytes, then, shard by shard
 *                       in name order, the shard's name with its NUL and its
 *                       first 8 + N bytes (the header's length and the header)
 *   tensor_data_sha256, tensors[]
 *                       as for a GGUF, over the tensors of every shard in
 *                       name order (each tensor's bytes, its scales being
 *                       tensors of their own) */
static int of_ckpt(const ds4_ckpt *c, const char *path, ds4_modelid *id, ds4err *err) {
    uint64_t size = c->config_len;
    for (size_t s = 0; s < c->n_shards; s++) size += c->shards[s].size;
    const tensor_list l = {c->n_tensors, ckpt_name, ckpt_data, ckpt_nbytes, c};
    if (hash_tensors(&l, base_name(path), size, id, err)) return -1;
    ds4_sha256 h;
    ds4_sha256_init(&h);
    ds4_sha256_update(&h, c->config_text, c->config_len);
    for (size_t s = 0; s < c->n_shards; s++) {
        ds4_sha256_update(&h, c->shard_names[s], strlen(c->shard_names[s]) + 1);
        ds4_sha256_update(&h, c->shards[s].map, (size_t)(8 + c->shards[s].header_len));
    }
    ds4_sha256_final(&h, id->metadata_sha256);
    return 0;
}

int ds4_modelid_of_model(const ds4_model *m, bool mtp, ds4_modelid *id, ds4err *err) {
    if (m->ckpt) return of_ckpt(m->ckpt, m->file.path, id, err);
    return ds4_modelid_of(mtp ? &m->mtp->file : &m->file, id, err);
}

int ds4_modelid_copy(ds4_modelid *dst, const ds4_modelid *src, ds4err *err) {
    memset(dst, 0, sizeof(*dst));
    dst->file = strdup(src->file ? src->file : "");
    dst->tensors = calloc(src->n_tensors ? src->n_tensors : 1, sizeof(ds4_tensor_hash));
    if (!dst->file || !dst->tensors) goto nomem;
    dst->size = src->size;
    memcpy(dst->metadata_sha256, src->metadata_sha256, 32);
    memcpy(dst->tensor_data_sha256, src->tensor_data_sha256, 32);
    dst->n_tensors = src->n_tensors;
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        dst->tensors[i].name = strdup(src->tensors[i].name);
        if (!dst->tensors[i].name) goto nomem;
        memcpy(dst->tensors[i].sha256, src->tensors[i].sha256, 32);
    }
    return 0;
nomem:
    ds4_modelid_free(dst);
    return ds4_err_set(err, DS4_E_NOMEM, "out of memory copying a model identity");
}

void ds4_modelid_free(ds4_modelid *id) {
    if (!id) return;
    if (id->tensors)
        for (uint64_t i = 0; i < id->n_tensors; i++) free(id->tensors[i].name);
    free(id->tensors);
    free(id->file);
    memset(id, 0, sizeof(*id));
}

bool ds4_modelid_same(const ds4_modelid *a, const ds4_modelid *b) {
    return a->size == b->size && !memcmp(a->metadata_sha256, b->metadata_sha256, 32) &&
           !memcmp(a->tensor_data_sha256, b->tensor_data_sha256, 32);
}

/* ---------------------------------------------------------- describing */

typedef struct text {
    char *p;
    size_t cap, len;
} text;

static void put(text *t, const char *s) {
    size_t n = strlen(s);
    if (t->len + 1 >= t->cap) return;
    size_t room = t->cap - 1 - t->len;
    if (n > room) n = room;
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static int by_name(const void *pa, const void *pb) {
    const ds4_tensor_hash *a = *(const ds4_tensor_hash *const *)pa;
    const ds4_tensor_hash *b = *(const ds4_tensor_hash *const *)pb;
    return strcmp(a->name, b->name);
}

static const ds4_tensor_hash **sorted(const ds4_modelid *m) {
    const ds4_tensor_hash **v = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof(*v));
    if (!v) return NULL;
    for (uint64_t i = 0; i < m->n_tensors; i++) v[i] = &m->tensors[i];
    qsort(v, m->n_tensors, sizeof(*v), by_name);
    return v;
}

enum { SHOWN = 4 };

/* One group of names ("changed", "only in golden", ...): the first SHOWN,
 * then a count. */
typedef struct group {
    const char *label;
    uint64_t n;
    const char *names[SHOWN];
} group;

static void group_add(group *g, const char *name) {
    if (g->n < SHOWN) g->names[g->n] = name;
    g->n++;
}

static void group_put(text *t, const group *g) {
    if (!g->n) return;
    char num[64];
    snprintf(num, sizeof(num), "; %" PRIu64 " tensor%s %s: ", g->n, g->n == 1 ? "" : "s",
             g->label);
    put(t, num);
    for (uint64_t i = 0; i < g->n && i < SHOWN; i++) {
        if (i) put(t, ", ");
        put(t, g->names[i]);
    }
    if (g->n > SHOWN) put(t, ", ...");
}

void ds4_modelid_describe_diff(const ds4_modelid *a, const ds4_modelid *b, char *out,
                               size_t cap) {
    text t = {out, cap, 0};
    if (cap) out[0] = '\0';
    if (ds4_modelid_same(a, b)) return;
    char line[160];
    if (a->size != b->size) {
        snprintf(line, sizeof(line), "size %" PRIu64 " vs %" PRIu64, a->size, b->size);
        put(&t, line);
    } else {
        put(&t, "same size");
    }
    put(&t, memcmp(a->metadata_sha256, b->metadata_sha256, 32) ? ", metadata differs"
                                                               : ", same metadata");
    put(&t, memcmp(a->tensor_data_sha256, b->tensor_data_sha256, 32) ? ", tensor data differs"
                                                                     : ", same tensor data");
    const ds4_tensor_hash **sa = sorted(a), **sb = sorted(b);
    if (!sa || !sb) {
        free(sa);
        free(sb);
        return;
    }
    group changed = {"changed", 0, {0}}, only_a = {"only in the first", 0, {0}},
          only_b = {"only in the second", 0, {0}};
    uint64_t i = 0, j = 0;
    while (i < a->n_tensors || j < b->n_tensors) {
        int c = i == a->n_tensors ? 1 : j == b->n_tensors ? -1 : strcmp(sa[i]->name, sb[j]->name);
        if (c < 0) {
            group_add(&only_a, sa[i++]->name);
        } else if (c > 0) {
            group_add(&only_b, sb[j++]->name);
        } else {
            if (memcmp(sa[i]->sha256, sb[j]->sha256, 32)) group_add(&changed, sa[i]->name);
            i++;
            j++;
        }
    }
    group_put(&t, &changed);
    group_put(&t, &only_a);
    group_put(&t, &only_b);
    free(sa);
    free(sb);
}
