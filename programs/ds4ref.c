/* ds4ref: the command line.  Flags follow ds4's where ds4 has them.
 *
 * Everything happens in the library, through its public API (ds4ref.h) only;
 * this file parses arguments, picks the model, turns the prompt into tokens
 * and routes the run to one of: tokenizing, teacher-forced logits, or
 * generation (plain, speculative, sampled, batched, or recorded as a golden /
 * ds4 logprob dump / official.vec case). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ds4ref.h"

#include "models.h"
#include "options.h"
#include "termtext.h"
#include "wait_policy.h"

typedef struct cli {
    const char *model, *mtp, *dspark;
    const char *prompt, *prompt_file, *tokens_file;
    const char *system;           /* NULL: ds4's default system prompt */
    bool nothink, think_max;
    const char *effort;           /* --reasoning-effort; NULL: the release's default */
    int release;                  /* enum ds4ref_chat_release */
    long n_predict;
    double temp;
    uint32_t ctx, chunk;
    uint32_t threads;
    bool qat;
    const char *numerics;         /* NULL: the official numerics */
    const char *logits_out, *golden_out, *dump_logprobs, *vec_out, *vec_id;
    uint32_t top_k;
    const char *tokenize_file;
    bool dump_tokens;
    bool no_stop_eos;
    uint32_t mtp_draft;
    double dspark_conf;
    bool spec_report;
    uint64_t seed;
    const char *batch_prompts, *batch_tokens;
} cli;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ds4ref [options]\n"
            "\n"
            "Reference implementation of DeepSeek V4 Flash inference (CPU, bit-exact).\n"
            "\n"
            "model:\n"
            "  -m, --model FILE        GGUF model (default ./ds4flash.gguf, else the\n"
            "                          synthetic default model built by make)\n"
            "  --mtp FILE              MTP draft head GGUF: speculative decoding\n"
            "  --dspark FILE           llama.cpp's DSpark drafter GGUF (architecture\n"
            "                          dflash) for a 0731 model whose file has none\n"
            "  --mtp-draft N           drafts per cycle with --mtp, or with the DSpark\n"
            "                          drafter of a model that has one (0731; a block\n"
            "                          drafts at most its size) (1..16, default 1 with\n"
            "                          --mtp); the output is bit-identical to plain\n"
            "                          decoding\n"
            "  --dspark-confidence X   the DSpark drafter stops a block at the first slot\n"
            "                          whose confidence is below X (0..1; default 0:\n"
            "                          every block whole); never changes a token\n"
            "  --spec-report           print the draft acceptance line at the end\n"
            "prompt (one of):\n"
            "  -p, --prompt TEXT       user message, rendered with the chat template\n"
            "  --prompt-file FILE      the same, read byte for byte from FILE\n"
            "  --tokens-file FILE      whitespace-separated token ids, used as they are\n"
            "  -sys, --system TEXT     system prompt (default \"%s\";\n"
            "                          \"\" for none)\n"
            "  --think | --nothink | --think-max   thinking mode (default --think)\n"
            "  --reasoning-effort E    low, high or max, in thinking mode (the official\n"
            "                          reasoning_effort; --think-max is max)\n"
            "  --chat-release R        v4 (default: DeepSeek-V4-Flash) or 0731 (-0731's\n"
            "                          encoder: efforts low, the default, high and max)\n"
            "generation:\n"
            "  -n, --tokens N          tokens to generate (default 128)\n"
            "  --temp T                0 = greedy (default; ties to the lowest id)\n"
            "  --seed S                sampling seed for --temp > 0 (default 1)\n"
            "  --batch-prompts FILE    decode every line of FILE as a prompt, together\n"
            "  --batch-tokens FILE     the same with token ids (a prompt's ids on a line);\n"
            "                          --golden-out F / --dump-logprobs F write F.ROW\n"
            "                          for each row (ROW = 0, 1, ...)\n"
            "  --ignore-eos            do not stop at the end-of-sentence token\n"
            "  -c, --ctx N             context size (default: the model's, at most 32768)\n"
            "  --chunk N               tokens per forward pass (default 256; never\n"
            "                          changes the numbers); also --prefill-chunk N\n"
            "  -t, --threads N         OpenMP threads (never changes the numbers; default:\n"
            "                          OMP_NUM_THREADS, else every core, or on machines of\n"
            "                          more than 16 the fastest count its passes measure)\n"
            "  --qat on|off            official FP8 KV / FP4 indexer simulation (default on)\n"
            "  --numerics P            another engine's intended rounding, reproduced exactly:\n"
            "                          ggml-act, ds4-act, f16-kv, ds4 (= ds4-act,f16-kv) or a\n"
            "                          comma list (default official; docs/NUMERICS.md);\n"
            "                          jitter adds one ulp of noise to every product\n"
            "outputs:\n"
            "  --logits-out FILE       f32 LE logits of every prompt position [n][n_vocab]\n"
            "  --golden-out FILE       golden stream (docs/FORMATS.md)\n"
            "  --dump-logprobs FILE    the same in ds4's --dump-logprobs JSON layout\n"
            "  --vec-out FILE          append a case to an official.vec file\n"
            "  --vec-id ID             case id for --vec-out (default: the --prompt-file's\n"
            "                          name; required with -p)\n"
            "  --logprobs-top-k K      alternatives recorded per step (default 20)\n"
            "tokenizer:\n"
            "  --tokenize-file FILE    print the ids of FILE's raw bytes and exit\n"
            "  --dump-tokens           print the prompt's ids and strings and exit\n"
            "  -h, --help, --version\n",
            DS4REF_DEFAULT_SYSTEM);
}

/* ---- argument parsing ---- */

enum opt_id {
    O_HELP, O_VERSION, O_THINK, O_NOTHINK, O_THINK_MAX, O_DUMP_TOKENS, O_IGNORE_EOS,
    O_SPEC_REPORT, O_MODEL, O_MTP, O_MTP_DRAFT, O_PROMPT, O_PROMPT_FILE, O_TOKENS_FILE,
    O_SYSTEM, O_LOGITS_OUT, O_GOLDEN_OUT, O_DUMP_LOGPROBS, O_VEC_OUT, O_VEC_ID,
    O_TOKENIZE_FILE, O_BATCH_PROMPTS, O_BATCH_TOKENS, O_SEED, O_TOKENS, O_CTX, O_CHUNK, O_THREADS, O_TOP_K,
    O_TEMP, O_QAT, O_NUMERICS, O_EFFORT, O_RELEASE, O_DSPARK_CONF, O_DSPARK
};

static const ds4ref_option options[] = {
    {"-h", O_HELP, false}, {"--help", O_HELP, false}, {"--version", O_VERSION, false},
    {"--think", O_THINK, false}, {"--nothink", O_NOTHINK, false},
    {"--think-max", O_THINK_MAX, false}, {"--dump-tokens", O_DUMP_TOKENS, false},
    {"--ignore-eos", O_IGNORE_EOS, false}, {"--spec-report", O_SPEC_REPORT, false},
    {"-m", O_MODEL, true}, {"--model", O_MODEL, true}, {"--mtp", O_MTP, true},
    {"--mtp-draft", O_MTP_DRAFT, true}, {"--dspark-confidence", O_DSPARK_CONF, true},
    {"--dspark", O_DSPARK, true}, {"-p", O_PROMPT, true}, {"--prompt", O_PROMPT, true},
    {"--prompt-file", O_PROMPT_FILE, true}, {"--tokens-file", O_TOKENS_FILE, true},
    {"-sys", O_SYSTEM, true}, {"--system", O_SYSTEM, true},
    {"--logits-out", O_LOGITS_OUT, true}, {"--golden-out", O_GOLDEN_OUT, true},
    {"--dump-logprobs", O_DUMP_LOGPROBS, true}, {"--vec-out", O_VEC_OUT, true},
    {"--vec-id", O_VEC_ID, true}, {"--tokenize-file", O_TOKENIZE_FILE, true},
    {"--batch-prompts", O_BATCH_PROMPTS, true}, {"--batch-tokens", O_BATCH_TOKENS, true},
    {"--seed", O_SEED, true},
    {"-n", O_TOKENS, true}, {"--tokens", O_TOKENS, true}, {"-c", O_CTX, true},
    {"--ctx", O_CTX, true}, {"--chunk", O_CHUNK, true},
    {"--prefill-chunk", O_CHUNK, true},   /* ds4's name */
    {"-t", O_THREADS, true}, {"--threads", O_THREADS, true},
    {"--logprobs-top-k", O_TOP_K, true}, {"--temp", O_TEMP, true}, {"--qat", O_QAT, true},
    {"--numerics", O_NUMERICS, true}, {"--reasoning-effort", O_EFFORT, true},
    {"--chat-release", O_RELEASE, true},
};

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "ds4ref: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_u32(const char *flag, const char *v, long lo, long hi, uint32_t *out) {
    long x;
    if (parse_long(flag, v, lo, hi, &x)) return -1;
    *out = (uint32_t)x;
    return 0;
}

/* A case of --vec-out is one ds4_test --logprob-vectors can replay: it
 * renders the prompt as ds4's official vectors are made, with no system
 * prompt and thinking off, so the case must have been made that way; and it
 * needs a name, which a prompt file gives and -p does not. */
static int check_vec_out(const cli *c) {
    if (!c->vec_out || c->batch_prompts || c->batch_tokens || c->tokens_file) return 0;
    if (!c->system || c->system[0] || !c->nothink) {
        fprintf(stderr, "ds4ref: --vec-out writes a case for ds4_test --logprob-vectors, which "
                        "renders the prompt with no system prompt and thinking off: add "
                        "-sys \"\" --nothink\n");
        return -1;
    }
    if (c->prompt && !c->vec_id) {
        fprintf(stderr, "ds4ref: --vec-out with -p needs --vec-id ID, the case's name "
                        "(--prompt-file names it after the file)\n");
        return -1;
    }
    return 0;
}

/* One option into c (v: its value, for those that take one); -1 after a
 * message when the value is bad. */
static int apply_option(cli *c, int id, const char *a, const char *v) {
    char *end;
    switch ((enum opt_id)id) {
    case O_HELP:
        usage(stdout);
        exit(0);
    case O_VERSION:
        printf("ds4ref %s (kernels %s; this machine runs: %s)\n", ds4ref_version(),
               ds4ref_kernels(), ds4ref_kernels_available());
        exit(0);
    case O_THINK: c->nothink = false; c->think_max = false; c->effort = NULL; return 0;
    case O_NOTHINK: c->nothink = true; return 0;
    case O_THINK_MAX: c->think_max = true; c->nothink = false; c->effort = NULL; return 0;
    case O_EFFORT:
        if (strcmp(v, "low") && strcmp(v, "high") && strcmp(v, "max")) {
            fprintf(stderr, "ds4ref: --reasoning-effort expects low, high or max, got '%s'\n", v);
            return -1;
        }
        c->effort = v;
        c->think_max = false;
        c->nothink = false;
        return 0;
    case O_RELEASE:
        if (strcmp(v, "v4") && strcmp(v, "0731")) {
            fprintf(stderr, "ds4ref: --chat-release expects v4 or 0731, got '%s'\n", v);
            return -1;
        }
        c->release = strcmp(v, "0731") ? DS4REF_CHAT_V4 : DS4REF_CHAT_V4_0731;
        return 0;
    case O_DUMP_TOKENS: c->dump_tokens = true; return 0;
    case O_IGNORE_EOS: c->no_stop_eos = true; return 0;
    case O_SPEC_REPORT: c->spec_report = true; return 0;
    case O_MODEL: c->model = v; return 0;
    case O_MTP: c->mtp = v; return 0;
    case O_DSPARK: c->dspark = v; return 0;
    case O_MTP_DRAFT: return parse_u32(a, v, 1, 16, &c->mtp_draft);
    case O_PROMPT: c->prompt = v; return 0;
    case O_PROMPT_FILE: c->prompt_file = v; return 0;
    case O_TOKENS_FILE: c->tokens_file = v; return 0;
    case O_SYSTEM: c->system = v; return 0;
    case O_LOGITS_OUT: c->logits_out = v; return 0;
    case O_GOLDEN_OUT: c->golden_out = v; return 0;
    case O_DUMP_LOGPROBS: c->dump_logprobs = v; return 0;
    case O_VEC_OUT: c->vec_out = v; return 0;
    case O_VEC_ID: c->vec_id = v; return 0;
    case O_NUMERICS: c->numerics = v; return 0;
    case O_TOKENIZE_FILE: c->tokenize_file = v; return 0;
    case O_BATCH_PROMPTS: c->batch_prompts = v; return 0;
    case O_BATCH_TOKENS: c->batch_tokens = v; return 0;
    case O_SEED:
        errno = 0;
        c->seed = strtoull(v, &end, 10);
        if (*v && *v != '-' && !*end && !errno) return 0;
        fprintf(stderr, "ds4ref: --seed expects a non-negative integer, got '%s'\n", v);
        return -1;
    case O_TOKENS: return parse_long(a, v, 0, INT_MAX, &c->n_predict);
    case O_CTX: return parse_u32(a, v, 1, INT_MAX, &c->ctx);
    case O_CHUNK: return parse_u32(a, v, 1, 65536, &c->chunk);
    case O_THREADS: return parse_u32(a, v, 1, 4096, &c->threads);
    case O_TOP_K: return parse_u32(a, v, 1, 1024, &c->top_k);
    case O_DSPARK_CONF:
        c->dspark_conf = strtod(v, &end);
        if (*v && !*end && c->dspark_conf >= 0 && c->dspark_conf <= 1) return 0;
        fprintf(stderr, "ds4ref: --dspark-confidence expects a number in [0, 1], got '%s'\n", v);
        return -1;
    case O_TEMP:
        c->temp = strtod(v, &end);
        if (*v && !*end && c->temp >= 0 && c->temp <= 100) return 0;
        fprintf(stderr, "ds4ref: --temp expects a number in [0, 100], got '%s'\n", v);
        return -1;
    case O_QAT:
        if (!strcmp(v, "on") || !strcmp(v, "off")) {
            c->qat = !strcmp(v, "on");
            return 0;
        }
        fprintf(stderr, "ds4ref: --qat expects on or off, got '%s'\n", v);
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, cli *c) {
    memset(c, 0, sizeof(*c));
    c->n_predict = 128;
    c->chunk = 256;
    c->qat = true;
    c->top_k = 20;
    c->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int id = ds4ref_option_next("ds4ref", options, sizeof(options) / sizeof(options[0]),
                                    argc, argv, &i, &v);
        if (id < 0 || apply_option(c, id, a, v)) return -1;
    }
    int sources = !!c->prompt + !!c->prompt_file + !!c->tokens_file + !!c->batch_prompts +
                  !!c->batch_tokens;
    if (sources > 1) {
        fprintf(stderr, "ds4ref: specify only one prompt source (-p, --prompt-file, --tokens-file, "
                        "--batch-prompts, --batch-tokens)\n");
        return -1;
    }
    /* As in ds4: the MTP head drafts one token per cycle unless told more. */
    if (c->mtp && !c->mtp_draft) c->mtp_draft = 1;
    if (c->temp > 0 && (c->golden_out || c->dump_logprobs || c->vec_out)) {
        fprintf(stderr, "ds4ref: goldens, dumps and vec cases record greedy decoding: use --temp 0\n");
        return -1;
    }
    if ((c->batch_prompts || c->batch_tokens) && (c->vec_out || c->logits_out)) {
        fprintf(stderr, "ds4ref: a batch writes goldens and dumps (one per row); --vec-out and "
                        "--logits-out take one prompt at a time\n");
        return -1;
    }
    return check_vec_out(c);
}

/* A context past the one the model's metadata declares runs (the state
 * grows as asked), but its positions are beyond what the model was made
 * for: said, not refused. */
static void warn_ctx(const cli *c, ds4ref_model *m) {
    ds4ref_model_info in;
    ds4ref_model_get_info(m, &in);
    if (c->ctx && in.context_length && c->ctx > in.context_length)
        fprintf(stderr, "ds4ref: note: --ctx %u is past the model's context_length %u (its "
                        "metadata): positions beyond it are outside what the model was made "
                        "for\n", c->ctx, in.context_length);
}

/* ---- model selection ---- */

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

/* ---- small file helpers ---- */

static int set_err(ds4ref_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int set_err(ds4ref_error *err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return code;
}

/* -m, else ./ds4flash.gguf, else the synthetic model `make` builds (or
 * `make install` installs, programs/models.h); DS4REF_E_IO, saying where it
 * looked, when there is none. */
static int pick_model(const cli *c, char *buf, size_t cap, const char **path, ds4ref_error *err) {
    *path = c->model;
    if (c->model) return 0;
    *path = "ds4flash.gguf";
    if (file_exists(*path)) return 0;
    char where[3 * PATH_MAX];
    if (!ds4ref_find_model("tiny.gguf", buf, cap, where, sizeof(where)))
        return set_err(err, DS4REF_E_IO, "no model: give -m FILE (a DeepSeek V4 Flash GGUF), or "
                       "put one at ./ds4flash.gguf; the synthetic tiny.gguf that make builds is "
                       "not in %.600s", where);
    fprintf(stderr, "ds4ref: ./ds4flash.gguf not found; using the synthetic default model %s "
                    "(random weights)\n", buf);
    *path = buf;
    return 0;
}


/* ---- prompt ---- */

typedef struct ids {
    int32_t *v;
    size_t n;
} ids;

/* Whitespace-separated decimal ids of text[from, to) of the file path (the
 * offsets name the place of an error). */
static int parse_ids(const char *path, const char *text, size_t from, size_t to, ids *out,
                     ds4ref_error *err) {
    out->v = malloc(sizeof(int32_t) * ((to - from) / 2 + 1));
    out->n = 0;
    int rc = out->v ? 0 : set_err(err, DS4REF_E_NOMEM, "out of memory");
    for (const char *p = text + from, *end = text + to; !rc && p < end;) {
        while (p < end && strchr(" \n\t\r", *p)) p++;
        if (p == end) break;
        const char *q = p;
        long v = 0;
        while (q < end && *q >= '0' && *q <= '9' && v <= INT32_MAX) v = v * 10 + (*q++ - '0');
        if (q == p || v > INT32_MAX || (q < end && !strchr(" \n\t\r", *q)))
            rc = set_err(err, DS4REF_E_FORMAT, "%s: byte %ld: expected a decimal token id", path,
                         (long)(p - text));
        else
            out->v[out->n++] = (int32_t)v;
        p = q;
    }
    return rc;
}

static int read_tokens_file(const char *path, ids *out, ds4ref_error *err) {
    char *buf;
    size_t len;
    if (ds4ref_read_file(path, &buf, &len, err)) return err->code;
    int rc = parse_ids(path, buf, 0, len, out, err);
    ds4ref_free(buf);
    return rc;
}

static int chat_ids(const cli *c, ds4ref_model *m, const char *text, size_t len, ids *out,
                    ds4ref_error *err) {
    const char *sys = c->system ? c->system : DS4REF_DEFAULT_SYSTEM;
    ds4ref_chat_options co = {.system = sys, .system_len = strlen(sys),
                              .thinking = !c->nothink, .think_max = c->think_max,
                              .reasoning_effort = c->effort, .release = c->release};
    return ds4ref_chat_prompt(m, text, len, &co, &out->v, &out->n, err);
}

/* The prompt's token ids, and its text when it came as text. */
static int build_prompt(const cli *c, ds4ref_model *m, ids *out, char **text, size_t *text_len,
                        ds4ref_error *err) {
    *text = NULL;
    *text_len = 0;
    if (c->tokens_file) return read_tokens_file(c->tokens_file, out, err);
    if (c->prompt_file) {
        if (ds4ref_read_file(c->prompt_file, text, text_len, err)) return err->code;
    } else if (c->prompt) {
        *text_len = strlen(c->prompt);
        *text = strdup(c->prompt);
        if (!*text) return set_err(err, DS4REF_E_NOMEM, "out of memory");
    } else {
        return set_err(err, DS4REF_E_ARG,
                       "no prompt: give -p TEXT, --prompt-file FILE or --tokens-file FILE");
    }
    return chat_ids(c, m, *text, *text_len, out, err);
}

/* ---- modes ---- */

static int tokenize_file(ds4ref_model *m, const char *path, ds4ref_error *err) {
    char *buf;
    size_t len;
    ids t = {0};
    if (ds4ref_read_file(path, &buf, &len, err)) return err->code;
    int rc = ds4ref_tokenize(m, buf, len, 0, &t.v, &t.n, err);
    for (size_t i = 0; !rc && i < t.n; i++) printf(i ? " %d" : "%d", t.v[i]);
    if (!rc) printf("\n");
    ds4ref_free(t.v);
    ds4ref_free(buf);
    return rc;
}

static int dump_tokens(ds4ref_model *m, const ids *t, ds4ref_error *err) {
    printf("[");
    for (size_t i = 0; i < t->n; i++) printf(i ? ", %d" : "%d", t->v[i]);
    printf("]\n");
    for (size_t i = 0; i < t->n; i++) {
        const char *s;
        size_t len;
        if (ds4ref_token_string(m, t->v[i], &s, &len, err)) return err->code;
        printf("%6d  %.*s\n", t->v[i], (int)len, s);
    }
    return 0;
}

/* ---- what the user sees while it runs ---- */

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The end-of-run speed line: when the prompts' evaluation began and ended,
 * when the first and the last token came. */
typedef struct speed {
    double prefill_start, prefill_end, first, last;
    uint64_t prompt_tokens;
    uint32_t steps, rows;
    int threads_decode, threads_prefill;   /* what ds4ref chose (ds4ref_model_threads) */
} speed;

/* A run's terminal side: the prompt's progress line, the generated text
 * (through the terminal filter when stdout is one) and its speed. */
typedef struct view {
    bool show_progress;        /* stderr is a terminal and the prompt takes several passes */
    bool term;                 /* stdout is a terminal */
    ds4ref_termtext text;
    speed sp;
} view;

/* Progress is the prompt's (the library reports nothing while decoding);
 * the line is erased when the prompt is done, so the text starts clean. */
static void progress(void *ud, uint32_t done, uint32_t total) {
    view *v = ud;
    if (done == 0) v->sp.prefill_start = now_sec();
    /* The prompt's first evaluation is the one timed, not a logits pass after it. */
    if (done == total && !v->sp.prefill_end) v->sp.prefill_end = now_sec();
    if (!v->show_progress) return;
    if (done < total) fprintf(stderr, "\rprefill: %u/%u tokens", done, total);
    else fputs("\r\033[K", stderr);
}

static void step_seen(speed *sp) {
    double t = now_sec();
    if (!sp->steps++) sp->first = t;
    sp->last = t;
}

/* "ds4ref: prefill: X t/s (P tokens), generation: Y t/s (N tokens)", as ds4
 * and llama-cli end a run; then the thread counts, when ds4ref chose them (a
 * machine of more than 16 threads and no -t: ref/forward/threads.h), 0 for
 * a kind of pass that was not measured.  A row's first token comes out of
 * its prompt's evaluation; generation counts the tokens decoded after it.  A run that
 * generates nothing (-n 0) has its prompt's evaluation timed alone; one that
 * evaluated nothing prints nothing. */
static void print_speed(const speed *sp) {
    /* The text first: with stdout and stderr in one file, the buffered text
     * would otherwise land after this line, glued to it. */
    fflush(stdout);
    double prefilled = sp->steps ? sp->first : sp->prefill_end;
    if (!prefilled) return;
    double pre = prefilled - sp->prefill_start, gen = sp->last - sp->first;
    uint32_t decoded = sp->steps > sp->rows ? sp->steps - sp->rows : 0;
    char a[32] = "-", b[32] = "-";
    if (pre > 0) snprintf(a, sizeof(a), "%.2f", (double)sp->prompt_tokens / pre);
    if (decoded && gen > 0) snprintf(b, sizeof(b), "%.2f", decoded / gen);
    char th[64] = "";
    if (sp->threads_decode || sp->threads_prefill)
        snprintf(th, sizeof(th), ", threads chosen: %d decode, %d prefill", sp->threads_decode,
                 sp->threads_prefill);
    fprintf(stderr, "ds4ref: prefill: %s t/s (%llu tokens), generation: %s t/s (%u tokens)%s\n",
            a, (unsigned long long)sp->prompt_tokens, b, sp->steps, th);
}

/* Generated bytes: raw into a file or a pipe, filtered on a terminal. */
static void put_text(view *v, const uint8_t *bytes, size_t n) {
    if (v->term) ds4ref_termtext_put(&v->text, bytes, n, stdout);
    else fwrite(bytes, 1, n, stdout);
}

static void end_text(view *v) {
    if (v->term) ds4ref_termtext_end(&v->text, stdout);
    printf("\n");
}

/* The prompt's logits into out (opened by the caller before any work),
 * committed when complete, else released.  The prompt is evaluated from
 * position 0 whatever generation left on the session. */
static int write_logits(ds4ref_model *m, ds4ref_session *s, const ids *t, ds4ref_logits_file *out,
                        ds4ref_error *err) {
    ds4ref_model_info in;
    ds4ref_model_get_info(m, &in);
    float *lg = malloc(sizeof(float) * t->n * in.n_vocab);
    int rc = lg ? ds4ref_session_truncate(s, 0, err)
                : set_err(err, DS4REF_E_NOMEM, "out of memory for %zu x %u logits", t->n,
                          in.n_vocab);
    if (!rc) rc = ds4ref_session_eval(s, t->v, t->n, lg, err);
    if (!rc) rc = ds4ref_logits_write(out, lg, t->n, err);
    if (!rc) rc = ds4ref_logits_commit(out, err);
    else ds4ref_logits_abort(out);
    free(lg);
    return rc;
}

/* Said before any work: a prompt the context cannot hold is refused with
 * the --ctx that holds it, and a -n the context cuts short is said so.
 * who names the row of a batch ("" alone). */
static int check_room(const cli *c, const ds4ref_session *s, size_t n_prompt, const char *who,
                      ds4ref_error *err) {
    uint32_t ctx = ds4ref_session_ctx(s), want = (uint32_t)c->n_predict;
    uint64_t need = n_prompt + (want ? want - 1 : 0);
    if (n_prompt > ctx)
        return set_err(err, DS4REF_E_RANGE, "%sthe prompt has %zu tokens, more than the context "
                       "of %u: give --ctx %llu or more (the prompt and -n %u)", who, n_prompt,
                       ctx, (unsigned long long)need, want);
    uint32_t room = ds4ref_generate_room(s, n_prompt, want);
    if (room < want)
        fprintf(stderr, "ds4ref: %s-n %u cut to %u tokens: that is what a context of %u leaves "
                "after the %zu-token prompt (--ctx %llu makes room for all)\n", who, want, room,
                ctx, n_prompt, (unsigned long long)need);
    return 0;
}

static int print_step(void *ud, const ds4ref_step *st) {
    view *v = ud;
    step_seen(&v->sp);
    put_text(v, st->bytes, st->n_bytes);
    fflush(stdout);
    return 0;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void print_report(const cli *c, const ds4ref_spec_stats *st) {
    if (!c->spec_report) return;
    char line[160], pos[400];
    ds4ref_spec_report(st, line, sizeof(line));
    ds4ref_spec_report_positions(st, pos, sizeof(pos));
    fflush(stdout);    /* after the text, as print_speed says */
    fprintf(stderr, "%s\n", line);
    if (pos[0]) fprintf(stderr, "%s\n", pos);
}

static void gen_options(const cli *c, ds4ref_generate_options *o, ds4ref_spec_stats *st) {
    ds4ref_generate_options_init(o);
    o->n_tokens = (uint32_t)c->n_predict;
    o->top_k = c->top_k;
    o->stop_at_eos = !c->no_stop_eos;
    o->temperature = c->temp;
    o->seed = c->seed;
    o->mtp_draft = c->mtp_draft;
    o->dspark_confidence = c->dspark_conf;
    o->stop = &interrupted;
    o->stats = st;
}

static int generate(const cli *c, ds4ref_session *s, const ids *t, const char *text,
                    size_t text_len, view *v, ds4ref_error *err) {
    char vec_id[96];
    snprintf(vec_id, sizeof(vec_id), "%s", c->vec_id ? c->vec_id
                                          : c->prompt_file ? base_name(c->prompt_file) : "ds4ref");
    char *dot = strrchr(vec_id, '.');
    if (!c->vec_id && dot) *dot = '\0';
    ds4ref_spec_stats st = {0};
    ds4ref_generate_options o;
    gen_options(c, &o, &st);
    o.golden_path = c->golden_out;
    o.dump_path = c->dump_logprobs;
    o.vec_path = c->vec_out;
    o.vec_id = vec_id;
    o.vec_prompt_path = c->prompt_file;
    o.prompt_text = (const uint8_t *)text;
    o.prompt_text_len = text_len;
    int rc = ds4ref_generate(s, t->v, t->n, &o, print_step, v, err);
    if (v->sp.steps) end_text(v);
    print_report(c, &st);
    return rc;
}

/* --batch-prompts / --batch-tokens: one prompt per line, decoded together
 * (each row its own session and positions); every row's text is printed at
 * the end, and each row's golden and dump go to PATH.ROW. */
typedef struct batch_text {
    char *p;
    size_t len, cap;
} batch_text;

typedef struct batch_out {
    batch_text *rows;
    speed sp;
} batch_out;

static int collect_row(void *ud, uint32_t row, const ds4ref_step *st) {
    batch_out *b = ud;
    batch_text *t = &b->rows[row];
    step_seen(&b->sp);
    if (t->len + st->n_bytes > t->cap) {
        size_t cap = 2 * (t->len + st->n_bytes) + 64;
        char *np = realloc(t->p, cap);
        if (!np) return 1;
        t->p = np;
        t->cap = cap;
    }
    memcpy(t->p + t->len, st->bytes, st->n_bytes);
    t->len += st->n_bytes;
    return interrupted != 0;
}

/* The prompt lines of a batch file (non-empty lines, no newline, in place
 * in *buf). */
static int read_batch(const char *path, char **buf, char ***lines, uint32_t *n,
                      ds4ref_error *err) {
    size_t len;
    *lines = NULL;
    if (ds4ref_read_file(path, buf, &len, err)) return err->code;
    *n = 0;
    *lines = malloc(sizeof(char *) * (len + 1));
    if (!*lines) return set_err(err, DS4REF_E_NOMEM, "out of memory");
    for (char *p = *buf, *end = *buf + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        if (stop > p) {
            *stop = '\0';
            (*lines)[(*n)++] = p;
        }
        p = stop + 1;
    }
    if (!*n) return set_err(err, DS4REF_E_ARG, "%s holds no prompt (one per line)", path);
    return 0;
}

/* Row i's prompt: line i rendered as a chat, or its token ids. */
static int batch_row(const cli *c, ds4ref_model *m, const char *buf, const char *line, ids *out,
                     ds4ref_error *err) {
    if (!c->batch_tokens) return chat_ids(c, m, line, strlen(line), out, err);
    size_t at = (size_t)(line - buf);
    return parse_ids(c->batch_tokens, buf, at, at + strlen(line), out, err);
}

static int run_batch(const cli *c, ds4ref_model *m, const char *buf, char **lines, uint32_t n,
                     const ds4ref_session_options *so, ds4ref_error *err) {
    ds4ref_session **rows = calloc(n, sizeof(*rows));
    ids *prompts = calloc(n, sizeof(*prompts));
    const int32_t **pv = calloc(n, sizeof(*pv));
    size_t *lens = calloc(n, sizeof(*lens));
    batch_text *texts = calloc(n, sizeof(*texts));
    int rc = rows && prompts && pv && lens && texts ? 0 : set_err(err, DS4REF_E_NOMEM, "out of memory");
    for (uint32_t i = 0; !rc && i < n; i++) {
        char who[32];
        snprintf(who, sizeof(who), "prompt %u: ", i + 1);
        rc = batch_row(c, m, buf, lines[i], &prompts[i], err);
        if (!rc) rc = ds4ref_session_new(m, so, &rows[i], err);
        if (!rc) rc = check_room(c, rows[i], prompts[i].n, who, err);
        pv[i] = prompts[i].v;
        lens[i] = prompts[i].n;
    }
    ds4ref_spec_stats st = {0};
    ds4ref_generate_options o;
    gen_options(c, &o, &st);
    o.golden_path = c->golden_out;
    o.dump_path = c->dump_logprobs;
    batch_out out = {texts, {.rows = n}};
    for (uint32_t i = 0; i < n; i++) out.sp.prompt_tokens += lens[i];
    out.sp.prefill_start = now_sec();
    if (!rc) rc = ds4ref_generate_batch(rows, pv, lens, n, &o, collect_row, &out, err);
    view v = {.term = isatty(STDOUT_FILENO)};
    for (uint32_t i = 0; !rc && i < n; i++) {
        if (c->batch_tokens) printf("--- row %u\n", i);
        else printf("--- prompt %u: %s\n", i + 1, lines[i]);
        put_text(&v, (const uint8_t *)texts[i].p, texts[i].len);
        end_text(&v);
    }
    if (!rc) print_report(c, &st);
    ds4ref_model_threads(m, &out.sp.threads_decode, &out.sp.threads_prefill);
    if (!rc) print_speed(&out.sp);
    for (uint32_t i = 0; rows && i < n; i++) {
        ds4ref_session_free(rows[i]);
        ds4ref_free(prompts[i].v);
        free(texts[i].p);
    }
    free(rows);
    free(prompts);
    free(pv);
    free(lens);
    free(texts);
    return rc;
}

static int run(const cli *c, ds4ref_error *err) {
    char model_buf[PATH_MAX];
    char *batch_buf = NULL, **lines = NULL, *text = NULL;
    uint32_t rows = 1;
    size_t text_len = 0;
    ids t = {0};
    ds4ref_model *m = NULL;
    ds4ref_session *s = NULL;
    int rc;
    const char *batch_file = c->batch_prompts ? c->batch_prompts : c->batch_tokens;
    if (batch_file && (rc = read_batch(batch_file, &batch_buf, &lines, &rows, err))) goto done;
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    if ((rc = pick_model(c, model_buf, sizeof(model_buf), &mo.path, err))) goto done;
    mo.mtp_path = c->mtp;
    mo.dspark_path = c->dspark;
    mo.qat = c->qat;
    mo.numerics = c->numerics;
    mo.max_batch = c->chunk * rows;   /* the rows of a batch share every pass */
    if ((rc = ds4ref_model_open(&mo, &m, err))) goto done;
    if (c->tokenize_file) {
        rc = tokenize_file(m, c->tokenize_file, err);
        goto done;
    }
    ds4ref_session_options so = {.ctx = c->ctx, .chunk = c->chunk};
    warn_ctx(c, m);
    if (batch_file) {
        rc = run_batch(c, m, batch_buf, lines, rows, &so, err);
        goto done;
    }
    if ((rc = build_prompt(c, m, &t, &text, &text_len, err))) goto done;
    if (c->dump_tokens) {
        rc = dump_tokens(m, &t, err);
        goto done;
    }
    view v = {.show_progress = isatty(STDERR_FILENO) && t.n > c->chunk,
              .term = isatty(STDOUT_FILENO), .sp = {.prompt_tokens = t.n, .rows = 1}};
    so.progress = progress;
    so.progress_ud = &v;
    if ((rc = ds4ref_session_new(m, &so, &s, err)) || (rc = check_room(c, s, t.n, "", err)))
        goto done;
    /* Every output is opened before any work: the logits file here, those of
     * generation by ds4ref_generate before the prompt's first pass.  So the
     * logits come after generation, committed only when it succeeded, in a
     * pass that shows no progress: the prompt's was shown once, by
     * generation.  -n 0 with the logits alone evaluates the prompt once. */
    ds4ref_logits_file *logits = NULL;
    ds4ref_model_info mi;
    ds4ref_model_get_info(m, &mi);
    if (c->logits_out && (rc = ds4ref_logits_open(c->logits_out, mi.n_vocab, &logits, err)))
        goto done;
    bool gen = !logits || c->n_predict || c->golden_out || c->dump_logprobs || c->vec_out;
    if (gen) rc = generate(c, s, &t, text, text_len, &v, err);
    else progress(&v, 0, (uint32_t)t.n);    /* the logits pass is the prompt's evaluation */
    v.show_progress = v.show_progress && !gen;
    if (logits && rc) ds4ref_logits_abort(logits);
    else if (logits) rc = write_logits(m, s, &t, logits, err);
    ds4ref_model_threads(m, &v.sp.threads_decode, &v.sp.threads_prefill);
    print_speed(&v.sp);
done:
    ds4ref_session_free(s);
    ds4ref_model_close(m);
    free(t.v);
    free(text);
    free(lines);
    ds4ref_free(batch_buf);
    return rc;
}

int main(int argc, char **argv) {
    ds4ref_wait_policy(argv);
    cli c;
    if (parse_args(argc, argv, &c)) return DS4REF_E_ARG;
    if (c.threads) ds4ref_set_threads((int)c.threads);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    ds4ref_error err = {0};
    if (ds4ref_report_sigbus("ds4ref", &err) || run(&c, &err)) {
        fprintf(stderr, "ds4ref: %s\n", err.message);
        return err.code ? err.code : 1;
    }
    return 0;
}
