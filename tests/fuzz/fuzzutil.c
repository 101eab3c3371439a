#include "fuzzutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "ds4ref.h"
#include "base/file.h"
#include "ref/model/dflash_write.h"
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


static const uint64_t interesting[] = {
    0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1024, 4096, 65535, 65536,
    UINT32_MAX / 2, (uint64_t)UINT32_MAX / 2 + 1, UINT32_MAX, (uint64_t)UINT32_MAX + 1,
    INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX, UINT64_MAX - 1,
    0x7f800000,  /* f32 +inf */
    0x7fc00000,  /* f32 NaN */
    0xff800000,  /* f32 -inf */
};

size_t fz_edit(const uint8_t *base, size_t base_len, uint64_t header_len, uint8_t *work,
               const uint8_t *ed, size_t n) {
    size_t len = base_len;
    memcpy(work, base, base_len);
    while (n >= 4) {
        uint32_t w = fz_le32(ed);
        ed += 4;
        n -= 4;
        uint32_t kind = w >> 30, off = w & 0x3fffffff;
        if (kind == 3) {
            len = off % (len + 1);
            continue;
        }
        uint64_t span = kind == 1 ? len : (header_len < len ? header_len : len);
        if (!span || !n) break;
        uint64_t at = off % span;
        if (kind == 2) {
            uint64_t v = interesting[ed[0] % (sizeof(interesting) / sizeof(interesting[0]))];
            ed++;
            n--;
            for (int b = 0; b < 8 && at + (uint64_t)b < len; b++) work[at + (uint64_t)b] = (uint8_t)(v >> 8 * b);
            continue;
        }
        size_t k = ed[0] % 16;
        ed++;
        n--;
        if (k > n) k = n;
        for (size_t i = 0; i < k && at + i < len; i++) work[at + i] = ed[i];
        ed += k;
        n -= k;
    }
    return len;
}

/* A temporary file's path under $TMPDIR (or /tmp), created empty. */
static void temp_path(char *path, size_t cap) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/ds4ref-fuzz-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) die(path, "cannot create a temporary file");
    close(fd);
}

void fz_dspark_split(uint8_t **trunk, size_t *trunk_len, uint8_t **draft, size_t *draft_len) {
    char model[512], tpath[512], dpath[512];
    temp_path(model, sizeof(model));
    temp_path(tpath, sizeof(tpath));
    temp_path(dpath, sizeof(dpath));
    ds4_synth_opts o = {.config = "tiny-dspark", .seed = 1};
    ds4err err = {0};
    char *t = NULL, *d = NULL;
    int rc = ds4_synth_write(&o, model, NULL, &err) ||
             ds4_dflash_write_split(model, tpath, dpath, &err) ||
             ds4_file_read(tpath, (size_t)1 << 30, &t, trunk_len, &err) ||
             ds4_file_read(dpath, (size_t)1 << 30, &d, draft_len, &err);
    unlink(model), unlink(tpath), unlink(dpath);
    if (rc) die("tiny-dspark split", err.msg);
    *trunk = (uint8_t *)t;
    *draft = (uint8_t *)d;
}
