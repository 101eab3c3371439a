/* ds4ref-llama: llama.cpp's CPU backend as a ds4ref-conform backend (the
 * preset "llama.cpp", docs/CONFORM.md "Against llama.cpp").  It is an
 * adapter over llama.cpp's public C API and nothing of ds4ref's: the
 * numbers it writes are llama.cpp's.
 *
 *   ds4ref-llama [--lib DIR] -m MODEL --batch-tokens FILE -n N --chunk C
 *                -c CTX --top-k K --out OUT [-t THREADS] [--bug rows-late|rope-shift]
 *
 * DIR (default $DS4REF_LLAMA_LIB) is bins/linux-x64 of the npm package
 * @node-llama-cpp/linux-x64@3.22.1: libllama.v0.5.0.so, libggml.v0.5.0.so,
 * libggml-base.so and the per-CPU ggml backends.  They are loaded with
 * dlopen, so this program builds and installs without them.
 *
 * Every row of FILE (prompt ids separated by spaces, one row per line) is
 * its own llama.cpp sequence in one context, and every llama_decode call
 * carries all rows: prefill passes of up to C tokens of each row, then one
 * greedy step of each unfinished row per call.  A row stops after N tokens
 * or after the model's end token.  Row r's steps go to OUT (one row) or
 * OUT.r as a ds4 --dump-logprobs JSON with token ids only: the K largest
 * logits and their logprobs, computed here in double from llama.cpp's f32
 * logits and rounded to f32.
 *
 * --bug makes it a backend with a bug confined to one cell class, the cells
 * of several rows:
 *   rows-late   in a call that carries several rows, row r >= 1 reads the
 *               logits of row r - 1 (a batched backend that indexes its
 *               output one row late);
 *   rope-shift  with several rows, row r >= 1 takes every position one
 *               later than it is, from its first token on (a batched
 *               backend whose rows' positions are off by one).  llama.cpp
 *               takes a sequence that starts at position 1 (its positions
 *               stay consecutive), and the rotary angles, the compressor's
 *               blocks and the sliding window all follow the positions.
 *
 * programs/llama_api.h says how llama.cpp is loaded and which struct
 * layouts it has.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_api.h"

static llama_api L;

typedef struct args {
    const char *lib, *model, *batch_tokens, *out;
    long n, chunk, ctx, top_k, threads;
    int rows_late, rope_shift;
} args;

/* One row: its prompt, what it committed, and each step's top entries. */
typedef struct row {
    int32_t *prompt;
    long n_prompt, fed;      /* prompt tokens, and how many went through */
    int32_t *ids;            /* committed tokens */
    long n_ids;
    int32_t *top_id;         /* K per step */
    float *top_logit, *top_lp;
    int done;
} row;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ds4ref-llama: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) die("out of memory");
    return p;
}

/* llama.cpp's log goes to stderr only when it says something went wrong:
 * the cell's log then holds the reason a decode failed. */
static void log_errors(int level, const char *text, void *ud) {
    (void)ud;
    if (level >= 4) fputs(text, stderr);   /* GGML_LOG_LEVEL_ERROR */
}

static long parse_count(const char *opt, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        die("%s: expected an integer in %ld..%ld, got \"%s\"", opt, lo, hi, s);
    return v;
}

static void usage(void) {
    fputs("usage: ds4ref-llama [--lib DIR] -m MODEL --batch-tokens FILE -n N --chunk C -c CTX\n"
          "                    --top-k K --out OUT [-t THREADS] [--bug rows-late|rope-shift]\n"
          "DIR (default $DS4REF_LLAMA_LIB): bins/linux-x64 of the npm package\n"
          "@node-llama-cpp/linux-x64@3.22.1 (make peers installs it)\n", stderr);
    exit(2);
}

static args parse_args(int argc, char **argv) {
    args a = {.lib = getenv("DS4REF_LLAMA_LIB"), .top_k = 20, .threads = 1};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) usage();
        if (i + 1 >= argc) die("%s: expected a value", o);
        const char *v = argv[++i];
        if (!strcmp(o, "--lib")) a.lib = v;
        else if (!strcmp(o, "-m")) a.model = v;
        else if (!strcmp(o, "--batch-tokens")) a.batch_tokens = v;
        else if (!strcmp(o, "--out")) a.out = v;
        else if (!strcmp(o, "-n")) a.n = parse_count(o, v, 0, 1 << 20);
        else if (!strcmp(o, "--chunk")) a.chunk = parse_count(o, v, 1, 1 << 20);
        else if (!strcmp(o, "-c")) a.ctx = parse_count(o, v, 1, 1 << 24);
        else if (!strcmp(o, "--top-k")) a.top_k = parse_count(o, v, 1, 1024);
        else if (!strcmp(o, "-t")) a.threads = parse_count(o, v, 1, 1024);
        else if (!strcmp(o, "--bug")) {
            if (!strcmp(v, "rows-late")) a.rows_late = 1;
            else if (!strcmp(v, "rope-shift")) a.rope_shift = 1;
            else die("--bug: rows-late or rope-shift, got \"%s\"", v);
        } else die("unknown option %s (--help lists them)", o);
    }
    if (!a.lib || !*a.lib)
        die("no llama.cpp: give --lib DIR or set DS4REF_LLAMA_LIB to bins/linux-x64 of the npm "
            "package @node-llama-cpp/linux-x64@3.22.1 (make peers installs it)");
    if (!a.model || !a.batch_tokens || !a.out || !a.chunk || !a.ctx)
        die("-m, --batch-tokens, --out, --chunk and -c are required");
    return a;
}

/* One line of the batch file into r's prompt: ids separated by spaces. */
static void parse_row(const char *path, long index, char *line, row *r) {
    r->prompt = xcalloc(strlen(line) / 2 + 1, sizeof(int32_t));
    char *p = line;
    for (;;) {
        p += strspn(p, " \t\r\n");
        if (!*p) break;
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || errno || id < 0 || id > INT32_MAX || !strchr(" \t\r\n", *end))
            die("%s: row %ld: expected token ids separated by spaces, at \"%.20s\"", path, index, p);
        r->prompt[r->n_prompt++] = (int32_t)id;
        p = end;
    }
}

static row *read_rows(const char *path, long *n_rows) {
    FILE *f = fopen(path, "r");
    if (!f) die("%s: %s", path, strerror(errno));
    row *rows = NULL;
    long n = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) >= 0) {
        if (line[strspn(line, " \t\r\n")] == '\0') continue;
        rows = realloc(rows, (size_t)(n + 1) * sizeof(row));
        if (!rows) die("out of memory");
        memset(&rows[n], 0, sizeof(row));
        parse_row(path, n, line, &rows[n]);
        n++;
    }
    free(line);
    fclose(f);
    if (n == 0) die("%s: no rows", path);
    *n_rows = n;
    return rows;
}

/* n_ctx is shared among the sequences (each gets n_ctx / n_seq_max), and
 * a pass of every row's chunk is one forward pass, as it is in the
 * reference's batch cells. */
static void *new_context(void *model, const args *a, long n_rows) {
    llama_api_context_params cp = llama_api_context(&L, (uint32_t)(a->ctx * n_rows),
                                                    (uint32_t)(a->chunk * n_rows), (uint32_t)n_rows);
    void *ctx = L.init_from_model(model, cp);
    if (!ctx) die("llama_init_from_model failed (n_ctx %ld, n_batch %ld, %ld sequences)", a->ctx * n_rows,
                  a->chunk * n_rows, n_rows);
    L.set_n_threads(ctx, (int32_t)a->threads, (int32_t)a->threads);
    return ctx;
}

static void add_token(llama_api_batch *b, int32_t id, long pos, long seq, int want_logits) {
    int32_t i = b->n_tokens++;
    b->token[i] = id;
    b->pos[i] = (int32_t)pos;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = (int32_t)seq;
    b->logits[i] = (int8_t)want_logits;
}

/* The next call's tokens: every row's next prompt chunk while some prompt
 * is left, else each unfinished row's last committed token.  out[r] is the
 * batch index of row r's logits, -1 when it gets none in this call. */
static void fill_batch(llama_api_batch *b, row *rows, long n_rows, long chunk, int rope_shift,
                       int32_t *out) {
    b->n_tokens = 0;
    int prefill = 0;
    for (long r = 0; r < n_rows; r++) prefill |= rows[r].fed < rows[r].n_prompt;
    for (long r = 0; r < n_rows; r++) {
        row *w = &rows[r];
        const long shift = rope_shift && n_rows > 1 && r > 0;
        out[r] = -1;
        if (prefill) {
            long end = w->fed + chunk < w->n_prompt ? w->fed + chunk : w->n_prompt;
            for (long p = w->fed; p < end; p++) {
                if (p == w->n_prompt - 1) out[r] = b->n_tokens;
                add_token(b, w->prompt[p], p + shift, r, p == w->n_prompt - 1);
            }
            w->fed = end;
        } else if (!w->done) {
            out[r] = b->n_tokens;
            add_token(b, w->ids[w->n_ids - 1], w->n_prompt + w->n_ids - 1 + shift, r, 1);
        }
    }
}

/* The step after logits x: the K largest (ties: the lower id first), their
 * logprobs from a log-sum-exp in double, and the greedy choice. */
static void record_step(row *w, const float *x, int32_t n_vocab, long k, int32_t eos, long n) {
    int32_t *id = w->top_id + w->n_ids * k;
    float *lg = w->top_logit + w->n_ids * k, *lp = w->top_lp + w->n_ids * k;
    double mx = -INFINITY, sum = 0;
    for (int32_t v = 0; v < n_vocab; v++) if (x[v] > mx) mx = x[v];
    for (int32_t v = 0; v < n_vocab; v++) sum += exp((double)x[v] - mx);
    double lse = mx + log(sum);
    long m = 0;
    for (int32_t v = 0; v < n_vocab; v++) {
        if (m == k && !(x[v] > lg[k - 1])) continue;
        long at = m < k ? m++ : k - 1;   /* a new slot, or the last one's */
        for (; at > 0 && x[v] > lg[at - 1]; at--) {
            id[at] = id[at - 1];
            lg[at] = lg[at - 1];
        }
        id[at] = v;
        lg[at] = x[v];
    }
    for (long j = 0; j < m; j++) lp[j] = (float)((double)lg[j] - lse);
    w->ids[w->n_ids++] = id[0];
    w->done = id[0] == eos || w->n_ids >= n;
}

static void write_row(const char *path, const row *w, long ctx, long k, int32_t n_vocab) {
    FILE *f = fopen(path, "w");
    if (!f) die("%s: %s", path, strerror(errno));
    long m = k < n_vocab ? k : n_vocab;
    fprintf(f, "{\n  \"source\":\"llama.cpp\",\n  \"prompt_tokens\":%ld,\n  \"ctx\":%ld,\n"
               "  \"top_k\":%ld,\n  \"steps\":[\n", w->n_prompt, ctx, m);
    for (long s = 0; s < w->n_ids; s++) {
        fprintf(f, "%s    {\"step\":%ld,\"selected\":{\"id\":%d},\"top_logprobs\":[", s ? ",\n" : "", s,
                w->ids[s]);
        for (long j = 0; j < m; j++)
            fprintf(f, "%s{\"token\":{\"id\":%d},\"logit\":%.9g,\"logprob\":%.9g}", j ? "," : "",
                    w->top_id[s * k + j], (double)w->top_logit[s * k + j], (double)w->top_lp[s * k + j]);
        fputs("]}", f);
    }
    fputs("\n  ]\n}\n", f);
    if (ferror(f) | fclose(f)) die("%s: cannot write", path);
}

int main(int argc, char **argv) {
    args a = parse_args(argc, argv);
    long n_rows;
    row *rows = read_rows(a.batch_tokens, &n_rows);
    char why[512];
    if (llama_api_load(&L, a.lib, log_errors, why, sizeof(why))) die("%s", why);
    /* Without the repacked weights (llama_api.h says why). */
    void *model = L.model_load_from_file(a.model, llama_api_model(&L, 0));
    if (!model) die("%s: llama.cpp cannot load it", a.model);
    const void *vocab = L.model_get_vocab(model);
    int32_t n_vocab = L.vocab_n_tokens(vocab), eos = L.vocab_eos(vocab);
    long longest = 0;
    for (long r = 0; r < n_rows; r++) {
        row *w = &rows[r];
        if (w->n_prompt == 0) die("%s: row %ld is empty", a.batch_tokens, r);
        for (long p = 0; p < w->n_prompt; p++)
            if (w->prompt[p] >= n_vocab)
                die("%s: row %ld: token %d is outside the vocabulary (%d)", a.batch_tokens, r, w->prompt[p],
                    n_vocab);
        if (w->n_prompt + a.n > a.ctx) die("row %ld: %ld prompt tokens and %ld steps exceed -c %ld", r, w->n_prompt, a.n, a.ctx);
        if (w->n_prompt > longest) longest = w->n_prompt;
        w->ids = xcalloc((size_t)a.n, sizeof(int32_t));
        w->top_id = xcalloc((size_t)(a.n * a.top_k), sizeof(int32_t));
        w->top_logit = xcalloc((size_t)(a.n * a.top_k), sizeof(float));
        w->top_lp = xcalloc((size_t)(a.n * a.top_k), sizeof(float));
        w->done = a.n == 0;
    }
    if (a.chunk > longest) a.chunk = longest;
    void *ctx = new_context(model, &a, n_rows);
    llama_api_batch b = L.batch_init((int32_t)(a.chunk * n_rows), 0, 1);
    int32_t *out = xcalloc((size_t)n_rows, sizeof(int32_t));
    for (;;) {
        fill_batch(&b, rows, n_rows, a.chunk, a.rope_shift, out);
        if (b.n_tokens == 0) break;
        int32_t rc = L.decode(ctx, b);
        if (rc) die("llama_decode failed (%d) on a call of %d tokens", rc, b.n_tokens);
        int32_t prev = -1;
        for (long r = 0; r < n_rows; r++) {
            if (out[r] < 0) continue;
            int32_t at = a.rows_late && prev >= 0 ? prev : out[r];
            prev = out[r];
            const float *x = L.get_logits_ith(ctx, at);
            if (!x) die("llama.cpp returned no logits for batch index %d", at);
            if (!rows[r].done) record_step(&rows[r], x, n_vocab, a.top_k, eos, a.n);
        }
    }
    for (long r = 0; r < n_rows; r++) {
        char path[4096];
        if (n_rows == 1) snprintf(path, sizeof(path), "%s", a.out);
        else snprintf(path, sizeof(path), "%s.%ld", a.out, r);
        write_row(path, &rows[r], a.ctx, a.top_k, n_vocab);
    }
    L.batch_free(b);
    L.free_ctx(ctx);
    L.model_free(model);
    return 0;
}
