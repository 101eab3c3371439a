/* libFuzzer target: DS4 model validation on edited copies of a valid model.
 *
 * Random bytes almost never get past the GGUF header, and random mutations
 * of a 5 MB model almost always land in tensor data.  So the input here is
 * not a file but a list of edits applied to the synthetic tiny model, most
 * of them aimed at the metadata and the tensor directory (the first ~20 KB)
 * where the validation decisions are made:
 *
 *   the records of fz_edit (fuzzutil.h): bytes written at an offset of the
 *   header or anywhere (tensor data: non-finite norms, out-of-range hash
 *   tables, wild quant scales), interesting integers, a truncation
 *
 * An empty input is the model itself, which must load.  Every loaded
 * variant must also survive what the CLI does next: tokenizer lookups. */
#include <stdlib.h>
#include <string.h>

#include "fuzzutil.h"
#include "ref/model/model.h"
#include "quant/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *base, *work;
static size_t base_len;
static uint64_t header_len;   /* bytes before the tensor data */

static void setup(void) {
    fz_tiny_model(false, &base, &base_len);
    work = malloc(base_len);
    ds4_gguf_file g;
    ds4err err = {0};
    fz_check(work && !ds4_gguf_parse(&g, base, base_len, "tiny.gguf", &err),
             "the base model parses");
    header_len = g.data_off;
    ds4_gguf_close(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!base) setup();
    size_t len = fz_edit(base, base_len, header_len, work, data, size);
    ds4_gguf_file g;
    ds4err err = {0};
    if (ds4_gguf_parse(&g, work, len, "variant.gguf", &err)) {
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
        fz_check(size != 0, "the unedited model parses");
        return 0;
    }
    ds4_model m;
    if (ds4_model_from_gguf(&m, &g, &err)) {
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
        fz_check(size != 0, "the unedited model loads");
        return 0;
    }
    const ds4_tokenizer *tok;
    if (!ds4_model_tokenizer(&m, &tok, &err)) {
        ds4_tokens ids = {0};
        static const char text[] = "Hello <\xef\xbd\x9c" "User\xef\xbd\x9c> 123 world\n";
        if (!ds4_tok_encode(tok, text, sizeof(text) - 1, DS4_TOK_ADDED, &ids, &err)) {
            ds4_buf out = {0};
            fz_check(!ds4_tok_decode(tok, ids.ids, ids.n, &out, &err), "encoded ids decode");
            ds4_buf_free(&out);
        }
        ds4_tokens_free(&ids);
    }
    ds4_model_close(&m);
    return 0;
}
