/* libFuzzer target: DS4 model validation on edited copies of a valid model.
 *
 * Random bytes almost never get past the GGUF header, and random mutations
 * of a 5 MB model almost always land in tensor data.  So the input here is
 * not a file but a list of edits applied to the synthetic tiny model, most
 * of them aimed at the metadata and the tensor directory (the first ~20 KB)
 * where the validation decisions are made:
 *
 *   record = u32 w, then operands;  kind = w >> 30, off = w & 0x3fffffff
 *     kind 0: n = next byte % 16; overwrite n bytes at off % header size
 *     kind 1: the same anywhere in the file (tensor data: non-finite norms,
 *             out-of-range hash tables, wild quant scales)
 *     kind 2: write the next byte's pick of interesting u64 values
 *             (0, 1, -1, 2^31, 2^32, 2^63, ...) little-endian at off % header
 *     kind 3: truncate the file to off % (size + 1)
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

static const uint64_t interesting[] = {
    0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1024, 4096, 65535, 65536,
    UINT32_MAX / 2, (uint64_t)UINT32_MAX / 2 + 1, UINT32_MAX, (uint64_t)UINT32_MAX + 1,
    INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX, UINT64_MAX - 1,
    0x7f800000,  /* f32 +inf */
    0x7fc00000,  /* f32 NaN */
    0xff800000,  /* f32 -inf */
};

/* Apply the edits; returns the edited length. */
static size_t apply(const uint8_t *ed, size_t n) {
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!base) setup();
    size_t len = apply(data, size);
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
