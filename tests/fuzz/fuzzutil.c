#include "fuzzutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "model/synth.h"

_Noreturn static void die(const char *what, const char *msg) {
    fprintf(stderr, "fuzz setup: %s: %s\n", what, msg);
    exit(1);
}

void fz_tiny_model(bool f32, uint8_t **buf, size_t *len) {
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/ds4ref-fuzz-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) die(path, "cannot create a temporary file");
    close(fd);
    ds4_synth_opts o = {.config = "tiny", .f32 = f32, .seed = 1};
    ds4err err = {0};
    char *data;
    if (ds4_synth_write(&o, path, NULL, &err) ||
        ds4_file_read(path, (size_t)1 << 30, &data, len, &err)) {
        unlink(path);
        die("synthetic model", err.msg);
    }
    unlink(path);
    *buf = (uint8_t *)data;
}

void fz_check(bool ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "invariant violated: %s\n", what);
    abort();
}

uint32_t fz_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
