/* conform-backend: a backend for ds4ref-conform's tests, on the public API
 * only, with switches that reproduce the bug classes ds4ref-conform exists
 * to catch.  Without --bug it is a correct greedy speculative decoder, so it
 * must pass every cell, in exact mode too.
 *
 *   conform-backend -m MODEL --batch-tokens FILE -n N --chunk C --draft D
 *                   --top-k K -c CTX --out OUT [--bug NAME]
 *                   [--numerics P] [--qat on|off]
 *
 * --numerics and --qat run it under other numerics than ds4ref's default
 * (a numerics profile, the FP8/FP4 simulation off): a stand-in for a
 * backend with its own intended approximation, which ds4ref-conform's
 * calibration must recognize.
 *
 * Rows (one per line of the batch file) are decoded in lockstep cycles, each
 * row in its own session evaluated in passes of C tokens.  A cycle commits
 * x = argmax of the row's logits, asks the drafter for D tokens after it,
 * evaluates [x, drafts] in one call (logits of every position), accepts
 * drafts while each is the argmax of the logits before it, and moves the
 * session back to just after the committed tokens.  The drafter is scripted:
 * it proposes the row's own greedy continuation (decoded once up front),
 * wrong at one depth every fourth cycle (cycle c of row r errs when
 * (c + r) % 4 == 3, at depth 1 + c % D), so that both full and partial
 * accepts happen, at every depth, and rows diverge.
 *
 * The bugs (each as a backend could really have it):
 *   verify-rows   at depth > 2 the verifier reads the verify batch's logits
 *                 one row late from row 2 on (ds4 #358: drafts compared
 *                 against the wrong rows, only past depth 2);
 *   stale-verify  a verify batch longer than the prefill chunk keeps only C
 *                 rows of logits: rows past C are the previous cycle's
 *                 (ds4 #381: a verify batch beyond the prefill scratch);
 *   batch-holes   with several rows, every row moves forward by the most
 *                 drafts any row accepted in the cycle, so a row that
 *                 accepted fewer keeps rejected drafts in its state (mlxcel
 *                 #203: positions with holes after divergent accepts);
 *   skip-bonus    at depth 1, the token committed after a fully accepted
 *                 draft is never written to the state (ds4 #371: a
 *                 continuous depth-1 loop that skips the bonus token's KV);
 *   row-pad       with several rows, every row after the first is left-padded
 *                 by one token (its first, BOS, repeated) that it attends to:
 *                 each of its positions is one late and its context holds one
 *                 token more (a batched backend that pads rows to align them
 *                 and neither shifts their positions back nor masks the pad);
 *   no-draft      the drafter proposes nothing, whatever --draft says, and
 *                 the acceptance line says so (ds4 #468: BF16 Markov
 *                 tensors silently disabled the DSpark drafter): the
 *                 output is plain decoding's;
 *   verify-flip   a verify batch of drafts is evaluated a little off: its
 *                 rows' logits moved by up to 0.15, as batch-drift's (ds4
 *                 #658: a batched verifier that is not greedy-exact, top-1
 *                 flips at near-ties); a plain step is right;
 *   batch-drift   with several rows, every row after the first commits
 *                 from logits moved by up to 0.15 (a fixed function of the
 *                 token id): a batched path a little off, as a kernel that
 *                 only batches take would be.  Within the noise of a noisy
 *                 backend, it shows only as the streams of those rows
 *                 parting from their base streams at near-ties.
 *
 * Each row's steps go to OUT (one row) or OUT.ROW as a ds4 --dump-logprobs
 * JSON; stderr gets ds4ref's acceptance line. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4ref.h"

enum bug { BUG_NONE, BUG_VERIFY_ROWS, BUG_STALE_VERIFY, BUG_BATCH_HOLES, BUG_SKIP_BONUS,
           BUG_BATCH_DRIFT, BUG_ROW_PAD, BUG_NO_DRAFT, BUG_VERIFY_FLIP };

typedef struct args {
    const char *model, *batch_tokens, *out;
    const char *numerics;  /* NULL: official */
    int qat;
    uint32_t n, chunk, draft, top_k, ctx;
    enum bug bug;
    int32_t eos;           /* the model's end token: a row stops after it */
    uint32_t n_rows;
} args;

typedef struct step {
    int32_t id;
    uint32_t n_top;
    ds4ref_logprob *top;
} step;

typedef struct row {
    ds4ref_session *s;
    int32_t *prompt;
    size_t n_prompt;
    size_t n_told;         /* the prompt's length as the dump gives it (row-pad's is one less) */
    int32_t *oracle;       /* the greedy continuation: oracle[i] is step i's token */
    uint32_t n_oracle;
    float *cur;            /* the logits the next committed token comes from */
    float *ver;            /* [1 + draft] rows of the verify batch */
    float *stale;          /* [1 + draft] rows of the previous verify batch */
    step *steps;
    uint32_t n_steps;
    bool done;
    bool skip_next;        /* skip-bonus: the next committed token stays out of the state */
    /* this cycle */
    uint32_t pos, nd, a;
    int32_t batch[17];
} row;

static void die(const char *what, const ds4ref_error *e) {
    fprintf(stderr, "conform-backend: %s: %s\n", what, e ? e->message : strerror(errno));
    exit(2);
}

static uint32_t num(const char *v) {
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (!*v || *end) {
        fprintf(stderr, "conform-backend: not a number: %s\n", v);
        exit(2);
    }
    return (uint32_t)x;
}

static void parse(int argc, char **argv, args *a) {
    memset(a, 0, sizeof(*a));
    a->n = 16;
    a->chunk = 256;
    a->top_k = 20;
    a->qat = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "-m")) a->model = v;
        else if (!strcmp(k, "--batch-tokens")) a->batch_tokens = v;
        else if (!strcmp(k, "--out")) a->out = v;
        else if (!strcmp(k, "-n")) a->n = num(v);
        else if (!strcmp(k, "--chunk")) a->chunk = num(v);
        else if (!strcmp(k, "--draft")) a->draft = num(v);
        else if (!strcmp(k, "--top-k")) a->top_k = num(v);
        else if (!strcmp(k, "-c")) a->ctx = num(v);
        else if (!strcmp(k, "--numerics")) a->numerics = v;
        else if (!strcmp(k, "--qat")) a->qat = !strcmp(v, "on");
        else if (!strcmp(k, "--bug")) {
            a->bug = !strcmp(v, "none") ? BUG_NONE : !strcmp(v, "verify-rows") ? BUG_VERIFY_ROWS
                   : !strcmp(v, "stale-verify") ? BUG_STALE_VERIFY
                   : !strcmp(v, "batch-holes") ? BUG_BATCH_HOLES
                   : !strcmp(v, "skip-bonus") ? BUG_SKIP_BONUS
                   : !strcmp(v, "batch-drift") ? BUG_BATCH_DRIFT
                   : !strcmp(v, "row-pad") ? BUG_ROW_PAD
                   : !strcmp(v, "no-draft") ? BUG_NO_DRAFT
                   : !strcmp(v, "verify-flip") ? BUG_VERIFY_FLIP : (enum bug)-1;
            if ((int)a->bug < 0) {
                fprintf(stderr, "conform-backend: unknown bug %s\n", v);
                exit(2);
            }
        } else {
            fprintf(stderr, "conform-backend: unknown option %s\n", k);
            exit(2);
        }
    }
    if (!a->model || !a->batch_tokens || !a->out || a->draft > 16) {
        fprintf(stderr, "conform-backend: -m, --batch-tokens and --out are needed; --draft <= 16\n");
        exit(2);
    }
}

/* The rows' prompts: whitespace-separated ids, a row per line. */
static row *read_rows(const char *path, uint32_t *n_rows) {
    char *buf;
    size_t len;
    ds4ref_error e;
    if (ds4ref_read_file(path, &buf, &len, &e)) die(path, &e);
    row *rows = NULL;
    *n_rows = 0;
    for (char *p = buf; *p;) {
        char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
        if (end > p) {
            rows = realloc(rows, sizeof(row) * (*n_rows + 1));
            row *r = &rows[(*n_rows)++];
            memset(r, 0, sizeof(*r));
            r->prompt = malloc(sizeof(int32_t) * ((size_t)(end - p) / 2 + 1));
            for (char *q = p; q < end;) {
                char *after;
                long v = strtol(q, &after, 10);
                if (after == q) break;
                r->prompt[r->n_prompt++] = (int32_t)v;
                q = after;
            }
        }
        p = nl ? nl + 1 : end;
    }
    ds4ref_free(buf);
    return rows;
}

static int32_t argmax(const float *v, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

static void record(const ds4ref_model *m, const args *a, row *r, int32_t id, const float *logits) {
    step *st = &r->steps[r->n_steps++];
    st->id = id;
    st->top = malloc(sizeof(ds4ref_logprob) * a->top_k);
    ds4ref_error e;
    if (ds4ref_top_logprobs(m, logits, a->top_k, st->top, &st->n_top, &e)) die("top", &e);
}

/* Row r's greedy continuation, for the scripted drafter. */
static void make_oracle(ds4ref_model *m, const args *a, row *r, uint32_t n_vocab) {
    ds4ref_error e;
    r->n_oracle = a->n + a->draft + 1;
    r->oracle = malloc(sizeof(int32_t) * r->n_oracle);
    float *lg = malloc(sizeof(float) * n_vocab);
    if (ds4ref_session_eval(r->s, r->prompt, r->n_prompt, NULL, &e) ||
        ds4ref_session_logits(r->s, (uint32_t)r->n_prompt - 1, lg, &e))
        die("oracle", &e);
    uint32_t ctx = ds4ref_session_ctx(r->s);
    for (uint32_t i = 0; i < r->n_oracle; i++) {
        r->oracle[i] = argmax(lg, n_vocab);
        if (ds4ref_session_pos(r->s) + 1 > ctx) {
            r->n_oracle = i + 1;
            break;
        }
        if (i + 1 < r->n_oracle && ds4ref_session_eval(r->s, &r->oracle[i], 1, lg, &e))
            die("oracle", &e);
    }
    free(lg);
    if (ds4ref_session_truncate(r->s, 0, &e)) die("truncate", &e);
}

/* The logits after the session's last token. */
static void last_logits(row *r, float *out) {
    ds4ref_error e;
    if (ds4ref_session_logits(r->s, ds4ref_session_pos(r->s) - 1, out, &e)) die("logits", &e);
}

/* Which row of the verify batch the verifier reads for position j. */
static uint32_t verify_row(const args *a, uint32_t j, uint32_t nd) {
    if (a->bug == BUG_VERIFY_ROWS && nd > 2 && j >= 2) return j + 1 < nd ? j + 1 : nd;
    return j;
}

/* batch-drift: logit v moved by a value in [-0.15, 0.15] that depends on v
 * alone. */
static void drift(float *logits, uint32_t V) {
    for (uint32_t v = 0; v < V; v++) {
        uint32_t h = v * 2654435761u;
        logits[v] += 0.15f * ((float)((h >> 16) % 2001) / 1000.0f - 1.0f);
    }
}

/* Phase 1 of a cycle for one row: commit x, draft, verify, accept. */
static void verify(ds4ref_model *m, const args *a, row *r, uint32_t ri, uint32_t cycle,
                   uint32_t V) {
    ds4ref_error e;
    if (a->bug == BUG_BATCH_DRIFT && a->n_rows > 1 && ri > 0) drift(r->cur, V);
    int32_t x = argmax(r->cur, V);
    record(m, a, r, x, r->cur);
    r->a = r->nd = 0;
    r->pos = ds4ref_session_pos(r->s);
    if (r->n_steps == a->n || x == a->eos) {
        r->done = true;
        return;
    }
    uint32_t left = a->n - r->n_steps;
    r->nd = a->bug == BUG_NO_DRAFT ? 0 : a->draft < left ? a->draft : left;
    uint32_t at = r->n_steps;   /* the oracle index of the first draft */
    for (uint32_t k = 1; k <= r->nd; k++)
        r->batch[k] = at + k - 1 < r->n_oracle ? r->oracle[at + k - 1] : 0;
    if (r->nd && (cycle + ri) % 4 == 3) {
        uint32_t w = 1 + cycle % r->nd;
        r->batch[w] = (r->batch[w] + 1) % (int32_t)V;
    }
    r->batch[0] = x;
    bool skip = r->skip_next;
    r->skip_next = false;
    uint32_t n = 1 + r->nd;
    if (ds4ref_session_eval(r->s, r->batch, n, r->ver, &e)) die("verify", &e);
    for (uint32_t k = 0; a->bug == BUG_VERIFY_FLIP && n > 1 && k < n; k++)
        drift(r->ver + (size_t)k * V, V);
    if (a->bug == BUG_STALE_VERIFY && n > a->chunk) {
        for (uint32_t k = a->chunk; k < n; k++) {
            float *row_k = r->ver + (size_t)k * V, *old = r->stale + (size_t)k * V;
            for (uint32_t i = 0; i < V; i++) {
                float t = row_k[i];
                row_k[i] = old[i];
                old[i] = t;
            }
        }
    }
    while (r->a < r->nd && r->batch[r->a + 1] == argmax(r->ver + (size_t)verify_row(a, r->a, r->nd) * V, V))
        r->a++;
    for (uint32_t k = 1; k <= r->a && !r->done; k++) {
        record(m, a, r, r->batch[k], r->ver + (size_t)verify_row(a, k - 1, r->nd) * V);
        if (r->n_steps == a->n || r->batch[k] == a->eos) {
            r->done = true;
            r->a = k;
        }
    }
    memcpy(r->cur, r->ver + (size_t)verify_row(a, r->a, r->nd) * V, sizeof(float) * V);
    if (skip) {
        /* x stays out of the state: the accepted drafts take its place. */
        if (ds4ref_session_truncate(r->s, r->pos, &e)) die("truncate", &e);
        if (r->a && ds4ref_session_eval(r->s, r->batch + 1, r->a, NULL, &e)) die("skip", &e);
        r->pos -= 1;
        if (r->a) last_logits(r, r->cur);
    }
    if (a->bug == BUG_SKIP_BONUS && a->draft == 1 && r->a == 1) r->skip_next = true;
}

/* Phase 2: the row keeps what it committed (and what a bug keeps too). */
static void settle(const args *a, row *r, uint32_t n_rows, uint32_t a_max) {
    ds4ref_error e;
    uint32_t keep = r->a;
    if (a->bug == BUG_BATCH_HOLES && n_rows > 1) keep = a_max < r->nd ? a_max : r->nd;
    if (ds4ref_session_pos(r->s) > r->pos + 1 + keep &&
        ds4ref_session_truncate(r->s, r->pos + 1 + keep, &e))
        die("truncate", &e);
}

static void put_json_token(FILE *f, const ds4ref_model *m, int32_t id) {
    char *bytes;
    size_t len;
    ds4ref_error e;
    if (ds4ref_detokenize(m, &id, 1, &bytes, &len, &e)) die("detokenize", &e);
    fprintf(f, "{\"id\":%" PRId32 ",\"text\":\"", id);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x80) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputs("\",\"bytes\":[", f);
    for (size_t i = 0; i < len; i++) fprintf(f, i ? ",%u" : "%u", (unsigned char)bytes[i]);
    fputs("]}", f);
    ds4ref_free(bytes);
}

static void write_dump(const ds4ref_model *m, const args *a, const row *r, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) die(path, NULL);
    fprintf(f, "{\"source\":\"conform-backend\",\"prompt_tokens\":%zu,\"ctx\":%u,\"top_k\":%u,"
               "\"steps\":[\n", r->n_told, a->ctx, a->top_k);
    for (uint32_t i = 0; i < r->n_steps; i++) {
        const step *st = &r->steps[i];
        fprintf(f, "%s{\"step\":%u,\"selected\":", i ? ",\n" : "", i);
        put_json_token(f, m, st->id);
        fputs(",\"top_logprobs\":[", f);
        for (uint32_t k = 0; k < st->n_top; k++) {
            fputs(k ? ",{\"token\":" : "{\"token\":", f);
            put_json_token(f, m, st->top[k].id);
            fprintf(f, ",\"logit\":%.9g,\"logprob\":%.9g}", (double)st->top[k].logit,
                    (double)(float)st->top[k].logprob);
        }
        fputs("]}", f);
    }
    fputs("\n]}\n", f);
    if (fclose(f)) die(path, NULL);
}

int main(int argc, char **argv) {
    args a;
    parse(argc, argv, &a);
    ds4ref_error e;
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = a.model;
    mo.numerics = a.numerics;
    mo.qat = a.qat;
    uint32_t n_rows;
    row *rows = read_rows(a.batch_tokens, &n_rows);
    a.n_rows = n_rows;
    for (uint32_t i = 0; i < n_rows; i++) {
        row *r = &rows[i];
        r->n_told = r->n_prompt;
        if (a.bug != BUG_ROW_PAD || n_rows == 1 || i == 0 || !r->n_prompt) continue;
        int32_t *padded = malloc(sizeof(int32_t) * (r->n_prompt + 1));
        padded[0] = r->prompt[0];
        memcpy(padded + 1, r->prompt, sizeof(int32_t) * r->n_prompt);
        free(r->prompt);
        r->prompt = padded;
        r->n_prompt++;
    }
    mo.max_batch = a.chunk > 17 ? a.chunk : 17;
    ds4ref_model *m;
    if (ds4ref_model_open(&mo, &m, &e)) die(a.model, &e);
    ds4ref_model_info info;
    ds4ref_model_get_info(m, &info);
    uint32_t V = info.n_vocab;
    a.eos = info.eos;
    ds4ref_session_options so = {.ctx = a.ctx, .chunk = a.chunk};
    for (uint32_t i = 0; i < n_rows; i++) {
        row *r = &rows[i];
        if (ds4ref_session_new(m, &so, &r->s, &e)) die("session", &e);
        make_oracle(m, &a, r, V);
        r->cur = malloc(sizeof(float) * V);
        r->ver = malloc(sizeof(float) * V * (a.draft + 1));
        r->stale = calloc((size_t)V * (a.draft + 1), sizeof(float));
        r->steps = calloc(a.n, sizeof(step));
        if (ds4ref_session_eval(r->s, r->prompt, r->n_prompt, NULL, &e)) die("prefill", &e);
        last_logits(r, r->cur);
    }
    uint64_t iters = 0, proposed = 0, accepted = 0, deepest = 0;
    for (uint32_t cycle = 0;; cycle++) {
        uint32_t active = 0, a_max = 0;
        for (uint32_t i = 0; i < n_rows; i++) {
            row *r = &rows[i];
            if (r->done) continue;
            verify(m, &a, r, i, cycle, V);
            active++;
            iters += r->nd > 0;
            proposed += r->nd;
            accepted += r->a;
            if (r->a > deepest) deepest = r->a;
            if (r->a > a_max) a_max = r->a;
        }
        if (!active) break;
        for (uint32_t i = 0; i < n_rows; i++)
            if (!rows[i].done) settle(&a, &rows[i], n_rows, a_max);
    }
    for (uint32_t i = 0; i < n_rows; i++) {
        char path[4096];
        if (n_rows > 1) snprintf(path, sizeof(path), "%s.%u", a.out, i);
        else snprintf(path, sizeof(path), "%s", a.out);
        write_dump(m, &a, &rows[i], path);
    }
    if (a.draft)
        fprintf(stderr, "mtp accept: iters=%" PRIu64 " proposed=%" PRIu64 " accepted=%" PRIu64
                " deepest=%" PRIu64 "\n", iters, proposed, accepted, deepest);
    for (uint32_t i = 0; i < n_rows; i++) {
        row *r = &rows[i];
        for (uint32_t k = 0; k < r->n_steps; k++) free(r->steps[k].top);
        free(r->steps);
        free(r->cur);
        free(r->ver);
        free(r->stale);
        free(r->oracle);
        free(r->prompt);
        ds4ref_session_free(r->s);
    }
    free(rows);
    ds4ref_model_close(m);
    return 0;
}
