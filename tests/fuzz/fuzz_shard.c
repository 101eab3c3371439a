/* libFuzzer target: ds4ref-conform's shard files (check/conform/shard.c),
 * what --merge reads.
 *
 * Each input is a shard file, merged into a run of FZ_SHARD_CELLS cells
 * whose description is FZ_SHARD_DESC (the last cell n/a); the seeds are
 * valid shards of that run (tests/fuzz/seeds.c).  Whatever the bytes, the
 * merge refuses them with a code and a message, or accepts them and then
 * every cell that ran has its folder, none both ran and failed, and the n/a
 * cell stays n/a; the folders made are removed after each input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzzutil.h"
#include "base/file.h"
#include "check/conform/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], work[96], path[96];

static void cleanup(void) {
    ds4_file_remove_tree(dir);
}

static void setup(void) {
    snprintf(dir, sizeof(dir), "/tmp/fuzz_shard.XXXXXX");
    fz_check(mkdtemp(dir) != NULL, "a temporary folder");
    atexit(cleanup);
    snprintf(work, sizeof(work), "%s/work", dir);
    snprintf(path, sizeof(path), "%s/shard.json", dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    ds4err err = {0};
    FILE *f = fopen(path, "wb");
    fz_check(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "the input is written");
    fz_check(mkdir(work, 0755) == 0, "the work folder is made");
    ds4_cf_prompt prompt = {.name = "p"};
    ds4_cf_cell cells[FZ_SHARD_CELLS];
    memset(cells, 0, sizeof(cells));
    for (uint32_t i = 0; i < FZ_SHARD_CELLS; i++) {
        cells[i].batch = 1;
        cells[i].exit_status = -1;
    }
    cells[FZ_SHARD_CELLS - 1].status = cells[FZ_SHARD_CELLS - 1].f.status = DS4_CF_NA;
    ds4_cf_result res = {.n_prompts = 1, .prompts = &prompt, .n_cells = FZ_SHARD_CELLS,
                         .cells = cells};
    const char *paths[1] = {path};
    if (ds4chk_shard_merge(&res, FZ_SHARD_DESC, paths, 1, work, &err)) {
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
    } else {
        for (uint32_t i = 0; i < FZ_SHARD_CELLS; i++) {
            struct stat st;
            if (cells[i].dir)
                fz_check(stat(cells[i].dir, &st) == 0 && S_ISDIR(st.st_mode),
                         "a cell that ran has its folder");
            fz_check(!cells[i].dir || cells[i].status != DS4_CF_ERROR,
                     "a cell ran or failed, not both");
        }
        fz_check(cells[FZ_SHARD_CELLS - 1].status == DS4_CF_NA && !cells[FZ_SHARD_CELLS - 1].dir,
                 "the n/a cell stays n/a");
    }
    for (uint32_t i = 0; i < FZ_SHARD_CELLS; i++) free(cells[i].dir);
    ds4_file_remove_tree(work);
    return 0;
}
