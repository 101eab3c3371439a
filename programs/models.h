/* Where a program finds the synthetic models when no -m is given: `make`
 * builds them into models/ beside the programs, and `make install` copies
 * them to PREFIX/share/ds4ref/models, beside PREFIX/bin.  Included by each
 * program's main file that has a default model. */
#ifndef DS4REF_MODELS_H
#define DS4REF_MODELS_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The folder of the running program, or false. */
static bool ds4ref_self_dir(char *out, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) return false;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash) return false;
    *slash = '\0';
    return true;
}

/* The synthetic model NAME ("tiny.gguf") into buf: models/ beside the
 * program, then ../share/ds4ref/models from it, then ./models.  False when
 * none is there, with *where naming the places looked in, for the error. */
static bool ds4ref_find_model(const char *name, char *buf, size_t cap, char *where,
                              size_t where_cap) {
    char dir[PATH_MAX], prefix[PATH_MAX];
    size_t used = 0;
    where[0] = '\0';
    if (ds4ref_self_dir(dir, sizeof(dir))) {
        /* PREFIX is the folder above PREFIX/bin. */
        snprintf(prefix, sizeof(prefix), "%s", dir);
        char *slash = strrchr(prefix, '/');
        if (slash) *slash = '\0';
        const char *folder[] = {dir, prefix};
        const char *fmt[] = {"%s/models/%s", "%s/share/ds4ref/models/%s"};
        for (size_t i = 0; i < sizeof(fmt) / sizeof(fmt[0]); i++) {
            int w = snprintf(buf, cap, fmt[i], folder[i], name);
            if (w > 0 && (size_t)w < cap && access(buf, R_OK) == 0) return true;
            if (used < where_cap)
                used += (size_t)snprintf(where + used, where_cap - used, "%s, ", buf);
        }
    }
    snprintf(buf, cap, "models/%s", name);
    if (access(buf, R_OK) == 0) return true;
    if (used < where_cap) snprintf(where + used, where_cap - used, "./%s", buf);
    return false;
}

#endif
