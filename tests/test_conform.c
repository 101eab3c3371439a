/* ds4ref-conform's parts that need no backend process: the command
 * template (expansion, quoting, optional groups), the matrix syntax, the
 * acceptance lines of a backend's log, and the verdicts on hand-built
 * outputs and teacher-forced records whose expected figures are written out
 * below.  tests/conform.sh runs the whole program against real backends. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/conform/backend.h"
#include "check/conform/matrix.h"
#include "check/conform/client.h"
#include "ref/format/dump.h"
#include "ref/format/golden.h"
#include "check/conform/template.h"
#include "check/conform/verdict.h"
#include "testutil.h"
#include "ref/text/tokenizer.h"

/* ---- templates ---- */

static char *expand(const char *tmpl, const ds4_cf_vars *v, ds4err *err) {
    ds4_buf b = {0};
    if (ds4chk_template_expand(tmpl, v, &b, err)) {
        ds4_buf_free(&b);
        return NULL;
    }
    return b.p ? b.p : calloc(1, 1);
}

static const ds4_cf_vars vars = {
    .model = "/m/model.gguf", .mtp = "/m/it's mtp.gguf", .tokens_file = "/w/tokens",
    .prompt_file = "/w/prompt", .batch_tokens = "/w/batch tokens", .out = "/w/out",
    .ds4ref = "/bin/ds4ref", .n = 32, .draft = 3, .chunk = 7, .batch = 2, .ctx = 4096,
    .top_k = 20, .temp = 0.7, .seed = 1};

static void test_template_expand(void **state) {
    (void)state;
    ds4err err = {0};
    char *s = expand("x -m {model} --mtp {mtp} -n {n} --draft {draft} --chunk {chunk} -b {batch} "
                     "-c {ctx} -k {top_k} -T {temp} -s {seed} {tokens_file} {prompt_file} "
                     "{batch_tokens} > {out} {ds4ref}", &vars, &err);
    assert_non_null(s);
    /* Plain paths stay as they are; a space or a quote gets single quotes,
     * the quote itself as '\''. */
    assert_string_equal(s, "x -m /m/model.gguf --mtp '/m/it'\\''s mtp.gguf' -n 32 --draft 3 "
                           "--chunk 7 -b 2 -c 4096 -k 20 -T 0.7 -s 1 /w/tokens /w/prompt "
                           "'/w/batch tokens' > /w/out /bin/ds4ref");
    free(s);
    /* A batch's totals (chunk x batch, ctx x batch) and the twins. */
    ds4_cf_vars v = vars;
    v.model_f32 = "/w/model-f32.gguf";
    s = expand("e --ubatch {chunk_total} --n-ctx {ctx_total} -m {model_f32} {[--mtp {mtp_f32}]} "
               "{tokens_file} {out}", &v, &err);
    assert_string_equal(s, "e --ubatch 14 --n-ctx 8192 -m /w/model-f32.gguf  /w/tokens /w/out");
    free(s);
}

static void test_template_groups(void **state) {
    (void)state;
    ds4err err = {0};
    ds4_cf_vars v = vars;
    const char *t = "b {[--mtp {mtp} --mtp-draft {draft}]} {[--seed {seed}]}-o {out} {tokens_file}";
    char *s = expand(t, &v, &err);
    assert_string_equal(s, "b --mtp '/m/it'\\''s mtp.gguf' --mtp-draft 3 --seed 1-o /w/out /w/tokens");
    free(s);
    /* A group goes when a placeholder in it is 0 or empty. */
    v.draft = 0;
    v.seed = 0;
    s = expand(t, &v, &err);
    assert_string_equal(s, "b  -o /w/out /w/tokens");
    free(s);
    v = vars;
    v.mtp = NULL;
    s = expand(t, &v, &err);
    assert_string_equal(s, "b  --seed 1-o /w/out /w/tokens");
    free(s);
    /* {conf} is a threshold: 0 keeps its group, and it is written as a number. */
    v = vars;
    const char *tc = "b {[--mtp-draft {draft} --conf {conf}]} {out} {tokens_file}";
    s = expand(tc, &v, &err);
    assert_string_equal(s, "b --mtp-draft 3 --conf 0 /w/out /w/tokens");
    free(s);
    v.conf = 0.5;
    s = expand(tc, &v, &err);
    assert_string_equal(s, "b --mtp-draft 3 --conf 0.5 /w/out /w/tokens");
    free(s);
    /* {{ is a brace; a lone "]}" outside a group is text. */
    s = expand("echo {{x} ]} {out} {tokens_file}", &vars, &err);
    assert_string_equal(s, "echo {x} ]} /w/out /w/tokens");
    free(s);
}

/* Server templates: {port} required and expanded; the vllm preset's JSON
 * speculative config, with its braces, present at depth 3 and gone at 0. */
static void test_template_server(void **state) {
    (void)state;
    ds4err err = {0};
    uint32_t uses;
    assert_int_not_equal(ds4chk_template_check_server("e -m {model}", &uses, &err), 0);
    assert_non_null(strstr(err.msg, "no {port}"));
    assert_int_equal(ds4chk_template_check_server("e -m {model} --port {port}", &uses, &err), 0);
    assert_true(uses & 1u << DS4_CF_PORT);
    ds4_cf_vars v = vars;
    v.port = 8123;
    v.model = "/m/ckpt";
    const char *t = ds4chk_template_server_preset("vllm");
    assert_non_null(t);
    char *s = expand(t, &v, &err);
    assert_non_null(strstr(s, "--port 8123 --max-model-len 4096 --max-num-batched-tokens 14 "));
    assert_non_null(strstr(s, "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'"));
    free(s);
    v.draft = 0;
    s = expand(t, &v, &err);
    assert_null(strstr(s, "speculative"));
    free(s);
    const char *name, *tmpl, *about;
    uint32_t n = 0;
    for (; ds4chk_template_server_preset_at(n, &name, &tmpl, &about); n++)
        assert_int_equal(ds4chk_template_check_server(tmpl, &uses, &err), 0);
    assert_true(n >= 2);
    assert_null(ds4chk_template_server_preset("nope"));
    /* How each preset's engine reads prompts and names tokens. */
    assert_string_equal(ds4chk_template_server_dialect("llama-cpp-python"), "lossy-text");
    assert_string_equal(ds4chk_template_server_prompt("llama-cpp-python"), "text");
    assert_string_equal(ds4chk_template_server_dialect("llama-server"), "llama");
    assert_string_equal(ds4chk_template_server_prompt("vllm"), "ids");
    assert_string_equal(ds4chk_template_server_dialect("nope"), "ids");
}

/* A text prompt goes out as a JSON string; an answer whose usage counts
 * other than the reference's prompt tokens is refused with both counts,
 * and one without usage is taken. */
static void test_server_prompt_count(void **state) {
    (void)state;
    const int32_t p0[3] = {1, 2, 3};
    const int32_t *ids[1] = {p0};
    const uint32_t n[1] = {3};
    const char *text[1] = {"a\"b"};
    const size_t text_len[1] = {3};
    ds4_cf_server_cell c = {.ids = ids, .n = n, .text = text, .text_len = text_len, .rows = 1,
                            .n_tokens = 1, .top_k = 1, .ctx = 64, .dialect = DS4_CF_DIALECT_IDS};
    const char *steps = "{\"choices\": [{\"logprobs\": {\"tokens\": [\"token_id:7\"], "
                        "\"top_logprobs\": [{\"token_id:7\": -0.5}]}}]%s}";
    char body[512];
    ds4_buf out = {0};
    ds4err err = {0};
    snprintf(body, sizeof(body), steps, ", \"usage\": {\"prompt_tokens\": 4}");
    assert_int_not_equal(ds4chk_client_answer(&c, 0, body, strlen(body), &out, &err), 0);
    assert_non_null(strstr(err.msg, "row 0: the engine read the prompt as 4 tokens, the reference's has 3"));
    assert_non_null(strstr(err.msg, "--server-prompt ids"));
    ds4_buf_free(&out);
    snprintf(body, sizeof(body), steps, ", \"usage\": {\"prompt_tokens\": 3}");
    assert_int_equal(ds4chk_client_answer(&c, 0, body, strlen(body), &out, &err), 0);
    ds4_buf_free(&out);
    snprintf(body, sizeof(body), steps, "");
    assert_int_equal(ds4chk_client_answer(&c, 0, body, strlen(body), &out, &err), 0);
    ds4_buf_free(&out);
}

/* Each dialect's answer (in the shape its engine documents) becomes the
 * same dump: the chosen ids, and alternatives sorted by logprob with the
 * engine's own digits. */
static void test_server_answers(void **state) {
    (void)state;
    const int32_t p0[3] = {1, 2, 3};
    const int32_t *ids[1] = {p0};
    const uint32_t n[1] = {3};
    ds4_cf_server_cell c = {.ids = ids, .n = n, .rows = 1, .n_tokens = 2, .top_k = 2, .ctx = 64};
    static const struct {
        int dialect;
        const char *body;
    } answers[] = {
        {DS4_CF_DIALECT_IDS,
         "{\"choices\": [{\"logprobs\": {\"tokens\": [\"token_id:7\", \"token_id:9\"], "
         "\"token_logprobs\": [-0.25, -1.5], \"top_logprobs\": [{\"token_id:8\": -2.0, "
         "\"token_id:7\": -0.25}, {\"token_id:9\": -1.5, \"token_id:4\": -1.75}]}}]}"},
        {DS4_CF_DIALECT_LLAMA,
         "{\"content\": \"x\", \"completion_probabilities\": [{\"id\": 7, \"token\": \"a\", "
         "\"logprob\": -0.25, \"top_logprobs\": [{\"id\": 7, \"logprob\": -0.25}, {\"id\": 8, "
         "\"logprob\": -2.0}]}, {\"id\": 9, \"logprob\": -1.5, \"top_logprobs\": [{\"id\": 4, "
         "\"logprob\": -1.75}, {\"id\": 9, \"logprob\": -1.5}]}]}"},
        {DS4_CF_DIALECT_SGLANG,
         "{\"text\": \"x\", \"meta_info\": {\"output_token_logprobs\": [[-0.25, 7, null], "
         "[-1.5, 9, null]], \"output_top_logprobs\": [[[-0.25, 7, null], [-2.0, 8, null]], "
         "[[-1.75, 4, null], [-1.5, 9, null]]]}}"},
    };
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        c.dialect = answers[i].dialect;
        ds4_buf out = {0};
        ds4err err = {0};
        assert_int_equal(ds4chk_client_answer(&c, 0, answers[i].body, strlen(answers[i].body), &out, &err), 0);
        ds4_golden g;
        if (ds4_dump_parse(out.p, out.len, "answer", &g, &err)) fail_msg("%s: %s", out.p, err.msg);
        assert_false(g.has_logits);
        assert_int_equal(g.h.n_prompt, 3);
        assert_int_equal(g.n_steps, 2);
        assert_int_equal(g.steps[0].tok.id, 7);
        assert_int_equal(g.steps[1].tok.id, 9);
        assert_int_equal(g.steps[0].top[0].id, 7);
        assert_int_equal(g.steps[0].top[1].id, 8);
        assert_int_equal(g.steps[1].top[0].id, 9);   /* sorted: -1.5 before -1.75 */
        assert_int_equal(g.steps[1].top[1].id, 4);
        assert_true(g.steps[1].top[1].logprob == -1.75f);
        ds4_golden_free(&g);
        ds4_buf_free(&out);
        /* Another dialect's answer is refused, saying what was missing. */
        c.dialect = answers[(i + 1) % 3].dialect;
        assert_int_not_equal(ds4chk_client_answer(&c, 0, answers[i].body, strlen(answers[i].body),
                                                  &out, &err), 0);
        assert_non_null(strstr(err.msg, "row 0"));
        ds4_buf_free(&out);
    }
}

/* The first id of tok whose bytes are b[0..n), or -1. */
static int32_t id_of_bytes(const ds4_tokenizer *tok, const char *b, size_t n) {
    for (uint32_t i = 0; i < tok->n_vocab; i++) {
        ds4_buf out = {0};
        ds4err err = {0};
        const int32_t id = (int32_t)i;
        const bool same = !ds4_tok_decode(tok, &id, 1, &out, &err) && out.len == n &&
                          !memcmp(out.p, b, n);
        ds4_buf_free(&out);
        if (same) return id;
    }
    return -1;
}

/* llama-server gives a token whose text ends inside a UTF-8 character no
 * entry of its own (the next entry is for both); its "tokens" list every
 * step, and a step without an entry has no alternatives.  A null logprob
 * (logits that are not finite) is named as such. */
static void test_server_llama_tokens(void **state) {
    (void)state;
    const int32_t p0[3] = {1, 2, 3};
    const int32_t *ids[1] = {p0};
    const uint32_t n[1] = {3};
    ds4_cf_server_cell c = {.ids = ids, .n = n, .rows = 1, .n_tokens = 4, .top_k = 2, .ctx = 64,
                            .dialect = DS4_CF_DIALECT_LLAMA};
    const char *body = "{\"tokens\": [7, 228, 9, 5], \"completion_probabilities\": ["
                       "{\"id\": 7, \"logprob\": -0.25, \"top_logprobs\": [{\"id\": 7, \"logprob\": -0.25}]}, "
                       "{\"id\": 9, \"logprob\": -1.5, \"top_logprobs\": [{\"id\": 9, \"logprob\": -1.5}, "
                       "{\"id\": 4, \"logprob\": -1.75}]}]}";
    ds4_buf out = {0};
    ds4err err = {0};
    assert_int_equal(ds4chk_client_answer(&c, 0, body, strlen(body), &out, &err), 0);
    ds4_golden g;
    if (ds4_dump_parse(out.p, out.len, "answer", &g, &err)) fail_msg("%s: %s", out.p, err.msg);
    static const int32_t want[4] = {7, 228, 9, 5};
    static const uint32_t tops[4] = {1, 0, 2, 0};
    assert_int_equal(g.n_steps, 4);
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(g.steps[i].tok.id, want[i]);
        assert_int_equal(g.steps[i].n_top, tops[i]);
    }
    ds4_golden_free(&g);
    ds4_buf_free(&out);
    const char *nan = "{\"completion_probabilities\": [{\"id\": 30, \"logprob\": null, "
                      "\"top_logprobs\": [{\"id\": 0, \"logprob\": null}]}]}";
    assert_int_not_equal(ds4chk_client_answer(&c, 0, nan, strlen(nan), &out, &err), 0);
    assert_non_null(strstr(err.msg, "logprob is null: the engine's logits were not finite"));
    ds4_buf_free(&out);
    const char *stray = "{\"tokens\": [7], \"completion_probabilities\": [{\"id\": 8, \"logprob\": -1, "
                        "\"top_logprobs\": []}]}";
    assert_int_not_equal(ds4chk_client_answer(&c, 0, stray, strlen(stray), &out, &err), 0);
    assert_non_null(strstr(err.msg, "none of the tokens left"));
    ds4_buf_free(&out);
}

/* The synthetic tiny model, its tokenizer in *tok. */
static tu_model *tiny_tokenizer(const ds4_tokenizer **tok) {
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny", 1, false, &err);
    if (!t) fail_msg("%s", err.msg);
    if (ds4_model_tokenizer(&t->m, tok, &err)) fail_msg("%s", err.msg);
    return t;
}

/* A lossy engine (llama-cpp-python) names the byte token 0x9b "", as it
 * names every lone byte that is not UTF-8: an alternative so named is
 * left out; a chosen token so named is the reference's where the stream
 * has followed it, the reference's token may be named so and none of the
 * reference's alternatives there may; else it ends what is judged. */
static void test_server_lossy(void **state) {
    (void)state;
    ds4err err = {0};
    const ds4_tokenizer *tok;
    tu_model *t = tiny_tokenizer(&tok);
    const int32_t b9b = id_of_bytes(tok, "\x9b", 1), h = id_of_bytes(tok, "h", 1);
    assert_true(b9b >= 0 && h >= 0);
    ds4_cf_vocab_index *ix;
    assert_int_equal(ds4chk_client_index_new(tok, true, &ix, &err), 0);
    const int32_t p0[3] = {1, 2, 3}, ref0[3] = {h, b9b, h};
    const int32_t *ids[1] = {p0}, *refs[1] = {ref0};
    const uint32_t n[1] = {3}, ref_n[1] = {3};
    int32_t cut[1];
    ds4_cf_server_cell c = {.ids = ids, .n = n, .ref_ids = refs, .ref_n = ref_n, .cut = cut,
                            .rows = 1, .n_tokens = 3, .top_k = 3, .ctx = 64,
                            .dialect = DS4_CF_DIALECT_LOSSY, .vocab = ix};
    const char *body = "{\"choices\": [{\"logprobs\": {\"tokens\": [\"h\", \"\", \"h\"], "
                       "\"top_logprobs\": [{\"h\": -0.5, \"\": -1.0}, {\"\": -0.25, \"h\": -2.0}, "
                       "{\"h\": -0.5}]}}]}";
    ds4_buf out = {0};
    assert_int_equal(ds4chk_client_answer(&c, 0, body, strlen(body), &out, &err), 0);
    ds4_golden g;
    if (ds4_dump_parse(out.p, out.len, "answer", &g, &err)) fail_msg("%s: %s", out.p, err.msg);
    assert_int_equal(cut[0], -1);
    assert_int_equal(g.n_steps, 3);
    assert_int_equal(g.steps[1].tok.id, b9b);   /* the reference's, which "" may name */
    assert_int_equal(g.steps[0].n_top, 1);      /* "" left out */
    assert_int_equal(g.steps[0].top[0].id, h);
    ds4_golden_free(&g);
    ds4_buf_free(&out);
    /* Where the reference had another token, or among its alternatives one
     * "" may name too (0x9c, which the engine may have chosen), "" cannot
     * be told: judged up to there. */
    const int32_t b9c = id_of_bytes(tok, "\x9c", 1);
    const int32_t ref1[3] = {h, h, h}, top_h[6] = {h, -1, h, -1, h, -1},
                  top_rival[6] = {h, -1, b9b, b9c, h, -1};
    const int32_t *tops[1] = {top_h};
    c.ref_top = tops;
    c.ref_k = 2;
    /* The rival case once more where the reference's token is also the
     * lowest id "" may name (0x80): cut all the same. */
    const int32_t b80 = id_of_bytes(tok, "\x80", 1);
    assert_true(b80 >= 0 && b80 < b9b);
    const int32_t ref80[3] = {h, b80, h}, top_rival80[6] = {h, -1, b80, b9b, h, -1};
    for (int k = 0; k < 4; k++) {
        refs[0] = k == 0 ? ref1 : k == 3 ? ref80 : ref0;
        tops[0] = k == 2 ? top_rival : k == 3 ? top_rival80 : top_h;
        assert_int_equal(ds4chk_client_answer(&c, 0, body, strlen(body), &out, &err), 0);
        if (ds4_dump_parse(out.p, out.len, "answer", &g, &err)) fail_msg("%s: %s", out.p, err.msg);
        assert_int_equal(cut[0], k == 1 ? -1 : 1);
        assert_int_equal(g.n_steps, k == 1 ? 3 : 1);
        ds4_golden_free(&g);
        ds4_buf_free(&out);
    }
    ds4chk_client_index_free(ix);
    tu_model_free(t);
}

/* ds4's chat answer is text: read as the reference's tokens while they
 * explain it (a lone byte that is not UTF-8 may come as U+FFFD), the rest
 * tokenized again, the end token after a "stop" short of max_tokens. */
static void test_server_ds4(void **state) {
    (void)state;
    ds4err err = {0};
    const ds4_tokenizer *tok;
    tu_model *t = tiny_tokenizer(&tok);
    const int32_t b9b = id_of_bytes(tok, "\x9b", 1), h = id_of_bytes(tok, "h", 1);
    const int32_t x = id_of_bytes(tok, "x", 1), eos = ds4_tok_special(tok, DS4_SPECIAL_EOS);
    assert_true(b9b >= 0 && h >= 0 && x >= 0 && eos >= 0);
    const int32_t p0[3] = {1, 2, 3}, ref0[3] = {h, b9b, h};
    const int32_t *ids[1] = {p0}, *refs[1] = {ref0};
    const uint32_t n[1] = {3}, ref_n[1] = {3};
    ds4_cf_server_cell c = {.ids = ids, .n = n, .ref_ids = refs, .ref_n = ref_n, .rows = 1,
                            .n_tokens = 3, .top_k = 3, .ctx = 64, .dialect = DS4_CF_DIALECT_DS4,
                            .tok = tok};
    static const struct {
        const char *body;
        int32_t want[3];
    } cases[] = {
        {"{\"choices\": [{\"message\": {\"content\": \"h\\ufffdh\"}, \"finish_reason\": \"length\"}], "
         "\"usage\": {\"prompt_tokens\": 3}}", {0, 1, 0}},
        {"{\"choices\": [{\"message\": {\"content\": \"hx\"}, \"finish_reason\": \"stop\"}]}",
         {0, 2, 3}},
    };
    for (size_t k = 0; k < 2; k++) {
        const int32_t names[4] = {h, b9b, x, eos};
        ds4_buf out = {0};
        assert_int_equal(ds4chk_client_answer(&c, 0, cases[k].body, strlen(cases[k].body), &out, &err), 0);
        ds4_golden g;
        if (ds4_dump_parse(out.p, out.len, "answer", &g, &err)) fail_msg("%s: %s", out.p, err.msg);
        assert_int_equal(g.n_steps, 3);
        for (uint32_t i = 0; i < 3; i++) {
            assert_int_equal(g.steps[i].tok.id, names[cases[k].want[i]]);
            assert_int_equal(g.steps[i].n_top, 0);
        }
        ds4_golden_free(&g);
        ds4_buf_free(&out);
    }
    /* A prompt the engine counted otherwise: rendered with a system prompt,
     * or thinking on. */
    const char *sys = "{\"choices\": [{\"message\": {\"content\": \"h\"}, \"finish_reason\": "
                      "\"length\"}], \"usage\": {\"prompt_tokens\": 9}}";
    ds4_buf out = {0};
    assert_int_not_equal(ds4chk_client_answer(&c, 0, sys, strlen(sys), &out, &err), 0);
    assert_non_null(strstr(err.msg, "system prompt"));
    ds4_buf_free(&out);
    tu_model_free(t);
}

static void test_template_check(void **state) {
    (void)state;
    ds4err err = {0};
    uint32_t uses;
    assert_int_equal(ds4chk_template_check("a {tokens_file} {out} {draft}", &uses, &err), 0);
    assert_int_equal(uses, 1u << DS4_CF_TOKENS_FILE | 1u << DS4_CF_OUT | 1u << DS4_CF_DRAFT);
    static const struct {
        const char *t, *msg;
    } bad[] = {
        {"a ${HOME} {out} {tokens_file}", "unknown placeholder {HOME}"},
        {"a {tokens_file}", "no {out}"},
        {"a {out}", "no prompt"},
        {"a {[ {[ {draft} ]} ]} {out} {tokens_file}", "inside another"},
        {"a {[ {draft} {out} {tokens_file}", "without its ]}"},
        {"a {out {tokens_file}", "unknown placeholder"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_not_equal(ds4chk_template_check(bad[i].t, &uses, &err), 0);
        assert_int_equal(err.code, DS4_E_ARG);
        if (!strstr(err.msg, bad[i].msg)) fail_msg("%s: %s", bad[i].t, err.msg);
    }
    /* The presets are valid templates. */
    const char *name, *tmpl, *about;
    uint32_t n = 0;
    for (; ds4chk_template_preset_at(n, &name, &tmpl, &about); n++) {
        assert_int_equal(ds4chk_template_check(tmpl, &uses, &err), 0);
        assert_ptr_equal(ds4chk_template_preset(name), tmpl);
    }
    assert_int_equal(n, 6);
    assert_null(ds4chk_template_preset("nope"));
    /* The DSpark presets pass the matrix's threshold. */
    static const char *const dspark[] = {"ds4-dspark", "ds4ref-dspark"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(ds4chk_template_check(ds4chk_template_preset(dspark[i]), &uses, &err), 0);
        assert_true(uses & 1u << DS4_CF_CONF);
    }
}

/* ---- the matrix ---- */

static void test_matrix(void **state) {
    (void)state;
    ds4err err = {0};
    ds4_cf_matrix m;
    ds4chk_matrix_default(&m);
    assert_int_equal(m.draft.n, 7);
    assert_int_equal(m.draft.v[6], 8);
    assert_int_equal(m.chunk.n, 4);
    assert_int_equal(m.chunk.v[3], DS4_CF_WHOLE);
    assert_int_equal(m.batch.n, 3);
    assert_int_equal(ds4chk_matrix_parse(&m, "  draft=0,2,2,4   chunk=whole,64 ", &err), 0);
    assert_int_equal(m.draft.n, 3);   /* the repeat is dropped */
    assert_int_equal(m.draft.v[2], 4);
    assert_int_equal(m.chunk.n, 2);
    assert_int_equal(m.chunk.v[0], DS4_CF_WHOLE);
    assert_int_equal(m.chunk.v[1], 64);
    assert_int_equal(m.batch.n, 3);   /* not named: kept */
    assert_int_equal(m.cache.n, 1);   /* cold only by default */
    assert_int_equal(m.cache.v[0], DS4_CF_COLD);
    assert_int_equal(ds4chk_matrix_parse(&m, "cache=warm,cold,warm", &err), 0);
    assert_int_equal(m.cache.n, 2);
    assert_int_equal(m.cache.v[0], DS4_CF_WARM);
    assert_int_equal(m.cache.v[1], DS4_CF_COLD);
    assert_int_equal(m.conf.n, 1);    /* no threshold by default */
    assert_int_equal(m.conf.v[0], 0);
    assert_int_equal(ds4chk_matrix_parse(&m, "conf=0,50,100,50", &err), 0);
    assert_int_equal(m.conf.n, 3);
    assert_int_equal(m.conf.v[2], 100);
    static const char *const bad[] = {"draft=17", "chunk=0", "batch=0", "batch=17", "draft",
                                      "draft=", "depth=1", "draft=1,,2", "draft=whole",
                                      "chunk=-1", "batch=1x", "cache=hot", "cache=cold,,warm",
                                      "conf=101", "conf=0.5", "conf=whole"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ds4chk_matrix_default(&m);
        assert_int_not_equal(ds4chk_matrix_parse(&m, bad[i], &err), 0);
        assert_int_equal(err.code, DS4_E_ARG);
        assert_non_null(strstr(err.msg, "--matrix"));
        assert_int_equal(m.draft.n, 7);   /* nothing changed */
    }
    char buf[16];
    assert_string_equal(ds4chk_matrix_chunk_name(DS4_CF_WHOLE, buf, sizeof(buf)), "whole");
    assert_string_equal(ds4chk_matrix_chunk_name(64, buf, sizeof(buf)), "64");
}

/* ---- a backend's log ---- */

static void test_accept_lines(void **state) {
    (void)state;
    ds4_cf_accept a;
    const char *ours = "prefill...\nmtp accept: iters=4 proposed=10 accepted=7 rate=70.0% "
                       "per_iter=1.75 deepest=3\nds4ref: prefill: 1 t/s\n";
    ds4chk_backend_read_accept(ours, strlen(ours), &a);
    assert_true(a.known && a.has_deepest);
    assert_int_equal(a.proposed, 10);
    assert_int_equal(a.accepted, 7);
    assert_int_equal(a.deepest, 3);
    /* Without deepest= (an older line): known, no depth. */
    const char *old = "mtp accept: iters=4 proposed=10 accepted=7 rate=70.0% per_iter=1.75";
    ds4chk_backend_read_accept(old, strlen(old), &a);
    assert_true(a.known && !a.has_deepest);
    /* ds4's DS4_MTP_SPEC_LOG lines add up; the deepest is the most one
     * cycle accepted. */
    const char *ds4 = "ds4: mtp spec seq accept drafted=3 accepted=3\n"
                      "ds4: mtp spec miss first draft=12\n"
                      "ds4: mtp spec seq partial drafted=4 verified=2 accepted=1\n"
                      "ds4: mtp spec seq accept drafted=2 accepted=2\n";
    ds4chk_backend_read_accept(ds4, strlen(ds4), &a);
    assert_true(a.known && a.has_deepest);
    assert_int_equal(a.proposed, 9);
    assert_int_equal(a.accepted, 6);
    assert_int_equal(a.deepest, 3);
    /* ds4's DSpark summary (DS4_DSPARK_STATS=1), as ds4 #468 shows it
     * with the drafter silently off: known, nothing proposed, no depth. */
    const char *dspark = "ds4: DSpark stats cycles=119 first_tokens=119 proposed=0 "
                         "accepted_draft=0\naccept_rate=0.00% avg_accept=0.000 full=0\n";
    ds4chk_backend_read_accept(dspark, strlen(dspark), &a);
    assert_true(a.known && !a.has_deepest);
    assert_int_equal(a.proposed, 0);
    const char *dspark2 = "DSpark stats cycles=9 proposed=40 accepted_draft=31 full=5\n";
    ds4chk_backend_read_accept(dspark2, strlen(dspark2), &a);
    assert_true(a.known);
    assert_int_equal(a.proposed, 40);
    assert_int_equal(a.accepted, 31);
    const char *none = "nothing here\naccepted=3\n";
    ds4chk_backend_read_accept(none, strlen(none), &a);
    assert_false(a.known);
    char last[16];
    const char *log = "one\ntwo \x1b[0m end\n\n";
    ds4chk_backend_last_line(log, strlen(log), last, sizeof(last));
    assert_string_equal(last, "two ?[0m end");
    ds4chk_backend_last_line("", 0, last, sizeof(last));
    assert_string_equal(last, "");
}

/* ---- verdicts ---- */

enum { K = 3, STEPS = 3 };

/* The reference's top 3 at every step: ids 10, 11, 12 with these logprobs. */
static const double lps[K] = {-0.1, -2, -3};

/* A teacher-forced record: at every step the reference's top 3 are ids
 * 10, 11, 12 with logprobs -0.1, -2, -3; committed ids as given, their
 * logprob from that list (or -9 off it). */
static void make_tf(ds4_cf_tf *tf, const int32_t *ids, uint32_t n) {
    tf->n = n;
    tf->k = K;
    tf->ids = malloc(sizeof(int32_t) * n);
    tf->lp = malloc(sizeof(double) * n);
    tf->gap = malloc(sizeof(double) * n);
    tf->n_top = malloc(sizeof(uint32_t) * n);
    tf->top_ids = malloc(sizeof(int32_t) * n * K);
    tf->top_lp = malloc(sizeof(double) * n * K);
    for (uint32_t i = 0; i < n; i++) {
        tf->ids[i] = ids[i];
        tf->n_top[i] = K;
        tf->lp[i] = -9;
        for (uint32_t j = 0; j < K; j++) {
            tf->top_ids[i * K + j] = 10 + (int32_t)j;
            tf->top_lp[i * K + j] = lps[j];
            if (ids[i] == 10 + (int32_t)j) tf->lp[i] = lps[j];
        }
        tf->gap[i] = -0.1 - tf->lp[i];
    }
}

/* A backend output with the given committed ids, its top lists those of
 * make_tf shifted by `shift` nats. */
static void make_out(ds4_golden *g, const int32_t *ids, uint32_t n, double shift) {
    ds4_golden_init(g, DS4_TRACE_DUMP);
    g->has_ids = g->has_logits = true;
    g->has_prompt_count = true;
    g->h.n_prompt = 2;
    g->steps = calloc(n, sizeof(ds4_golden_step));
    g->n_steps = g->cap_steps = n;
    for (uint32_t i = 0; i < n; i++) {
        ds4_golden_step *st = &g->steps[i];
        st->tok.id = ids[i];
        st->tok.bytes = malloc(1);
        st->top = calloc(K, sizeof(ds4_golden_tok));
        st->n_top = K;
        for (uint32_t j = 0; j < K; j++) {
            st->top[j].id = 10 + (int32_t)j;
            st->top[j].bytes = malloc(1);
            st->top[j].logprob = lps[j] + shift;
        }
    }
}

static ds4_cf_limits tolerance(void) {
    return (ds4_cf_limits){.greedy = true, .max_gap = 0.5, .tie_eps = 0.05, .max_dlogprob = 0.5,
                           .min_top5 = NAN, .min_top20 = NAN};
}

static void test_verdict_row(void **state) {
    (void)state;
    ds4_cf_limits l = tolerance();
    ds4_cf_finding f;
    ds4_cf_findings all = {0};
    ds4_cf_tf tf;
    ds4_golden out;
    /* The argmax every step, logprobs 0.3 off: a pass. */
    const int32_t good[STEPS] = {10, 10, 10};
    make_tf(&tf, good, STEPS);
    make_out(&out, good, STEPS, 0.3);
    ds4chk_verdict_row(NULL, &out, &tf, STEPS, -1, &l, NULL, &all, &f);
    assert_int_equal(f.status, DS4_CF_PASS);
    /* 0.6 off: |dlogprob| fails at step 0. */
    ds4_golden_free(&out);
    make_out(&out, good, STEPS, 0.6);
    ds4chk_verdict_row(NULL, &out, &tf, STEPS, -1, &l, NULL, &all, &f);
    assert_int_equal(f.status, DS4_CF_FAIL);
    assert_int_equal(f.step, 0);
    assert_true(fabs(f.dlogprob - 0.6) < 1e-12);
    assert_non_null(strstr(f.detail, "|dlogprob| 0.6"));
    /* Every failing step is a finding of its own, not only the first. */
    assert_int_equal(all.n, STEPS);
    for (uint32_t i = 0; i < STEPS; i++) {
        assert_int_equal(all.v[i].status, DS4_CF_FAIL);
        assert_int_equal(all.v[i].step, i);
    }
    ds4chk_verdict_findings_free(&all);
    /* ...unless no |dlogprob| limit is set. */
    l.max_dlogprob = NAN;
    ds4chk_verdict_row(NULL, &out, &tf, STEPS, -1, &l, NULL, &all, &f);
    assert_int_equal(f.status, DS4_CF_PASS);
    l = tolerance();
    ds4_golden_free(&out);
    ds4chk_reference_tf_free(&tf);
    /* Step 1 commits the second choice, 1.9 nats below the argmax. */
    const int32_t wrong[STEPS] = {10, 11, 10};
    make_tf(&tf, wrong, STEPS);
    make_out(&out, wrong, STEPS, 0);
    ds4chk_verdict_row(NULL, &out, &tf, STEPS, -1, &l, NULL, &all, &f);
    assert_int_equal(f.status, DS4_CF_FAIL);
    assert_int_equal(f.step, 1);
    assert_int_equal(f.token, 11);
    assert_true(fabs(f.gap - 1.9) < 1e-12);
    assert_non_null(strstr(f.detail, "1.9 nats below the reference's argmax 10"));
    /* With a looser gap it passes; sampled runs do not check the gap. */
    l.max_gap = 2;
    ds4chk_verdict_row(NULL, &out, &tf, STEPS, -1, &l, NULL, &all, &f);
    assert_int_equal(f.status, DS4_CF_PASS);
    l = tolerance();
    l.greedy = false;
    ds4chk_verdict_row(NULL, &out, &tf, STEPS, -1, &l, NULL, &all, &f);
    assert_int_equal(f.status, DS4_CF_PASS);
    l = tolerance();
    /* Two steps of three without the end token: stopped early. */
    out.n_steps = 2;
    tf.n = 2;
    const int32_t two[2] = {10, 10};
    ds4_cf_tf tf2;
    make_tf(&tf2, two, 2);
    ds4_golden out2;
    make_out(&out2, two, 2, 0);
    ds4chk_verdict_row(NULL, &out2, &tf2, STEPS, -1, &l, NULL, &all, &f);
    assert_int_equal(f.status, DS4_CF_FAIL);
    assert_int_equal(f.step, 2);
    assert_non_null(strstr(f.detail, "stopped after 2 of 3"));
    /* ...but ending on the end token is a complete run. */
    ds4chk_verdict_row(NULL, &out2, &tf2, STEPS, 10, &l, NULL, &all, &f);
    assert_int_equal(f.status, DS4_CF_PASS);
    out.n_steps = STEPS;
    tf.n = STEPS;
    ds4_golden_free(&out2);
    ds4chk_reference_tf_free(&tf2);
    ds4_golden_free(&out);
    ds4chk_reference_tf_free(&tf);
    ds4chk_verdict_findings_free(&all);
}

static void test_verdict_usable(void **state) {
    (void)state;
    ds4_cf_finding f;
    ds4_golden out;
    const int32_t ids[STEPS] = {10, 10, 600};
    const int32_t prompt[2] = {1, 2};
    make_out(&out, ids, STEPS, 0);
    assert_false(ds4chk_verdict_usable(&out, prompt, 2, STEPS, 512, &f));
    assert_int_equal(f.status, DS4_CF_FAIL);
    assert_int_equal(f.step, 2);
    assert_non_null(strstr(f.detail, "outside the vocabulary"));
    out.steps[2].tok.id = 11;
    assert_true(ds4chk_verdict_usable(&out, prompt, 2, STEPS, 512, &f));
    assert_false(ds4chk_verdict_usable(&out, prompt, 2, STEPS - 1, 512, &f));
    assert_non_null(strstr(f.detail, "3 steps written, 2 asked for"));
    out.h.n_prompt = 3;
    assert_false(ds4chk_verdict_usable(&out, prompt, 2, STEPS, 512, &f));
    assert_int_equal(f.status, DS4_CF_FAIL);
    assert_non_null(strstr(f.detail, "prompt has 3 tokens"));
    out.has_ids = false;
    assert_false(ds4chk_verdict_usable(&out, prompt, 2, STEPS, 512, &f));
    assert_int_equal(f.status, DS4_CF_ERROR);
    ds4_golden_free(&out);
}

static void test_verdict_same(void **state) {
    (void)state;
    ds4_cf_limits l = tolerance();
    ds4_cf_finding f;
    ds4_cf_tf base, row;
    const int32_t a[STEPS] = {10, 10, 10}, b[STEPS] = {10, 11, 12};
    make_tf(&base, a, STEPS);
    make_tf(&row, a, STEPS);
    ds4_cf_stream bs = {&base, NULL}, rs = {&row, NULL};
    ds4chk_verdict_same(&bs, &rs, "draft=0", &l, NULL, &f);
    assert_int_equal(f.status, DS4_CF_PASS);
    ds4chk_reference_tf_free(&row);
    /* Step 1 differs and the reference puts the two 1.9 nats apart. */
    make_tf(&row, b, STEPS);
    ds4chk_verdict_same(&bs, &rs, "draft=0", &l, NULL, &f);
    assert_int_equal(f.status, DS4_CF_FAIL);
    assert_int_equal(f.step, 1);
    assert_non_null(strstr(f.detail, "in the draft=0 stream"));
    /* The backend's own margins, 0.3 at step 1 on both sides: still a
     * failure, and the detail says them. */
    double wide[STEPS] = {1, 0.3, 1}, close[STEPS] = {1, 0.01, 1};
    bs.margin = rs.margin = wide;
    ds4chk_verdict_same(&bs, &rs, "draft=0", &l, NULL, &f);
    assert_int_equal(f.status, DS4_CF_FAIL);
    assert_non_null(strstr(f.detail, "its own top two 0.3 here and 0.3 there"));
    /* Its own top two within 0.05 in this stream, or in the base's: a tie,
     * whatever the reference says (issue 23: one side's margin is not
     * enough). */
    rs.margin = close;
    ds4chk_verdict_same(&bs, &rs, "draft=0", &l, NULL, &f);
    assert_int_equal(f.status, DS4_CF_TIE);
    rs.margin = wide;
    bs.margin = close;
    ds4chk_verdict_same(&bs, &rs, "draft=0", &l, NULL, &f);
    assert_int_equal(f.status, DS4_CF_TIE);
    bs.margin = rs.margin = NULL;
    /* A reference near-tie there: a tie, not a failure. */
    row.lp[1] = base.lp[1] - 0.01;
    ds4chk_verdict_same(&bs, &rs, "draft=0", &l, NULL, &f);
    assert_int_equal(f.status, DS4_CF_TIE);
    assert_int_equal(f.step, 1);
    ds4chk_reference_tf_free(&row);
    ds4chk_reference_tf_free(&base);
    assert_string_equal(ds4chk_verdict_status_name(DS4_CF_NOT_EXERCISED), "not exercised");
    assert_string_equal(ds4chk_verdict_status_name(DS4_CF_NA), "n/a");
}

/* The backend's own margins: its first top entry's logprob minus its
 * second's, NAN with fewer than two. */
static void test_verdict_margins(void **state) {
    (void)state;
    ds4_golden out;
    const int32_t ids[STEPS] = {10, 10, 10};
    make_out(&out, ids, STEPS, 0);
    out.steps[2].n_top = 1;
    double *m = ds4chk_verdict_margins(&out);
    assert_non_null(m);
    assert_true(m[0] == lps[0] - lps[1]);
    assert_true(isnan(m[2]));
    free(m);
    out.steps[2].n_top = K;   /* its entries are freed by count */
    ds4_golden_free(&out);
}

/* Every dialect has a complete row in client.c's table, found by its own
 * name: a dialect added to the enum without its row fails here. */
static void test_dialect_table(void **state) {
    (void)state;
    for (uint32_t d = 0; d < DS4_CF_NDIALECTS; d++) {
        const ds4_cf_dialect_info *x = ds4chk_client_dialect(d);
        assert_non_null(x);
        if (!x->name || !x->about || !x->request || !x->steps) fail_msg("dialect %u has no row", d);
        assert_int_equal(ds4chk_client_dialect_find(x->name), (int)d);
        assert_false(x->lossy && !x->by_text);
    }
    assert_null(ds4chk_client_dialect(DS4_CF_NDIALECTS));
    assert_int_equal(ds4chk_client_dialect_find("nope"), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_expand), cmocka_unit_test(test_template_groups),
        cmocka_unit_test(test_template_check), cmocka_unit_test(test_template_server),
        cmocka_unit_test(test_server_answers),
        cmocka_unit_test(test_server_prompt_count),
        cmocka_unit_test(test_server_lossy),
        cmocka_unit_test(test_server_llama_tokens),
        cmocka_unit_test(test_server_ds4),
        cmocka_unit_test(test_matrix),
        cmocka_unit_test(test_dialect_table),
        cmocka_unit_test(test_accept_lines),    cmocka_unit_test(test_verdict_row),
        cmocka_unit_test(test_verdict_usable),  cmocka_unit_test(test_verdict_same),
        cmocka_unit_test(test_verdict_margins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
