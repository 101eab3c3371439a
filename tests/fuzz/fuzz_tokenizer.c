/* libFuzzer target: the tokenizer (pre-tokenizer regexes, BPE, added-token
 * matching, decoding) and the chat encoder, on arbitrary bytes.
 *
 * Properties checked on every input:
 *   - the pre-tokenizer's pieces lie inside the text, in order, without
 *     overlapping;
 *   - byte-level BPE loses nothing: decode(encode(text)) == text, with and
 *     without recognising added tokens, whatever the bytes (invalid UTF-8,
 *     NULs, lone surrogates' encodings, ...);
 *   - every id produced is inside the vocabulary;
 *   - the chat prompt (ds4's -sys/-p, the input split at its first NUL into
 *     system and prompt) renders and tokenizes, in every thinking mode;
 *   - an input that is a JSON array of messages renders through the
 *     official encoder, or is refused with an error.
 *
 * The vocabulary: $DS4_FUZZ_VOCAB (a tokenizer.json[.xz]), else the real
 * DeepSeek one in ../shared/tokenizer when present, else the synthetic tiny
 * model's (the same code path, far fewer merges). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_msgs.h"
#include "fuzzutil.h"
#include "../xzvocab.h"
#include "ref/model/model.h"
#include "quant/gguf.h"
#include "ref/text/chat.h"
#include "ref/text/json.h"
#include "ref/text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ds4_tokenizer *tok;
static ds4_tokenizer own_tok;
static ds4_vocab vocab;
static ds4_model model;
static uint8_t *model_bytes;

static void setup(void) {
    const char *path = getenv("DS4_FUZZ_VOCAB");
    static const char shared[] = "../shared/tokenizer/deepseek_v3_tokenizer.json.xz";
    if (!path && access(shared, R_OK) == 0) path = shared;
    ds4err err = {0};
    if (path) {
        fz_check(!xz_hf_vocab(&vocab, path, &err), err.msg);
        fz_check(!ds4_tok_init(&own_tok, vocab.tokens, vocab.n_tokens, vocab.types, vocab.merges,
                               vocab.n_merges, &err), err.msg);
        tok = &own_tok;
        fprintf(stderr, "fuzz_tokenizer: vocabulary %s (%u tokens, %u merges)\n", path,
                vocab.n_tokens, vocab.n_merges);
        return;
    }
    size_t len;
    ds4_gguf_file g;
    fz_tiny_model(false, &model_bytes, &len);
    fz_check(!ds4_gguf_parse(&g, model_bytes, len, "tiny.gguf", &err), err.msg);
    fz_check(!ds4_model_from_gguf(&model, &g, &err), err.msg);
    fz_check(!ds4_model_tokenizer(&model, &tok, &err), err.msg);
    fprintf(stderr, "fuzz_tokenizer: vocabulary of the synthetic tiny model (%u tokens)\n",
            tok->n_vocab);
}

static void check_pretok(const char *text, size_t len) {
    ds4_spans sp = {0};
    ds4err err = {0};
    if (!ds4_pretok_split(&tok->pretok, text, len, &sp, &err)) {
        size_t end = 0;
        for (size_t i = 0; i < sp.n; i++) {
            fz_check(sp.v[i].off >= end && sp.v[i].len <= len - sp.v[i].off,
                     "pieces are ordered, disjoint and inside the text");
            end = sp.v[i].off + sp.v[i].len;
        }
    }
    ds4_pretok_spans_free(&sp);
}

static void check_round_trip(const char *text, size_t len, unsigned flags) {
    ds4_tokens ids = {0};
    ds4err err = {0};
    if (ds4_tok_encode(tok, text, len, flags, &ids, &err)) {
        fz_check(err.code == DS4_E_NOMEM, "encoding fails only for lack of memory");
        ds4_tokens_free(&ids);
        return;
    }
    for (size_t i = 0; i < ids.n; i++)
        fz_check(ids.ids[i] >= 0 && (uint32_t)ids.ids[i] < tok->n_vocab, "ids are in the vocabulary");
    ds4_buf out = {0};
    fz_check(!ds4_tok_decode(tok, ids.ids, ids.n, &out, &err), "encoded ids decode");
    fz_check(out.len == len && (!len || !memcmp(out.p, text, len)), "decode(encode(text)) == text");
    ds4_buf_free(&out);
    ds4_tokens_free(&ids);
}

/* The encoder's options from the mode byte: every effort of either
 * release, the refused ones (the first release's "low") included. */
static ds4_chat_opts chat_opts(uint8_t mode) {
    return (ds4_chat_opts){.thinking = mode & 1, .keep_thinking = mode & 4, .no_bos = mode & 8,
                           .effort = (ds4_chat_effort)((mode >> 4) & 3),
                           .release = mode & 64 ? DS4_CHAT_V4_0731 : DS4_CHAT_V4};
}

static void check_chat_prompt(const char *text, size_t len, uint8_t mode) {
    const char *nul = memchr(text, '\0', len);
    const char *sys = nul ? text : NULL, *prompt = nul ? nul + 1 : text;
    size_t sys_len = nul ? (size_t)(nul - text) : 0, prompt_len = nul ? len - sys_len - 1 : len;
    ds4_chat_opts o = chat_opts(mode);
    ds4_tokens ids = {0};
    ds4err err = {0};
    if (ds4_chat_prompt_ids(tok, sys, sys_len, prompt, prompt_len, &o, &ids, &err) == 0)
        for (size_t i = 0; i < ids.n; i++)
            fz_check(ids.ids[i] >= 0 && (uint32_t)ids.ids[i] < tok->n_vocab, "chat ids are in the vocabulary");
    ds4_tokens_free(&ids);
}

static void check_chat_json(const char *text, size_t len, uint8_t mode) {
    ds4_json_doc *doc;
    ds4err err = {0};
    if (ds4_json_parse(text, len, "messages", &doc, &err)) return;
    ds4_chat_msg *msgs;
    size_t n;
    if (!chat_msgs_from_json(ds4_json_root(doc), &msgs, &n, &err)) {
        ds4_chat_opts o = chat_opts(mode);
        ds4_buf out = {0};
        ds4_chat_render(msgs, n, &o, &out, &err);
        ds4_buf_free(&out);
        ds4_tokens ids = {0};
        ds4_chat_render_ids(tok, msgs, n, &o, &ids, &err);
        ds4_tokens_free(&ids);
        free(msgs);
    }
    ds4_json_free(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) setup();
    /* A private copy: no reader may rely on bytes past the end. */
    char *text = malloc(size ? size : 1);
    fz_check(text != NULL, "malloc");
    memcpy(text, data, size);
    uint8_t mode = size ? data[0] : 0;
    check_pretok(text, size);
    check_round_trip(text, size, 0);
    check_round_trip(text, size, DS4_TOK_ADDED);
    check_chat_prompt(text, size, mode);
    check_chat_json(text, size, mode);
    free(text);
    return 0;
}
