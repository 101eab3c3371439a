/* Which model a backend ran (identity.h). */
#include "conform/identity.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/file.h"
#include "conform/http.h"
#include "text/json.h"

void ds4chk_identity_init(ds4_cf_identity *id, const char *model, const char *twin) {
    memset(id, 0, sizeof(*id));
    id->model = model;
    id->twin = twin;
    pthread_mutex_init(&id->mu, NULL);
}

void ds4chk_identity_free(ds4_cf_identity *id) {
    pthread_mutex_destroy(&id->mu);
}

/* The SHA-256 of path into hex, read once ("" until then). */
static int digest(const char *path, char hex[65], ds4err *err) {
    return hex[0] ? 0 : ds4_file_sha256(path, hex, err);
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
        char hex[65] = "";
        if (digest(refs[k], shas[k], err) || digest(path, hex, err)) return -1;
        *same = !strcmp(hex, shas[k]);
    }
    return 0;
}

/* s[0..len) as 64 lowercase hex digits into hex, if it is a SHA-256. */
static bool lower_hex(const char *s, size_t len, char hex[65]) {
    if (len != 64) return false;
    for (size_t i = 0; i < 64; i++) {
        if (!isxdigit((unsigned char)s[i])) return false;
        hex[i] = (char)tolower((unsigned char)s[i]);
    }
    hex[64] = '\0';
    return true;
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
        if (!sha || sha->type != DS4_JSON_STRING || !lower_hex(sha->str, sha->len, m->sha))
            m->sha[0] = '\0';
        copy_str(ds4_json_get(e, "root"), m->root, sizeof(m->root));
        copy_str(ds4_json_get(e, "id"), m->id, sizeof(m->id));
    }
    ds4_json_free(doc);
}

/* One /v1/models entry: 1 when it named the reference's model, 0 when it
 * named nothing comparable; -1 with err when it named another file. */
static int check_entry(ds4_cf_identity *id, const ds4_cf_named *e, const char *url, ds4err *err) {
    if (e->sha[0]) return ds4chk_identity_check_sha256(id, e->sha, url, err) ? -1 : 1;
    const char *paths[2] = {e->root, e->id};
    for (int k = 0; k < 2; k++) {
        struct stat st;
        if (!paths[k][0] || stat(paths[k], &st) || !S_ISREG(st.st_mode)) continue;
        bool same;
        if (same_file(id, paths[k], &same, err)) return -1;
        if (same) return 1;
        return ds4_err_set(err, DS4_E_ARG, "%s: the engine serves another model (%s, the "
                           "reference %s); check the server's command or URL", url, paths[k],
                           id->model);
    }
    if (e->id[0] && !id->server_names[0])
        snprintf(id->server_names, sizeof(id->server_names), "%s", e->id);
    return 0;
}

/* ds4chk_identity_check_server, under the lock. */
static int check_server(ds4_cf_identity *id, const char *url, ds4err *err) {
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
    int named = 0;
    for (uint32_t i = 0; i < n && named >= 0; i++) {
        int r = check_entry(id, &names[i], url, err);
        named = r < 0 ? -1 : named | r;
    }
    if (named < 0) return -1;
    if (named) id->by_server++;
    else id->server_unnamed++;
    return 0;
}

int ds4chk_identity_check_server(ds4_cf_identity *id, const char *url, ds4err *err) {
    pthread_mutex_lock(&id->mu);
    int rc = check_server(id, url, err);
    pthread_mutex_unlock(&id->mu);
    return rc;
}
