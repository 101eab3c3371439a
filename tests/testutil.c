#include "testutil.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/synth.h"

int tu_read_file(const char *path, uint8_t **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    uint8_t *p = malloc(cap);
    while (p) {
        n += fread(p + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *q = realloc(p, cap * 2);
        if (!q) {
            free(p);
            p = NULL;
        } else {
            p = q;
            cap *= 2;
        }
    }
    int bad = !p || ferror(f);
    fclose(f);
    if (bad) {
        free(p);
        return -1;
    }
    *buf = p;
    *len = n;
    return 0;
}

char *tu_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void tu_skipping(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("skipping: ", stdout);
    vprintf(fmt, ap);
    fputs("\n", stdout);
    va_end(ap);
}

char *tu_shared(const char *rel) {
    char *p = tu_path("../shared", rel);
    if (p && access(p, F_OK) == 0) return p;
    tu_skipping("%s not found (the shared fixtures live in ../shared, relative to the "
                "repository root the tests run from)", p ? p : rel);
    free(p);
    return NULL;
}

char *tu_official(const char *rel) {
    char *p = tu_path(DS4REF_OFFICIAL_DIR, rel);
    if (p && access(p, F_OK) == 0) return p;
    fprintf(stderr, "%s not found: the build decompresses vectors/official there (make test, or "
            "make %s)\n", p ? p : rel, DS4REF_OFFICIAL_DIR "/.checked");
    free(p);
    return NULL;
}

char *tu_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char *p = tu_path(base && *base ? base : "/tmp", "ds4ref-test-XXXXXX");
    if (p && !mkdtemp(p)) {
        free(p);
        p = NULL;
    }
    return p;
}

int tu_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

void tu_rmdir(char *dir) {
    if (!dir) return;
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = tu_path(dir, e->d_name);
            if (p) unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

tu_model *tu_model_new(const char *config, uint64_t seed, bool mtp, ds4err *err) {
    tu_model *t = calloc(1, sizeof(*t));
    if (!t) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        return NULL;
    }
    t->dir = tu_tmpdir();
    t->path = t->dir ? tu_path(t->dir, "model.gguf") : NULL;
    t->mtp_path = t->dir && mtp ? tu_path(t->dir, "model-mtp.gguf") : NULL;
    ds4_synth_opts o = {.config = config, .seed = seed};
    if (!t->path || (mtp && !t->mtp_path)) {
        ds4_err_set(err, DS4_E_IO, "cannot make a scratch directory");
    } else if (!ds4_synth_write(&o, t->path, t->mtp_path, err) &&
               !ds4_model_open(&t->m, t->path, err)) {
        if (!mtp || !ds4_model_load_mtp(&t->m, t->mtp_path, err)) return t;
        ds4_model_close(&t->m);
    }
    memset(&t->m, 0, sizeof(t->m));
    tu_model_free(t);
    return NULL;
}

void tu_model_free(tu_model *t) {
    if (!t) return;
    ds4_model_close(&t->m);
    if (t->path) remove(t->path);
    if (t->mtp_path) remove(t->mtp_path);
    free(t->path);
    free(t->mtp_path);
    if (t->dir) tu_rmdir(t->dir);
    free(t);
}

uint64_t tu_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double tu_uniform(uint64_t *state, double a, double b) {
    return a + (b - a) * ((double)(tu_splitmix64(state) >> 11) * 0x1p-53);
}

int32_t *tu_random_tokens(uint32_t n, uint32_t vocab, uint64_t seed) {
    int32_t *t = malloc(sizeof(int32_t) * (n ? n : 1));
    for (uint32_t i = 0; t && i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % vocab);
    }
    return t;
}
