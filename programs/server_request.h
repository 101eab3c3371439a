/* ds4ref-server's requests: an HTTP body parsed (jansson) and checked
 * against what the endpoint accepts, before anything touches the model.
 * Every refusal says which field and what was expected, with the HTTP
 * status and OpenAI error type to answer with (docs/SERVER.md).  The one
 * part of the server that reads untrusted bytes: it has a fuzz target
 * (tests/fuzz/fuzz_server.c). */
#ifndef DS4REF_SERVER_REQUEST_H
#define DS4REF_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ds4ref.h"

enum srv_kind { SRV_COMPLETIONS, SRV_CHAT, SRV_TOKENIZE, SRV_DETOKENIZE };

/* The most prompts of one completions request, stop strings, top
 * alternatives and chat messages. */
#define SRV_MAX_PROMPTS 64
#define SRV_MAX_STOP 4
#define SRV_MAX_TOP 20
#define SRV_MAX_MESSAGES 256

/* A prompt: text (ids NULL) or token ids. */
typedef struct srv_prompt {
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n_ids;
} srv_prompt;

typedef struct srv_request {
    int kind;
    json_t *root;                 /* the parsed body; the strings point into it */
    srv_prompt prompts[SRV_MAX_PROMPTS];
    size_t n_prompts;
    ds4ref_chat_message msgs[SRV_MAX_MESSAGES];
    size_t n_msgs;
    long long max_tokens;         /* -1: not given; 0 (completions with echo): score only */
    double temperature;           /* 0: greedy */
    uint64_t seed;
    const char *stop[SRV_MAX_STOP];
    size_t stop_len[SRV_MAX_STOP];
    size_t n_stop;
    int logprobs;                 /* alternatives a token: -1 none, 0..SRV_MAX_TOP */
    int prompt_logprobs;          /* vLLM's, alternatives a prompt token: -1 none */
    int echo, stream, ignore_eos, token_ids, thinking, special;
    int include_usage;            /* stream_options.include_usage */
    int add_bos;                  /* /tokenize's add_special_tokens: BOS first */
    const char *effort;           /* "reasoning_effort": low, high or max; NULL: not given */
    const char *model;            /* "model", or NULL: the server checks it is its own */
} srv_request;

typedef struct srv_error {
    int status;                   /* 400, 413, 429, ... */
    const char *type;             /* "invalid_request_error", ... */
    char param[48];               /* the field, or "" */
    char message[320];
} srv_error;

/* Parse body[0..len) for an endpoint of `kind`, token ids checked against
 * n_vocab.  0, or -1 with *e filled (status 400); either way free with
 * srv_request_free. */
int srv_request_parse(int kind, const char *body, size_t len, uint32_t n_vocab, srv_request *r,
                      srv_error *e);

void srv_request_free(srv_request *r);

/* Fill *e; returns -1. */
int srv_error_set(srv_error *e, int status, const char *type, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
