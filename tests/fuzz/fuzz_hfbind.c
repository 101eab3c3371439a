/* libFuzzer target: binding the official checkpoint (model/hfbind.h) when
 * one of its files is arbitrary bytes.
 *
 * The base is the release folder of the tiny-ckpt model, written once into
 * a temporary folder.  An input's first byte chooses the file the rest of
 * it replaces: config.json (0), the shard index (1), or the header of the
 * first shard (2: the 8-byte length, then the input as the header, then the
 * shard's own tensor data), so that a dtype, shape or offset that disagrees
 * with the config, a duplicate key, a huge number, a missing shard or a
 * tensor no shard has all come to the binder.  Whatever it is,
 * ds4_hfbind_open must refuse with a code and a message or bind a model;
 * the sanitizers watch every byte it reads.  The file is then restored.
 *
 * Seeds (tests/fuzz/seeds.c): the three files as written, and a few edits
 * of each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "fuzzutil.h"
#include "ref/model/hfbind.h"
#include "ref/model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_FILES = 3 };
static const char *const names[N_FILES] = {"config.json", "model.safetensors.index.json",
                                           "model-00001-of-00002.safetensors"};

static char *dir;
static char *paths[N_FILES];
static char *orig[N_FILES];
static size_t orig_len[N_FILES];

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fz_check(f && (n == 0 || fwrite(p, 1, n, f) == n) && !fclose(f), "the scratch folder takes the file");
}

static void cleanup(void) { fz_remove_checkpoint(dir); }

static void setup(void) {
    dir = fz_tiny_checkpoint();
    atexit(cleanup);
    for (int i = 0; i < N_FILES; i++) {
        paths[i] = malloc(strlen(dir) + strlen(names[i]) + 2);
        fz_check(paths[i] != NULL, "malloc");
        sprintf(paths[i], "%s/%s", dir, names[i]);
        ds4err err = {0};
        fz_check(!ds4_file_read(paths[i], (size_t)1 << 30, &orig[i], &orig_len[i], &err),
                 "the base checkpoint reads back");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir) setup();
    if (size < 1) return 0;
    const int which = data[0] % N_FILES;
    const uint8_t *rest = data + 1;
    const size_t n = size - 1;
    if (which < 2) {
        write_file(paths[which], rest, n);
    } else {
        /* The shard's tensor data follows its own header. */
        uint64_t hlen = 0;
        for (int k = 0; k < 8; k++) hlen |= (uint64_t)(uint8_t)orig[2][k] << (8 * k);
        uint8_t len[8];
        for (int k = 0; k < 8; k++) len[k] = (uint8_t)((uint64_t)n >> (8 * k));
        FILE *f = fopen(paths[2], "wb");
        fz_check(f && fwrite(len, 1, 8, f) == 8 && (n == 0 || fwrite(rest, 1, n, f) == n) &&
                     fwrite(orig[2] + 8 + hlen, 1, orig_len[2] - 8 - hlen, f) == orig_len[2] - 8 - hlen &&
                     !fclose(f),
                 "the scratch folder takes the shard");
    }
    ds4_model m;
    ds4err err = {0};
    if (ds4_hfbind_open(&m, dir, &err))
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
    else
        ds4_model_close(&m);
    write_file(paths[which], orig[which], orig_len[which]);
    return 0;
}
