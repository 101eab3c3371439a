/* ds4ref-conform as the HTTP client of an engine behind HTTP (client.h). */
#include "check/conform/client.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/utf8.h"
#include "check/conform/http.h"
#include "ref/text/json.h"

/* ---- texts to ids ---- */

/* One way a token may be named: its bytes, or (for a lossy engine) a lenient
 * decoding of them, at off[0..n) of the index's names. */
typedef struct vocab_entry {
    size_t off;
    uint32_t n;
    int32_t id;
} vocab_entry;

struct ds4_cf_vocab_index {
    vocab_entry *e;      /* sorted by name, then id */
    size_t n_e;
    uint32_t n_vocab;
    ds4_buf names;       /* every token's bytes by id, then the lenient names */
};

static const ds4_cf_vocab_index *sort_ix;   /* qsort has no context argument */

static int entry_cmp_in(const ds4_cf_vocab_index *ix, const vocab_entry *x, const uint8_t *yb,
                        uint32_t yn, int32_t yid) {
    const uint32_t n = x->n < yn ? x->n : yn;
    const int c = memcmp(ix->names.p + x->off, yb, n);
    if (c) return c;
    if (x->n != yn) return x->n < yn ? -1 : 1;
    return (x->id > yid) - (x->id < yid);
}

static int entry_cmp(const void *a, const void *b) {
    const vocab_entry *y = b;
    return entry_cmp_in(sort_ix, a, (const uint8_t *)sort_ix->names.p + y->off, y->n, y->id);
}

/* The bytes at b[0..n), which do not start a well-formed sequence, that one
 * U+FFFD stands for as Python's decoder writes it: a lead byte with the
 * continuation bytes that could still have completed it (Unicode's
 * "maximal subpart"), else one byte. */
static size_t bad_run(const uint8_t *b, size_t n) {
    const uint8_t c = b[0];
    /* The continuation bytes a lead byte takes, and the range of the first
     * (narrower after E0, ED, F0 and F4: no overlong forms, surrogates or
     * code points past U+10FFFF). */
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    }
    if (!need || n < 2 || b[1] < lo || b[1] > hi) return 1;
    size_t k = 2;
    while (k <= need && k < n && b[k] >= 0x80 && b[k] <= 0xBF) k++;
    return k;
}

/* b[0..n) as an engine that decodes a token leniently names it: each
 * well-formed sequence as itself, each other byte dropped (Python's
 * errors="ignore", as llama-cpp-python) or, with replace, U+FFFD
 * (errors="replace").  Appended to out; false when nothing was lenient. */
static bool put_lenient(ds4_buf *out, const uint8_t *b, size_t n, bool replace) {
    bool lossy = false;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        const size_t k = ds4_utf8_next(b + i, n - i, &cp);
        if (k) ds4_buf_put(out, b + i, k);
        else if (replace) ds4_buf_put(out, "\xEF\xBF\xBD", 3);
        lossy |= !k;
        i += k ? k : bad_run(b + i, n - i);
    }
    return lossy;
}

int ds4chk_client_index_new(const ds4_tokenizer *tok, bool lossy, ds4_cf_vocab_index **out,
                            ds4err *err) {
    ds4_cf_vocab_index *ix = calloc(1, sizeof(*ix));
    const uint32_t V = tok->n_vocab;
    size_t *off = malloc(sizeof(size_t) * (V + 1));
    if (ix) ix->e = calloc(V ? 3 * (size_t)V : 1, sizeof(vocab_entry));
    if (!ix || !ix->e || !off) {
        if (ix) free(ix->e);
        free(ix), free(off);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    ix->n_vocab = V;
    for (uint32_t i = 0; i < V; i++) {
        off[i] = ix->names.len;
        const int32_t id = (int32_t)i;
        if (ds4_tok_decode(tok, &id, 1, &ix->names, err)) {
            free(off);
            ds4chk_client_index_free(ix);
            return -1;
        }
    }
    off[V] = ix->names.len;
    for (uint32_t i = 0; i < V; i++)
        ix->e[ix->n_e++] = (vocab_entry){off[i], (uint32_t)(off[i + 1] - off[i]), (int32_t)i};
    for (uint32_t i = 0; lossy && i < V; i++)
        for (int replace = 0; replace < 2; replace++) {
            const size_t at = ix->names.len;
            /* names.p may move as it grows: the token's bytes are read
             * through a copy of their offset each time. */
            ds4_buf tmp = {0};
            ds4_buf_put(&tmp, ix->names.p + off[i], off[i + 1] - off[i]);
            const bool differs = !tmp.failed && put_lenient(&ix->names, (const uint8_t *)tmp.p,
                                                            tmp.len, replace);
            ds4_buf_free(&tmp);
            if (differs)
                ix->e[ix->n_e++] = (vocab_entry){at, (uint32_t)(ix->names.len - at), (int32_t)i};
            else
                ix->names.len = at;
        }
    free(off);
    if (ix->names.failed) {
        ds4chk_client_index_free(ix);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    sort_ix = ix;
    qsort(ix->e, ix->n_e, sizeof(vocab_entry), entry_cmp);
    sort_ix = NULL;
    *out = ix;
    return 0;
}

void ds4chk_client_index_free(ds4_cf_vocab_index *ix) {
    if (!ix) return;
    free(ix->e);
    ds4_buf_free(&ix->names);
    free(ix);
}

/* The entries that name b[0..n) (one an id, sorted by id): how many, the
 * first at *first. */
static uint32_t names_of(const ds4_cf_vocab_index *ix, const uint8_t *b, uint32_t n, size_t *first) {
    size_t lo = 0, hi = ix->n_e;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (entry_cmp_in(ix, &ix->e[mid], b, n, INT32_MIN) < 0) lo = mid + 1;
        else hi = mid;
    }
    uint32_t k = 0;
    while (lo + k < ix->n_e && ix->e[lo + k].n == n && !memcmp(ix->names.p + ix->e[lo + k].off, b, n))
        k++;
    *first = lo;
    return k;
}

static bool names_id(const ds4_cf_vocab_index *ix, size_t first, uint32_t k, int32_t id) {
    for (uint32_t j = 0; j < k; j++)
        if (ix->e[first + j].id == id) return true;
    return false;
}

/* A token's text as bytes: "bytes:\xNN..." (vLLM's and ds4ref-server's
 * form for bytes that are not UTF-8) decoded, else the string's UTF-8. */
static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* UINT32_MAX for a "bytes:" form that is not whole \xNN escapes, or a
 * name longer than cap (no token's is). */
static uint32_t text_bytes(const ds4_json *v, uint8_t *out, uint32_t cap) {
    if (v->len > 6 && !memcmp(v->str, "bytes:", 6)) {
        if ((v->len - 6) % 4 || (v->len - 6) / 4 > cap) return UINT32_MAX;
        uint32_t n = 0;
        for (size_t i = 6; i < v->len; i += 4) {
            const int hi = hex_digit(v->str[i + 2]), lo = hex_digit(v->str[i + 3]);
            if (v->str[i] != '\\' || v->str[i + 1] != 'x' || hi < 0 || lo < 0) return UINT32_MAX;
            out[n++] = (uint8_t)(16 * hi + lo);
        }
        return n;
    }
    if (v->len > cap) return UINT32_MAX;
    memcpy(out, v->str, v->len);
    return (uint32_t)v->len;
}

typedef struct row_job {
    const ds4_cf_server_cell *c;
    uint32_t r;
    const char *path;
    ds4_buf body, resp;
    long status;
    int rc;
    ds4err err;
} row_job;

static void *send_row(void *arg) {
    row_job *j = arg;
    const ds4_cf_server_cell *c = j->c;
    char url[512];
    snprintf(url, sizeof(url), "%s%s", c->url, j->path);
    j->rc = ds4chk_http_request(url, j->body.p, j->body.len, c->timeout, &j->resp, &j->status,
                                &j->err);
    return NULL;
}

static void put_ids(ds4_buf *b, const ds4_cf_server_cell *c, uint32_t r) {
    ds4_buf_putc(b, '[');
    for (uint32_t i = 0; i < c->n[r]; i++) ds4_buf_printf(b, "%s%d", i ? ", " : "", c->ids[r][i]);
    ds4_buf_putc(b, ']');
}

/* The cell's dialect (the table at the end of this file). */
static const ds4_cf_dialect_info *dialect_of(const ds4_cf_server_cell *c) {
    return ds4chk_client_dialect((uint32_t)c->dialect);
}

/* The alternatives asked for (OpenAI's limit is 20), and row r's seed. */
static unsigned asked_top(const ds4_cf_server_cell *c) {
    return c->top_k < 20 ? c->top_k : 20;
}

static unsigned long long row_seed(const ds4_cf_server_cell *c, uint32_t r) {
    return (unsigned long long)(c->seed + r);
}

/* Row r's request into b, each dialect's, and the path it goes to. */
static const char *llama_request(const ds4_cf_server_cell *c, uint32_t r, ds4_buf *b) {
    ds4_buf_puts(b, "{\"prompt\": ");
    put_ids(b, c, r);
    ds4_buf_printf(b, ", \"n_predict\": %u, \"n_probs\": %u, \"temperature\": %.17g, "
                   "\"seed\": %llu, \"return_tokens\": true}", c->n_tokens, asked_top(c),
                   c->temp, row_seed(c, r));
    return "/completion";
}

/* ds4's server: the user's message, rendered by the engine with the
 * official template, thinking off (which also makes temperature 0 greedy
 * there); no logprobs to ask for. */
static const char *ds4_request(const ds4_cf_server_cell *c, uint32_t r, ds4_buf *b) {
    ds4_buf_puts(b, "{\"messages\": [{\"role\": \"user\", \"content\": ");
    ds4_json_put_str(b, c->text[r], c->text_len[r]);
    ds4_buf_printf(b, "}], \"max_tokens\": %u, \"temperature\": %.17g, \"seed\": %llu, "
                   "\"thinking\": false}", c->n_tokens, c->temp, row_seed(c, r));
    return "/v1/chat/completions";
}

static const char *sglang_request(const ds4_cf_server_cell *c, uint32_t r, ds4_buf *b) {
    ds4_buf_puts(b, "{\"input_ids\": ");
    put_ids(b, c, r);
    ds4_buf_printf(b, ", \"sampling_params\": {\"max_new_tokens\": %u, \"temperature\": "
                   "%.17g, \"sampling_seed\": %llu}, \"return_logprob\": true, "
                   "\"top_logprobs_num\": %u}", c->n_tokens, c->temp, row_seed(c, r),
                   asked_top(c));
    return "/generate";
}

/* OpenAI's completions: the prompt as ids or text, tokens named as the
 * dialect names them. */
static const char *openai_request(const ds4_cf_server_cell *c, uint32_t r, ds4_buf *b) {
    const unsigned k = asked_top(c);
    const unsigned long long seed = row_seed(c, r);
    ds4_buf_puts(b, "{");
    if (c->model) {
        ds4_buf_puts(b, "\"model\": ");
        ds4_json_put_str(b, c->model, strlen(c->model));
        ds4_buf_puts(b, ", ");
    }
    ds4_buf_puts(b, "\"prompt\": ");
    if (c->text) ds4_json_put_str(b, c->text[r], c->text_len[r]);
    else put_ids(b, c, r);
    ds4_buf_printf(b, ", \"max_tokens\": %u, \"temperature\": %.17g, \"seed\": %llu, "
                   "\"logprobs\": %u%s}", c->n_tokens, c->temp, seed, k,
                   dialect_of(c)->by_text ? "" : ", \"return_tokens_as_token_ids\": true");
    return "/v1/completions";
}

static const char *request_body(const ds4_cf_server_cell *c, uint32_t r, ds4_buf *b) {
    return dialect_of(c)->request(c, r, b);
}

static void log_line(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "token_id:N" -> N. */
static int token_id(const ds4_json *v, int32_t *id) {
    if (!v || v->type != DS4_JSON_STRING || v->len <= 9 || memcmp(v->str, "token_id:", 9)) return -1;
    long long x = 0;
    for (size_t i = 9; i < v->len; i++) {
        if (v->str[i] < '0' || v->str[i] > '9' || x > 1 << 30) return -1;
        x = 10 * x + (v->str[i] - '0');
    }
    if (x > INT32_MAX) return -1;
    *id = (int32_t)x;
    return 0;
}

typedef struct alt {
    int32_t id;
    double lp;
    const char *lit;
    size_t len;
} alt;

/* The id a token's name stands for in the cell's dialect (0; -1 for a name
 * that is not one).  A text that is no id's bytes, or several ids', is
 * ambiguous and logged (row r, step i): it is taken as hint (the
 * reference's token, where the stream has followed the reference so far)
 * when the text may name it and none of rivals[0..n_rivals) (the
 * reference's other likely tokens there, one of which the engine may have
 * chosen), and 0 is returned; else 1, with the lowest id the text may name
 * (0 for none). */
static int name_to_id(const ds4_cf_server_cell *c, uint32_t r, size_t i, const ds4_json *v,
                      int32_t hint, const int32_t *rivals, uint32_t n_rivals, int32_t *id) {
    if (!dialect_of(c)->by_text) return token_id(v, id);
    if (!v || v->type != DS4_JSON_STRING) return -1;
    uint8_t b[1024];
    const uint32_t n = text_bytes(v, b, sizeof(b));
    if (n == UINT32_MAX) return -1;
    const ds4_cf_vocab_index *ix = c->vocab;
    size_t first;
    const uint32_t k = names_of(ix, b, n, &first);
    if (k == 1) {
        *id = ix->e[first].id;
        return 0;
    }
    bool fits = hint >= 0 && names_id(ix, first, k, hint);
    for (uint32_t j = 0; fits && j < n_rivals; j++)
        fits = rivals[j] == hint || !names_id(ix, first, k, rivals[j]);
    *id = fits ? hint : k ? ix->e[first].id : 0;
    log_line(c->log, "row %u step %zu: the text \"%.*s\" is %s: ambiguous, taken as %d%s", r, i,
             (int)v->len, v->str, k ? "the bytes of several ids" : "no id's bytes (the engine lost bytes?)",
             *id, fits ? " (the reference's token there, which it can name, and no other of its "
                         "likely ones)" : "");
    return fits ? 0 : 1;
}

/* By logprob descending, then id ascending: the order of a top list. */
static int by_logprob(const void *a, const void *b) {
    const alt *x = a, *y = b;
    if (x->lp != y->lp) return x->lp > y->lp ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* One step into the dump: the chosen id and its alternatives, sorted as a
 * top list, at most top_k, each logprob written as the engine wrote it. */
static void put_step(const ds4_cf_server_cell *c, ds4_buf *out, size_t i, int32_t id, alt *a,
                     size_t n) {
    if (n) qsort(a, n, sizeof(*a), by_logprob);
    ds4_buf_printf(out, "%s\n{\"step\":%zu,\"selected\":{\"id\":%d},\"top_logprobs\":[",
                   i ? "," : "", i, id);
    for (size_t k = 0; k < n && k < c->top_k; k++)
        ds4_buf_printf(out, "%s{\"token\":{\"id\":%d},\"logprob\":%.*s}", k ? "," : "",
                       a[k].id, (int)a[k].len, a[k].lit);
    ds4_buf_puts(out, "]}");
}

static int bad_answer(uint32_t r, const char *what, ds4err *err) {
    return ds4_err_set(err, DS4_E_FORMAT, "row %u: the answer has no %s", r, what);
}

/* usage.prompt_tokens, where the engine gives it, must be the reference's
 * count: an engine that tokenized a text prompt its own way, or added a BOS
 * to one that had it, answered another question. */
static int check_prompt_count(const ds4_cf_server_cell *c, uint32_t r, const ds4_json *root,
                              ds4err *err) {
    const ds4_json *pt = ds4_json_get(ds4_json_get(root, "usage"), "prompt_tokens");
    uint64_t used;
    if (pt && ds4_json_uint(pt, UINT32_MAX, &used) && used != c->n[r])
        return ds4_err_set(err, DS4_E_FORMAT, "row %u: the engine read the prompt as %llu tokens, "
                           "the reference's has %u (%s)", r, (unsigned long long)used, c->n[r],
                           dialect_of(c)->chat_text
                               ? "did it render the chat with a system prompt, or thinking on?"
                           : c->text ? "a text prompt tokenized otherwise, or its BOS not added: "
                                       "try --server-prompt ids"
                                     : "were the ids read as given?");
    return 0;
}

/* How many bytes of s[0..n) token id stands for, as its bytes or with each
 * byte that is not UTF-8 written U+FFFD (an engine that sanitizes each
 * token's text); SIZE_MAX when neither starts s. */
static size_t explains(const ds4_tokenizer *tok, int32_t id, const uint8_t *s, size_t n) {
    ds4_buf b = {0}, lenient = {0};
    ds4err e = {0};
    size_t used = SIZE_MAX;
    if (!ds4_tok_decode(tok, &id, 1, &b, &e) && !b.failed) {
        put_lenient(&lenient, (const uint8_t *)b.p, b.len, true);
        if (b.len && b.len <= n && !memcmp(s, b.p, b.len)) used = b.len;
        else if (!lenient.failed && lenient.len && lenient.len <= n && !memcmp(s, lenient.p, lenient.len))
            used = lenient.len;
    }
    ds4_buf_free(&b);
    ds4_buf_free(&lenient);
    return used;
}

/* ds4's chat answer: choices[0].message.content, as ids.  Text has no ids,
 * and tokenizing it again need not give the ones the engine chose, so the
 * reference's stream is followed while it explains the text (the engine
 * agreeing, as it should), and only what is left after the first token it
 * does not explain is tokenized as ds4ref tokenizes text, and kept to
 * max_tokens (tokenizing again may make more tokens than the engine did).
 * The end token follows when the engine stopped before max_tokens
 * ("stop").  Steps
 * without logprobs: the reference's teacher forcing alone judges them. */
static int ds4_steps(const ds4_cf_server_cell *c, uint32_t r, const ds4_json *root, ds4_buf *out,
                     ds4err *err) {
    const ds4_json *ch = ds4_json_get(root, "choices");
    const ds4_json *c0 = ch && ch->type == DS4_JSON_ARRAY && ch->n ? &ch->elems[0] : NULL;
    const ds4_json *content = ds4_json_get(ds4_json_get(c0, "message"), "content");
    const ds4_json *finish = ds4_json_get(c0, "finish_reason");
    if (!content || content->type != DS4_JSON_STRING || !finish || finish->type != DS4_JSON_STRING)
        return bad_answer(r, "choices[0].message.content and finish_reason (a chat completion)", err);
    ds4_tokens t = {0};
    const uint8_t *s = (const uint8_t *)content->str;
    size_t left = content->len;
    for (uint32_t i = 0; c->ref_ids && i < c->ref_n[r] && i < c->n_tokens && left; i++) {
        const size_t used = explains(c->tok, c->ref_ids[r][i], s, left);
        if (used == SIZE_MAX) break;
        if (ds4_tokens_push(&t, c->ref_ids[r][i], err)) {
            ds4_tokens_free(&t);
            return -1;
        }
        s += used;
        left -= used;
    }
    if (left) log_line(c->log, "row %u: the text from step %zu on is not the reference's: "
                       "tokenized again", r, t.n);
    if (ds4_tok_encode(c->tok, (const char *)s, left, 0, &t, err)) {
        ds4_tokens_free(&t);
        return -1;
    }
    if (t.n > c->n_tokens) t.n = c->n_tokens;
    const bool eos = finish->len == 4 && !memcmp(finish->str, "stop", 4) && t.n < c->n_tokens;
    for (size_t i = 0; i < t.n + eos; i++)
        put_step(c, out, i, i < t.n ? t.ids[i] : ds4_tok_special(c->tok, DS4_SPECIAL_EOS), NULL, 0);
    ds4_tokens_free(&t);
    return 0;
}

/* OpenAI's completion: choices[0].logprobs' tokens and top_logprobs, named
 * by id or by text. */
static int openai_steps(const ds4_cf_server_cell *c, uint32_t r, const ds4_json *root,
                        ds4_buf *out, ds4err *err) {
    const ds4_json *ch = ds4_json_get(root, "choices");
    const ds4_json *lp = ch && ch->type == DS4_JSON_ARRAY && ch->n ? ds4_json_get(&ch->elems[0], "logprobs") : NULL;
    const ds4_json *toks = ds4_json_get(lp, "tokens"), *tops = ds4_json_get(lp, "top_logprobs");
    if (!toks || toks->type != DS4_JSON_ARRAY || !tops || tops->type != DS4_JSON_ARRAY ||
        tops->n != toks->n)
        return bad_answer(r, "choices[0].logprobs with tokens and top_logprobs (an OpenAI "
                          "completion with logprobs)", err);
    bool agree = true;   /* the stream so far is the reference's */
    for (size_t i = 0; i < toks->n; i++) {
        int32_t id;
        const bool known = agree && c->ref_ids && i < c->ref_n[r];
        const int32_t hint = known ? c->ref_ids[r][i] : -1;
        const int named = name_to_id(c, r, i, &toks->elems[i], hint,
                                     known && c->ref_top ? c->ref_top[r] + i * c->ref_k : NULL,
                                     known && c->ref_top ? c->ref_k : 0, &id);
        if (named < 0)
            return ds4_err_set(err, DS4_E_FORMAT, "row %u: token %zu is not %s", r, i,
                               !dialect_of(c)->by_text
                                   ? "\"token_id:N\": the engine ignored return_tokens_as_token_ids"
                                   : "a string");
        /* A chosen token that cannot be told ends what can be judged: the
         * reference would be teacher-forced on a guess.  Not in an answer
         * longer than asked for, a fault the verdict must see whole. */
        if (named && toks->n <= c->n_tokens) {
            if (c->cut) c->cut[r] = (int32_t)i;
            log_line(c->log, "row %u: judged up to step %zu, whose token cannot be told", r, i);
            break;
        }
        const ds4_json *d = &tops->elems[i];
        if (d->type != DS4_JSON_OBJECT)
            return ds4_err_set(err, DS4_E_FORMAT, "row %u: top_logprobs[%zu] is not an object", r, i);
        /* An alternative whose text is ambiguous is left out: its logprob
         * is some id's, and which one cannot be told. */
        alt *a = calloc(d->n ? d->n : 1, sizeof(*a));
        if (!a) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        size_t n = 0;
        for (size_t k = 0; k < d->n; k++) {
            const int alt_named = name_to_id(c, r, i, &d->keys[k], -1, NULL, 0, &a[n].id);
            if (alt_named < 0 || d->elems[k].type != DS4_JSON_NUMBER) {
                free(a);
                return ds4_err_set(err, DS4_E_FORMAT, "row %u: top_logprobs[%zu] has an entry "
                                   "that is not a token and its logprob", r, i);
            }
            if (alt_named == 0) {
                a[n] = (alt){a[n].id, d->elems[k].num, d->elems[k].str, d->elems[k].len};
                n++;
            }
        }
        put_step(c, out, i, id, a, n);
        agree = agree && id == hint;
        free(a);
    }
    return 0;
}

/* An {"id": N, "logprob": x} object (llama.cpp server's entries). */
static int id_logprob(const ds4_json *e, alt *a) {
    const ds4_json *id = ds4_json_get(e, "id"), *lp = ds4_json_get(e, "logprob");
    uint64_t v;
    if (!ds4_json_uint(id, INT32_MAX, &v) || !lp || lp->type != DS4_JSON_NUMBER) return -1;
    *a = (alt){(int32_t)v, lp->num, lp->str, lp->len};
    return 0;
}

/* Is v the token id `id`? */
static bool id_is(const ds4_json *v, int32_t id) {
    uint64_t x;
    return ds4_json_uint(v, INT32_MAX, &x) && x == (uint64_t)id;
}

/* llama.cpp server's /completion with n_probs: completion_probabilities,
 * each the chosen token's id and logprob and its top_logprobs.  It gives
 * one entry for a token whose text ends inside a UTF-8 character together
 * with the next (the entry is the later token's), so with return_tokens
 * its "tokens" say which steps those are. */
static int llama_steps(const ds4_cf_server_cell *c, uint32_t r, const ds4_json *root,
                       ds4_buf *out, ds4err *err) {
    const ds4_json *cp = ds4_json_get(root, "completion_probabilities");
    const ds4_json *toks = ds4_json_get(root, "tokens");
    if (!cp || cp->type != DS4_JSON_ARRAY) return bad_answer(r, "completion_probabilities (n_probs)", err);
    if (toks && toks->type != DS4_JSON_ARRAY)
        return ds4_err_set(err, DS4_E_FORMAT, "row %u: tokens is not an array", r);
    size_t step = 0, t = 0;
    for (size_t i = 0; i < cp->n; i++) {
        const ds4_json *e = &cp->elems[i], *tops = ds4_json_get(e, "top_logprobs");
        const ds4_json *lp = ds4_json_get(e, "logprob");
        alt sel;
        if (lp && lp->type == DS4_JSON_NULL)
            return ds4_err_set(err, DS4_E_FORMAT, "row %u: completion_probabilities[%zu]'s logprob "
                               "is null: the engine's logits were not finite", r, i);
        if (id_logprob(e, &sel) || !tops || tops->type != DS4_JSON_ARRAY)
            return ds4_err_set(err, DS4_E_FORMAT, "row %u: completion_probabilities[%zu] has no "
                               "id, logprob and top_logprobs", r, i);
        /* The tokens it held back (bytes that end inside a UTF-8
         * character), whose probabilities it does not give: steps of their
         * own, without alternatives. */
        for (; toks && t < toks->n && !id_is(&toks->elems[t], sel.id); t++) {
            uint64_t id;
            if (!ds4_json_uint(&toks->elems[t], INT32_MAX, &id))
                return ds4_err_set(err, DS4_E_FORMAT, "row %u: tokens[%zu] is not a token id", r, t);
            put_step(c, out, step++, (int32_t)id, NULL, 0);
        }
        if (toks && t == toks->n)
            return ds4_err_set(err, DS4_E_FORMAT, "row %u: completion_probabilities[%zu] (id %d) is "
                               "none of the tokens left", r, i, sel.id);
        t++;
        alt *a = calloc(tops->n ? tops->n : 1, sizeof(*a));
        if (!a) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        for (size_t k = 0; k < tops->n; k++)
            if (id_logprob(&tops->elems[k], &a[k])) {
                free(a);
                return ds4_err_set(err, DS4_E_FORMAT, "row %u: completion_probabilities[%zu]."
                                   "top_logprobs[%zu] has no id and logprob", r, i, k);
            }
        put_step(c, out, step++, sel.id, a, tops->n);
        free(a);
    }
    for (; toks && t < toks->n; t++) {
        uint64_t id;
        if (!ds4_json_uint(&toks->elems[t], INT32_MAX, &id))
            return ds4_err_set(err, DS4_E_FORMAT, "row %u: tokens[%zu] is not a token id", r, t);
        put_step(c, out, step++, (int32_t)id, NULL, 0);
    }
    return 0;
}

/* A [logprob, id, text] triple (SGLang's). */
static int triple(const ds4_json *t, alt *a) {
    uint64_t v;
    if (!t || t->type != DS4_JSON_ARRAY || t->n < 2 || t->elems[0].type != DS4_JSON_NUMBER ||
        !ds4_json_uint(&t->elems[1], INT32_MAX, &v))
        return -1;
    *a = (alt){(int32_t)v, t->elems[0].num, t->elems[0].str, t->elems[0].len};
    return 0;
}

/* SGLang's /generate with return_logprob: meta_info's
 * output_token_logprobs and output_top_logprobs, [logprob, id, text]. */
static int sglang_steps(const ds4_cf_server_cell *c, uint32_t r, const ds4_json *root,
                        ds4_buf *out, ds4err *err) {
    const ds4_json *mi = ds4_json_get(root, "meta_info");
    const ds4_json *toks = ds4_json_get(mi, "output_token_logprobs");
    const ds4_json *tops = ds4_json_get(mi, "output_top_logprobs");
    if (!toks || toks->type != DS4_JSON_ARRAY || !tops || tops->type != DS4_JSON_ARRAY ||
        tops->n != toks->n)
        return bad_answer(r, "meta_info.output_token_logprobs and output_top_logprobs "
                          "(return_logprob, top_logprobs_num)", err);
    for (size_t i = 0; i < toks->n; i++) {
        alt sel;
        const ds4_json *t = &tops->elems[i];
        if (triple(&toks->elems[i], &sel) || t->type != DS4_JSON_ARRAY)
            return ds4_err_set(err, DS4_E_FORMAT, "row %u: step %zu is not [logprob, id, text] "
                               "with its alternatives", r, i);
        alt *a = calloc(t->n ? t->n : 1, sizeof(*a));
        if (!a) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        for (size_t k = 0; k < t->n; k++)
            if (triple(&t->elems[k], &a[k])) {
                free(a);
                return ds4_err_set(err, DS4_E_FORMAT, "row %u: output_top_logprobs[%zu][%zu] is "
                                   "not [logprob, id, text]", r, i, k);
            }
        put_step(c, out, i, sel.id, a, t->n);
        free(a);
    }
    return 0;
}

/* ---- the dialects ---- */

/* Every dialect's facts and code, the one place they are stated: a new
 * dialect is a row here (with its request and its reader) and a name in
 * enum ds4_cf_dialect; test_conform.c holds every row complete. */
static const ds4_cf_dialect_info dialects[DS4_CF_NDIALECTS] = {
    [DS4_CF_DIALECT_IDS] = {"ids", "OpenAI completions, tokens as \"token_id:N\" (vLLM's "
                            "return_tokens_as_token_ids: ds4ref-server, vLLM)",
                            .openai = true, .counts_prompt = true, .request = openai_request,
                            .steps = openai_steps},
    [DS4_CF_DIALECT_TEXT] = {"text", "OpenAI completions, each token named by its text, matched "
                             "to ids by its bytes", .by_text = true, .openai = true,
                             .counts_prompt = true, .request = openai_request,
                             .steps = openai_steps},
    [DS4_CF_DIALECT_LOSSY] = {"lossy-text", "OpenAI completions by text, the bytes that are not "
                              "UTF-8 dropped or made U+FFFD (llama-cpp-python)", .by_text = true, .lossy = true,
                              .openai = true, .counts_prompt = true, .request = openai_request,
                              .steps = openai_steps},
    [DS4_CF_DIALECT_LLAMA] = {"llama", "llama.cpp server's /completion with n_probs (ids)",
                              .request = llama_request, .steps = llama_steps},
    [DS4_CF_DIALECT_SGLANG] = {"sglang", "SGLang's /generate with return_logprob (ids)",
                               .request = sglang_request, .steps = sglang_steps},
    [DS4_CF_DIALECT_DS4] = {"ds4", "ds4-server's chat: its text only, no logprobs, judged by "
                            "teacher forcing", .chat_text = true, .counts_prompt = true,
                            .request = ds4_request, .steps = ds4_steps},
};

const ds4_cf_dialect_info *ds4chk_client_dialect(uint32_t d) {
    return d < DS4_CF_NDIALECTS ? &dialects[d] : NULL;
}

int ds4chk_client_dialect_find(const char *name) {
    for (int d = 0; d < DS4_CF_NDIALECTS; d++)
        if (dialects[d].name && !strcmp(dialects[d].name, name)) return d;
    return -1;
}

int ds4chk_client_answer(const ds4_cf_server_cell *c, uint32_t r, const char *body, size_t len,
                         ds4_buf *out, ds4err *err) {
    ds4_json_doc *doc;
    if (c->cut) c->cut[r] = -1;
    if (ds4_json_parse(body, len, "answer", &doc, err)) return -1;
    const ds4_json *root = ds4_json_root(doc);
    ds4_buf_printf(out, "{\"source\":\"server\",\"prompt_tokens\":%u,\"ctx\":%u,\"top_k\":%u,"
                   "\"steps\":[", c->n[r], c->ctx, c->top_k);
    const ds4_cf_dialect_info *d = dialect_of(c);
    int rc = d->counts_prompt && check_prompt_count(c, r, root, err) ? -1
             : d->steps(c, r, root, out, err);
    ds4_json_free(doc);
    ds4_buf_puts(out, "\n]}\n");
    if (!rc && out->failed) rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    return rc;
}

static void log_line(const char *log, const char *fmt, ...) {
    FILE *f = log ? fopen(log, "a") : NULL;
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

int ds4chk_client_cell(const ds4_cf_server_cell *c, ds4err *err) {
    row_job *jobs = calloc(c->rows, sizeof(*jobs));
    pthread_t *th = calloc(c->rows, sizeof(*th));
    if (!jobs || !th) {
        free(jobs), free(th);
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    }
    /* A warm cell: each row's prompt once, alone, for an engine that keeps
     * a prefix cache to fill it; what comes back is not checked. */
    for (uint32_t r = 0; c->warm && r < c->rows; r++) {
        row_job w = {.c = c, .r = r};
        w.path = request_body(c, r, &w.body);
        send_row(&w);
        log_line(c->log, "POST %s%s row %u (warming the cache): %s%ld", c->url, w.path, r,
                 w.rc ? w.err.msg : "status ", w.rc ? 0 : w.status);
        ds4_buf_free(&w.body);
        ds4_buf_free(&w.resp);
    }
    /* Every row's request goes out before any answer is awaited: they are
     * in flight together, which is what a batch cell tests. */
    uint32_t started = 0;
    for (uint32_t r = 0; r < c->rows; r++) {
        jobs[r] = (row_job){.c = c, .r = r};
        jobs[r].path = request_body(c, r, &jobs[r].body);
        if (pthread_create(&th[r], NULL, send_row, &jobs[r])) break;
        started++;
    }
    for (uint32_t r = 0; r < started; r++) pthread_join(th[r], NULL);
    int rc = started == c->rows ? 0 : ds4_err_set(err, DS4_E_NOMEM, "cannot start a thread per row");
    for (uint32_t r = 0; rc == 0 && r < c->rows; r++) {
        row_job *j = &jobs[r];
        log_line(c->log, "POST %s%s row %u: %s%ld", c->url, j->path, r,
                 j->rc ? j->err.msg : "status ", j->rc ? 0 : j->status);
        if (j->rc) {
            rc = ds4_err_set(err, j->err.code, "row %u: %s", r, j->err.msg);
            break;
        }
        if (j->status != 200) {
            log_line(c->log, "%.*s", (int)(j->resp.len > 600 ? 600 : j->resp.len), j->resp.p ? j->resp.p : "");
            rc = ds4_err_set(err, DS4_E_FORMAT, "row %u: the engine answered %ld: %.200s", r,
                             j->status, j->resp.p ? j->resp.p : "");
            break;
        }
        ds4_buf dump = {0};
        rc = ds4chk_client_answer(c, r, j->resp.p ? j->resp.p : "", j->resp.len, &dump, err);
        char path[1024];
        if (c->rows > 1) snprintf(path, sizeof(path), "%s.%u", c->out, r);
        else snprintf(path, sizeof(path), "%s", c->out);
        if (rc == 0) rc = ds4_file_write_atomic(path, dump.p, dump.len, err);
        ds4_buf_free(&dump);
    }
    for (uint32_t r = 0; r < c->rows; r++) {
        ds4_buf_free(&jobs[r].body);
        ds4_buf_free(&jobs[r].resp);
    }
    free(jobs), free(th);
    return rc;
}

int ds4chk_client_wait_ready(const char *url, double timeout, int (*alive)(void *ud), void *ud,
                             ds4err *err) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char last[600] = "no answer";
    for (;;) {
        static const char *const paths[] = {"/health", "/v1/models"};
        for (int k = 0; k < 2; k++) {
            char u[512];
            snprintf(u, sizeof(u), "%s%s", url, paths[k]);
            ds4_buf b = {0};
            long status = 0;
            ds4err e = {0};
            const int rc = ds4chk_http_request(u, NULL, 0, 5, &b, &status, &e);
            ds4_buf_free(&b);
            if (rc == 0 && status == 200) return 0;
            snprintf(last, sizeof(last), "%s", rc ? e.msg : "a status other than 200");
        }
        if (alive && !alive(ud))
            return ds4_err_set(err, DS4_E_IO, "the engine exited before %s answered (%s)", url, last);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > timeout)
            return ds4_err_set(err, DS4_E_IO, "%s did not answer /health or /v1/models within "
                               "%g s (%s)", url, timeout, last);
        nanosleep(&(struct timespec){0, 100 * 1000000L}, NULL);
    }
}
