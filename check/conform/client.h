/* ds4ref-conform against an engine behind HTTP (docs/CONFORM.md, "Against a
 * server"): a cell's rows sent as requests held in flight together, each
 * answer written as the row's output ({out}, or {out}.ROW with several
 * rows) in ds4's dump layout, token ids and logprobs, without logits.
 *
 * The request is OpenAI's completions: the prompt as token ids (or, for an
 * engine that reads text only, as text less its leading BOS, which the
 * engine adds itself), greedy or
 * sampled at the cell's temperature and seed (row r: seed + r, as
 * ds4ref's batches), logprobs top_k (at most 20).  The answer names its
 * tokens by id (vLLM's return_tokens_as_token_ids: ds4ref-server, vLLM) or
 * by text (plain OpenAI), each text then matched to the vocabulary's ids
 * by its bytes: a text that several ids share, or none, is ambiguous and
 * listed in the cell's log.  An ambiguous alternative is left out; an
 * ambiguous chosen token is the reference's where nothing else the
 * reference found likely shares its name, else the row is written (and
 * judged) up to it (CONFORM.md, "Against a server").  An answer whose usage counts other than the reference's prompt
 * tokens is the cell's error: the engine did not read the prompt as the
 * reference tokenized it. */
#ifndef DS4_CONFORM_CLIENT_H
#define DS4_CONFORM_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "ref/text/json.h"
#include "ref/text/tokenizer.h"

/* How an engine names tokens in its answer. */
enum ds4_cf_dialect {
    DS4_CF_DIALECT_IDS,    /* "token_id:N" (return_tokens_as_token_ids: ds4ref-server, vLLM) */
    DS4_CF_DIALECT_TEXT,   /* the token's text (plain OpenAI: llama-cpp-python, ...) */
    DS4_CF_DIALECT_LOSSY,  /* the token's text, bytes that are not UTF-8 dropped or made
                            * U+FFFD (llama-cpp-python): ambiguous where two ids may be
                            * named so */
    DS4_CF_DIALECT_LLAMA,  /* llama.cpp server's /completion with n_probs (ids) */
    DS4_CF_DIALECT_SGLANG, /* SGLang's /generate with return_logprob (ids) */
    DS4_CF_DIALECT_DS4,    /* ds4's server: chat completions, the answer's text only (no
                            * logprobs), tokenized again */
    DS4_CF_NDIALECTS
};

/* Every token's bytes, sorted, to find the ids a text names. */
typedef struct ds4_cf_vocab_index ds4_cf_vocab_index;

/* Every token's bytes, sorted, to find the ids a text names; with lossy,
 * also each token as a lenient decoding names it (DS4_CF_DIALECT_LOSSY). */
int ds4chk_client_index_new(const ds4_tokenizer *tok, bool lossy, ds4_cf_vocab_index **out,
                            ds4err *err);
void ds4chk_client_index_free(ds4_cf_vocab_index *ix);

typedef struct ds4_cf_server_cell {
    const char *url;               /* the engine, "http://HOST:PORT" */
    const char *model;             /* the request's "model", or NULL */
    const int32_t *const *ids;     /* [rows] each row's prompt */
    const uint32_t *n;
    const char *const *text;       /* [rows] the prompts as text (less BOS; for ds4, the user's
                                    * message, which it renders), or NULL: ids */
    const size_t *text_len;
    const int32_t *const *ref_ids; /* [rows] the reference's stream, or NULL: an ambiguous */
    const uint32_t *ref_n;         /* chosen text is taken as its token where it fits and */
    const int32_t *const *ref_top; /* [rows][ref_n * ref_k] its alternatives (-1 past the */
    uint32_t ref_k;                /* last) do not: NULL none */
    int32_t *cut;                  /* [rows] out, or NULL: the step whose chosen token could not
                                    * be told (the answer is written up to it), -1 none */
    uint32_t rows, n_tokens, top_k, ctx;
    double temp;
    uint64_t seed;
    const char *out;               /* {out} */
    const char *log;               /* each request and its status, appended */
    double timeout;                /* seconds a request may take (0: none) */
    int warm;                      /* each row's prompt sent once, alone, first */
    int dialect;                   /* enum ds4_cf_dialect */
    const ds4_cf_vocab_index *vocab;   /* the text dialects: texts to ids */
    const ds4_tokenizer *tok;      /* DS4_CF_DIALECT_DS4: the answer's text to ids */
} ds4_cf_server_cell;

/* What a dialect is and does (client.c's table). */
typedef struct ds4_cf_dialect_info {
    const char *name;              /* --server-dialect's */
    const char *about;             /* a line for --help */
    bool by_text;                  /* names tokens by their text (a vocabulary index) */
    bool lossy;                    /* ... with the bytes that are not UTF-8 lost */
    bool openai;                   /* OpenAI completions: the prompt as ids or text
                                    * (--server-prompt) */
    bool chat_text;                /* the user's message in, its text alone out */
    bool counts_prompt;            /* usage.prompt_tokens, where given, must be the cell's */
    /* Row r's request into b, returning the path it goes to; and the
     * answer's steps into out (ds4's dump layout). */
    const char *(*request)(const ds4_cf_server_cell *c, uint32_t r, ds4_buf *b);
    int (*steps)(const ds4_cf_server_cell *c, uint32_t r, const ds4_json *root,
                 ds4_buf *out, ds4err *err);
} ds4_cf_dialect_info;

/* Dialect d's row (enum ds4_cf_dialect); NULL past the last. */
const ds4_cf_dialect_info *ds4chk_client_dialect(uint32_t d);

/* The dialect named name, or -1. */
int ds4chk_client_dialect_find(const char *name);

/* Send the rows and write their outputs.  An error is the cell's (an engine
 * that refused, failed or answered something else): the message says
 * which row and what. */
int ds4chk_client_cell(const ds4_cf_server_cell *c, ds4err *err);

/* Row r's answer body[0..len) in the cell's dialect as ds4's dump layout
 * (appended to *out); an error says what the answer lacked. */
int ds4chk_client_answer(const ds4_cf_server_cell *c, uint32_t r, const char *body, size_t len,
                         ds4_buf *out, ds4err *err);

/* Wait, at most timeout seconds, until url answers GET /health or
 * /v1/models with 200; 0, or an error saying what it last answered. */
int ds4chk_client_wait_ready(const char *url, double timeout, int (*alive)(void *ud), void *ud,
                             ds4err *err);

#endif
