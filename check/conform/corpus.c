/* Prompt corpora (corpus.h). */
#include "check/conform/corpus.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"

#define CORPUS_MAX_FILES 64
#define CORPUS_MAX_BYTES ((size_t)1 << 20)

void ds4chk_corpus_free(ds4_cf_corpus *c) {
    for (uint32_t i = 0; c->p && i < c->n; i++) {
        free((char *)c->p[i].name);
        free((uint8_t *)c->p[i].bytes);
    }
    free(c->p);
    memset(c, 0, sizeof(*c));
}

/* Append a copy of name and text[0..len). */
static int add(ds4_cf_corpus *c, const char *name, size_t name_len, const uint8_t *text,
               size_t len, ds4err *err) {
    ds4_cf_text *np = realloc(c->p, sizeof(*np) * (c->n + 1));
    if (!np) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    c->p = np;
    char *nm = malloc(name_len + 1);
    uint8_t *tx = malloc(len + 1);
    if (!nm || !tx) {
        free(nm);
        free(tx);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    memcpy(nm, name, name_len);
    nm[name_len] = '\0';
    memcpy(tx, text, len);
    tx[len] = '\0';
    c->p[c->n++] = (ds4_cf_text){nm, tx, len};
    return 0;
}

int ds4chk_corpus_builtin(ds4_cf_corpus *c, ds4err *err) {
    memset(c, 0, sizeof(*c));
    for (uint32_t i = 0; i < ds4chk_corpus_data_n; i++) {
        const ds4_cf_text *t = &ds4chk_corpus_data[i];
        if (add(c, t->name, strlen(t->name), t->bytes, t->len, err)) {
            ds4chk_corpus_free(c);
            return -1;
        }
    }
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The NAME.txt entries of dir, sorted. */
static int list_txt(const char *dir, char **names, uint32_t *n, ds4err *err) {
    DIR *d = opendir(dir);
    if (!d) return ds4_err_set(err, DS4_E_IO, "%s: %s", dir, strerror(errno));
    *n = 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= 4 || strcmp(e->d_name + len - 4, ".txt")) continue;
        if (*n == CORPUS_MAX_FILES)
            rc = ds4_err_set(err, DS4_E_ARG, "%s: more than %d prompt files", dir, CORPUS_MAX_FILES);
        else if (!(names[(*n)++] = strdup(e->d_name)))
            rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    closedir(d);
    if (rc == 0 && *n == 0)
        rc = ds4_err_set(err, DS4_E_ARG, "%s: no prompt files (NAME.txt)", dir);
    qsort(names, *n, sizeof(char *), by_name);
    return rc;
}

int ds4chk_corpus_dir(ds4_cf_corpus *c, const char *dir, ds4err *err) {
    memset(c, 0, sizeof(*c));
    char *names[CORPUS_MAX_FILES] = {0};
    uint32_t n = 0;
    int rc = list_txt(dir, names, &n, err);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        size_t plen = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(plen), *text = NULL;
        size_t len = 0;
        if (!path) {
            rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
            break;
        }
        snprintf(path, plen, "%s/%s", dir, names[i]);
        rc = ds4_file_read(path, CORPUS_MAX_BYTES, &text, &len, err);
        if (rc == 0 && len == 0) rc = ds4_err_set(err, DS4_E_ARG, "%s: an empty prompt", path);
        if (rc == 0) rc = add(c, names[i], strlen(names[i]) - 4, (const uint8_t *)text, len, err);
        free(text);
        free(path);
    }
    for (uint32_t i = 0; i < n; i++) free(names[i]);
    if (rc) ds4chk_corpus_free(c);
    return rc;
}
