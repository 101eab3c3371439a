/* ds4ref: the command line.  Flags follow ds4's where ds4 has them.
 *
 * Everything numeric happens in the library; this file parses arguments,
 * picks the model, turns the prompt into tokens and routes the run to one of:
 * tokenizing, teacher-forced logits, or generation (plain, or recorded as a
 * golden / ds4 logprob dump / official.vec case). */
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "fileio.h"
#include "goldenrun.h"
#include "model.h"
#include "session.h"
#include "mtp.h"
#include "spec.h"

typedef struct cli {
    const char *model, *mtp;
    const char *prompt, *prompt_file, *tokens_file;
    const char *system;           /* NULL: ds4's default system prompt */
    bool nothink, think_max;
    long n_predict;
    double temp;
    uint32_t ctx, chunk;
    int threads;
    bool qat;
    const char *logits_out, *golden_out, *dump_logprobs, *vec_out, *vec_id;
    uint32_t top_k;
    const char *tokenize_file;
    bool dump_tokens;
    bool no_stop_eos;
    uint32_t mtp_draft;
    bool spec_report;
    uint64_t seed;
    const char *batch_prompts;
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
            "  --mtp FILE              MTP draft head GGUF\n"
            "  --mtp-draft N           speculative decoding with N drafts per cycle (1..16);\n"
            "                          the output is bit-identical to plain decoding\n"
            "  --spec-report           print the draft acceptance line at the end\n"
            "prompt (one of):\n"
            "  -p, --prompt TEXT       user message, rendered with the chat template\n"
            "  --prompt-file FILE      the same, read byte for byte from FILE\n"
            "  --tokens-file FILE      whitespace-separated token ids, used as they are\n"
            "  -sys, --system TEXT     system prompt (default \"%s\";\n"
            "                          \"\" for none)\n"
            "  --think | --nothink | --think-max   thinking mode (default --think)\n"
            "generation:\n"
            "  -n, --tokens N          tokens to generate (default 128)\n"
            "  --temp T                0 = greedy (default; ties to the lowest id)\n"
            "  --seed S                sampling seed for --temp > 0 (default 1)\n"
            "  --batch-prompts FILE    decode every line of FILE as a prompt, together\n"
            "  --ignore-eos            do not stop at the end-of-sentence token\n"
            "  -c, --ctx N             context size (default: the model's, at most 32768)\n"
            "  --chunk N               tokens per forward pass (default 256; never\n"
            "                          changes the numbers)\n"
            "  -t, --threads N         OpenMP threads (never changes the numbers)\n"
            "  --qat on|off            official FP8 KV / FP4 indexer simulation (default on)\n"
            "outputs:\n"
            "  --logits-out FILE       f32 LE logits of every prompt position [n][n_vocab]\n"
            "  --golden-out FILE       golden stream (docs/FORMATS.md)\n"
            "  --dump-logprobs FILE    the same in ds4's --dump-logprobs JSON layout\n"
            "  --vec-out FILE          append a case to an official.vec file\n"
            "  --vec-id ID             case id for --vec-out (default: prompt file name)\n"
            "  --logprobs-top-k K      alternatives recorded per step (default 20)\n"
            "tokenizer:\n"
            "  --tokenize-file FILE    print the ids of FILE's raw bytes and exit\n"
            "  --dump-tokens           print the prompt's ids and strings and exit\n"
            "  -h, --help, --version\n",
            DS4_CHAT_DEFAULT_SYSTEM);
}

/* ---- argument parsing ---- */

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

static int parse_args(int argc, char **argv, cli *c) {
    memset(c, 0, sizeof(*c));
    c->n_predict = 128;
    c->chunk = 256;
    c->qat = true;
    c->top_k = 20;
    c->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--version")) {
            printf("ds4ref %s\n", DS4REF_VERSION);
            exit(0);
        }
        if (!strcmp(a, "--think")) { c->nothink = false; c->think_max = false; continue; }
        if (!strcmp(a, "--nothink")) { c->nothink = true; continue; }
        if (!strcmp(a, "--think-max")) { c->think_max = true; c->nothink = false; continue; }
        if (!strcmp(a, "--dump-tokens")) { c->dump_tokens = true; continue; }
        if (!strcmp(a, "--ignore-eos")) { c->no_stop_eos = true; continue; }
        if (!strcmp(a, "--spec-report")) { c->spec_report = true; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, "ds4ref: %s needs a value (see --help)\n", a);
            return -1;
        }
        const char *v = argv[++i];
        long x;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) c->model = v;
        else if (!strcmp(a, "--mtp")) c->mtp = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) c->prompt = v;
        else if (!strcmp(a, "--prompt-file")) c->prompt_file = v;
        else if (!strcmp(a, "--tokens-file")) c->tokens_file = v;
        else if (!strcmp(a, "-sys") || !strcmp(a, "--system")) c->system = v;
        else if (!strcmp(a, "--logits-out")) c->logits_out = v;
        else if (!strcmp(a, "--golden-out")) c->golden_out = v;
        else if (!strcmp(a, "--dump-logprobs")) c->dump_logprobs = v;
        else if (!strcmp(a, "--vec-out")) c->vec_out = v;
        else if (!strcmp(a, "--vec-id")) c->vec_id = v;
        else if (!strcmp(a, "--tokenize-file")) c->tokenize_file = v;
        else if (!strcmp(a, "--batch-prompts")) c->batch_prompts = v;
        else if (!strcmp(a, "--mtp-draft")) {
            if (parse_long(a, v, 1, DS4_SPEC_MAX_DRAFT, &x)) return -1;
            c->mtp_draft = (uint32_t)x;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            c->seed = strtoull(v, &end, 10);
            if (!*v || *end || errno) {
                fprintf(stderr, "ds4ref: --seed expects a non-negative integer, got '%s'\n", v);
                return -1;
            }
        }
        else if (!strcmp(a, "-n") || !strcmp(a, "--tokens")) {
            if (parse_long(a, v, 0, INT_MAX, &c->n_predict)) return -1;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (parse_long(a, v, 1, INT_MAX, &x)) return -1;
            c->ctx = (uint32_t)x;
        } else if (!strcmp(a, "--chunk")) {
            if (parse_long(a, v, 1, 65536, &x)) return -1;
            c->chunk = (uint32_t)x;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (parse_long(a, v, 1, 4096, &x)) return -1;
            c->threads = (int)x;
        } else if (!strcmp(a, "--logprobs-top-k")) {
            if (parse_long(a, v, 1, DS4_GOLDEN_MAX_TOP, &x)) return -1;
            c->top_k = (uint32_t)x;
        } else if (!strcmp(a, "--temp")) {
            char *end;
            c->temp = strtod(v, &end);
            if (!*v || *end || !(c->temp >= 0 && c->temp <= 100)) {
                fprintf(stderr, "ds4ref: --temp expects a number in [0, 100], got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--qat")) {
            if (!strcmp(v, "on")) c->qat = true;
            else if (!strcmp(v, "off")) c->qat = false;
            else {
                fprintf(stderr, "ds4ref: --qat expects on or off, got '%s'\n", v);
                return -1;
            }
        } else {
            fprintf(stderr, "ds4ref: unknown option %s (see --help)\n", a);
            return -1;
        }
    }
    int sources = !!c->prompt + !!c->prompt_file + !!c->tokens_file + !!c->batch_prompts;
    if (sources > 1) {
        fprintf(stderr, "ds4ref: specify only one prompt source (-p, --prompt-file, --tokens-file, "
                        "--batch-prompts)\n");
        return -1;
    }
    if (c->mtp_draft && !c->mtp) {
        fprintf(stderr, "ds4ref: --mtp-draft needs the MTP head: --mtp FILE\n");
        return -1;
    }
    if (c->temp > 0 && (c->golden_out || c->dump_logprobs || c->vec_out)) {
        fprintf(stderr, "ds4ref: goldens, dumps and vec cases record greedy decoding: use --temp 0\n");
        return -1;
    }
    if (c->batch_prompts && (c->golden_out || c->dump_logprobs || c->vec_out || c->logits_out)) {
        fprintf(stderr, "ds4ref: --batch-prompts prints text only; record goldens one prompt at a time\n");
        return -1;
    }
    return 0;
}

/* ---- model selection ---- */

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

/* -m, else ./ds4flash.gguf, else the synthetic model `make` builds next to
 * this binary (or in the current directory). */
static const char *pick_model(const cli *c, char *buf, size_t cap) {
    if (c->model) return c->model;
    if (file_exists("ds4flash.gguf")) return "ds4flash.gguf";
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            int w = snprintf(buf, cap, "%.*s/models/tiny.gguf", (int)(cap - 32), exe);
            if (w > 0 && (size_t)w < cap && file_exists(buf)) goto found;
        }
    }
    snprintf(buf, cap, "models/tiny.gguf");
    if (!file_exists(buf)) return "ds4flash.gguf";   /* let open() report it */
found:
    fprintf(stderr, "ds4ref: ./ds4flash.gguf not found; using the synthetic default model %s "
                    "(random weights)\n", buf);
    return buf;
}

/* ---- prompt ---- */

static int read_tokens_file(const char *path, ds4_tokens *out, ds4err *err) {
    char *buf;
    size_t len;
    if (ds4_read_file(path, (size_t)1 << 30, &buf, &len, err)) return -1;
    char *p = buf, *end = buf + len;
    int rc = 0;
    while (p < end && !rc) {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
        if (p == end) break;
        char *q = p;
        long v = 0;
        while (q < end && *q >= '0' && *q <= '9' && v <= INT32_MAX) v = v * 10 + (*q++ - '0');
        if (q == p || v > INT32_MAX || (q < end && !strchr(" \n\t\r", *q))) {
            rc = ds4err_set(err, DS4_E_FORMAT, "%s: byte %ld: expected a decimal token id",
                            path, (long)(p - buf));
            break;
        }
        rc = ds4_tokens_push(out, (int32_t)v, err);
        p = q;
    }
    free(buf);
    return rc;
}

/* The prompt's token ids, and its text when it came as text. */
static int build_prompt(const cli *c, const ds4_model *m, ds4_tokens *ids, char **text,
                        size_t *text_len, ds4err *err) {
    *text = NULL;
    *text_len = 0;
    if (c->tokens_file) return read_tokens_file(c->tokens_file, ids, err);
    if (c->prompt_file) {
        if (ds4_read_file(c->prompt_file, (size_t)1 << 30, text, text_len, err)) return -1;
    } else if (c->prompt) {
        *text_len = strlen(c->prompt);
        *text = malloc(*text_len + 1);
        if (!*text) return ds4err_set(err, DS4_E_NOMEM, "out of memory");
        memcpy(*text, c->prompt, *text_len + 1);
    } else {
        return ds4err_set(err, DS4_E_ARG, "no prompt: give -p TEXT, --prompt-file FILE or --tokens-file FILE");
    }
    const ds4_tokenizer *tok;
    if (ds4_model_tokenizer(m, &tok, err)) return -1;
    const char *sys = c->system ? c->system : DS4_CHAT_DEFAULT_SYSTEM;
    ds4_chat_opts co = {.thinking = !c->nothink, .effort_max = c->think_max};
    return ds4_chat_prompt_ids(tok, sys, strlen(sys), *text, *text_len, &co, ids, err);
}

/* ---- modes ---- */

static int tokenize_file(const ds4_model *m, const char *path, ds4err *err) {
    const ds4_tokenizer *tok;
    char *buf;
    size_t len;
    if (ds4_model_tokenizer(m, &tok, err)) return -1;
    if (ds4_read_file(path, (size_t)1 << 30, &buf, &len, err)) return -1;
    ds4_tokens ids = {0};
    int rc = ds4_tok_encode(tok, buf, len, 0, &ids, err);
    for (size_t i = 0; !rc && i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
    if (!rc) printf("\n");
    ds4_tokens_free(&ids);
    free(buf);
    return rc;
}

static int dump_tokens(const ds4_model *m, const ds4_tokens *ids, ds4err *err) {
    const ds4_tokenizer *tok;
    if (ds4_model_tokenizer(m, &tok, err)) return -1;
    printf("[");
    for (size_t i = 0; i < ids->n; i++) printf(i ? ", %d" : "%d", ids->ids[i]);
    printf("]\n");
    for (size_t i = 0; i < ids->n; i++) {
        ds4_strref s;
        if (ds4_tok_text(tok, ids->ids[i], &s, err)) return -1;
        printf("%6d  %.*s\n", ids->ids[i], (int)s.len, s.ptr);
    }
    return 0;
}

static void progress(void *ud, uint32_t done, uint32_t total) {
    (void)ud;
    fprintf(stderr, "\rprefill: %u/%u tokens", done, total);
    if (done == total) fprintf(stderr, "\n");
}

static int write_logits(ds4_session *s, const ds4_tokens *ids, const char *path, ds4err *err) {
    uint32_t V = s->e->m->cfg.n_vocab;
    float *lg = malloc(sizeof(float) * ids->n * V);
    if (!lg) return ds4err_set(err, DS4_E_NOMEM, "out of memory for %zu x %u logits", ids->n, V);
    int rc = ds4_session_eval(s, ids->ids, (uint32_t)ids->n, lg, NULL, err);
    if (!rc) rc = ds4_write_file_atomic(path, lg, sizeof(float) * ids->n * V, err);
    free(lg);
    return rc;
}

static void print_text(void *ud, const uint8_t *bytes, size_t n) {
    (void)ud;
    fwrite(bytes, 1, n, stdout);
    fflush(stdout);
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Everything generation needs besides the session. */
typedef struct gen_env {
    const ds4_model *m;
    ds4_spec_cfg spec;
    ds4_spec_stats stats;
} gen_env;

static void print_report(const cli *c, const gen_env *g) {
    if (!c->spec_report) return;
    char line[160];
    ds4_spec_report(&g->stats, line, sizeof(line));
    fprintf(stderr, "%s\n", line);
}

static int generate(const cli *c, gen_env *g, ds4_session *s, const ds4_tokens *ids,
                    const char *text, size_t text_len, ds4err *err) {
    char vec_id[96];
    snprintf(vec_id, sizeof(vec_id), "%s", c->vec_id ? c->vec_id
                                          : c->prompt_file ? base_name(c->prompt_file) : "ds4ref");
    char *dot = strrchr(vec_id, '.');
    if (!c->vec_id && dot) *dot = '\0';
    ds4_run_opts o = {
        .n_steps = (uint32_t)c->n_predict,
        .top_k = c->top_k,
        .stop_at_eos = !c->no_stop_eos,
        .golden_path = c->golden_out,
        .dump_path = c->dump_logprobs,
        .vec_path = c->vec_out,
        .vec_id = vec_id,
        .vec_prompt_path = c->prompt_file ? c->prompt_file : "prompt.txt",
        .prompt_text = (const uint8_t *)text,
        .prompt_text_len = text_len,
        .on_text = print_text,
        .stop = &interrupted,
        .spec = &g->spec,
        .seed = c->seed,
        .stats = &g->stats,
    };
    const ds4_tokenizer *tok = g->m->has_tok ? &g->m->tok : NULL;
    int rc = ds4_run_golden(s, tok, ids->ids, (uint32_t)ids->n, &o, NULL, err);
    printf("\n");
    print_report(c, g);
    return rc;
}

/* --batch-prompts: one prompt per line, decoded together (each row its own
 * session and positions); every row's text is printed at the end. */
typedef struct batch_row {
    ds4_session s;
    ds4_tokens ids;
    ds4_buf text;
    bool live;
} batch_row;

typedef struct row_out {
    const ds4_tokenizer *tok;
    ds4_buf *text;
} row_out;

static int collect_text(void *ud, uint32_t step, const ds4_gen_step *st) {
    row_out *r = ud;
    ds4err e = {0};
    (void)step;
    ds4_tok_decode(r->tok, &st->token, 1, r->text, &e);
    return interrupted != 0;
}

static int read_batch(const char *path, char **buf, char ***lines, uint32_t *n, ds4err *err) {
    size_t len;
    if (ds4_read_file(path, (size_t)1 << 30, buf, &len, err)) return -1;
    *n = 0;
    *lines = malloc(sizeof(char *) * (len / 1 + 1));
    if (!*lines) return ds4err_set(err, DS4_E_NOMEM, "out of memory");
    for (char *p = *buf, *end = *buf + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        if (stop > p) {
            *stop = '\0';
            (*lines)[(*n)++] = p;
        }
        p = stop + 1;
    }
    if (!*n) return ds4err_set(err, DS4_E_ARG, "%s holds no prompt (one per line)", path);
    return 0;
}

static int run_batch(const cli *c, ds4_model *m, ds4_engine *e, gen_env *g, uint32_t ctx,
                     ds4err *err) {
    char *buf = NULL, **lines = NULL;
    uint32_t n = 0;
    const ds4_tokenizer *tok;
    if (read_batch(c->batch_prompts, &buf, &lines, &n, err) || ds4_model_tokenizer(m, &tok, err)) {
        free(buf);
        free(lines);
        return -1;
    }
    batch_row *rows = calloc(n, sizeof(batch_row));
    ds4_spec_row *sr = calloc(n, sizeof(ds4_spec_row));
    ds4_session **ss = calloc(n, sizeof(ds4_session *));
    const int32_t **prompts = calloc(n, sizeof(int32_t *));
    uint32_t *lens = calloc(n, sizeof(uint32_t));
    row_out *outs = calloc(n, sizeof(row_out));
    int rc = -1;
    if (!rows || !sr || !ss || !prompts || !lens || !outs) {
        ds4err_set(err, DS4_E_NOMEM, "out of memory");
        goto done;
    }
    const char *sys = c->system ? c->system : DS4_CHAT_DEFAULT_SYSTEM;
    ds4_chat_opts co = {.thinking = !c->nothink, .effort_max = c->think_max};
    uint32_t rollback = ds4_spec_rollback(c->mtp_draft ? c->mtp_draft : 1);
    ds4_session_opts so = {.ctx = ctx, .chunk = c->chunk, .rollback = rollback > 32 ? rollback : 32};
    for (uint32_t i = 0; i < n; i++) {
        if (ds4_chat_prompt_ids(tok, sys, strlen(sys), lines[i], strlen(lines[i]), &co,
                                &rows[i].ids, err) ||
            ds4_session_init(&rows[i].s, e, &so, err))
            goto done;
        rows[i].live = true;
        if (rows[i].ids.n > ctx) {
            ds4err_set(err, DS4_E_RANGE, "prompt %u has %zu tokens, more than the context of %u",
                       i + 1, rows[i].ids.n, ctx);
            goto done;
        }
        ss[i] = &rows[i].s;
        prompts[i] = rows[i].ids.ids;
        lens[i] = (uint32_t)rows[i].ids.n;
        outs[i] = (row_out){tok, &rows[i].text};
        uint64_t room = (uint64_t)ctx - lens[i] + 1;
        sr[i] = (ds4_spec_row){.s = ss[i], .seed = c->seed + i, .cb = collect_text, .ud = &outs[i],
                               .n_steps = (uint32_t)(room < (uint64_t)c->n_predict ? room : (uint64_t)c->n_predict)};
        sr[i].steps = calloc(sr[i].n_steps ? sr[i].n_steps : 1, sizeof(ds4_gen_step));
        if (!sr[i].steps) {
            ds4err_set(err, DS4_E_NOMEM, "out of memory");
            goto done;
        }
    }
    ds4_gen_opts go = {.n_steps = (uint32_t)c->n_predict, .top_k = 1,
                       .eos = ds4_tok_special(tok, DS4_SPECIAL_EOS), .stop_at_eos = !c->no_stop_eos};
    if (ds4_spec_prefill(g->spec.drafter, ss, prompts, lens, n, err) ||
        ds4_spec_generate(&g->spec, &go, sr, n, &g->stats, err))
        goto done;
    for (uint32_t i = 0; i < n; i++)
        printf("--- prompt %u: %s\n%.*s\n", i + 1, lines[i], (int)rows[i].text.len,
               rows[i].text.p ? rows[i].text.p : "");
    print_report(c, g);
    rc = 0;
done:
    for (uint32_t i = 0; rows && i < n; i++) {
        if (rows[i].live) ds4_session_free(&rows[i].s);
        ds4_tokens_free(&rows[i].ids);
        ds4_buf_free(&rows[i].text);
        if (sr && sr[i].steps) {
            ds4_gen_steps_free(sr[i].steps, sr[i].n_done);
            free(sr[i].steps);
        }
    }
    free(rows);
    free(sr);
    free(ss);
    free(prompts);
    free(lens);
    free(outs);
    free(lines);
    free(buf);
    return rc;
}

static uint32_t default_ctx(const ds4_model *m) {
    uint32_t cl = m->cfg.context_length;
    return cl && cl < 32768 ? cl : 32768;
}

static int run(const cli *c, ds4err *err) {
    char model_buf[PATH_MAX];
    const char *path = pick_model(c, model_buf, sizeof(model_buf));
    ds4_model m;
    if (ds4_model_open(&m, path, err)) return -1;
    int rc = -1;
    ds4_tokens ids = {0};
    char *text = NULL;
    size_t text_len = 0;
    ds4_engine e;
    ds4_session s;
    bool have_engine = false, have_session = false;
    gen_env g = {.m = &m, .spec = {.temp = c->temp}};
    if (c->mtp && ds4_model_load_mtp(&m, c->mtp, err)) goto done;
    if (c->tokenize_file) {
        rc = tokenize_file(&m, c->tokenize_file, err);
        goto done;
    }
    if (!c->batch_prompts && build_prompt(c, &m, &ids, &text, &text_len, err)) goto done;
    if (c->dump_tokens) {
        rc = dump_tokens(&m, &ids, err);
        goto done;
    }
    uint32_t ctx = c->ctx ? c->ctx : default_ctx(&m);
    uint32_t rows = 1;
    if (c->batch_prompts) {
        char *tmp = NULL, **lines = NULL;
        if (read_batch(c->batch_prompts, &tmp, &lines, &rows, err)) {
            free(tmp);
            free(lines);
            goto done;
        }
        free(tmp);
        free(lines);
    }
    ds4_fwd_opts fo = {.qat = c->qat};
    /* Rows of a batch share every forward pass. */
    if (ds4_engine_init(&e, &m, &fo, c->chunk * rows, err)) goto done;
    have_engine = true;
    if (c->mtp_draft && ds4_mtp_drafter_new(&g.spec.drafter, &e, rows, ctx, c->chunk, c->mtp_draft, err))
        goto done;
    g.spec.n_draft = c->mtp_draft;
    if (c->batch_prompts) {
        rc = run_batch(c, &m, &e, &g, ctx, err);
        goto done;
    }
    uint32_t rollback = ds4_spec_rollback(c->mtp_draft ? c->mtp_draft : 1);
    ds4_session_opts so = {.ctx = ctx, .chunk = c->chunk, .rollback = rollback > 32 ? rollback : 32};
    if (ds4_session_init(&s, &e, &so, err)) goto done;
    have_session = true;
    if (isatty(2) && ids.n > c->chunk) s.progress = progress;
    if (c->logits_out) {
        if (write_logits(&s, &ids, c->logits_out, err)) goto done;
        if (!c->n_predict) {
            rc = 0;
            goto done;
        }
    }
    rc = generate(c, &g, &s, &ids, text, text_len, err);
done:
    if (g.spec.drafter) ds4_drafter_free(g.spec.drafter);
    if (have_session) ds4_session_free(&s);
    if (have_engine) ds4_engine_free(&e);
    ds4_tokens_free(&ids);
    free(text);
    ds4_model_close(&m);
    return rc;
}

int main(int argc, char **argv) {
    cli c;
    if (parse_args(argc, argv, &c)) return DS4_E_ARG;
    if (c.threads) omp_set_num_threads(c.threads);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    ds4err err = {0};
    if (run(&c, &err)) {
        fprintf(stderr, "ds4ref: %s\n", err.msg);
        return err.code ? err.code : 1;
    }
    return 0;
}
