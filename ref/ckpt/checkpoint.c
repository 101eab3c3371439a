/* A checkpoint folder as one tensor directory (checkpoint.h). */
#include "ref/ckpt/checkpoint.h"

#include "base/file.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_NAME "model.safetensors.index.json"
/* config.json is a few kB and the index a few MB (69,187 names); anything
 * far past that is not one. */
#define CONFIG_LIMIT (1u << 20)
#define INDEX_LIMIT (256u << 20)

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* A shard name the index may use: a file in the folder itself. */
static bool plain_file_name(const ds4_json *v) {
    return v->type == DS4_JSON_STRING && v->len > 0 && strlen(v->str) == v->len &&
           !strchr(v->str, '/') && strcmp(v->str, ".") && strcmp(v->str, "..");
}

void ds4_checkpoint_index_free(ds4_ckpt_index *ix) {
    for (size_t i = 0; i < ix->n; i++) {
        free(ix->tensors[i]);
        free(ix->shards[i]);
    }
    free(ix->tensors);
    free(ix->shards);
    memset(ix, 0, sizeof(*ix));
}

typedef struct pair {
    char *tensor, *shard;
} pair;

static int cmp_pair(const void *a, const void *b) {
    return strcmp(((const pair *)a)->tensor, ((const pair *)b)->tensor);
}

/* total_size as HF writes it: an integer (plain digits). */
static int read_total(ds4_ckpt_index *ix, const ds4_json *meta, const char *name, ds4err *err) {
    if (meta->type != DS4_JSON_OBJECT)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: \"metadata\" is not an object", name);
    const ds4_json *t = ds4_json_get(meta, "total_size");
    if (!t) return 0;
    uint64_t x;
    if (!ds4_json_uint(t, UINT64_C(999999999999999999), &x))
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: \"metadata\".\"total_size\" is not an integer below 10^18", name);
    ix->has_total = true;
    ix->total_size = x;
    return 0;
}

static int index_from_json(ds4_ckpt_index *ix, const ds4_json *root, const char *name,
                           ds4err *err) {
    if (root->type != DS4_JSON_OBJECT)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: not a JSON object", name);
    const ds4_json *meta = ds4_json_get(root, "metadata");
    if (meta && read_total(ix, meta, name, err)) return -1;
    const ds4_json *map = ds4_json_get(root, "weight_map");
    if (!map || map->type != DS4_JSON_OBJECT)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: no \"weight_map\" object (tensor -> shard file)",
                           name);
    pair *p = calloc(map->n ? map->n : 1, sizeof(*p));
    if (!p) return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < map->n && !rc; i++) {
        const ds4_json *k = &map->keys[i], *v = &map->elems[i];
        if (k->len == 0 || strlen(k->str) != k->len) {
            rc = ds4_err_set(err, DS4_E_FORMAT,
                             "%s: \"weight_map\" member %zu: a tensor name must be non-empty text "
                             "without NUL bytes", name, i);
        } else if (!plain_file_name(v)) {
            rc = ds4_err_set(err, DS4_E_FORMAT,
                             "%s: tensor '%s': the shard must be a file name in the checkpoint's "
                             "folder (no '/', not \".\" or \"..\")", name, k->str);
        } else {
            p[n].tensor = strdup(k->str);
            p[n].shard = strdup(v->str);
            if (!p[n++].shard || !p[n - 1].tensor)
                rc = ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
        }
    }
    if (!rc) {
        qsort(p, n, sizeof(*p), cmp_pair);
        for (size_t i = 1; i < n && !rc; i++)
            if (!strcmp(p[i - 1].tensor, p[i].tensor))
                rc = ds4_err_set(err, DS4_E_FORMAT, "%s: \"weight_map\" names tensor '%s' twice",
                                 name, p[i].tensor);
    }
    if (!rc && (!(ix->tensors = calloc(n ? n : 1, sizeof(char *))) ||
                !(ix->shards = calloc(n ? n : 1, sizeof(char *)))))
        rc = ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < n; i++) {
        if (!rc) {
            ix->tensors[i] = p[i].tensor;
            ix->shards[i] = p[i].shard;
        } else {
            free(p[i].tensor);
            free(p[i].shard);
        }
    }
    if (!rc) ix->n = n;
    free(p);
    return rc;
}

int ds4_checkpoint_index_parse(ds4_ckpt_index *ix, const char *buf, size_t len, const char *name,
                         ds4err *err) {
    memset(ix, 0, sizeof(*ix));
    ds4_json_doc *doc;
    if (ds4_json_parse(buf, len, name, &doc, err)) return -1;
    int rc = index_from_json(ix, ds4_json_root(doc), name, err);
    ds4_json_free(doc);
    if (rc) ds4_checkpoint_index_free(ix);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const ds4_ckpt_entry *)a)->t->name, ((const ds4_ckpt_entry *)b)->t->name);
}

/* The distinct shard names of the index, sorted, into c. */
static int shard_names_of(ds4_ckpt *c, const ds4_ckpt_index *ix, ds4err *err) {
    char **names = malloc((ix->n ? ix->n : 1) * sizeof(char *));
    if (!names) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    for (size_t i = 0; i < ix->n; i++) names[i] = ix->shards[i];
    qsort(names, ix->n, sizeof(char *), cmp_str);
    c->shard_names = calloc(ix->n ? ix->n : 1, sizeof(char *));
    if (!c->shard_names) {
        free(names);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < ix->n; i++) {
        if (i && !strcmp(names[i], names[i - 1])) continue;
        if (!(c->shard_names[c->n_shards] = strdup(names[i]))) {
            free(names);
            return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        }
        c->n_shards++;
    }
    free(names);
    return 0;
}

static int read_config(ds4_ckpt *c, ds4err *err) {
    char *path = join(c->dir, "config.json"), *buf = NULL;
    size_t len;
    if (!path) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    int rc = ds4_file_read(path, CONFIG_LIMIT, &buf, &len, err);
    if (!rc) rc = ds4_json_parse(buf, len, path, &c->config, err);
    if (!rc && ds4_json_root(c->config)->type != DS4_JSON_OBJECT)
        rc = ds4_err_set(err, DS4_E_FORMAT, "%s: not a JSON object", path);
    if (!rc) {
        c->config_text = buf;   /* kept: a model's identity covers its bytes */
        c->config_len = len;
    } else {
        free(buf);
    }
    free(path);
    return rc;
}

static int open_shards(ds4_ckpt *c, ds4err *err) {
    c->shards = calloc(c->n_shards ? c->n_shards : 1, sizeof(*c->shards));
    if (!c->shards) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    size_t total = 0;
    for (size_t s = 0; s < c->n_shards; s++) {
        char *path = join(c->dir, c->shard_names[s]);
        if (!path) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        int rc = ds4_safetensors_open(&c->shards[s], path, err);
        free(path);
        if (rc) return -1;   /* the failed one is left closed, the rest zeroed */
        total += c->shards[s].n_tensors;
    }
    c->tensors = malloc((total ? total : 1) * sizeof(*c->tensors));
    if (!c->tensors) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    for (size_t s = 0; s < c->n_shards; s++)
        for (size_t i = 0; i < c->shards[s].n_tensors; i++)
            c->tensors[c->n_tensors++] = (ds4_ckpt_entry){&c->shards[s].tensors[i], s};
    qsort(c->tensors, c->n_tensors, sizeof(*c->tensors), cmp_entry);
    for (size_t i = 1; i < c->n_tensors; i++)
        if (!strcmp(c->tensors[i - 1].t->name, c->tensors[i].t->name))
            return ds4_err_set(err, DS4_E_FORMAT, "%s: tensor '%s' is in two shards, %s and %s",
                               c->dir, c->tensors[i].t->name,
                               c->shard_names[c->tensors[i - 1].shard],
                               c->shard_names[c->tensors[i].shard]);
    return 0;
}

/* The index and the shards agree both ways, and on the total size. */
static int check_index(const ds4_ckpt *c, const ds4_ckpt_index *ix, const char *ixpath,
                       ds4err *err) {
    for (size_t i = 0; i < ix->n; i++) {
        const ds4_st_tensor *t = ds4_checkpoint_find(c, ix->tensors[i]);
        if (!t)
            return ds4_err_set(err, DS4_E_FORMAT, "%s: names tensor '%s' in %s, which does not "
                               "hold it", ixpath, ix->tensors[i], ix->shards[i]);
    }
    uint64_t total = 0;
    for (size_t i = 0; i < c->n_tensors; i++) {
        const char *name = c->tensors[i].t->name, *shard = c->shard_names[c->tensors[i].shard];
        char *const *at = bsearch(&name, ix->tensors, ix->n, sizeof(char *), cmp_str);
        if (!at)
            return ds4_err_set(err, DS4_E_FORMAT, "%s: holds tensor '%s', which %s does not name",
                               shard, name, ixpath);
        const char *listed = ix->shards[at - ix->tensors];
        if (strcmp(listed, shard))
            return ds4_err_set(err, DS4_E_FORMAT, "%s: names tensor '%s' in %s, but it is in %s",
                               ixpath, name, listed, shard);
        total += c->tensors[i].t->end - c->tensors[i].t->begin;
    }
    if (ix->has_total && ix->total_size != total)
        return ds4_err_set(err, DS4_E_FORMAT,
                           "%s: \"total_size\" is %" PRIu64 ", but the shards' tensors hold %" PRIu64
                           " bytes", ixpath, ix->total_size, total);
    return 0;
}

static int open_folder(ds4_ckpt *c, ds4err *err) {
    char *ixpath = join(c->dir, INDEX_NAME), *buf = NULL;
    size_t len;
    if (!ixpath) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    ds4_ckpt_index ix = {0};
    int rc = ds4_file_read(ixpath, INDEX_LIMIT, &buf, &len, err);
    if (rc) ds4_err_prefix(err, "%s: a checkpoint folder holds config.json, " INDEX_NAME
                           " and its shards", c->dir);
    if (!rc) rc = ds4_checkpoint_index_parse(&ix, buf, len, ixpath, err);
    free(buf);
    if (!rc) rc = shard_names_of(c, &ix, err);
    if (!rc) rc = open_shards(c, err);
    if (!rc) rc = check_index(c, &ix, ixpath, err);
    ds4_checkpoint_index_free(&ix);
    free(ixpath);
    return rc;
}

/* One shard on its own: its folder holds config.json. */
static int open_file(ds4_ckpt *c, const char *path, ds4err *err) {
    const char *slash = strrchr(path, '/');
    free(c->dir);
    c->dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    c->shard_names = calloc(1, sizeof(char *));
    if (!c->dir || !c->shard_names || !(c->shard_names[0] = strdup(slash ? slash + 1 : path)))
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    c->n_shards = 1;
    /* The shard is opened by its path as given, not rebuilt from the parts. */
    c->shards = calloc(1, sizeof(*c->shards));
    if (!c->shards) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    if (ds4_safetensors_open(&c->shards[0], path, err)) return -1;
    c->tensors = malloc((c->shards[0].n_tensors ? c->shards[0].n_tensors : 1) * sizeof(*c->tensors));
    if (!c->tensors) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    for (size_t i = 0; i < c->shards[0].n_tensors; i++)
        c->tensors[c->n_tensors++] = (ds4_ckpt_entry){&c->shards[0].tensors[i], 0};
    return 0;   /* already sorted by name, and unique (safetensors.h) */
}

int ds4_checkpoint_open(ds4_ckpt *c, const char *path, ds4err *err) {
    memset(c, 0, sizeof(*c));
    struct stat st;
    if (stat(path, &st) != 0)
        return ds4_err_set(err, DS4_E_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!(c->dir = strdup(path))) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    int rc = S_ISDIR(st.st_mode) ? open_folder(c, err) : open_file(c, path, err);
    if (!rc) rc = read_config(c, err);
    if (rc) ds4_checkpoint_close(c);
    return rc;
}

void ds4_checkpoint_close(ds4_ckpt *c) {
    for (size_t s = 0; s < c->n_shards; s++) {
        if (c->shards) ds4_safetensors_close(&c->shards[s]);
        free(c->shard_names[s]);
    }
    free(c->shards);
    free(c->shard_names);
    free(c->tensors);
    if (c->config) ds4_json_free(c->config);
    free(c->config_text);
    free(c->dir);
    memset(c, 0, sizeof(*c));
}

const ds4_st_tensor *ds4_checkpoint_find(const ds4_ckpt *c, const char *name) {
    ds4_st_tensor key = {.name = (char *)name};
    ds4_ckpt_entry k = {&key, 0};
    const ds4_ckpt_entry *e = bsearch(&k, c->tensors, c->n_tensors, sizeof(*c->tensors), cmp_entry);
    return e ? e->t : NULL;
}

const ds4_json *ds4_checkpoint_config(const ds4_ckpt *c) {
    return ds4_json_root(c->config);
}
