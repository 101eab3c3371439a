/* Seed corpora of the fuzz targets, generated rather than committed:
 *
 *   seeds OUTDIR        (run from the repository root: reads vectors/)
 *
 * writes OUTDIR/gguf, OUTDIR/model, OUTDIR/tokenizer, OUTDIR/parsers,
 * OUTDIR/safetensors and OUTDIR/hfbind:
 *   gguf       the malformed-file catalogue (tests/malformed.c), the small
 *              valid file (v2 and v3), nested arrays up to one level too
 *              deep, the tiny and tiny-0731 models' metadata without their tensors;
 *   model      edit lists for fuzz_model: none (the model itself), and one
 *              interesting value written over each metadata value, each
 *              array count and each field of each tensor's info record;
 *   dflash     the same for fuzz_dflash, of tiny-dspark's drafter file;
 *   tokenizer  the prompts of vectors/prompts, special-token strings, chat
 *              messages as JSON, scripts, digits, whitespace, bad UTF-8;
 *   parsers    a committed golden and cut-down ones (complete,
 *              interrupted, drafted by DSpark), a dump and an official.vec case written from
 *              them, vectors/tiny.vec, JSON edge cases, a server answer
 *              in each dialect ds4ref-conform reads;
 *   safetensors  the format's own test vector, headers with metadata, every
 *              type, an empty tensor and tensors out of offset order, a
 *              few refused ones (a gap, an overlap, a bad count), and
 *              shard indexes;
 *   hfbind     the tiny checkpoint's config.json, index and first shard
 *   server     ds4ref-server's request bodies, good and bad
 *              header as written, and edits of each (a string, a duplicate
 *              key, a huge number, a missing shard, a dtype, a shape). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "base/sha256.h"
#include "fuzzutil.h"
#include "malformed.h"
#include "quant/gguf.h"
#include "ref/format/dump.h"
#include "ref/format/golden.h"
#include "ref/format/golden_read.h"
#include "ref/format/golden_write.h"
#include "ref/format/lpvec.h"

static const char *outdir;
static unsigned n_written;

_Noreturn static void fail(const char *what, const char *why) {
    fprintf(stderr, "seeds: %s: %s\n", what, why);
    exit(1);
}

static void put(const char *target, const char *name, const void *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", outdir, target);
    if (mkdir(path, 0755) && errno != EEXIST) fail(path, strerror(errno));
    snprintf(path, sizeof(path), "%s/%s/%s", outdir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) fail(path, "cannot write");
    n_written++;
}

static void put_str(const char *target, const char *name, const char *s) {
    put(target, name, s, strlen(s));
}

/* ---------------------------------------------------------------- gguf */

/* A synthetic model's metadata without its tensors: a small file that
 * parses and takes the model validation through the whole configuration
 * (fuzz_model covers the tensors).  The tensor count is the u64 at byte 8;
 * the first tensor record starts where the metadata ends. */
static void put_metadata(const char *config, const char *name) {
    uint8_t *buf;
    size_t len;
    fz_synth_model(config, false, &buf, &len);
    ds4_gguf_file g;
    ds4err err = {0};
    if (ds4_gguf_parse(&g, buf, len, "tiny.gguf", &err)) fail(config, err.msg);
    size_t meta_end = (size_t)g.tensors[0].info_off;
    for (uint64_t i = 1; i < g.n_tensors; i++)
        if (g.tensors[i].info_off < meta_end) meta_end = (size_t)g.tensors[i].info_off;
    ds4_gguf_close(&g);
    memset(buf + 8, 0, 8);
    put("gguf", name, buf, meta_end);
    free(buf);
}

static void gguf_seeds(void) {
    mf_case *cases;
    size_t n;
    if (mf_catalogue(&cases, &n)) fail("catalogue", "out of memory");
    for (size_t i = 0; i < n; i++) put("gguf", cases[i].name, cases[i].buf, cases[i].len);
    mf_free(cases, n);
    for (uint32_t v = 2; v <= 3; v++) {
        uint8_t *b;
        size_t len;
        char name[32];
        if (mf_valid_small(v, &b, &len)) fail("valid small", "out of memory");
        snprintf(name, sizeof(name), "valid-small-v%u", v);
        put("gguf", name, b, len);
        free(b);
    }
    for (int d = 1; d <= GGUF_MAX_ARRAY_DEPTH + 1; d++) {
        uint8_t *b;
        size_t len;
        char name[32];
        if (mf_nested_arrays(d, &b, &len)) fail("nested arrays", "out of memory");
        snprintf(name, sizeof(name), "nested-%d", d);
        put("gguf", name, b, len);
        free(b);
    }
    put_metadata("tiny", "tiny-metadata");
    put_metadata("tiny-0731", "tiny-0731-metadata");   /* its DSpark keys */
}

/* ---------------------------------------------------------------- model */

/* One fz_edit record for TARGET: kind 2 writes interesting[pick] at off. */
static void put_edit(const char *target, const char *name, uint64_t off, uint8_t pick) {
    uint8_t rec[5];
    uint32_t w = (2u << 30) | (uint32_t)(off & 0x3fffffff);
    for (int b = 0; b < 4; b++) rec[b] = (uint8_t)(w >> 8 * b);
    rec[4] = pick;
    put(target, name, rec, sizeof(rec));
}

/* Edit lists of a GGUF (buf, len) for TARGET: none, and one interesting
 * value over each metadata value, array count and tensor info field. */
static void edit_seeds(const char *target, uint8_t *buf, size_t len) {
    ds4_gguf_file g;
    ds4err err = {0};
    if (ds4_gguf_parse(&g, buf, len, target, &err)) fail(target, err.msg);
    put(target, "unedited", "", 0);
    char name[64];
    /* Picks index fuzz_model's table: 0 -> 0, 2 -> 2, 22 -> UINT32_MAX,
     * 26 -> UINT64_MAX, 29 -> NaN. */
    for (uint64_t i = 0; i < g.n_kv; i++) {
        const ds4_gguf_kv *kv = &g.kv[i];
        snprintf(name, sizeof(name), "kv%llu-zero", (unsigned long long)i);
        put_edit(target, name, kv->value_off, 0);
        snprintf(name, sizeof(name), "kv%llu-nan", (unsigned long long)i);
        put_edit(target, name, kv->value_off, 29);
        if (kv->type == GGUF_ARR) {   /* u32 element type, then the u64 count */
            snprintf(name, sizeof(name), "kv%llu-count", (unsigned long long)i);
            put_edit(target, name, kv->value_off + 4, 22);
        }
    }
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const ds4_gguf_tensor *t = &g.tensors[i];
        /* name: u64 length + bytes; n_dims u32; ne[n_dims] u64; type u32; offset u64 */
        uint64_t at = t->info_off + 8 + strlen(t->name);
        uint64_t fields[4] = {at, at + 4, at + 4 + 8ull * t->n_dims, at + 8 + 8ull * t->n_dims};
        const char *what[4] = {"ndims", "ne0", "type", "offset"};
        const uint8_t pick[4] = {0, 2, 0, 26};
        for (int f = 0; f < 4; f++) {
            snprintf(name, sizeof(name), "t%llu-%s", (unsigned long long)i, what[f]);
            put_edit(target, name, fields[f], pick[f]);
        }
    }
    uint8_t trunc[4];
    uint32_t w = (3u << 30) | (uint32_t)g.data_off;
    for (int b = 0; b < 4; b++) trunc[b] = (uint8_t)(w >> 8 * b);
    put(target, "truncate-at-data", trunc, sizeof(trunc));
    ds4_gguf_close(&g);
}

static void model_seeds(void) {
    uint8_t *buf;
    size_t len;
    fz_tiny_model(false, &buf, &len);
    edit_seeds("model", buf, len);
    free(buf);
    uint8_t *trunk, *draft;
    size_t trunk_len, draft_len;
    fz_dspark_split(&trunk, &trunk_len, &draft, &draft_len);
    edit_seeds("dflash", draft, draft_len);
    free(trunk);
    free(draft);
}

/* ---------------------------------------------------------------- tokenizer */

static void tokenizer_seeds(void) {
    static const char *const texts[][2] = {
        {"hello", "Hello world"},
        {"specials", "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
                     "<\xef\xbd\x9cUser\xef\xbd\x9c>hi<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>"
                     "x</think><\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
        {"dsml", "\xef\xbd\x9c" "DSML\xef\xbd\x9cinvoke name=\"f\""},
        {"digits", "1234567890 3.14159 -42 1e10 007"},
        {"space", "  a\t\tb\n\n\nc \r\n   \xc2\xa0 end  "},
        {"cjk", "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82"
                "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf"},
        {"emoji", "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd e\xcc\x81 \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d"},
        {"badutf8", "\xff\xfe\xc0\x80\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82 ok \x80"},
        {"code", "int main(void) {\n    return 0; // done\n}\n"},
        {"punct", "Don't stop! It's 5 o'clock... (maybe?) \"quoted\" [x] {y}"},
        {"chat-json", "[{\"role\":\"system\",\"content\":\"Be brief\"},"
                      "{\"role\":\"user\",\"content\":\"hi\"},"
                      "{\"role\":\"assistant\",\"content\":\"yo\",\"reasoning_content\":\"r\"},"
                      "{\"role\":\"user\",\"content\":\"more\"}]"},
        {"chat-tools", "[{\"role\":\"system\",\"content\":\"\",\"tools\":[{\"type\":\"function\","
                       "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]},"
                       "{\"role\":\"user\",\"content\":\"call f\"},{\"role\":\"assistant\","
                       "\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
                       "{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                       "\"tool_call_id\":\"1\",\"content\":\"ok\"}]"},
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        put_str("tokenizer", texts[i][0], texts[i][1]);
    static const char sys_prompt[] = "You are terse\0What is 2+2?";
    put("tokenizer", "system-nul-prompt", sys_prompt, sizeof(sys_prompt) - 1);
    static const char *const prompts[] = {"capital", "code", "story"};
    for (size_t i = 0; i < 3; i++) {
        char path[128], *buf;
        size_t len;
        ds4err err = {0};
        snprintf(path, sizeof(path), "vectors/prompts/%s.txt", prompts[i]);
        if (ds4_file_read(path, 1 << 20, &buf, &len, &err)) fail(path, err.msg);
        snprintf(path, sizeof(path), "prompt-%s", prompts[i]);
        put("tokenizer", path, buf, len);
        free(buf);
    }
}

/* ---------------------------------------------------------------- parsers */

/* The first n steps of g as a new golden ending with stop. */
static void put_cut(const ds4_golden *g, uint32_t n, ds4_stop stop, const char *name) {
    ds4_golden c;
    ds4err err = {0};
    ds4_golden_header h = g->h;   /* shallow: set_header copies deeply */
    if (stop == DS4_STOP_LENGTH) h.settings.max_steps = n;
    ds4_golden_init(&c, DS4_TRACE_GOLDEN);
    if (ds4_golden_set_header(&c, &h, &err)) fail(name, err.msg);
    for (uint32_t i = 0; i < n && i < g->n_steps; i++)
        if (ds4_golden_push_step(&c, &g->steps[i], &err)) fail(name, err.msg);
    ds4_golden_set_end(&c, stop);
    ds4_buf out = {0};
    if (ds4_golden_write_text(&c, &out, &err)) fail(name, err.msg);
    put("parsers", name, out.p, out.len);
    ds4_buf_free(&out);
    ds4_golden_free(&c);
}

static void parser_seeds(void) {
    static const char golden_path[] = "vectors/tiny-ds4-qaton-capital.jsonl";
    char *buf;
    size_t len;
    ds4err err = {0};
    if (ds4_file_read(golden_path, (size_t)1 << 30, &buf, &len, &err)) fail(golden_path, err.msg);
    put("parsers", "golden-full", buf, len);
    ds4_golden g;
    if (ds4_golden_read_text(buf, len, golden_path, &g, &err)) fail(golden_path, err.msg);
    free(buf);
    put_cut(&g, 2, DS4_STOP_LENGTH, "golden-2-steps");
    put_cut(&g, 1, DS4_STOP_INTERRUPTED, "golden-interrupted");
    put_cut(&g, 0, DS4_STOP_ERROR, "golden-error");
    /* A stream drafted by DSpark names its drafter (settings.drafter). */
    ds4_golden_settings plain = g.h.settings;
    g.h.settings.mtp_draft = 5;
    memcpy(g.h.settings.drafter, "dspark", 7);
    put_cut(&g, 2, DS4_STOP_LENGTH, "golden-dspark");
    g.h.settings = plain;
    ds4_buf out = {0};
    if (ds4_dump_format(&g, &out, &err)) fail("dump", err.msg);
    put("parsers", "dump", out.p, out.len);
    ds4_buf_free(&out);
    memset(&out, 0, sizeof(out));
    ds4_lpv_append_opts o = {.id = "seed", .prompt_path = "prompts/capital.txt", .max_top = 5};
    ds4_buf_puts(&out, DS4_LPV_HEADER "\n");
    if (ds4_lpvec_format_case(&g, &o, &out, &err)) fail("vec case", err.msg);
    put("parsers", "vec-case", out.p, out.len);
    ds4_buf_free(&out);
    ds4_golden_free(&g);
    if (ds4_file_read("vectors/tiny.vec", 1 << 24, &buf, &len, &err)) fail("tiny.vec", err.msg);
    put("parsers", "tiny.vec", buf, len);
    free(buf);
    static const char *const json[][2] = {
        {"json-empty-object", "{}"},
        {"json-nested", "[[[[{\"a\":[1,2,{\"b\":null}]}]]]]"},
        {"json-numbers", "[0,-0,1e400,-1e-400,123456789012345678901234567890,0.1,1E+2,-3.5e-7]"},
        {"json-strings", "[\"\\u0000\",\"\\ud83d\\ude00\",\"\\ud800\",\"\\\"\\\\\\/\\b\\f\\n\\r\\t\","
                         "\"\xf0\x9f\x98\x80\"]"},
        {"json-literals", "{\"t\":true,\"f\":false,\"n\":null,\"t\":1}"},
        /* A server's answer in each dialect ds4ref-conform reads. */
        {"answer-ids", "{\"choices\": [{\"logprobs\": {\"tokens\": [\"token_id:7\", \"token_id:9\"], "
                       "\"top_logprobs\": [{\"token_id:8\": -2.0, \"token_id:7\": -0.25}, "
                       "{\"token_id:9\": -1.5}]}}], \"usage\": {\"prompt_tokens\": 3}}"},
        {"answer-text", "{\"choices\": [{\"logprobs\": {\"tokens\": [\"a\", \"bytes:\\\\x9b\"], "
                        "\"top_logprobs\": [{\"a\": -0.25, \"b\": -2.0}, {\"\": -1.5}]}}]}"},
        {"answer-llama", "{\"completion_probabilities\": [{\"id\": 7, \"logprob\": -0.25, "
                         "\"top_logprobs\": [{\"id\": 7, \"logprob\": -0.25}, {\"id\": 8, "
                         "\"logprob\": -2.0}]}]}"},
        {"answer-llama-tokens", "{\"tokens\": [7, 228, 9], \"completion_probabilities\": [{\"id\": 7, "
                                "\"logprob\": -0.25, \"top_logprobs\": []}, {\"id\": 9, \"logprob\": null, "
                                "\"top_logprobs\": [{\"id\": 9, \"logprob\": -1.5}]}]}"},
        {"answer-ds4", "{\"choices\": [{\"message\": {\"content\": \"hi\\ufffd there\"}, "
                       "\"finish_reason\": \"stop\"}], \"usage\": {\"prompt_tokens\": 3}}"},
        {"answer-sglang", "{\"meta_info\": {\"output_token_logprobs\": [[-0.25, 7, null]], "
                          "\"output_top_logprobs\": [[[-0.25, 7, null], [-2.0, 8, null]]]}}"},
        {"models", "{\"object\": \"list\", \"data\": [{\"id\": \"tiny.gguf\", \"root\": "
                   "\"/m/tiny.gguf\"}, {\"id\": \"x\", \"model_sha256\": \"0123456789ABCDEF"
                   "0123456789abcdef0123456789abcdef0123456789abcdef\"}]}"},
    };
    for (size_t i = 0; i < sizeof(json) / sizeof(json[0]); i++) put_str("parsers", json[i][0], json[i][1]);
}

/* ------------------------------------------------------- safetensors */

/* One file: the 8-byte length, the header, data_len bytes. */
static void put_st(const char *name, const char *header, size_t data_len) {
    size_t n = strlen(header), len = 8 + n + data_len;
    uint8_t *b = calloc(1, len);
    if (!b) fail(name, "out of memory");
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, header, n);
    for (size_t i = 0; i < data_len; i++) b[8 + n + i] = (uint8_t)(i * 37);
    put("safetensors", name, b, len);
    free(b);
}

static void safetensors_seeds(void) {
    put_st("format-vector", "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],"
                            "\"data_offsets\":[0,24]}}", 24);
    put_st("metadata-only", "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 0);
    put_st("every-type",
           "{\"__metadata__\":{\"format\":\"pt\"},"
           "\"a\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]},"
           "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
           "\"c\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[2,3]},"
           "\"d\":{\"dtype\":\"F8_E5M2\",\"shape\":[1],\"data_offsets\":[3,4]},"
           "\"e\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[4,8]},"
           "\"f\":{\"dtype\":\"F8_E8M0\",\"shape\":[2],\"data_offsets\":[8,10]},"
           "\"g\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[10,12]},"
           "\"h\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[12,14]},"
           "\"i\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[14,16]},"
           "\"j\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[16,20]},"
           "\"k\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[20,24]},"
           "\"l\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[24,28]},"
           "\"m\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[28,32]},"
           "\"n\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[32,40]},"
           "\"o\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[40,48]},"
           "\"p\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[48,56]}}", 56);
    put_st("out-of-order-empty",
           "{\"z\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]},"
           "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[4,4]},"
           "\"a\":{\"shape\":[2],\"dtype\":\"I16\",\"data_offsets\":[0,4]}}", 7);
    put_st("gap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[1,5]}}", 5);
    put_st("overlap",
           "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6);
    put_str("safetensors", "index",
            "{\"metadata\": {\"total_size\": 11}, \"weight_map\": {\"a\": \"s1.safetensors\", "
            "\"b\": \"s2.safetensors\", \"a.scale\": \"s1.safetensors\"}}");
    put_str("safetensors", "index-outside", "{\"weight_map\": {\"a\": \"../x\"}}");
    put_st("bad-count", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,10]}}",
           10);
}

/* ----------------------------------------------------------- hfbind */

/* Input `which` (fuzz_hfbind's first byte) with text, with the first
 * `from` in it replaced by `to` when both are given. */
static void put_bind(const char *name, uint8_t which, const char *text, size_t n, const char *from,
                     const char *to) {
    const char *at = from ? memmem(text, n, from, strlen(from)) : NULL;
    if (from && !at) fail(name, "the edit's text is not in the file");
    const size_t cut = at ? (size_t)(at - text) : n, skip = at ? strlen(from) : 0;
    const size_t add = at ? strlen(to) : 0, len = 1 + n - skip + add;
    uint8_t *b = malloc(len);
    if (!b) fail(name, "out of memory");
    b[0] = which;
    memcpy(b + 1, text, cut);
    memcpy(b + 1 + cut, to ? to : "", add);
    memcpy(b + 1 + cut + add, text + cut + skip, n - cut - skip);
    put("hfbind", name, b, len);
    free(b);
}

static char *read_all(const char *dir, const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    char *p;
    ds4err err = {0};
    if (ds4_file_read(path, (size_t)1 << 30, &p, n, &err)) fail(path, err.msg);
    return p;
}

static void hfbind_seeds(void) {
    char *dir = fz_tiny_checkpoint();
    size_t nc, ni, ns;
    char *cfg = read_all(dir, "config.json", &nc);
    char *idx = read_all(dir, "model.safetensors.index.json", &ni);
    char *shard = read_all(dir, "model-00001-of-00002.safetensors", &ns);
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)(uint8_t)shard[k] << (8 * k);
    const char *hdr = shard + 8;
    put_bind("config", 0, cfg, nc, NULL, NULL);
    put_bind("config-string-limit", 0, cfg, nc, "\"swiglu_limit\": 10.0", "\"swiglu_limit\": \"10\"");
    put_bind("config-duplicate", 0, cfg, nc, "\"hidden_size\": 256,", "\"hidden_size\": 256, \"hidden_size\": 128,");
    put_bind("config-huge", 0, cfg, nc, "\"num_hidden_layers\": 4", "\"num_hidden_layers\": 4e300");
    put_bind("config-dspark", 0, cfg, nc, "\"num_nextn_predict_layers\": 1,",
             "\"num_nextn_predict_layers\": 1, \"dspark_block_size\": 5, "
             "\"dspark_noise_token_id\": 511, \"dspark_target_layer_ids\": [1, 2, 3], "
             "\"dspark_markov_rank\": 16,");
    put_bind("index", 1, idx, ni, NULL, NULL);
    put_bind("index-missing-shard", 1, idx, ni, "model-00001-of-00002", "model-00003-of-00002");
    put_bind("header", 2, hdr, (size_t)hl, NULL, NULL);
    put_bind("header-dtype", 2, hdr, (size_t)hl, "\"F8_E4M3\"", "\"BF16\"   ");
    put_bind("header-shape", 2, hdr, (size_t)hl, "[128,256]", "[128,255]");
    free(cfg), free(idx), free(shard);
    fz_remove_checkpoint(dir);
    free(dir);
}

/* ------------------------------------------------------------ shards */

/* Shard files of fuzz_shard's run (FZ_SHARD_DESC, FZ_SHARD_CELLS cells, the
 * last n/a): a whole one (a cell that ran with its files, one that failed,
 * the n/a one), one that stopped before a cell ran, and one of another run. */
static void shard_seeds(void) {
    char key[65];
    ds4_sha256_hex(FZ_SHARD_DESC, strlen(FZ_SHARD_DESC), key);
    static const char *const states[][3] = {{"ran", "error", "na"}, {"ran", "not-run", "na"}};
    static const char *const names[] = {"whole", "stopped", "other-run"};
    for (int v = 0; v < 3; v++) {
        char buf[4096];
        int n = snprintf(buf, sizeof(buf),
                         "{\"ds4ref_conform_shard\": 1, \"key\": \"%s\", \"shard\": 0, \"shards\": 1, "
                         "\"cells\": [0, 3], \"n_cells\": 3,\n  \"identity\": {\"by_server\": 1, "
                         "\"server_unnamed\": 0, \"server_names\": \"\"},\n"
                         "  \"run\": [\"ds4ref-conform run, fuzz_shard\"],\n"
                         "  \"cell_results\": [\n", v == 2 ? "00" : key);
        for (int i = 0; i < 3; i++)
            n += snprintf(buf + n, sizeof(buf) - (size_t)n,
                          "    {\"index\": %d, \"state\": \"%s\", \"exit_status\": %d, "
                          "\"seconds\": 0.5, \"detail\": \"%s\", \"accept\": {\"known\": true, "
                          "\"has_deepest\": false, \"proposed\": 4, \"accepted\": 2, \"deepest\": 0}, "
                          "\"cuts\": [-1], \"files\": %s}%s\n", i, states[v == 1][i], i == 1 ? 1 : 0,
                          i == 1 ? "the backend exited with status 1" : "",
                          i == 0 ? "{\"log\": \"6f6b0a\", \"out\": \"7b7d0a\"}" : "{}",
                          i < 2 ? "," : "");
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "  ]\n}\n");
        put("shard", names[v], buf, (size_t)n);
    }
}

/* ----------------------------------------------------------- server */

/* Request bodies, after fuzz_server's first byte: the endpoint. */
static void server_seeds(void) {
    static const struct { const char *name; char kind; const char *body; } seeds[] = {
        {"completions", 0, "{\"prompt\": \"Hello there\", \"max_tokens\": 12, \"logprobs\": 5, "
                          "\"echo\": true, \"stop\": [\"a\", \"bc\"], \"seed\": 7, "
                          "\"temperature\": 0.9, \"stream\": true}"},
        {"completions-ids", 0, "{\"prompt\": [[1, 2, 3], \"x\"], \"ignore_eos\": true, "
                              "\"return_tokens_as_token_ids\": true}"},
        {"completions-bad", 0, "{\"prompt\": \"x\", \"max_tokens\": \"5\", \"n\": 2}"},
        {"completions-dup", 0, "{\"prompt\": \"x\", \"prompt\": \"y\"}"},
        {"completions-big", 0, "{\"prompt\": [1, 99999999999999999999], \"top_p\": 0.5}"},
        {"chat", 1, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                   "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}], "
                   "\"logprobs\": true, \"top_logprobs\": 3, "
                   "\"chat_template_kwargs\": {\"thinking\": true}, \"max_completion_tokens\": 4}"},
        {"chat-bad", 1, "{\"messages\": [{\"role\": \"robot\", \"content\": 1}]}"},
        {"tokenize", 2, "{\"prompt\": \"Hello <\\u00e9>\", \"special\": false}"},
        {"detokenize", 3, "{\"tokens\": [1, 2, 300]}"},
        {"not-json", 0, "{bad"},
        {"scoring", 0, "{\"prompt\": \"a\\u0000b\", \"max_tokens\": 0, \"echo\": true, "
                      "\"logprobs\": 0, \"prompt_logprobs\": 3}"},
        {"stream-usage", 0, "{\"prompt\": \"x\", \"stream\": true, "
                           "\"stream_options\": {\"include_usage\": true}}"},
        {"model-nul", 1, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                        "\"model\": \"m\\u0000x\"}"},
        {"tokenize-bos", 2, "{\"prompt\": \"Hello\", \"add_special_tokens\": true}"},
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        char buf[1024];
        buf[0] = seeds[i].kind;
        const size_t n = strlen(seeds[i].body);
        memcpy(buf + 1, seeds[i].body, n);
        put("server", seeds[i].name, buf, n + 1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: seeds OUTDIR   (run from the repository root)\n");
        return 2;
    }
    outdir = argv[1];
    if (mkdir(outdir, 0755) && errno != EEXIST) fail(outdir, strerror(errno));
    gguf_seeds();
    model_seeds();
    tokenizer_seeds();
    parser_seeds();
    safetensors_seeds();
    hfbind_seeds();
    server_seeds();
    shard_seeds();
    printf("seeds: %u files in %s\n", n_written, outdir);
    return 0;
}
