/* Backend command templates (template.h). */
#include "check/conform/template.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every placeholder, in the order of enum ds4_cf_var, and what it holds
 * (--backend-help prints this table). */
static const struct {
    const char *name, *about;
} vars[DS4_CF_NVARS] = {
    {"model", "the model file"},
    {"mtp", "its MTP head; empty in cells without drafts"},
    {"tokens_file", "row 0's prompt token ids, one per line"},
    {"prompt_file", "row 0's prompt bytes: the rendered chat, starting with BOS"},
    {"batch_tokens", "every row's ids, one row per line, separated by spaces"},
    {"n", "tokens to generate per row"},
    {"draft", "MTP draft depth; 0: no speculation"},
    {"chunk", "prefill chunk: the most prompt tokens of each row in one pass"},
    {"batch", "rows decoded together"},
    {"ctx", "the context of each row"},
    {"top_k", "alternatives to record per step"},
    {"temp", "sampling temperature; 0: greedy"},
    {"seed", "sampling seed (row r: seed + r)"},
    {"ctx_total", "ctx x batch: one context split among the rows (llama.cpp's n_ctx)"},
    {"chunk_total", "chunk x batch: the tokens of one pass over every row (n_batch)"},
    {"out", "the result to write (a ds4 dump or a ds4ref golden); batch > 1: {out}.ROW"},
    {"ds4ref", "the ds4ref program beside ds4ref-conform"},
    {"model_f32", "the model's unquantized twin, written into the work folder"},
    {"mtp_f32", "the MTP head's twin; empty in cells without drafts"},
    {"port", "a server template's: the free loopback port the engine listens on"},
    {"model_sha256", "the model file's SHA-256 (sha256sum's), for a backend to check"},
    {"conf", "a DSpark drafter's confidence threshold, 0 to 1 (0: every block whole)"},
};

bool ds4chk_template_var_at(uint32_t i, const char **name, const char **about) {
    if (i >= DS4_CF_NVARS) return false;
    *name = vars[i].name;
    *about = vars[i].about;
    return true;
}

/* A preset; a server's also says how its API reads prompts and names
 * tokens (dialect and prompt form, client.h), NULL for a command's. */
typedef struct preset {
    const char *name, *tmpl, *about;
    const char *dialect, *prompt;
} preset;

/* ds4 has no option for the prefill chunk or for token ids: the chunk is
 * its DS4_METAL_PREFILL_CHUNK (for every backend, despite the name), the
 * prompt its rendered chat text (a prompt file that starts with the BOS
 * string is tokenized as it is).  --mtp-draft and --seed must be > 0, so
 * they sit in optional groups.  DS4_MTP_SPEC_LOG=1 makes it print a line per
 * speculative cycle, which ds4ref-conform reads for the accept counts.
 *
 * llama.cpp goes through ds4ref-llama, installed beside ds4ref ({ds4ref}
 * is shell-quoted, so "{ds4ref}-llama" names its neighbour): it has no
 * MTP drafts, so only depth 0 runs, and it finds llama.cpp's libraries
 * through DS4REF_LLAMA_LIB. */
static const preset presets[] = {
    {"ds4ref",
     "{ds4ref} -m {model} {[--mtp {mtp} --mtp-draft {draft} --spec-report]} "
     "--batch-tokens {batch_tokens} -n {n} --chunk {chunk} -c {ctx} --logprobs-top-k {top_k} "
     "--golden-out {out}",
     "this build of ds4ref: the self-check (every row of a batch in shared passes, goldens)",
     NULL, NULL},
    {"ds4ref-f32",
     "{ds4ref} -m {model_f32} {[--mtp {mtp_f32} --mtp-draft {draft} --spec-report]} "
     "--batch-tokens {batch_tokens} -n {n} --chunk {chunk} -c {ctx} --logprobs-top-k {top_k} "
     "--golden-out {out}",
     "this build of ds4ref on the models' unquantized twins: the same numbers as the models "
     "(a check of {model_f32})", NULL, NULL},
    {"ds4",
     "DS4_METAL_PREFILL_CHUNK={chunk} DS4_MTP_SPEC_LOG=1 ds4 -m {model} "
     "{[--mtp {mtp} --mtp-draft {draft}]} --prompt-file {prompt_file} -n {n} -c {ctx} "
     "--temp {temp} {[--seed {seed}]} --logprobs-top-k {top_k} --dump-logprobs {out}",
     "antirez/ds4's command line (ds4 on the PATH): one row, --dump-logprobs", NULL, NULL},
    /* ds4 with the DSpark drafter of DeepSeek-V4-Flash-0731: {mtp} is its
     * support GGUF (DeepSeek-V4-Flash-DSpark-support-0731.gguf), given as
     * ds4 takes it; its confidence threshold is the matrix's conf (0 by
     * default: every block whole, speculation exercised as much as it can
     * be).  The block is the drafter's, so
     * the cells of every depth are one run; DS4_DSPARK_STATS prints the
     * "DSpark stats ... proposed= accepted_draft=" line (backend.c).
     * Written from ds4's issues and its wrappers, not run here. */
    {"ds4-dspark",
     "DS4_METAL_PREFILL_CHUNK={chunk} DS4_DSPARK_STATS=1 ds4 -m {model} "
     "{[--mtp {mtp} --dspark --dspark-confidence {conf}]} --prompt-file {prompt_file} -n {n} -c {ctx} "
     "--temp {temp} {[--seed {seed}]} --logprobs-top-k {top_k} --dump-logprobs {out}",
     "antirez/ds4 drafting with DSpark ({mtp}: its DSpark support GGUF), confidence {conf}: one "
     "row, --dump-logprobs", NULL, NULL},
    /* ds4ref with the DSpark drafter of its model (DeepSeek-V4-Flash-0731,
     * tiny-dspark): drafts of {draft} a block at most, cut at confidence
     * {conf}; no {mtp}, the drafter is in the model's file. */
    {"ds4ref-dspark",
     "{ds4ref} -m {model} {[--mtp-draft {draft} --dspark-confidence {conf} --spec-report]} "
     "--batch-tokens {batch_tokens} -n {n} --chunk {chunk} -c {ctx} --logprobs-top-k {top_k} "
     "--golden-out {out}",
     "this build's ds4ref drafting with its model's DSpark drafter (DeepSeek-V4-Flash-0731), "
     "confidence {conf}", NULL, NULL},
    {"llama.cpp",
     "{ds4ref}-llama -m {model} --batch-tokens {batch_tokens} -n {n} --chunk {chunk} -c {ctx} "
     "--top-k {top_k} --out {out}",
     "llama.cpp's CPU backend through ds4ref-llama (DS4REF_LLAMA_LIB: its prebuilt libraries; "
     "make peers): every row a sequence of one context, depth 0 only", NULL, NULL},
};

/* Engines behind HTTP (--server-cmd NAME): each listens on {port} of the
 * loopback, with the cell's MTP depth and prefill chunk in its own flags.
 * ds4ref-server decodes without drafts, so its cells of every depth are
 * the same run. */
static const preset server_presets[] = {
    {"ds4ref-server", "{ds4ref}-server -m {model} --host 127.0.0.1 --port {port} --ctx {ctx} "
     "--chunk {chunk}", "this build's ds4ref-server (the self-check over HTTP)", "ids", "ids"},
    /* vLLM 0.22 (DeepSeek V4's MTP: method "mtp"; chunked prefill is on,
     * its chunk the batch's token budget; batch invariance by
     * VLLM_BATCH_INVARIANT=1).  Written from its documentation, not run
     * here: it needs its GPU build. */
    {"vllm", "VLLM_BATCH_INVARIANT=1 vllm serve {model} --host 127.0.0.1 --port {port} "
     "--max-model-len {ctx} --max-num-batched-tokens {chunk_total} --max-logprobs 20 "
     "{[--speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": {draft}}']}",
     "vLLM's OpenAI server on a checkpoint folder ({model}), MTP drafts of {draft}, "
     "batch-invariant kernels", "ids", "ids"},
    /* llama-cpp-python's OpenAI server (its [server] extra): llama.cpp on
     * the GGUF, no MTP; it reads prompts as text only (adding BOS) and
     * names tokens by text.  It answers one request at a time, so its one
     * context is a row's.  n_ubatch 1: its llama.cpp (0.3.36's) aborts
     * building the graph of a longer pass of deepseek4 (CONFORM.md), so
     * every pass is one token and n_batch, the chunk, only splits the
     * prompt. */
    {"llama-cpp-python", "python3 -m llama_cpp.server --model {model} --host 127.0.0.1 "
     "--port {port} --n_ctx {ctx} --n_batch {chunk} --n_ubatch 1",
     "llama.cpp behind llama-cpp-python's OpenAI server (text prompts, tokens named by text), "
     "depth 0 only", "lossy-text", "text"},
    /* llama.cpp's own server, /completion with n_probs, the prefill chunk
     * its batch size.  Run here as llama-cpp-python 0.3.36's llama.cpp
     * (commit 0c1e570) builds it, whose deepseek4 graph aborts with more
     * than one slot or more than one token a pass, and whose flash
     * attention gives logits that are not finite: one slot (requests
     * queue), -ub 1, -fa off (CONFORM.md).  SGLang: deterministic
     * inference on, its chunked prefill the chunk; its MTP flags need
     * steps + 1 draft tokens, which a template cannot say, so depth 0 only;
     * written from its documentation, not run here. */
    {"llama-server", "llama-server -m {model} --host 127.0.0.1 --port {port} -c {ctx} -np 1 "
     "-b {chunk} -ub 1 -fa off",
     "llama.cpp's server on the GGUF (/completion, n_probs), depth 0 only", "llama", "ids"},
    /* llama.cpp's server with a DSpark draft model (llama.cpp #25173,
     * #25784: {mtp} the drafter's GGUF, -md), up to {draft} drafts a block,
     * the matrix's confidence cut (0: none); the one-slot settings above.
     * Written from its pull requests, not run here. */
    {"llama-server-dspark", "llama-server -m {model} {[-md {mtp} --spec-type draft-dspark "
     "--spec-draft-n-max {draft} --spec-draft-conf-min {conf}]} --host 127.0.0.1 --port {port} -c {ctx} "
     "-np 1 -b {chunk} -ub 1 -fa off",
     "llama.cpp's server drafting with DSpark ({mtp}: the drafter's GGUF), {draft} drafts a "
     "block", "llama", "ids"},
    /* antirez/ds4's server (ds4-server on the PATH): one request at a time,
     * MTP drafts of {draft} from its --mtp head; no prefill-chunk flag.  It
     * returns text only: the ds4 dialect.  Written from its source, not
     * run here. */
    {"ds4-server", "ds4-server -m {model} {[--mtp {mtp} --mtp-draft {draft}]} --host 127.0.0.1 "
     "--port {port} --ctx {ctx}",
     "antirez/ds4's server (its chat, text only: tokens judged by teacher forcing)", "ds4", "text"},
    {"sglang", "python3 -m sglang.launch_server --model-path {model} --host 127.0.0.1 --port {port} "
     "--context-length {ctx} --chunked-prefill-size {chunk_total} --enable-deterministic-inference",
     "SGLang on a checkpoint folder (/generate, return_logprob), deterministic mode, depth 0 only",
     "sglang", "ids"},
};

static const size_t n_presets = sizeof(presets) / sizeof(presets[0]);
static const size_t n_server_presets = sizeof(server_presets) / sizeof(server_presets[0]);

static const preset *find(const preset *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

static bool nth(const preset *t, size_t n, uint32_t i, const char **name, const char **tmpl,
                const char **about) {
    if (i >= n) return false;
    *name = t[i].name;
    *tmpl = t[i].tmpl;
    *about = t[i].about;
    return true;
}

const char *ds4chk_template_preset(const char *name) {
    const preset *p = find(presets, n_presets, name);
    return p ? p->tmpl : NULL;
}

bool ds4chk_template_preset_at(uint32_t i, const char **name, const char **tmpl, const char **about) {
    return nth(presets, n_presets, i, name, tmpl, about);
}

const char *ds4chk_template_server_preset(const char *name) {
    const preset *p = find(server_presets, n_server_presets, name);
    return p ? p->tmpl : NULL;
}

bool ds4chk_template_server_preset_at(uint32_t i, const char **name, const char **tmpl,
                                      const char **about) {
    return nth(server_presets, n_server_presets, i, name, tmpl, about);
}

const char *ds4chk_template_server_dialect(const char *name) {
    const preset *p = find(server_presets, n_server_presets, name);
    return p ? p->dialect : "ids";
}

const char *ds4chk_template_server_prompt(const char *name) {
    const preset *p = find(server_presets, n_server_presets, name);
    return p ? p->prompt : "ids";
}

/* ---- scanning ---- */

/* What starts at p: a literal brace, a group's ends, a placeholder (its
 * index in *var, its length in *len), or plain text. */
typedef enum tok_kind { T_TEXT, T_BRACE, T_OPEN, T_CLOSE, T_VAR, T_BAD } tok_kind;

static tok_kind scan(const char *p, int *var, size_t *len) {
    if (p[0] == '{' && p[1] == '{') {
        *len = 2;
        return T_BRACE;
    }
    if (p[0] == '{' && p[1] == '[') {
        *len = 2;
        return T_OPEN;
    }
    if (p[0] == ']' && p[1] == '}') {
        *len = 2;
        return T_CLOSE;
    }
    if (p[0] != '{') {
        *len = 1;
        return T_TEXT;
    }
    const char *end = strchr(p, '}');
    *len = end ? (size_t)(end - p) + 1 : strlen(p);
    for (int i = 0; end && i < DS4_CF_NVARS; i++)
        if (strlen(vars[i].name) == *len - 2 && !strncmp(p + 1, vars[i].name, *len - 2)) {
            *var = i;
            return T_VAR;
        }
    return T_BAD;
}

/* The syntax: known placeholders, groups closed and not nested. */
static int template_scan(const char *tmpl, uint32_t *uses, ds4err *err) {
    *uses = 0;
    bool in_group = false;
    for (const char *p = tmpl; *p;) {
        int var = -1;
        size_t len;
        switch (scan(p, &var, &len)) {
        case T_BAD:
            return ds4_err_set(err, DS4_E_ARG, "backend template: unknown placeholder %.*s at byte "
                              "%zu (write {{ for a literal brace)", (int)(len > 40 ? 40 : len), p,
                              (size_t)(p - tmpl));
        case T_OPEN:
            if (in_group)
                return ds4_err_set(err, DS4_E_ARG, "backend template: a {[ group inside another "
                                  "at byte %zu", (size_t)(p - tmpl));
            in_group = true;
            break;
        case T_CLOSE:
            in_group = false;
            break;
        case T_VAR: *uses |= 1u << var; break;
        case T_TEXT: case T_BRACE: break;
        }
        p += len;
    }
    if (in_group) return ds4_err_set(err, DS4_E_ARG, "backend template: a {[ group without its ]}");
    return 0;
}

int ds4chk_template_check_server(const char *tmpl, uint32_t *uses, ds4err *err) {
    if (template_scan(tmpl, uses, err)) return -1;
    if (!(*uses & 1u << DS4_CF_PORT))
        return ds4_err_set(err, DS4_E_ARG, "server template: no {port}, where the engine is to "
                           "listen");
    return 0;
}

int ds4chk_template_check(const char *tmpl, uint32_t *uses, ds4err *err) {
    if (template_scan(tmpl, uses, err)) return -1;
    if (!(*uses & 1u << DS4_CF_OUT))
        return ds4_err_set(err, DS4_E_ARG, "backend template: no {out}, where the backend writes "
                          "its result");
    if (!(*uses & (1u << DS4_CF_TOKENS_FILE | 1u << DS4_CF_PROMPT_FILE | 1u << DS4_CF_BATCH_TOKENS)))
        return ds4_err_set(err, DS4_E_ARG, "backend template: no prompt ({tokens_file}, "
                          "{prompt_file} or {batch_tokens})");
    return 0;
}

/* ---- expansion ---- */

/* Bytes a shell passes through unquoted. */
static bool shell_plain(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,:=@%+-", *s))
            return false;
    return true;
}

static void put_quoted(ds4_buf *b, const char *s) {
    if (shell_plain(s)) {
        ds4_buf_puts(b, s);
        return;
    }
    ds4_buf_putc(b, '\'');
    for (; *s; s++) {
        if (*s == '\'') ds4_buf_puts(b, "'\\''");
        else ds4_buf_putc(b, *s);
    }
    ds4_buf_putc(b, '\'');
}

/* The shortest "%.Ng" that reads back as x. */
static void put_double(ds4_buf *b, double x) {
    char s[32];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof(s), "%.*g", prec, x);
        if (strtod(s, NULL) == x) break;
    }
    ds4_buf_puts(b, s);
}

/* Variable var's text into b; *empty says whether it counts as absent in a
 * group (nothing, or 0). */
static void put_var(ds4_buf *b, const ds4_cf_vars *v, int var, bool *empty) {
    const char *s = NULL;
    uint64_t u = 0;
    switch ((enum ds4_cf_var)var) {
    case DS4_CF_MODEL: s = v->model; break;
    case DS4_CF_MTP: s = v->mtp; break;
    case DS4_CF_TOKENS_FILE: s = v->tokens_file; break;
    case DS4_CF_PROMPT_FILE: s = v->prompt_file; break;
    case DS4_CF_BATCH_TOKENS: s = v->batch_tokens; break;
    case DS4_CF_OUT: s = v->out; break;
    case DS4_CF_DS4REF: s = v->ds4ref; break;
    case DS4_CF_MODEL_F32: s = v->model_f32; break;
    case DS4_CF_MTP_F32: s = v->mtp_f32; break;
    case DS4_CF_MODEL_SHA256: s = v->model_sha256; break;
    case DS4_CF_N: u = v->n; break;
    case DS4_CF_DRAFT: u = v->draft; break;
    case DS4_CF_CHUNK: u = v->chunk; break;
    case DS4_CF_BATCH: u = v->batch; break;
    case DS4_CF_CTX: u = v->ctx; break;
    case DS4_CF_TOP_K: u = v->top_k; break;
    case DS4_CF_SEED: u = v->seed; break;
    case DS4_CF_CTX_TOTAL: u = (uint64_t)v->ctx * v->batch; break;
    case DS4_CF_CHUNK_TOTAL: u = (uint64_t)v->chunk * v->batch; break;
    case DS4_CF_PORT: u = v->port; break;
    case DS4_CF_TEMP:
        *empty = v->temp == 0;
        put_double(b, v->temp);
        return;
    case DS4_CF_CONF:
        *empty = false;
        put_double(b, v->conf);
        return;
    case DS4_CF_NVARS: return;
    }
    if (var <= DS4_CF_BATCH_TOKENS || (var >= DS4_CF_OUT && var != DS4_CF_PORT)) {
        *empty = !s || !*s;
        put_quoted(b, s ? s : "");
    } else {
        *empty = u == 0;
        ds4_buf_printf(b, "%" PRIu64, u);
    }
}

int ds4chk_template_expand(const char *tmpl, const ds4_cf_vars *v, ds4_buf *out, ds4err *err) {
    uint32_t uses;
    if (template_scan(tmpl, &uses, err)) return -1;
    ds4_buf group = {0};
    bool in_group = false, drop = false;
    for (const char *p = tmpl; *p;) {
        int var = -1;
        size_t len;
        ds4_buf *b = in_group ? &group : out;
        bool empty = false;
        switch (scan(p, &var, &len)) {
        case T_TEXT: ds4_buf_putc(b, *p); break;
        case T_BRACE: ds4_buf_putc(b, '{'); break;
        case T_OPEN:
            in_group = true;
            drop = false;
            group.len = 0;
            break;
        case T_CLOSE:
            if (!in_group) ds4_buf_puts(out, "]}");   /* no group to close: text */
            else if (!drop && group.len) ds4_buf_put(out, group.p, group.len);
            in_group = false;
            break;
        case T_VAR:
            put_var(b, v, var, &empty);
            drop |= in_group && empty;
            break;
        case T_BAD: break;   /* refused by the check above */
        }
        p += len;
    }
    bool failed = out->failed || group.failed;
    ds4_buf_free(&group);
    if (failed) return ds4_err_set(err, DS4_E_NOMEM, "out of memory expanding the backend template");
    return 0;
}
