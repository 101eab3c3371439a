/* Which model a backend ran (identity.h). */
#include "check/conform/identity.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/hex.h"
#include "check/conform/http.h"
#include "ref/text/json.h"

void ds4chk_identity_init(ds4_cf_identity *id, const char *model, const char *twin) {
    memset(id, 0, sizeof(*id));
    id->model = model;
    id->twin = twin;
    pthread_mutex_init(&id->mu, NULL);
    id->ready = true;
}

void ds4chk_identity_free(ds4_cf_identity *id) {
    if (id->ready) pthread_mutex_destroy(&id->mu);
    id->ready = false;
}

/* The SHA-256 of the model file path into hex, read once ("" until then).
 * A checkpoint's folder has no one digest: DS4_E_ARG saying so. */
static int digest(const char *path, char hex[65], ds4err *err) {
    struct stat st;
    if (hex[0]) return 0;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ds4_err_set(err, DS4_E_ARG, "%s is not a file (a checkpoint's folder?): a model's "
                           "identity by SHA-256 ({model_sha256}, a dump's model_sha256) needs "
                           "one file", path);
    return ds4_file_sha256(path, hex, NULL, err);
}

int ds4chk_identity_model_sha256(ds4_cf_identity *id, const char **hex, ds4err *err) {
    if (digest(id->model, id->model_sha, err)) return -1;
    *hex = id->model_sha;
    return 0;
}

int ds4chk_identity_check_sha256(ds4_cf_identity *id, const char *hex, const char *where,
                                 ds4err *err) {
    if (digest(id->model, id->model_sha, err)) return -1;
    if (!strcmp(hex, id->model_sha)) return 0;
    if (id->twin) {
        if (digest(id->twin, id->twin_sha, err)) return -1;
        if (!strcmp(hex, id->twin_sha)) return 0;
    }
    return ds4_err_set(err, DS4_E_ARG, "%s: the backend ran another model: its model_sha256 is "
                       "%.16s..., the reference's %s is %.16s...; check the template's {model}",
                       where, hex, id->model, id->model_sha);
}

/* The SHA-256 of the other file at path (whose stat is a), from the last
 * one hashed when it is the same file unchanged. */
static int other_digest(ds4_cf_identity *id, const char *path, const struct stat *a,
                        ds4err *err) {
    if (id->seen.sha[0] && id->seen.dev == a->st_dev && id->seen.ino == a->st_ino &&
        id->seen.size == a->st_size && id->seen.mtime == a->st_mtime)
        return 0;
    id->seen.sha[0] = '\0';
    if (ds4_file_sha256(path, id->seen.sha, NULL, err)) return -1;
    id->seen.dev = a->st_dev;
    id->seen.ino = a->st_ino;
    id->seen.size = a->st_size;
    id->seen.mtime = a->st_mtime;
    return 0;
}

/* Is the file at path the reference's model (or its twin): the same file,
 * or one of its size and SHA-256?  -1 on an error reading it. */
static int same_file(ds4_cf_identity *id, const char *path, bool *same, ds4err *err) {
    struct stat a, b;
    *same = false;
    if (stat(path, &a)) return 0;
    const char *refs[2] = {id->model, id->twin};
    char *shas[2] = {id->model_sha, id->twin_sha};
    for (int k = 0; k < 2 && !*same; k++) {
        if (!refs[k] || stat(refs[k], &b)) continue;
        if (a.st_dev == b.st_dev && a.st_ino == b.st_ino) *same = true;
        if (*same || a.st_size != b.st_size) continue;
        if (digest(refs[k], shas[k], err) || other_digest(id, path, &a, err)) return -1;
        *same = !strcmp(id->seen.sha, shas[k]);
    }
    return 0;
}

/* A JSON string into out when it fits (and holds no NUL). */
static void copy_str(const ds4_json *v, char *out, size_t cap) {
    out[0] = '\0';
    if (v && v->type == DS4_JSON_STRING && v->len < cap && strlen(v->str) == v->len)
        memcpy(out, v->str, v->len + 1);
}

void ds4chk_identity_parse_models(const char *body, size_t len, ds4_cf_named *out, uint32_t cap,
                                  uint32_t *n) {
    *n = 0;
    ds4_json_doc *doc = NULL;
    ds4err ignored = {0};
    if (ds4_json_parse(body, len, "/v1/models", &doc, &ignored)) return;
    const ds4_json *root = ds4_json_root(doc);
    const ds4_json *data = root->type == DS4_JSON_OBJECT ? ds4_json_get(root, "data") : NULL;
    for (size_t i = 0; data && data->type == DS4_JSON_ARRAY && i < data->n && *n < cap; i++) {
        const ds4_json *e = &data->elems[i];
        if (e->type != DS4_JSON_OBJECT) continue;
        ds4_cf_named *m = &out[(*n)++];
        const ds4_json *sha = ds4_json_get(e, "model_sha256");
        if (!sha || sha->type != DS4_JSON_STRING || ds4_hex_sha256(sha->str, sha->len, m->sha))
            m->sha[0] = '\0';
        copy_str(ds4_json_get(e, "root"), m->root, sizeof(m->root));
        copy_str(ds4_json_get(e, "id"), m->id, sizeof(m->id));
    }
    ds4_json_free(doc);
}

/* One /v1/models entry: 1 when it named the reference's model, 0 when it
 * named nothing comparable, 2 when it named another file (into other);
 * -1 on an error reading a file. */
static int check_entry(ds4_cf_identity *id, const ds4_cf_named *e, bool local, char *other,
                       size_t cap, ds4err *err) {
    if (e->sha[0]) {
        if (digest(id->model, id->model_sha, err)) return -1;
        bool same = !strcmp(e->sha, id->model_sha);
        if (!same && id->twin) {
            if (digest(id->twin, id->twin_sha, err)) return -1;
            same = !strcmp(e->sha, id->twin_sha);
        }
        /* The path too when the entry gives one: it says which file. */
        if (!same)
            snprintf(other, cap, "%s%smodel_sha256 %.16s...", e->root, e->root[0] ? ", " : "",
                     e->sha);
        return same ? 1 : 2;
    }
    const char *paths[2] = {e->root, e->id};
    for (int k = 0; local && k < 2; k++) {
        struct stat st;
        if (!paths[k][0] || stat(paths[k], &st) || !S_ISREG(st.st_mode)) continue;
        bool same;
        if (same_file(id, paths[k], &same, err)) return -1;
        if (!same) snprintf(other, cap, "%s", paths[k]);
        return same ? 1 : 2;
    }
    if (e->id[0] && !id->server_names[0])
        snprintf(id->server_names, sizeof(id->server_names), "%s", e->id);
    return 0;
}

/* ds4chk_identity_check_server, under the lock. */
static int check_server(ds4_cf_identity *id, const char *url, bool local, ds4err *err) {
    char u[600];
    snprintf(u, sizeof(u), "%s/v1/models", url);
    ds4_buf b = {0};
    long status = 0;
    ds4err ignored = {0};
    enum { MAX_ENTRIES = 8 };
    ds4_cf_named names[MAX_ENTRIES];
    uint32_t n = 0;
    if (ds4chk_http_request(u, NULL, 0, 30, &b, &status, &ignored) == 0 && status == 200 &&
        !b.failed)
        ds4chk_identity_parse_models(b.p ? b.p : "", b.len, names, MAX_ENTRIES, &n);
    ds4_buf_free(&b);
    bool same = false, another = false;
    char other[1100] = "";
    for (uint32_t i = 0; i < n; i++) {
        int r = check_entry(id, &names[i], local, other, sizeof(other), err);
        if (r < 0) return -1;
        same |= r == 1;
        another |= r == 2;
    }
    if (!same && another)
        return ds4_err_set(err, DS4_E_ARG, "%s: the engine serves another model (%.600s, the "
                           "reference %s); check the server's command or URL", url, other,
                           id->model);
    if (same) id->by_server++;
    else id->server_unnamed++;
    return 0;
}

int ds4chk_identity_check_server(ds4_cf_identity *id, const char *url, bool local, ds4err *err) {
    pthread_mutex_lock(&id->mu);
    int rc = check_server(id, url, local, err);
    pthread_mutex_unlock(&id->mu);
    return rc;
}
