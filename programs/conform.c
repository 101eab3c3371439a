/* ds4ref-conform: run a backend over the speculative-decoding matrix and
 * pinpoint the first cell that breaks (docs/CONFORM.md).
 *
 * Argument parsing over the public API (ds4check_conform_run in ds4ref.h),
 * which runs the cells, checks them and writes the reports; this file picks
 * the defaults a user expects (the tiny-spec model beside the program, its
 * MTP head, the cache under ~/.cache), shows progress on a terminal and
 * turns the verdicts into the exit status. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ds4check.h"

#include "models.h"
#include "options.h"
#include "wait_policy.h"

/* The exit status when the backend ran in no cell at all. */
enum { EXIT_NO_BACKEND = 13 };

static const char usage_text[] =
    "usage: ds4ref-conform --backend NAME|TEMPLATE [options]\n"
    "\n"
    "Runs a backend over the speculative-decoding matrix -- MTP draft depths, prefill\n"
    "chunks, batch sizes, prompts -- and checks every cell against ds4ref.\n"
    "\n"
    "backend:\n"
    "  --backend NAME|TEMPLATE  a preset (the list at the end) or a command line\n"
    "                           with placeholders; --backend-help shows both\n"
    "  --backend-help           the placeholders and the presets\n"
    "  --server URL             an engine already running (OpenAI completions with\n"
    "                           token ids, as ds4ref-server and vLLM answer them); a\n"
    "                           batch cell is its rows' requests in flight together\n"
    "  --server-cmd NAME|TEMPLATE  an engine started for each cell: a server preset\n"
    "                           (the list at the end) or a command with {port}; ready when\n"
    "                           /health or /v1/models answers, stopped after the cell.\n"
    "                           A dimension a backend cannot set keeps one value\n"
    "                           (a server's matrix: draft=0 chunk=whole batch=1,2,4;\n"
    "                           add cache=cold,warm for its prefix cache)\n"
    "  --server-dialect D       the engine's API: ids (OpenAI, \"token_id:N\"; the\n"
    "                           default), text (OpenAI, tokens by text, matched to\n"
    "                           ids by their bytes), lossy-text (the same, bytes that\n"
    "                           are not UTF-8 dropped: llama-cpp-python), llama\n"
    "                           (llama.cpp's /completion), sglang (SGLang's /generate)\n"
    "                           or ds4 (ds4-server's chat: its text only, no\n"
    "                           logprobs, judged by teacher forcing); a preset sets\n"
    "                           its own\n"
    "  --server-prompt ids|text  OpenAI prompts as token ids (default) or as text less\n"
    "                           the BOS the engine adds (llama-cpp-python); either way\n"
    "                           the answer's prompt_tokens must be the reference's\n"
    "  --timeout SEC            kill a cell's command once it has used SEC seconds of CPU\n"
    "                           (or 10 x SEC of wall time without using it; default: none)\n"
    "  -j, --jobs N             run N cells' commands at once (default 1; the checks\n"
    "                           still run one at a time)\n"
    "model and prompts:\n"
    "  -m, --model FILE         default: models/tiny-spec.gguf (beside this program,\n"
    "                           else in the current folder)\n"
    "  --mtp FILE               the MTP head (default: the model's -mtp.gguf, if any)\n"
    "  --prompts DIR            NAME.txt prompts instead of the built-in corpus\n"
    "  -n, --tokens N           tokens per row (default 32)\n"
    "  -c, --ctx N              context (default: the model's, at most 32768)\n"
    "  --top-k K                alternatives the backend records per step (default 20)\n"
    "  --temp T, --seed S       sampling (default greedy; seed 1)\n"
    "  --numerics P             the reference's numerics: auto (the default: the one\n"
    "                           the backend's base cells are closest to, with the\n"
    "                           FP8/FP4 simulation on or off, and thresholds from\n"
    "                           that noise floor), official, or a profile: ggml-act,\n"
    "                           ds4-act, f16-kv, ds4, jitter or a comma list\n"
    "  --qat on|off             the reference's FP8/FP4 simulation (default on; with\n"
    "                           no --numerics, the official numerics)\n"
    "matrix:\n"
    "  --matrix SPEC            e.g. \"draft=0,2,4 chunk=64,whole batch=1\" (may be given\n"
    "                           several times); default draft=0,1,2,3,4,6,8\n"
    "                           chunk=1,7,64,whole batch=1,2,4; named only:\n"
    "                           cache=cold,warm (servers), conf=0,50 (a DSpark\n"
    "                           drafter's confidence threshold in hundredths)\n"
    "verdicts:\n"
    "  --exact                  tokens and logprobs bit-identical to ds4ref\n"
    "  --max-gap X              nats a greedy token may lie below the reference's\n"
    "                           argmax under the backend's own tokens\n"
    "  --max-dlogprob X         |dlogprob| against the reference\n"
    "  --min-top5-overlap F, --min-top20-overlap F   (default: unchecked)\n"
    "  --tie-eps X              a difference between cells at a reference near-tie\n"
    "                           below X nats is a tie, not a failure\n"
    "                           (defaults: 5, 5 and 2 times the calibrated noise\n"
    "                           floor, at least 0.01, 0.01 and 0.05; with the\n"
    "                           numerics given, 0.5, 0.5 and 0.05)\n"
    "outputs:\n"
    "  --json FILE              every cell as JSON\n"
    "  --cache DIR              reference goldens kept between runs (default\n"
    "                           ~/.cache/ds4ref/conform); --no-cache: none\n"
    "  --work DIR               keep each cell's inputs, outputs and log there\n"
    "  --shard K/N              run the commands of slice K (from 0) of N only and\n"
    "                           write them to --json FILE as a shard file (no verdict)\n"
    "  --merge FILE...          run no command: check the cells of every slice's\n"
    "                           shard file (the same options otherwise): the\n"
    "                           unsharded run's report and JSON\n"
    "  -t, --threads N          threads of the reference\n"
    "  -q, --quiet              no progress line\n"
    "  -h, --help, --version\n"
    "\n"
    "exit status: 0 no cell failed (ties and cells not exercised are listed, not\n"
    "failed), 1 a cell failed or its backend run failed, no numerics profile\n"
    "explains the backend (it computes something else), or its ties hide a\n"
    "systematic difference, 2 usage error, 3 I/O\n"
    "error, 4 malformed input, 5 not a DS4 model, 6 out of memory, 10 interrupted,\n"
    "13 the backend ran in no cell at all.\n";

static const char placeholders_text[] =
    "With {batch} > 1, {tokens_file}.ROW and {prompt_file}.ROW hold row ROW's prompt.\n"
    "Values are inserted shell-quoted.  {[ ... ]} is dropped when a placeholder in it\n"
    "is empty or 0; {{ is a literal brace.  A backend may print ds4ref's line\n"
    "\"mtp accept: ... proposed=M accepted=K ... deepest=D\" (or ds4's DS4_MTP_SPEC_LOG\n"
    "lines): without it a speculative cell is \"not exercised\".  A dump may carry\n"
    "\"model_sha256\", the SHA-256 of the model file the backend loaded: another\n"
    "model's is a setup error (docs/CONFORM.md).\n";

enum opt_id {
    O_HELP, O_VERSION, O_BACKEND_HELP, O_EXACT, O_NO_CACHE, O_QUIET, O_BACKEND, O_TIMEOUT, O_JOBS,
    O_NUMERICS,
    O_MODEL, O_MTP, O_PROMPTS, O_TOKENS, O_CTX, O_TOP_K, O_TEMP, O_SEED, O_QAT, O_MATRIX,
    O_MAX_GAP, O_MAX_DLOGPROB, O_MIN_TOP5, O_MIN_TOP20, O_TIE_EPS, O_JSON, O_CACHE, O_WORK,
    O_THREADS, O_SERVER, O_SERVER_CMD, O_SERVER_DIALECT, O_SERVER_PROMPT, O_SHARD, O_MERGE
};

static const ds4ref_option options[] = {
    {"-h", O_HELP, false}, {"--help", O_HELP, false}, {"--version", O_VERSION, false},
    {"--backend-help", O_BACKEND_HELP, false}, {"--exact", O_EXACT, false},
    {"--no-cache", O_NO_CACHE, false}, {"-q", O_QUIET, false}, {"--quiet", O_QUIET, false},
    {"--backend", O_BACKEND, true}, {"--timeout", O_TIMEOUT, true},
    {"-j", O_JOBS, true}, {"--jobs", O_JOBS, true}, {"-m", O_MODEL, true},
    {"--model", O_MODEL, true}, {"--mtp", O_MTP, true}, {"--prompts", O_PROMPTS, true},
    {"-n", O_TOKENS, true}, {"--tokens", O_TOKENS, true}, {"-c", O_CTX, true},
    {"--ctx", O_CTX, true}, {"--top-k", O_TOP_K, true}, {"--temp", O_TEMP, true},
    {"--seed", O_SEED, true}, {"--qat", O_QAT, true}, {"--numerics", O_NUMERICS, true}, {"--matrix", O_MATRIX, true},
    {"--max-gap", O_MAX_GAP, true}, {"--max-dlogprob", O_MAX_DLOGPROB, true},
    {"--min-top5-overlap", O_MIN_TOP5, true}, {"--min-top20-overlap", O_MIN_TOP20, true},
    {"--tie-eps", O_TIE_EPS, true}, {"--json", O_JSON, true}, {"--cache", O_CACHE, true},
    {"--work", O_WORK, true}, {"-t", O_THREADS, true}, {"--threads", O_THREADS, true},
    {"--server", O_SERVER, true}, {"--server-cmd", O_SERVER_CMD, true},
    {"--server-dialect", O_SERVER_DIALECT, true},
    {"--server-prompt", O_SERVER_PROMPT, true},
    {"--shard", O_SHARD, true}, {"--merge", O_MERGE, true},
};

/* The most shard files one --merge takes. */
enum { MAX_MERGE = 4096 };

typedef struct cli {
    ds4check_conform_options o;
    bool no_cache, quiet, numerics_given, qat_given;
    uint32_t threads;
    char matrix[1024];
    const char *merge[MAX_MERGE];
} cli;

static int bad_value(const char *flag, const char *v, const char *what) {
    fprintf(stderr, "ds4ref-conform: %s expects %s, got '%s'\n", flag, what, v);
    return -1;
}

/* --shard K/N: 0 <= K < N. */
static int parse_shard(const char *flag, const char *v, uint32_t *k, uint32_t *n) {
    char *slash = strchr(v, '/'), *end;
    errno = 0;
    unsigned long a = strtoul(v, &end, 10);
    if (!slash || end != slash || slash == v || *v == '-' || errno)
        return bad_value(flag, v, "K/N (slice K of N, counted from 0)");
    unsigned long b = strtoul(slash + 1, &end, 10);
    /* N at most what one --merge takes. */
    if (!slash[1] || slash[1] == '-' || *end || errno || b == 0 || b > MAX_MERGE || a >= b)
        return bad_value(flag, v, "K/N with 0 <= K < N <= 4096");
    *k = (uint32_t)a;
    *n = (uint32_t)b;
    return 0;
}

static int parse_uint(const char *flag, const char *v, unsigned long lo, unsigned long hi,
                      uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *v == '-' || *end || errno || x < lo || x > hi) {
        char what[64];
        snprintf(what, sizeof(what), "an integer in [%lu, %lu]", lo, hi);
        return bad_value(flag, v, what);
    }
    *out = x;
    return 0;
}

static int parse_u32(const char *flag, const char *v, unsigned long lo, unsigned long hi,
                     uint32_t *out) {
    uint64_t x;
    if (parse_uint(flag, v, lo, hi, &x)) return -1;
    *out = (uint32_t)x;
    return 0;
}

static int parse_num(const char *flag, const char *v, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= 0) || isinf(x)) return bad_value(flag, v, "a number >= 0");
    *out = x;
    return 0;
}

/* The usage, then every preset's name. */
static void usage(void) {
    fputs(usage_text, stdout);
    const char *name, *tmpl, *about;
    fputs("\npresets (--backend):", stdout);
    for (uint32_t i = 0; ds4check_conform_preset(i, &name, &tmpl, &about); i++)
        printf("%s %s", i ? "," : "", name);
    fputs("\nserver presets (--server-cmd):", stdout);
    for (uint32_t i = 0; ds4check_conform_server_preset(i, &name, &tmpl, &about); i++)
        printf("%s %s", i ? "," : "", name);
    fputs("\n", stdout);
}

static void backend_help(void) {
    const char *name, *tmpl, *about;
    puts("A backend is a command line run with /bin/sh once per cell.  Placeholders:");
    for (uint32_t i = 0; ds4check_conform_placeholder(i, &name, &about); i++) {
        char braced[40];
        snprintf(braced, sizeof(braced), "{%s}", name);
        printf("  %-16s %s\n", braced, about);
    }
    fputs(placeholders_text, stdout);
    puts("\nPresets (--backend NAME):");
    for (uint32_t i = 0; ds4check_conform_preset(i, &name, &tmpl, &about); i++)
        printf("  %s: %s\n    %s\n", name, about, tmpl);
    fputs("\nDialects of an engine behind HTTP (--server-dialect NAME):\n", stdout);
    for (uint32_t i = 0; ds4check_conform_dialect(i, &name, &about); i++)
        printf("  %-11s %s\n", name, about);
    fputs("\nServer presets (--server-cmd NAME; {port}: a free port of the loopback):\n", stdout);
    for (uint32_t i = 0; ds4check_conform_server_preset(i, &name, &tmpl, &about); i++)
        printf("  %s: %s\n    %s\n", name, about, tmpl);
}

static int apply_option(cli *c, int id, const char *a, const char *v) {
    ds4check_conform_options *o = &c->o;
    uint64_t u;
    switch ((enum opt_id)id) {
    case O_HELP: usage(); exit(0);
    case O_VERSION: printf("ds4ref-conform %s\n", ds4ref_version()); exit(0);
    case O_BACKEND_HELP: backend_help(); exit(0);
    case O_EXACT: o->exact = 1; return 0;
    case O_NO_CACHE: c->no_cache = true; return 0;
    case O_QUIET: c->quiet = true; return 0;
    case O_BACKEND: o->backend = v; return 0;
    case O_SERVER: o->server_url = v; return 0;
    case O_SERVER_CMD: o->server_cmd = v; return 0;
    case O_SERVER_DIALECT: {
        const char *name, *about;
        uint32_t i = 0;
        while (ds4check_conform_dialect(i, &name, &about) && strcmp(v, name)) i++;
        if (!ds4check_conform_dialect(i, &name, &about))
            return bad_value(a, v, "a dialect that --backend-help lists");
        o->server_dialect = v;
        return 0;
    }
    case O_SERVER_PROMPT:
        if (strcmp(v, "ids") && strcmp(v, "text")) return bad_value(a, v, "ids or text");
        o->server_prompt = v;
        return 0;
    case O_TIMEOUT: return parse_num(a, v, &o->timeout);
    case O_JOBS: return parse_u32(a, v, 1, 256, &o->jobs);
    case O_NUMERICS:
        o->numerics = v;
        c->numerics_given = true;
        return 0;
    case O_MODEL: o->model_path = v; return 0;
    case O_MTP: o->mtp_path = v; return 0;
    case O_PROMPTS: o->prompts_dir = v; return 0;
    case O_TOKENS: return parse_u32(a, v, 1, 1u << 20, &o->n_tokens);
    case O_CTX: return parse_u32(a, v, 1, INT_MAX, &o->ctx);
    case O_TOP_K: return parse_u32(a, v, 1, 1024, &o->top_k);
    case O_TEMP: return parse_num(a, v, &o->temperature);
    case O_SEED:
        if (parse_uint(a, v, 0, ULONG_MAX, &u)) return -1;
        o->seed = u;
        return 0;
    case O_QAT:
        if (strcmp(v, "on") && strcmp(v, "off")) return bad_value(a, v, "on or off");
        o->qat = !strcmp(v, "on");
        c->qat_given = true;
        return 0;
    case O_MATRIX:
        /* Several --matrix narrow in turn: "draft=0 chunk=7" = "draft=0" "chunk=7". */
        if (strlen(c->matrix) + strlen(v) + 2 > sizeof(c->matrix))
            return bad_value(a, v, "a shorter matrix");
        if (c->matrix[0]) strcat(c->matrix, " ");
        strcat(c->matrix, v);
        o->matrix = c->matrix;
        return 0;
    case O_MAX_GAP: return parse_num(a, v, &o->max_gap);
    case O_MAX_DLOGPROB: return parse_num(a, v, &o->max_dlogprob);
    case O_MIN_TOP5: return parse_num(a, v, &o->min_top5_overlap);
    case O_MIN_TOP20: return parse_num(a, v, &o->min_top20_overlap);
    case O_TIE_EPS: return parse_num(a, v, &o->tie_eps);
    case O_JSON: o->json_path = v; return 0;
    case O_CACHE: o->cache_dir = v; return 0;
    case O_WORK: o->work_dir = v; return 0;
    case O_THREADS: return parse_u32(a, v, 1, 4096, &c->threads);
    case O_SHARD: return parse_shard(a, v, &o->shard, &o->shards);
    case O_MERGE:
        if (o->n_merge == MAX_MERGE) return bad_value(a, v, "at most 4096 shard files");
        c->merge[o->n_merge++] = v;
        o->merge = c->merge;
        return 0;
    }
    return -1;
}

/* ---- defaults ---- */

static bool readable(const char *p) { return access(p, R_OK) == 0; }

/* The folder of this program (for the default model and {ds4ref}). */

typedef struct paths {
    char model[PATH_MAX + 32], ds4ref[PATH_MAX + 32], cache[PATH_MAX + 32];
    char *mtp;
} paths;

static int pick_defaults(cli *c, paths *p) {
    ds4check_conform_options *o = &c->o;
    char dir[PATH_MAX];
    bool have_dir = ds4ref_self_dir(dir, sizeof(dir));
    if (have_dir) snprintf(p->ds4ref, sizeof(p->ds4ref), "%s/ds4ref", dir);
    o->ds4ref_path = have_dir && readable(p->ds4ref) ? p->ds4ref : "ds4ref";
    if (!o->model_path) {
        char where[3 * PATH_MAX];
        if (!ds4ref_find_model("tiny-spec.gguf", p->model, sizeof(p->model), where, sizeof(where))) {
            fprintf(stderr, "ds4ref-conform: no model: give -m FILE; the synthetic tiny-spec.gguf "
                            "that make builds is not in %s\n", where);
            return -1;
        }
        o->model_path = p->model;
        fprintf(stderr, "ds4ref-conform: model %s (the synthetic tiny-spec model)\n", p->model);
    }
    if (!o->mtp_path) {
        ds4ref_error e;
        if (ds4ref_synth_mtp_path(o->model_path, &p->mtp, &e) == 0 && readable(p->mtp))
            o->mtp_path = p->mtp;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (c->no_cache) o->cache_dir = NULL;
    else if (!o->cache_dir && xdg && *xdg) {
        snprintf(p->cache, sizeof(p->cache), "%s/ds4ref/conform", xdg);
        o->cache_dir = p->cache;
    } else if (!o->cache_dir && home && *home) {
        snprintf(p->cache, sizeof(p->cache), "%s/.cache/ds4ref/conform", home);
        o->cache_dir = p->cache;
    }
    return 0;
}

/* ---- Ctrl-C ---- */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* ---- progress ---- */

static void progress(void *ud, uint32_t done, uint32_t total, const char *what) {
    (void)ud;
    if (done >= total && !strcmp(what, "done")) fputs("\r\033[K", stderr);
    else fprintf(stderr, "\r\033[K[%u/%u] %s", done + 1, total, what);
    fflush(stderr);
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Progress into a log (stderr not a terminal, as in CI): a line for each
 * cell started and each step before them, and while the outputs are
 * checked, which can take long on a real model, a line a minute. */
static void progress_lines(void *ud, uint32_t done, uint32_t total, const char *what) {
    static double last;
    (void)ud;
    const bool checking = !strncmp(what, "checking ", 9);
    if (!strcmp(what, "done") || (checking && seconds_now() - last < 60)) return;
    last = seconds_now();
    fprintf(stderr, "ds4ref-conform: [%u/%u] %s\n", done + 1, total, what);
    fflush(stderr);
}

int main(int argc, char **argv) {
    ds4ref_wait_policy(argv);
    cli c;
    memset(&c, 0, sizeof(c));
    ds4check_conform_options_init(&c.o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int id = ds4ref_option_next("ds4ref-conform", options, sizeof(options) / sizeof(options[0]),
                                    argc, argv, &i, &v);
        if (id < 0 || apply_option(&c, id, a, v)) return DS4REF_E_ARG;
        /* --merge A.json B.json ...: the files after it, up to the next option. */
        while (id == O_MERGE && i + 1 < argc && argv[i + 1][0] != '-')
            if (apply_option(&c, id, a, argv[++i])) return DS4REF_E_ARG;
    }
    /* --qat alone names the official numerics with that simulation. */
    if (c.qat_given && !c.numerics_given) c.o.numerics = NULL;
    if (!c.o.backend && !c.o.server_url && !c.o.server_cmd) {
        fprintf(stderr, "ds4ref-conform: no backend: --backend ds4ref (the self-check), "
                        "--backend ds4, a template, --server URL or --server-cmd (see "
                        "--backend-help)\n");
        return DS4REF_E_ARG;
    }
    paths p = {0};
    if (pick_defaults(&c, &p)) return DS4REF_E_IO;
    if (c.threads) ds4ref_set_threads((int)c.threads);
    if (!c.quiet) c.o.progress = isatty(STDERR_FILENO) ? progress : progress_lines;
    /* Ctrl-C (or SIGTERM) stops the run and kills the cell's command, which
     * runs in a process group of its own (a timeout must reach all it
     * started); the cells that finished are still checked and reported.  A
     * second one ends the program at once. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    c.o.stop = &interrupted;
    ds4ref_error err = {0};
    ds4check_conform_result res;
    int rc = ds4ref_report_sigbus("ds4ref-conform", &err);
    if (!rc) rc = ds4check_conform_run(&c.o, stdout, &res, &err);
    ds4ref_free(p.mtp);
    if (rc) {
        if (c.o.progress) fputs("\r\033[K", stderr);
        fprintf(stderr, "ds4ref-conform: %s\n", err.message);
        return rc;
    }
    if (res.interrupted) {
        fprintf(stderr, "ds4ref-conform: interrupted: the report holds the cells that finished\n");
        return DS4REF_E_INTERRUPTED;
    }
    if (res.fail + res.error == 0 && !res.unexplained && !res.tie_pattern) return 0;
    if (res.ran) return 1;
    fprintf(stderr, "ds4ref-conform: the backend ran in no cell (the report says why)\n");
    return EXIT_NO_BACKEND;
}
