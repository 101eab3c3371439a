#include "model/modelid.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"

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

int ds4_modelid_of(const gguf_file *g, ds4_modelid *id, ds4err *err) {
    memset(id, 0, sizeof(*id));
    const char *name = base_name(g->path);
    if (g->data_off > g->size)
        return ds4_err_set(err, DS4_E_INTERNAL, "%s: data offset %" PRIu64 " past end of file",
                          name, g->data_off);
    if (g->n_tensors > SIZE_MAX / sizeof(ds4_tensor_hash))
        return ds4_err_set(err, DS4_E_NOMEM, "%s: too many tensors", name);
    id->file = strdup(name);
    id->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(ds4_tensor_hash));
    job *order = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof(job));
    if (!id->file || !id->tensors || !order) {
        free(order);
        ds4_modelid_free(id);
        return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
    }
    id->size = g->size;
    id->n_tensors = g->n_tensors;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        order[i].nbytes = g->tensors[i].nbytes;
        order[i].index = i;
        id->tensors[i].name = strdup(g->tensors[i].name);
        if (!id->tensors[i].name) {
            free(order);
            ds4_modelid_free(id);
            return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
        }
    }
    qsort(order, g->n_tensors, sizeof(job), by_size_desc);

    /* Each tensor is hashed by one thread; the results land in directory
     * order, so the combined digest does not depend on the schedule. */
    int64_t n = (int64_t)g->n_tensors;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < n; k++) {
        const gguf_tensor *t = &g->tensors[order[k].index];
        ds4_sha256 h;
        ds4_sha256_init(&h);
        ds4_sha256_update(&h, t->data, (size_t)t->nbytes);
        ds4_sha256_final(&h, id->tensors[order[k].index].sha256);
    }
    free(order);

    ds4_sha256 h;
    ds4_sha256_init(&h);
    ds4_sha256_update(&h, g->map, (size_t)g->data_off);
    ds4_sha256_final(&h, id->metadata_sha256);
    ds4_modelid_combine(id->tensors, id->n_tensors, id->tensor_data_sha256);
    return 0;
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
