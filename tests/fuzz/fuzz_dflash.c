/* libFuzzer target: llama.cpp's DSpark drafter file (general.architecture
 * "dflash", ds4_model_load_dspark) on edited copies of a valid one.
 *
 * The base is tiny-dspark split as llama.cpp ships it (fz_dspark_split):
 * each input is a list of fz_edit records applied to the drafter file,
 * which is then loaded against a fresh copy of the trunk.  An empty input
 * is the drafter itself, which must load; every refusal must carry a code
 * and a message. */
#include <stdlib.h>
#include <string.h>

#include "fuzzutil.h"
#include "quant/gguf.h"
#include "ref/model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *trunk, *draft, *work;
static size_t trunk_len, draft_len;
static uint64_t header_len;

static void setup(void) {
    fz_dspark_split(&trunk, &trunk_len, &draft, &draft_len);
    work = malloc(draft_len);
    ds4_gguf_file g;
    ds4err err = {0};
    fz_check(work && !ds4_gguf_parse(&g, draft, draft_len, "draft.gguf", &err),
             "the drafter file parses");
    header_len = g.data_off;
    ds4_gguf_close(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!trunk) setup();
    size_t len = fz_edit(draft, draft_len, header_len, work, data, size);
    ds4err err = {0};
    ds4_gguf_file tg, dg;
    ds4_model m;
    fz_check(!ds4_gguf_parse(&tg, trunk, trunk_len, "trunk.gguf", &err) &&
             !ds4_model_from_gguf(&m, &tg, &err), "the trunk loads");
    if (ds4_gguf_parse(&dg, work, len, "draft.gguf", &err) ||
        ds4_model_load_dspark_gguf(&m, &dg, &err)) {
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
        fz_check(size != 0, "the unedited drafter loads");
    } else {
        fz_check(m.dspark && m.cfg.dspark_stages >= 1, "a loaded drafter has its stages");
    }
    ds4_model_close(&m);
    return 0;
}
