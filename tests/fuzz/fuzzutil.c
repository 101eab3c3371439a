#include "fuzzutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "ds4ref.h"
#include "base/file.h"
#include "ref/model/synth.h"

_Noreturn static void die(const char *what, const char *msg) {
    fprintf(stderr, "fuzz setup: %s: %s\n", what, msg);
    exit(1);
}

void fz_tiny_model(bool f32, uint8_t **buf, size_t *len) {
    fz_synth_model("tiny", f32, buf, len);
}

void fz_synth_model(const char *config, bool f32, uint8_t **buf, size_t *len) {
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/ds4ref-fuzz-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) die(path, "cannot create a temporary file");
    close(fd);
    ds4_synth_opts o = {.config = config, .f32 = f32, .seed = 1};
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

char *fz_tiny_checkpoint(void) {
    const char *tmp = getenv("TMPDIR");
    char base[512];
    snprintf(base, sizeof(base), "%s/ds4ref-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(base)) die(base, "cannot create a temporary folder");
    char gguf[600], mtp[600], *dir = malloc(600);
    if (!dir) die("checkpoint", "out of memory");
    snprintf(gguf, sizeof(gguf), "%s/src.gguf", base);
    snprintf(mtp, sizeof(mtp), "%s/src-mtp.gguf", base);
    snprintf(dir, 600, "%s/ckpt", base);
    ds4ref_synth_options o;
    ds4ref_synth_options_init(&o);
    o.config = "tiny-ckpt";
    o.f32 = 1;
    ds4ref_error err;
    if (ds4ref_synth_write(&o, gguf, mtp, &err) || ds4ref_gguf_to_checkpoint(gguf, mtp, dir, 0, &err))
        die("tiny-ckpt checkpoint", err.message);
    unlink(gguf);
    unlink(mtp);
    return dir;
}

void fz_remove_checkpoint(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors.index.json", "tokenizer.json",
                                        "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    char p[1024];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
        remove(p);
    }
    remove(dir);
    snprintf(p, sizeof(p), "%s", dir);
    char *slash = strrchr(p, '/');
    if (slash) {
        *slash = 0;
        remove(p);
    }
}

void fz_check(bool ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "invariant violated: %s\n", what);
    abort();
}

uint32_t fz_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
