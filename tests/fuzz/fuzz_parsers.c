/* libFuzzer target: every reader of vectors and goldens, on arbitrary bytes:
 * the JSON parser, the golden stream reader, ds4's --dump-logprobs reader
 * and the official.vec reader, ds4ref-conform's reader of a server's
 * answer in each dialect, then the comparison (ds4ref-diff's figures and
 * reports) of whatever they accept.
 *
 * Properties checked, beyond "no sanitizer report":
 *   - golden: the reader is canonical, so an accepted file formats back to
 *     exactly its own bytes (docs/FORMATS.md §1.1);
 *   - dump: format(parse(x)) parses, and formats back to the same bytes;
 *   - official.vec: every case converts to a golden; a case formatted from
 *     that golden parses back to a trace identical to it;
 *   - a server's answer, in any dialect, that is accepted becomes a dump
 *     that parses, with ids inside the vocabulary and at most top_k
 *     alternatives a step;
 *   - a server's /v1/models answer gives at most the entries asked for,
 *     each digest 64 lowercase hex digits or none, its strings ended;
 *   - any accepted trace compared with itself is exact, never diverges,
 *     and its text and JSON reports format.
 *
 * Seeds (tests/fuzz/seeds.c): the committed goldens of vectors/ (and cut-down
 * ones), a dump and a .vec written from them, tiny.vec, JSON snippets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/conform/identity.h"
#include "check/conform/client.h"
#include "fuzzutil.h"
#include "ref/model/model.h"
#include "quant/gguf.h"
#include "ref/text/json.h"
#include "check/diff/diff.h"
#include "ref/format/dump.h"
#include "ref/format/golden.h"
#include "ref/format/golden_read.h"
#include "ref/format/golden_write.h"
#include "ref/format/lpvec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_self_diff(const ds4_golden *g) {
    ds4_diff_opts o = {.all_steps = false};
    ds4_diff_report r;
    ds4err err = {0};
    fz_check(!ds4chk_diff_compute(g, g, &o, &r, &err), "a trace compares with itself");
    fz_check(r.exact && r.first_divergence == -1 && r.first_inexact == -1 && !r.prompt_differs,
             "a trace is exactly equal to itself");
    ds4_diff_limits lim = {NAN, NAN, NAN, NAN, NAN, .exact = true};
    ds4_buf why = {0}, out = {0};
    fz_check(ds4chk_diff_check(&r, &lim, &why) == 0, "no --exact violation against itself");
    fz_check(!ds4chk_diff_format_text(&r, g, g, "a", "a", false, &why, &out, &err), "the text report formats");
    ds4_buf_free(&out);
    memset(&out, 0, sizeof(out));
    fz_check(!ds4chk_diff_format_json(&r, g, g, "a", "a", &why, &out, &err), "the JSON report formats");
    ds4_buf_free(&out);
    ds4_buf_free(&why);
    ds4chk_diff_report_free(&r);
}

/* b must be the same trace as a, field for field. */
static void check_same(const ds4_golden *a, const ds4_golden *b, const char *what) {
    ds4_diff_opts o = {.all_steps = true};
    ds4_diff_report r;
    ds4err err = {0};
    fz_check(!ds4chk_diff_compute(a, b, &o, &r, &err), what);
    fz_check(r.exact && r.n_a == r.n_b, what);
    ds4chk_diff_report_free(&r);
}

static void golden(const char *buf, size_t len) {
    ds4_golden g;
    ds4err err = {0};
    if (ds4_golden_read_text(buf, len, "fuzz.jsonl", &g, &err)) return;
    ds4_buf out = {0};
    fz_check(!ds4_golden_write_text(&g, &out, &err), "an accepted golden formats");
    fz_check(out.len == len && !memcmp(out.p, buf, len), "a golden formats back to its own bytes");
    ds4_buf_free(&out);
    check_self_diff(&g);
    /* What ds4ref writes next to a golden must read back as the same trace. */
    memset(&out, 0, sizeof(out));
    if (!ds4_dump_format(&g, &out, &err)) {
        ds4_golden d;
        fz_check(!ds4_dump_parse(out.p, out.len, "dump", &d, &err), "a dump written from a golden parses");
        ds4_golden_free(&d);
    }
    ds4_buf_free(&out);
    ds4_golden_free(&g);
}

static void dump(const char *buf, size_t len) {
    ds4_golden g, g2;
    ds4err err = {0};
    if (ds4_dump_parse(buf, len, "fuzz.json", &g, &err)) return;
    ds4_buf out = {0}, out2 = {0};
    if (!ds4_dump_format(&g, &out, &err)) {
        fz_check(!ds4_dump_parse(out.p, out.len, "dump", &g2, &err), "a formatted dump parses");
        fz_check(!ds4_dump_format(&g2, &out2, &err), "a re-read dump formats");
        fz_check(out.len == out2.len && !memcmp(out.p, out2.p, out.len), "dump formatting is stable");
        check_same(&g, &g2, "a formatted dump reads back as the same trace");
        ds4_golden_free(&g2);
    }
    ds4_buf_free(&out);
    ds4_buf_free(&out2);
    check_self_diff(&g);
    ds4_golden_free(&g);
}

static void vec_case(const ds4_lpv_case *c) {
    ds4_golden g;
    ds4err err = {0};
    if (ds4_lpvec_to_golden(c, &g, &err)) return;
    check_self_diff(&g);
    ds4_lpv_append_opts o = {.id = c->id, .prompt_path = c->prompt, .max_top = DS4_LPV_MAX_TOP};
    ds4_buf out = {0};
    ds4_buf_puts(&out, DS4_LPV_HEADER "\n");
    if (!ds4_lpvec_format_case(&g, &o, &out, &err)) {
        ds4_lpv_file f;
        fz_check(!ds4_lpvec_parse(out.p, out.len, "case.vec", &f, &err) && f.n_cases == 1,
                 "a formatted case parses");
        ds4_golden g2;
        fz_check(!ds4_lpvec_to_golden(&f.cases[0], &g2, &err), "a re-read case converts");
        check_same(&g, &g2, "a formatted case reads back as the same trace");
        ds4_golden_free(&g2);
        ds4_lpvec_free(&f);
    }
    ds4_buf_free(&out);
    ds4_golden_free(&g);
}

static void vec(const char *buf, size_t len) {
    ds4_lpv_file f;
    ds4err err = {0};
    if (ds4_lpvec_parse(buf, len, "fuzz.vec", &f, &err)) return;
    for (uint32_t i = 0; i < f.n_cases; i++) {
        fz_check(ds4_lpvec_find(&f, f.cases[i].id) != NULL, "every case is found by id");
        vec_case(&f.cases[i]);
    }
    ds4_lpvec_free(&f);
}

static void json(const char *buf, size_t len) {
    ds4_json_doc *doc;
    ds4err err = {0};
    if (ds4_json_parse(buf, len, "fuzz.json", &doc, &err)) {
        fz_check(err.code != DS4_OK && err.msg[0], "a refusal carries a code and a message");
        return;
    }
    const ds4_json *root = ds4_json_root(doc);
    fz_check(root && root->offset < len, "the root lies inside the text");
    if (root->type == DS4_JSON_OBJECT)
        for (size_t i = 0; i < root->n; i++)
            if (strlen(root->keys[i].str) == root->keys[i].len)   /* no \u0000 inside */
                fz_check(ds4_json_get(root, root->keys[i].str) != NULL, "every key is found");
    ds4_json_free(doc);
}

/* The synthetic tiny model's vocabulary, indexed by bytes for the text
 * dialect: made once. */
static const ds4_cf_vocab_index *answer_vocab(uint32_t *n_vocab, const ds4_tokenizer **out) {
    static ds4_cf_vocab_index *ix;
    static ds4_model model;
    static const ds4_tokenizer *tok;
    static uint32_t n;
    if (!ix) {
        uint8_t *bytes;
        size_t len;
        ds4_gguf_file g;
        ds4err err = {0};
        fz_tiny_model(false, &bytes, &len);
        fz_check(!ds4_gguf_parse(&g, bytes, len, "tiny.gguf", &err), err.msg);
        fz_check(!ds4_model_from_gguf(&model, &g, &err), err.msg);
        fz_check(!ds4_model_tokenizer(&model, &tok, &err), err.msg);
        fz_check(!ds4chk_client_index_new(tok, true, &ix, &err), err.msg);
        n = tok->n_vocab;
    }
    *n_vocab = n;
    *out = tok;
    return ix;
}

static void server_answer(const char *buf, size_t len) {
    static const int32_t p0[3] = {1, 2, 3}, ref0[4] = {104, 105, 256, 300};
    const int32_t *ids[1] = {p0}, *refs[1] = {ref0};
    const uint32_t n[1] = {3}, ref_n[1] = {4};
    int32_t cut[1];
    uint32_t n_vocab;
    const ds4_tokenizer *tok;
    ds4_cf_server_cell c = {.ids = ids, .n = n, .ref_ids = refs, .ref_n = ref_n, .cut = cut,
                            .rows = 1, .n_tokens = 4, .top_k = 3, .ctx = 64};
    c.vocab = answer_vocab(&n_vocab, &tok);
    c.tok = tok;
    const int dialects[] = {DS4_CF_DIALECT_IDS, DS4_CF_DIALECT_LOSSY, DS4_CF_DIALECT_LLAMA,
                            DS4_CF_DIALECT_SGLANG, DS4_CF_DIALECT_DS4};
    for (size_t d = 0; d < sizeof(dialects) / sizeof(dialects[0]); d++) {
        c.dialect = dialects[d];
        ds4_buf out = {0};
        ds4err err = {0};
        if (ds4chk_client_answer(&c, 0, buf, len, &out, &err)) {
            fz_check(err.code != DS4_OK && err.msg[0], "a refused answer carries a message");
            ds4_buf_free(&out);
            continue;
        }
        ds4_golden g;
        fz_check(!ds4_dump_parse(out.p, out.len, "answer", &g, &err), "an accepted answer's dump parses");
        fz_check(c.dialect != DS4_CF_DIALECT_DS4 || g.n_steps <= c.n_tokens,
                 "a text answer makes at most max_tokens steps");
        for (uint32_t i = 0; i < g.n_steps; i++) {
            fz_check(g.steps[i].n_top <= c.top_k, "at most top_k alternatives a step");
            if (c.dialect == DS4_CF_DIALECT_LOSSY || c.dialect == DS4_CF_DIALECT_DS4) {
                fz_check(g.steps[i].tok.id >= 0 && (uint32_t)g.steps[i].tok.id < n_vocab,
                         "a text names an id of the vocabulary");
                for (uint32_t k = 0; k < g.steps[i].n_top; k++)
                    fz_check(g.steps[i].top[k].id >= 0 && (uint32_t)g.steps[i].top[k].id < n_vocab,
                             "a text names an id of the vocabulary");
            }
        }
        ds4_golden_free(&g);
        ds4_buf_free(&out);
    }
}

/* A server's /v1/models answer (conform/identity.h): at most the entries
 * asked for, each digest 64 lowercase hex digits or none, every string
 * ended inside its buffer. */
static void models(const char *buf, size_t len) {
    ds4_cf_named e[3];
    memset(e, 0x5a, sizeof(e));
    uint32_t n = 99;
    ds4chk_identity_parse_models(buf, len, e, 3, &n);
    fz_check(n <= 3, "no more entries than asked for");
    for (uint32_t i = 0; i < n; i++) {
        size_t k = strnlen(e[i].sha, sizeof(e[i].sha));
        fz_check(k == 0 || k == 64, "a digest is 64 digits or none");
        for (size_t j = 0; j < k; j++)
            fz_check((e[i].sha[j] >= '0' && e[i].sha[j] <= '9') ||
                     (e[i].sha[j] >= 'a' && e[i].sha[j] <= 'f'), "a digest is lowercase hex");
        fz_check(strnlen(e[i].root, sizeof(e[i].root)) < sizeof(e[i].root), "root ends");
        fz_check(strnlen(e[i].id, sizeof(e[i].id)) < sizeof(e[i].id), "id ends");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy, so a reader looking past the end is caught. */
    char *buf = malloc(size ? size : 1);
    fz_check(buf != NULL, "malloc");
    memcpy(buf, data, size);
    json(buf, size);
    golden(buf, size);
    dump(buf, size);
    vec(buf, size);
    server_answer(buf, size);
    models(buf, size);
    free(buf);
    return 0;
}
