/* ds4ref-conform against an engine behind HTTP (docs/CONFORM.md, "Against a
 * server"): a cell's rows sent as requests held in flight together, each
 * answer written as the row's output ({out}, or {out}.ROW with several
 * rows) in ds4's dump layout, token ids and logprobs, without logits.
 *
 * The request is OpenAI's completions: the prompt as token ids, greedy or
 * sampled at the cell's temperature and seed (row r: seed + r, as
 * ds4ref's batches), logprobs top_k (at most 20).  The answer names its
 * tokens by id (vLLM's return_tokens_as_token_ids: ds4ref-server, vLLM) or
 * by text (plain OpenAI), each text then matched to the vocabulary's ids
 * by its bytes: a text that several ids share, or none, is ambiguous; it
 * is taken as the lowest such id and each one is listed in the cell's
 * log. */
#ifndef DS4_CONFORM_SERVER_H
#define DS4_CONFORM_SERVER_H

#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "text/tokenizer.h"

/* How an engine names tokens in its answer. */
enum ds4_cf_dialect {
    DS4_CF_DIALECT_IDS,    /* "token_id:N" (return_tokens_as_token_ids: ds4ref-server, vLLM) */
    DS4_CF_DIALECT_TEXT,   /* the token's text (plain OpenAI: llama-cpp-python, ...) */
    DS4_CF_DIALECT_LLAMA,  /* llama.cpp server's /completion with n_probs (ids) */
    DS4_CF_DIALECT_SGLANG, /* SGLang's /generate with return_logprob (ids) */
};

/* Every token's bytes, sorted, to find the ids a text names. */
typedef struct ds4_cf_vocab_index ds4_cf_vocab_index;

int ds4chk_server_index_new(const ds4_tokenizer *tok, ds4_cf_vocab_index **out, ds4err *err);
void ds4chk_server_index_free(ds4_cf_vocab_index *ix);

typedef struct ds4_cf_server_cell {
    const char *url;               /* the engine, "http://HOST:PORT" */
    const char *model;             /* the request's "model", or NULL */
    const int32_t *const *ids;     /* [rows] each row's prompt */
    const uint32_t *n;
    uint32_t rows, n_tokens, top_k, ctx;
    double temp;
    uint64_t seed;
    const char *out;               /* {out} */
    const char *log;               /* each request and its status, appended */
    double timeout;                /* seconds a request may take (0: none) */
    int warm;                      /* each row's prompt sent once, alone, first */
    int dialect;                   /* enum ds4_cf_dialect */
    const ds4_cf_vocab_index *vocab;   /* DS4_CF_DIALECT_TEXT: texts to ids */
} ds4_cf_server_cell;

/* Send the rows and write their outputs.  An error is the cell's (an engine
 * that refused, failed or answered something else): the message says
 * which row and what. */
int ds4chk_server_cell(const ds4_cf_server_cell *c, ds4err *err);

/* Row r's answer body[0..len) in the cell's dialect as ds4's dump layout
 * (appended to *out); an error says what the answer lacked. */
int ds4chk_server_answer(const ds4_cf_server_cell *c, uint32_t r, const char *body, size_t len,
                         ds4_buf *out, ds4err *err);

/* Wait, at most timeout seconds, until url answers GET /health or
 * /v1/models with 200; 0, or an error saying what it last answered. */
int ds4chk_server_wait_ready(const char *url, double timeout, int (*alive)(void *ud), void *ud,
                             ds4err *err);

#endif
