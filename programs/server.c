/* ds4ref-server: the reference as an OpenAI-compatible HTTP endpoint, over
 * the public API, with libmicrohttpd for HTTP and jansson for JSON.
 *
 *   ds4ref-server -m MODEL [--mtp F] [--host 127.0.0.1] [--port 8080]
 *                 [--ctx N] [-t N] [--parallel N] [--queue N]
 *
 * Requests are parsed and checked in server_request.c; every request in
 * flight is a row that server_sched.c decodes with all the others, one
 * shared forward pass at a time; server_metrics.c counts what /metrics
 * says.  This file is the HTTP side: routing, prompts into tokens, jobs
 * into OpenAI responses (whole or as server-sent events), clients that
 * leave or half-close, and shutdown.  docs/SERVER.md says what
 * each endpoint takes and returns. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "ds4ref.h"

#include "options.h"
#include "server_metrics.h"
#include "server_request.h"
#include "server_sched.h"
#include "wait_policy.h"

/* Connections MHD accepts beyond --max-connections, to answer them 503
 * rather than close them unanswered. */
enum { SERVER_CONN_SLACK = 64 };

typedef struct server {
    ds4ref_model *m;
    srv_sched *sched;
    ds4ref_model_info info;
    const char *name;             /* the model's id in responses */
    int release;                  /* the chat encoder's, enum ds4ref_chat_release */
    char root[PATH_MAX];          /* its file's absolute path: /v1/models "root", as vLLM
                                   * gives it, so that a client can tell which file it is */
    uint32_t ctx;                 /* positions a request may use */
    size_t max_body;
    long long created;
    volatile int stopping;
    int open;                     /* requests begun whose answers are not sent yet */
    int conns;                    /* connections open, idle and half-sent ones included */
    int listening;                /* libmicrohttpd's messages are shown from then on */
    char start_msg[256];          /* its last message before that (a failed start's reason) */
    int max_conns;                /* beyond this a request is answered 503 at once */
    srv_metrics metrics;
    char info_labels[1024];       /* ds4ref_info's labels */
    pthread_t digest_thread;
    char model_sha256[65];        /* the model file's, once computed ("" until then) */
    volatile int digest_cancel;
} server;

/* The status of the response this thread queued in its current call from
 * libmicrohttpd (0: none yet), for /metrics: with a thread per connection,
 * a request's handler runs on its connection's thread. */
static _Thread_local unsigned answered;

/* ---- responses ---------------------------------------------------------- */

/* Answer with text (malloc'd, taken over; NULL: out of memory). */
static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *text,
                                 const char *content_type) {
    if (!text) return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", content_type);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    answered = status;
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *body) {
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return send_text(c, status, text, "application/json");
}

/* OpenAI's error object. */
static enum MHD_Result send_error(struct MHD_Connection *c, const srv_error *e) {
    json_t *err = json_pack("{s:s, s:s, s:o, s:n}", "message", e->message, "type", e->type,
                            "param", e->param[0] ? json_string(e->param) : json_null(), "code");
    return send_json(c, (unsigned)e->status, json_pack("{s:o}", "error", err));
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *type,
                            const char *param, const char *msg) {
    srv_error e;
    srv_error_set(&e, status, type, param, "%s", msg);
    return send_error(c, &e);
}

/* A token's bytes as a JSON string: itself when it is well-formed UTF-8,
 * else "bytes:" and \xNN escapes of every byte (vLLM's form), so that no
 * byte is lost or replaced. */
static json_t *token_text(const uint8_t *b, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = ds4ref_utf8_char(b + i, n - i);
        if (!k) break;
        i += k;
    }
    if (i == n) return json_stringn((const char *)b, n);
    char *s = malloc(6 + 4 * n + 1);
    if (!s) return NULL;
    size_t o = (size_t)sprintf(s, "bytes:");
    for (size_t k = 0; k < n; k++) o += (size_t)sprintf(s + o, "\\x%02x", b[k]);
    json_t *v = json_stringn(s, o);
    free(s);
    return v;
}

/* Generated or echoed text as a JSON string: its bytes, each byte that
 * does not begin a well-formed character replaced by U+FFFD (a token may
 * end inside a character; its exact bytes are in the logprobs). */
static json_t *utf8_text(const char *p, size_t n) {
    char *s = malloc(3 * n + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = ds4ref_utf8_char((const uint8_t *)p + i, n - i);
        if (k) {
            memcpy(s + o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(s + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    json_t *v = json_stringn(s, o);
    free(s);
    return v;
}

/* The string that stands for token id: "token_id:ID" when the request
 * asked for ids (vLLM's return_tokens_as_token_ids), else its bytes. */
static json_t *token_name(const server *sv, int32_t id, int as_id) {
    if (as_id) return json_sprintf("token_id:%" PRId32, id);
    char *b = NULL;
    size_t n = 0;
    ds4ref_error e;
    if (ds4ref_detokenize(sv->m, &id, 1, &b, &n, &e)) return json_string("");
    json_t *v = token_text((const uint8_t *)b, n);
    ds4ref_free(b);
    return v;
}


/* ---- jobs ---------------------------------------------------------------- */

/* A prompt as token ids: given, or its text tokenized with special-token
 * strings recognised and nothing added (the text is the prompt exactly). */
static int prompt_ids(const server *sv, const srv_prompt *p, int32_t **ids, size_t *n,
                      srv_error *e) {
    if (p->ids) {
        *ids = malloc(sizeof(int32_t) * (p->n_ids ? p->n_ids : 1));
        if (!*ids) return srv_error_set(e, 500, "server_error", NULL, "out of memory");
        memcpy(*ids, p->ids, sizeof(int32_t) * p->n_ids);
        *n = p->n_ids;
        return 0;
    }
    ds4ref_error de;
    if (ds4ref_tokenize(sv->m, p->text, p->len, DS4REF_TOKENIZE_SPECIAL, ids, n, &de))
        return srv_error_set(e, 400, "invalid_request_error", "prompt", "%s", de.message);
    return 0;
}

/* A job for prompt ids (taken over), its limits checked against the
 * context: the prompt and what is generated together fit it (usage's
 * total_tokens is at most the context), max_tokens cut to the room left,
 * as vLLM does; a prompt that leaves no room is refused unless it is only
 * scored (max_tokens 0). */
static srv_job *new_job(const server *sv, const srv_request *r, int32_t *ids, size_t n,
                        srv_error *e) {
    if (n == 0) {
        free(ids);
        srv_error_set(e, 400, "invalid_request_error", "prompt", "the prompt has no tokens");
        return NULL;
    }
    if (n > sv->ctx || (n == sv->ctx && r->max_tokens != 0)) {
        free(ids);
        srv_error_set(e, 400, "invalid_request_error", r->kind == SRV_CHAT ? "messages" : "prompt",
                      "the prompt has %zu tokens, %s the context of %u (--ctx)%s", n,
                      n > sv->ctx ? "more than" : "all of", sv->ctx,
                      n > sv->ctx ? "" : ": no room to generate");
        return NULL;
    }
    srv_job *j = calloc(1, sizeof(*j));
    if (!j) {
        free(ids);
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    const uint64_t room = sv->ctx - n;
    const uint64_t want = r->max_tokens >= 0 ? (uint64_t)r->max_tokens : room;
    j->prompt = ids;
    j->n_prompt = n;
    j->max_tokens = (uint32_t)(want < room ? want : room);
    j->temperature = r->temperature;
    j->seed = r->seed;
    j->top = r->logprobs > 0 ? (uint32_t)r->logprobs : 0;
    const int echo_lp = r->echo && r->logprobs >= 0;
    j->prompt_logprobs = echo_lp || r->prompt_logprobs >= 0;
    const int want_top = echo_lp ? r->logprobs : 0;
    j->prompt_top = (uint32_t)(r->prompt_logprobs > want_top ? r->prompt_logprobs : want_top);
    j->prompt_rank = r->prompt_logprobs >= 0;
    j->stop_at_eos = !r->ignore_eos;
    j->stop = r->stop;
    j->stop_len = r->stop_len;
    j->n_stop = r->n_stop;
    return j;
}

/* The jobs of a request: one a prompt (completions) or the conversation
 * (chat). */
static int make_jobs(const server *sv, const srv_request *r, srv_job **jobs, size_t *n_jobs,
                     srv_error *e) {
    *n_jobs = 0;
    const size_t n = r->kind == SRV_CHAT ? 1 : r->n_prompts;
    for (size_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t k;
        if (r->kind == SRV_CHAT) {
            ds4ref_chat_options co = {.thinking = r->thinking, .reasoning_effort = r->effort,
                                      .release = sv->release};
            ds4ref_error de;
            if (ds4ref_chat_messages(sv->m, r->msgs, r->n_msgs, &co, &ids, &k, &de))
                return srv_error_set(e, 400, "invalid_request_error", "messages", "%s", de.message);
        } else if (prompt_ids(sv, &r->prompts[i], &ids, &k, e)) {
            return -1;
        }
        if (!(jobs[i] = new_job(sv, r, ids, k, e))) return -1;
        ++*n_jobs;
    }
    return 0;
}

enum { PEER_HERE, PEER_GONE, PEER_FIN };

/* What the socket says of the client: here; gone (reset, or an error); or
 * a FIN, which alone does not say: a client that closed and one that only
 * shut its sending side after its request (and still reads) both sent one. */
static int peer_state(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return PEER_HERE;
    struct pollfd p = {ci->connect_fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return PEER_HERE;
    if (p.revents & (POLLHUP | POLLERR)) return PEER_GONE;
    if (p.revents & POLLRDHUP) return PEER_FIN;
    char b;
    const ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return PEER_FIN;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK ? PEER_GONE : PEER_HERE;
}

/* A probe of a half-closed client goes again this often: one that reads
 * the first and leaves later sends nothing more, and only a write shows it
 * gone. */
#define PROBE_EVERY 2.0

static double monotonic_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Is the client of a request still waiting for its answer gone?  After a
 * FIN the connection is probed, and again every PROBE_EVERY seconds: an
 * interim "100 Continue" response, which HTTP/1.1 clients skip before the
 * final one (RFC 9110, 15.2; there may be several).  A client that closed
 * answers it with a reset, seen at the next look; one that half-closed
 * reads it and waits on.  HTTP/1.0 has no interim responses, so there a FIN
 * is taken as gone.  *probed: when the last probe went (0: none yet). */
static int client_gone(struct MHD_Connection *c, int http11, double *probed) {
    const int state = peer_state(c);
    if (state != PEER_FIN) return state == PEER_GONE;
    if (!http11) return 1;
    const double now = monotonic_seconds();
    if (*probed && now - *probed < PROBE_EVERY) return 0;
    *probed = now;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return !ci || send(ci->connect_fd, probe, strlen(probe), MSG_NOSIGNAL | MSG_DONTWAIT) !=
                      (ssize_t)strlen(probe);
}

/* ---- completions and chat, whole -------------------------------------- */

/* A logprob as JSON: a number, or null where it is none (-inf: a logit of
 * -inf; NaN), which JSON cannot say and jansson would drop. */
static json_t *logprob_json(double x) {
    return isfinite(x) ? json_real(x) : json_null();
}

/* A token's bytes (empty when they cannot be had). */
static char *token_bytes(const server *sv, int32_t id, size_t *n) {
    char *b = NULL;
    ds4ref_error e;
    *n = 0;
    if (ds4ref_detokenize(sv->m, &id, 1, &b, n, &e)) return NULL;
    return b;
}

/* The characters of a token's bytes decoded alone: a well-formed character
 * is one, and so is each byte that begins none (U+FFFD in text).  A
 * completion's text_offset sums them, token by token, as vLLM sums its
 * tokens' lengths: a stream can say it as each token comes. */
static size_t token_chars(const server *sv, int32_t id) {
    size_t n, chars = 0;
    char *b = token_bytes(sv, id, &n);
    for (size_t i = 0; i < n; chars++) {
        const size_t k = ds4ref_utf8_char((const uint8_t *)b + i, n - i);
        i += k ? k : 1;
    }
    ds4ref_free(b);
    return chars;
}

/* A completion's logprobs object, built step by step (the prompt's first
 * when echoed, then the generated ones). */
typedef struct comp_lp {
    json_t *tokens, *logprobs, *tops, *offsets;
} comp_lp;

static void comp_lp_init(comp_lp *c) {
    c->tokens = json_array();
    c->logprobs = json_array();
    c->tops = json_array();
    c->offsets = json_array();
}

static json_t *comp_lp_json(comp_lp *c) {
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", c->tokens, "token_logprobs", c->logprobs,
                     "top_logprobs", c->tops, "text_offset", c->offsets);
}

/* Add n steps; *off is the text offset of the first, and is moved past
 * them.  first_of_prompt: steps[0] is the prompt's first token, which has
 * no logprob and no alternatives (null).  Each entry of top_logprobs holds
 * the token itself, then its `logprobs` most likely alternatives: OpenAI
 * gives "up to logprobs + 1" (with logprobs 0, the token alone), and vLLM
 * puts the token first. */
static void comp_lp_add(comp_lp *c, const server *sv, const srv_request *r, const srv_step *steps,
                        size_t n, int first_of_prompt, size_t *off) {
    for (size_t i = 0; i < n; i++) {
        const srv_step *st = &steps[i];
        json_array_append_new(c->tokens, token_name(sv, st->id, r->token_ids));
        json_array_append_new(c->offsets, json_integer((json_int_t)*off));
        *off += token_chars(sv, st->id);
        if (i == 0 && first_of_prompt) {
            json_array_append_new(c->logprobs, json_null());
            json_array_append_new(c->tops, json_null());
            continue;
        }
        json_array_append_new(c->logprobs, logprob_json(st->logprob));
        json_t *d = json_object();
        const uint32_t want = (uint32_t)r->logprobs;
        const uint32_t k_max = want < st->n_top ? want : st->n_top;
        for (uint32_t k = 0; k <= k_max; k++) {
            const int32_t id = k ? st->top[k - 1].id : st->id;
            json_t *kn = token_name(sv, id, r->token_ids);
            /* Keys by text can collide (two ids, one string): the first
             * (the token, then the most likely) is kept, as an object holds
             * one. */
            if (!json_object_get(d, json_string_value(kn)))
                json_object_set_new(d, json_string_value(kn),
                                    logprob_json(k ? st->top[k - 1].logprob : st->logprob));
            json_decref(kn);
        }
        json_array_append_new(c->tops, d);
    }
}

/* The logprobs object of a whole completion choice. */
static json_t *completion_logprobs(const server *sv, const srv_request *r, const srv_job *j) {
    comp_lp c;
    comp_lp_init(&c);
    size_t off = 0;
    if (r->echo) comp_lp_add(&c, sv, r, j->prompt_steps, j->n_prompt, 1, &off);
    comp_lp_add(&c, sv, r, j->steps, j->n_steps, 0, &off);
    return comp_lp_json(&c);
}

/* vLLM's prompt_logprobs: null for the first prompt token, then for each
 * one an object keyed by token id (a string) holding the token, then its
 * `prompt_logprobs` most likely alternatives, each with its logprob, rank
 * and decoded_token.  An alternative's rank is its place among them (from
 * 1); the token's, when it is none of them, vLLM's: the tokens whose
 * logprob is at least its own. */
static json_t *prompt_logprobs(const server *sv, const srv_request *r, const srv_job *j) {
    json_t *a = json_array();
    json_array_append_new(a, json_null());
    for (size_t i = 1; i < j->n_prompt; i++) {
        const srv_step *st = &j->prompt_steps[i];
        json_t *d = json_object();
        const uint32_t k_max =
            (uint32_t)r->prompt_logprobs < st->n_top ? (uint32_t)r->prompt_logprobs : st->n_top;
        for (uint32_t k = 0; k <= k_max; k++) {
            const int32_t id = k ? st->top[k - 1].id : st->id;
            char key[16];
            snprintf(key, sizeof(key), "%" PRId32, id);
            json_t *old = json_object_get(d, key);
            if (old) {
                json_object_set_new(old, "rank", json_integer((json_int_t)k));
                continue;
            }
            json_object_set_new(d, key, json_pack("{s:o, s:I, s:o}", "logprob",
                                                  logprob_json(k ? st->top[k - 1].logprob
                                                                 : st->logprob),
                                                  "rank", (json_int_t)(k ? k : st->rank),
                                                  "decoded_token",
                                                  token_name(sv, id, r->token_ids)));
        }
        json_array_append_new(a, d);
    }
    return a;
}

/* The prompt's bytes (echo). */
static json_t *prompt_text(const server *sv, const srv_job *j, const char *gen, size_t n) {
    char *b = NULL;
    size_t nb = 0;
    ds4ref_error e;
    if (ds4ref_detokenize(sv->m, j->prompt, j->n_prompt, &b, &nb, &e)) return json_string("");
    char *all = malloc(nb + n + 1);
    json_t *v = NULL;
    if (all) {
        memcpy(all, b, nb);
        memcpy(all + nb, gen, n);
        v = utf8_text(all, nb + n);
        free(all);
    }
    ds4ref_free(b);
    return v ? v : json_string("");
}

static json_t *usage(size_t prompt, size_t completion) {
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                     (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion));
}

#define THINK_END "</think>"

/* Chat with thinking: the reasoning is the text before </think>, the
 * answer the text after it (memmem: the text may hold a NUL byte).  Until
 * </think> comes, both positions are len: all of it is reasoning. */
static void split_thinking(const char *text, size_t len, size_t *think_len, size_t *answer_at) {
    const char *end = text ? memmem(text, len, THINK_END, strlen(THINK_END)) : NULL;
    *think_len = end ? (size_t)(end - text) : len;
    *answer_at = end ? *think_len + strlen(THINK_END) : len;
}

static json_t *byte_list(const server *sv, int32_t id) {
    size_t n;
    char *b = token_bytes(sv, id, &n);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((uint8_t)b[i]));
    ds4ref_free(b);
    return a;
}

static json_t *chat_logprobs(const server *sv, const srv_job *j) {
    json_t *content = json_array();
    for (uint32_t i = 0; i < j->n_steps; i++) {
        const srv_step *st = &j->steps[i];
        json_t *tops = json_array();
        for (uint32_t k = 0; k < st->n_top; k++)
            json_array_append_new(tops, json_pack("{s:o, s:f, s:o}", "token",
                                                  token_name(sv, st->top[k].id, 0), "logprob",
                                                  st->top[k].logprob, "bytes",
                                                  byte_list(sv, st->top[k].id)));
        json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token",
                                                  token_name(sv, st->id, 0), "logprob",
                                                  st->logprob, "bytes", byte_list(sv, st->id),
                                                  "top_logprobs", tops));
    }
    return json_pack("{s:o}", "content", content);
}

static json_t *chat_choice(const server *sv, const srv_request *r, const srv_job *j) {
    size_t tl = 0, at = 0;
    if (r->thinking) split_thinking(j->text, j->text_len, &tl, &at);
    json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                            utf8_text(j->text ? j->text + at : "", j->text_len - at));
    if (r->thinking)
        json_object_set_new(msg, "reasoning_content",
                            utf8_text(j->text ? j->text : "", tl));
    return json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs",
                     r->logprobs >= 0 ? chat_logprobs(sv, j) : json_null(), "finish_reason",
                     j->finish);
}

/* A response's id: unique in the server's life, the same in every chunk
 * of a stream (OpenAI's). */
static json_t *response_id(const srv_request *r) {
    static uint64_t counter;
    const uint64_t id = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    return json_sprintf("%s-%" PRIu64, r->kind == SRV_CHAT ? "chatcmpl" : "cmpl", id);
}

static json_t *whole_response(const server *sv, const srv_request *r, srv_job *const *jobs,
                              size_t n) {
    json_t *choices = json_array();
    size_t np = 0, nc = 0;
    for (size_t i = 0; i < n; i++) {
        const srv_job *j = jobs[i];
        np += j->n_prompt;
        nc += j->n_steps;
        json_t *choice;
        if (r->kind == SRV_CHAT) {
            choice = chat_choice(sv, r, j);
        } else {
            json_t *text = r->echo ? prompt_text(sv, j, j->text ? j->text : "", j->text_len)
                                   : utf8_text(j->text ? j->text : "", j->text_len);
            choice = json_pack("{s:I, s:o, s:o, s:s}", "index", (json_int_t)i, "text", text,
                               "logprobs",
                               r->logprobs >= 0 ? completion_logprobs(sv, r, j) : json_null(),
                               "finish_reason", j->finish);
        }
        /* vLLM: a completion choice's own; chat's at the top (below). */
        if (r->prompt_logprobs >= 0 && r->kind != SRV_CHAT)
            json_object_set_new(choice, "prompt_logprobs", prompt_logprobs(sv, r, j));
        json_array_append_new(choices, choice);
    }
    json_t *resp = json_pack("{s:o, s:s, s:I, s:s, s:o, s:o}", "id", response_id(r), "object",
                             r->kind == SRV_CHAT ? "chat.completion" : "text_completion",
                             "created", (json_int_t)time(NULL), "model", sv->name, "choices",
                             choices, "usage", usage(np, nc));
    if (r->prompt_logprobs >= 0 && r->kind == SRV_CHAT)
        json_object_set_new(resp, "prompt_logprobs", prompt_logprobs(sv, r, jobs[0]));
    return resp;
}

static double seconds_since(const struct timespec *t0, const struct timespec *t) {
    return (double)(t->tv_sec - t0->tv_sec) + 1e-9 * (double)(t->tv_nsec - t0->tv_nsec);
}

/* A generation request that completed, into /metrics: its tokens, its
 * latency, and the time to the first token any of its jobs gave. */
static void count_generation(server *sv, srv_job *const *jobs, size_t n,
                             const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t np = 0, ng = 0;
    double ttft = -1;
    for (size_t i = 0; i < n; i++) {
        np += jobs[i]->n_prompt;
        ng += jobs[i]->n_steps;
        const struct timespec *f = &jobs[i]->first_at;
        if ((f->tv_sec || f->tv_nsec) && (ttft < 0 || seconds_since(t0, f) < ttft))
            ttft = seconds_since(t0, f);
    }
    srv_metrics_generation(&sv->metrics, np, ng, seconds_since(t0, &now), ttft);
}

/* Wait for every job, the client watched; then answer. */
static enum MHD_Result serve_whole(server *sv, struct MHD_Connection *c, const srv_request *r,
                                   srv_job **jobs, size_t n, const struct timespec *t0,
                                   int http11) {
    double probed = 0;
    for (size_t i = 0; i < n; i++)
        while (!srv_sched_wait(sv->sched, jobs[i], UINT32_MAX, 100, NULL, NULL))
            if (client_gone(c, http11, &probed)) {
                for (size_t k = 0; k < n; k++) srv_sched_cancel(sv->sched, jobs[k]);
                for (size_t k = 0; k < n; k++) srv_job_free(sv->sched, jobs[k]);
                return MHD_NO;
            }
    enum MHD_Result rc;
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (jobs[i]->error[0] || !strcmp(jobs[i]->finish, "cancelled")) bad = i;
    if (bad < n)
        rc = fail(c, jobs[bad]->error[0] ? 500 : 503, jobs[bad]->error[0] ? "server_error" : "unavailable",
                  NULL, jobs[bad]->error[0] ? jobs[bad]->error : "the server is shutting down");
    else {
        count_generation(sv, jobs, n, t0);
        rc = send_json(c, MHD_HTTP_OK, whole_response(sv, r, jobs, n));
    }
    for (size_t i = 0; i < n; i++) srv_job_free(sv->sched, jobs[i]);
    return rc;
}

/* ---- streaming (server-sent events) ------------------------------------ */

typedef struct stream {
    server *sv;
    struct MHD_Connection *c;
    srv_request r;
    json_t *id;                           /* the response's id and time, the same in every */
    long long created;                    /* chunk (OpenAI's) */
    struct timespec t0;                   /* its arrival (/metrics) */
    int failed;                           /* a job failed or was cancelled */
    double probed;                        /* when a probe last answered the client's FIN */
    size_t think_at, think_from;          /* chat: where </think> is (SIZE_MAX: not seen
                                           * yet), where to look for it next */
    srv_job *jobs[SRV_MAX_PROMPTS];
    size_t n;
    uint32_t seen[SRV_MAX_PROMPTS];       /* steps sent */
    size_t sent_text[SRV_MAX_PROMPTS];    /* bytes of text sent, an echoed prompt's included */
    size_t offset[SRV_MAX_PROMPTS];       /* text_offset of the next token */
    char *pre[SRV_MAX_PROMPTS];           /* echo: the prompt's bytes, which begin the text */
    size_t pre_len[SRV_MAX_PROMPTS];
    int prompt_sent[SRV_MAX_PROMPTS];     /* echo: the prompt's chunk is out */
    int ended[SRV_MAX_PROMPTS], role_sent, done;
    size_t prompt_tokens, completion_tokens;   /* of the choices that ended (usage) */
    char *out;                            /* formatted, not yet handed over */
    size_t out_len, out_off;
    /* A copy of job cur's progress, taken under the scheduler's lock; its
     * text is pre[cur], then the job's. */
    size_t cur;
    srv_step *steps;
    uint32_t n_steps, cap;
    const srv_step *prompt_steps;         /* set once, freed with the job */
    char *text;
    size_t text_len, text_cap;
    const char *finish;
    char error[512];
} stream;

static void copy_progress(void *ud, const srv_job *j) {
    stream *st = ud;
    if (j->n_steps > st->cap) {
        srv_step *p = realloc(st->steps, sizeof(*p) * j->n_steps);
        if (!p) return;
        st->steps = p;
        st->cap = j->n_steps;
    }
    if (j->n_steps) memcpy(st->steps, j->steps, sizeof(*st->steps) * j->n_steps);
    st->n_steps = j->n_steps;
    st->prompt_steps = j->prompt_steps;
    const size_t pre = st->pre_len[st->cur], len = pre + j->text_len;
    if (len + 1 > st->text_cap) {
        char *p = realloc(st->text, len + 1);
        if (!p) return;
        st->text = p;
        st->text_cap = len + 1;
    }
    if (pre) memcpy(st->text, st->pre[st->cur], pre);
    if (j->text_len) memcpy(st->text + pre, j->text, j->text_len);
    st->text_len = len;
    st->finish = j->finish;
    snprintf(st->error, sizeof(st->error), "%s", j->error);
}

/* One server-sent event: "data: BODY" and a blank line. */
static void emit_raw(stream *st, const char *body) {
    const size_t add = strlen(body) + 8;
    char *p = realloc(st->out, st->out_len + add + 1);
    if (!p) return;
    st->out = p;
    st->out_len += (size_t)sprintf(st->out + st->out_len, "data: %s\n\n", body);
}

/* A chunk for the stream: OpenAI's chunk object around choices, with
 * "usage": null when the last chunk will carry it (include_usage). */
static void emit_chunk(stream *st, json_t *choices, json_t *usage_or_null) {
    const int chat = st->r.kind == SRV_CHAT;
    json_t *chunk = json_pack("{s:O, s:s, s:I, s:s, s:o}", "id", st->id, "object",
                              chat ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)st->created, "model", st->sv->name, "choices", choices);
    if (st->r.include_usage) json_object_set_new(chunk, "usage", usage_or_null);
    else json_decref(usage_or_null);
    char *text = json_dumps(chunk, JSON_COMPACT);
    json_decref(chunk);
    emit_raw(st, text ? text : "{}");
    free(text);
}

/* The longest stop string less one: text that may still turn out to begin
 * one is held back until it does not. */
static size_t holdback(const srv_request *r) {
    size_t h = 0;
    for (size_t i = 0; i < r->n_stop; i++)
        if (r->stop_len[i] - 1 > h) h = r->stop_len[i] - 1;
    return h;
}

/* The bytes at the end of text that may be the start of </think>. */
static size_t think_holdback(const char *text, size_t len) {
    for (size_t k = strlen(THINK_END) - 1; k > 0; k--)
        if (k <= len && !memcmp(text + len - k, THINK_END, k)) return k;
    return 0;
}

/* n, less a character cut short at the end (its first bytes came, the
 * rest is in the next token): a stream sends it whole, later. */
static size_t whole_chars(const char *p, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const uint8_t b = (uint8_t)p[n - back];
        if ((b & 0xC0) != 0x80) {
            const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
            return need > back ? n - back : n;
        }
    }
    return n;
}

/* split_thinking for a stream's text, looking only at what came since the
 * last look (a long stream would search its whole text at every token).  A
 * stop string can shorten the text's end, so a </think> no longer whole
 * there is looked for again. */
static void stream_thinking(stream *st, size_t *tl, size_t *at) {
    const size_t tag = strlen(THINK_END);
    if (st->think_at != SIZE_MAX && st->think_at + tag > st->text_len) st->think_at = SIZE_MAX;
    if (st->think_from > st->text_len) st->think_from = st->text_len;
    if (st->think_at == SIZE_MAX) {
        size_t t, a;
        split_thinking(st->text + st->think_from, st->text_len - st->think_from, &t, &a);
        if (t != a) st->think_at = st->think_from + t;
        else st->think_from = st->text_len >= tag ? st->text_len - (tag - 1) : 0;
    }
    *tl = st->think_at != SIZE_MAX ? st->think_at : st->text_len;
    *at = st->think_at != SIZE_MAX ? st->think_at + tag : st->text_len;
}

/* Choice i's chunk with the text up to cut (from what was sent), its
 * logprobs (or null) and, when final, its finish_reason.  Chat with
 * thinking says the text before </think> as delta.reasoning_content and
 * the text after it as delta.content, as the whole answer splits them. */
static void send_choice(stream *st, size_t i, size_t cut, json_t *lp, int final) {
    const srv_request *r = &st->r;
    const size_t from = st->sent_text[i];
    json_t *choice;
    if (r->kind == SRV_CHAT) {
        size_t tl = 0, at = 0;
        if (r->thinking) stream_thinking(st, &tl, &at);
        json_t *delta = json_object();
        if (!st->role_sent) json_object_set_new(delta, "role", json_string("assistant"));
        st->role_sent = 1;
        int said = 0;
        if (r->thinking && from < tl) {
            json_object_set_new(delta, "reasoning_content",
                                utf8_text(st->text + from, (cut < tl ? cut : tl) - from));
            said = 1;
        }
        if (!r->thinking || cut > at) {
            const size_t a = from > at ? from : at;
            json_object_set_new(delta, "content", utf8_text(st->text + a, cut - a));
            said = 1;
        }
        /* Nothing new: an empty piece of the part under way. */
        if (!said)
            json_object_set_new(delta, r->thinking && tl == st->text_len ? "reasoning_content"
                                                                         : "content",
                                json_string(""));
        choice = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)i, "delta", delta,
                           "logprobs", lp, "finish_reason",
                           final ? json_string(st->finish) : json_null());
    } else {
        choice = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)i, "text",
                           utf8_text(st->text + from, cut - from), "logprobs", lp,
                           "finish_reason", final ? json_string(st->finish) : json_null());
    }
    st->sent_text[i] = cut;
    emit_chunk(st, json_pack("[o]", choice), json_null());
}

/* The chunks for job i's new steps (one a token) and, when it has ended,
 * its last; with echo, the prompt's chunk first. */
static void job_chunks(stream *st, size_t i) {
    const srv_request *r = &st->r;
    const int chat = r->kind == SRV_CHAT;
    const int ended = st->finish != NULL;
    if (r->echo && !st->prompt_sent[i]) {
        /* The prompt's logprobs come with the first step. */
        if (!st->n_steps && !ended) return;
        const int final = ended && !st->n_steps;
        json_t *lp = json_null();
        if (r->logprobs >= 0) {
            comp_lp c;
            comp_lp_init(&c);
            comp_lp_add(&c, st->sv, r, st->prompt_steps, st->jobs[i]->n_prompt, 1,
                        &st->offset[i]);
            lp = comp_lp_json(&c);
        }
        st->prompt_sent[i] = 1;
        send_choice(st, i, final ? st->text_len : whole_chars(st->text, st->pre_len[i]), lp,
                    final);
        if (final) {
            st->ended[i] = 1;
            st->prompt_tokens += st->jobs[i]->n_prompt;
            return;
        }
    }
    size_t upto = st->text_len;
    if (!ended) {
        upto = upto > holdback(r) ? upto - holdback(r) : 0;
        size_t tl = 0, at = 0;
        if (chat && r->thinking) stream_thinking(st, &tl, &at);
        if (chat && r->thinking && tl == st->text_len) {
            const size_t h = think_holdback(st->text, st->text_len);
            if (st->text_len - h < upto) upto = st->text_len - h;
        }
        if (upto > st->sent_text[i])
            upto = st->sent_text[i] +
                   whole_chars(st->text + st->sent_text[i], upto - st->sent_text[i]);
    }
    if (chat && r->thinking) {
        /* </think> itself is in neither part: a chunk stops before it until
         * all of it can be passed over. */
        size_t tl, at;
        stream_thinking(st, &tl, &at);
        if (upto > tl && upto < at) upto = tl;
    }
    while (st->seen[i] < st->n_steps || (ended && !st->ended[i])) {
        const int last_step = st->seen[i] + 1 >= st->n_steps;
        size_t cut = last_step ? upto : st->sent_text[i];
        if (cut < st->sent_text[i]) cut = st->sent_text[i];
        json_t *lp = json_null();
        if (r->logprobs >= 0 && st->seen[i] < st->n_steps) {
            if (chat) {
                srv_job view = *st->jobs[i];
                view.steps = st->steps + st->seen[i];
                view.n_steps = 1;
                lp = chat_logprobs(st->sv, &view);
            } else {
                comp_lp c;
                comp_lp_init(&c);
                comp_lp_add(&c, st->sv, r, st->steps + st->seen[i], 1, 0, &st->offset[i]);
                lp = comp_lp_json(&c);
            }
        }
        if (st->seen[i] < st->n_steps) st->seen[i]++;
        const int final = ended && st->seen[i] >= st->n_steps;
        send_choice(st, i, cut, lp, final);
        if (final) {
            st->ended[i] = 1;
            st->prompt_tokens += st->jobs[i]->n_prompt;
            st->completion_tokens += st->n_steps;
        }
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *st = cls;
    while (st->out_off == st->out_len) {
        st->out_off = st->out_len = 0;
        if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
        size_t open = st->n;
        for (size_t i = 0; i < st->n; i++) {
            if (st->ended[i]) {
                open--;
                continue;
            }
            st->cur = i;
            srv_sched_wait(st->sv->sched, st->jobs[i], st->seen[i], 50, copy_progress, st);
            if (st->error[0] || (st->finish && !strcmp(st->finish, "cancelled"))) {
                json_t *e = json_pack("{s:{s:s, s:s}}", "error", "message",
                                      st->error[0] ? st->error : "the server is shutting down",
                                      "type", st->error[0] ? "server_error" : "unavailable");
                char *text = json_dumps(e, JSON_COMPACT);
                json_decref(e);
                emit_raw(st, text ? text : "{}");
                free(text);
                st->ended[i] = 1;
                st->failed = 1;
                continue;
            }
            job_chunks(st, i);
        }
        if (open == 0) {
            if (!st->failed) count_generation(st->sv, st->jobs, st->n, &st->t0);
            /* include_usage: a last chunk with no choice and the usage. */
            if (st->r.include_usage)
                emit_chunk(st, json_array(), usage(st->prompt_tokens, st->completion_tokens));
            emit_raw(st, "[DONE]");
            st->done = 1;
        } else if (st->out_len == 0) {
            /* A FIN: the client closed, or half-closed and reads on.  An
             * SSE comment, which clients skip, makes one that closed
             * answer with a reset (again every PROBE_EVERY seconds, for one
             * that reads on and leaves later). */
            const int state = peer_state(st->c);
            if (state == PEER_GONE) return MHD_CONTENT_READER_END_WITH_ERROR;
            const double now = monotonic_seconds();
            if (state == PEER_FIN && now - st->probed >= PROBE_EVERY) {
                st->probed = now;
                static const char comment[] = ": still here?\n\n";
                char *p = realloc(st->out, sizeof(comment));
                if (!p) return MHD_CONTENT_READER_END_WITH_ERROR;
                st->out = p;
                memcpy(st->out, comment, sizeof(comment));
                st->out_len = strlen(comment);
            }
        }
    }
    const size_t n = st->out_len - st->out_off < max ? st->out_len - st->out_off : max;
    memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

/* The connection is done with the stream (finished or gone): its jobs are
 * cancelled if still running, then freed. */
static void stream_free(void *cls) {
    stream *st = cls;
    for (size_t i = 0; i < st->n; i++) srv_sched_cancel(st->sv->sched, st->jobs[i]);
    for (size_t i = 0; i < st->n; i++) srv_job_free(st->sv->sched, st->jobs[i]);
    for (size_t i = 0; i < st->n; i++) ds4ref_free(st->pre[i]);
    srv_request_free(&st->r);
    json_decref(st->id);
    free(st->out);
    free(st->steps);
    free(st->text);
    free(st);
}

/* ---- routing ----------------------------------------------------------- */

static enum MHD_Result serve_generate(server *sv, struct MHD_Connection *c, srv_request *r,
                                      int http11) {
    /* Latencies count from here: tokenizing and rendering are the request's. */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    srv_job *jobs[SRV_MAX_PROMPTS];
    size_t n = 0;
    srv_error e;
    if (make_jobs(sv, r, jobs, &n, &e)) {
        for (size_t i = 0; i < n; i++) srv_job_free(NULL, jobs[i]);
        srv_request_free(r);
        return send_error(c, &e);
    }
    if (srv_sched_submit(sv->sched, jobs, n)) {
        for (size_t i = 0; i < n; i++) srv_job_free(NULL, jobs[i]);
        srv_request_free(r);
        return sv->stopping ? fail(c, 503, "unavailable", NULL, "the server is shutting down")
                            : fail(c, 429, "rate_limit_error", NULL,
                                   "too many requests in flight: the queue (--queue) is full; "
                                   "retry later");
    }
    if (!r->stream) {
        enum MHD_Result rc = serve_whole(sv, c, r, jobs, n, &t0, http11);
        srv_request_free(r);
        return rc;
    }
    stream *st = calloc(1, sizeof(*st));
    if (!st) {
        for (size_t i = 0; i < n; i++) srv_sched_cancel(sv->sched, jobs[i]);
        for (size_t i = 0; i < n; i++) srv_job_free(sv->sched, jobs[i]);
        srv_request_free(r);
        return MHD_NO;
    }
    st->sv = sv;
    st->c = c;
    st->r = *r;   /* the request's strings stay with it */
    st->id = response_id(r);
    st->created = (long long)time(NULL);
    st->t0 = t0;
    st->think_at = SIZE_MAX;
    /* Echo: the prompt's bytes begin each choice's text. */
    for (size_t i = 0; i < n && r->echo; i++) {
        ds4ref_error de;
        if (ds4ref_detokenize(sv->m, jobs[i]->prompt, jobs[i]->n_prompt, &st->pre[i],
                              &st->pre_len[i], &de))
            st->pre_len[i] = 0;
    }
    /* The jobs point at the request's stop strings: point them at the
     * stream's copy, which outlives this call. */
    for (size_t i = 0; i < n; i++) {
        st->jobs[i] = jobs[i];
        jobs[i]->stop = st->r.stop;
        jobs[i]->stop_len = st->r.stop_len;
    }
    st->n = n;
    /* A stream waits for its tokens inside the content reader, which
     * libmicrohttpd does not count as activity: --timeout, meant for idle
     * clients, would cut a stream whose next token is slow to come (a queued
     * request, a long prompt).  A client that leaves is seen by
     * client_gone. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)0);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    answered = MHD_HTTP_OK;
    return rc;
}

static enum MHD_Result serve_tokenize(server *sv, struct MHD_Connection *c, srv_request *r) {
    int32_t *ids = NULL;
    size_t n = 0;
    ds4ref_error de;
    int rc;
    if (r->n_msgs) {
        ds4ref_chat_options co = {0};
        rc = ds4ref_chat_messages(sv->m, r->msgs, r->n_msgs, &co, &ids, &n, &de);
    } else {
        rc = ds4ref_tokenize(sv->m, r->prompts[0].text, r->prompts[0].len,
                             r->special ? DS4REF_TOKENIZE_SPECIAL : 0, &ids, &n, &de);
    }
    const int bos = r->add_bos;
    srv_request_free(r);
    if (rc == 0 && bos && sv->info.bos < 0) {
        ds4ref_free(ids);
        return fail(c, 400, "invalid_request_error", "add_special_tokens",
                    "'add_special_tokens': this model's tokenizer has no BOS token");
    }
    if (rc) return fail(c, 400, "invalid_request_error", "prompt", de.message);
    json_t *a = json_array();
    /* add_special_tokens: BOS first, as DeepSeek's tokenizer adds it. */
    if (bos) json_array_append_new(a, json_integer(sv->info.bos));
    n += bos != 0;
    for (size_t i = 0; i + (bos != 0) < n; i++) json_array_append_new(a, json_integer(ids[i]));
    ds4ref_free(ids);
    return send_json(c, MHD_HTTP_OK, json_pack("{s:o, s:I, s:I}", "tokens", a, "count",
                                              (json_int_t)n, "max_model_len", (json_int_t)sv->ctx));
}

static enum MHD_Result serve_detokenize(server *sv, struct MHD_Connection *c, srv_request *r) {
    char *b = NULL;
    size_t n = 0;
    ds4ref_error de;
    int rc = ds4ref_detokenize(sv->m, r->prompts[0].ids, r->prompts[0].n_ids, &b, &n, &de);
    srv_request_free(r);
    if (rc) return fail(c, 400, "invalid_request_error", "tokens", de.message);
    json_t *t = utf8_text(b, n);
    ds4ref_free(b);
    return send_json(c, MHD_HTTP_OK, json_pack("{s:o}", "prompt", t));
}

static enum MHD_Result serve_metrics(server *sv, struct MHD_Connection *c) {
    uint32_t rows, queued;
    srv_sched_load(sv->sched, &rows, &queued);
    char *text = srv_metrics_text(&sv->metrics, rows, queued,
                                  __atomic_load_n(&sv->conns, __ATOMIC_SEQ_CST), sv->info_labels);
    return send_text(c, MHD_HTTP_OK, text, "text/plain; version=0.0.4; charset=utf-8");
}

/* A special token's text (JSON null without a tokenizer's id). */
static json_t *special_text(const server *sv, int32_t id) {
    if (id < 0) return json_null();
    size_t n;
    char *b = token_bytes(sv, id, &n);
    json_t *v = b ? utf8_text(b, n) : json_null();
    ds4ref_free(b);
    return v;
}

/* vLLM's /tokenizer_info, as lm-evaluation-harness's remote tokenizer reads
 * it: the tokenizer's class and its special tokens' text (which /tokenize
 * turns back into their ids).  No chat_template: the model's chat format is
 * the official encoder's code, not a Jinja template. */
static enum MHD_Result serve_tokenizer_info(server *sv, struct MHD_Connection *c) {
    return send_json(c, MHD_HTTP_OK,
                     json_pack("{s:s, s:o, s:o, s:n, s:b, s:b, s:I}", "tokenizer_class",
                               "ds4ref", "bos_token", special_text(sv, sv->info.bos), "eos_token",
                               special_text(sv, sv->info.eos), "pad_token", "add_bos_token", 1,
                               "add_eos_token", 0, "model_max_length", (json_int_t)sv->ctx));
}

static enum MHD_Result serve_get(server *sv, struct MHD_Connection *c, const char *url) {
    if (!strcmp(url, "/health")) {
        uint32_t rows, queued;
        srv_sched_load(sv->sched, &rows, &queued);
        return send_json(c, MHD_HTTP_OK, json_pack("{s:s, s:i, s:i}", "status", "ok", "rows",
                                                  (int)rows, "queued", (int)queued));
    }
    if (!strcmp(url, "/version"))
        return send_json(c, MHD_HTTP_OK, json_pack("{s:s, s:s}", "version", ds4ref_version(),
                                                   "kernels", ds4ref_kernels()));
    if (!strcmp(url, "/metrics")) return serve_metrics(sv, c);
    if (!strcmp(url, "/tokenizer_info")) return serve_tokenizer_info(sv, c);
    const char *id = !strncmp(url, "/v1/models/", 11) ? url + 11 : NULL;
    if (id && strcmp(id, sv->name)) {
        char msg[512];
        snprintf(msg, sizeof(msg), "no model '%.200s' here; this server serves '%.200s'", id,
                 sv->name);
        return fail(c, 404, "invalid_request_error", "model", msg);
    }
    json_t *model = json_pack("{s:s, s:s, s:s, s:I, s:s, s:I}", "id", sv->name, "root", sv->root,
                              "object", "model", "created", (json_int_t)sv->created, "owned_by",
                              "ds4ref", "max_model_len", (json_int_t)sv->ctx);
    /* The file's SHA-256, once the digest thread has it: ds4ref-conform
     * compares it with the reference's file (docs/CONFORM.md). */
    if (__atomic_load_n(&sv->model_sha256[0], __ATOMIC_ACQUIRE))
        json_object_set_new(model, "model_sha256", json_string(sv->model_sha256));
    if (id) return send_json(c, MHD_HTTP_OK, model);
    return send_json(c, MHD_HTTP_OK, json_pack("{s:s, s:[o]}", "object", "list", "data", model));
}

/* The body as it arrives, up to the limit. */
typedef struct upload {
    char *body;
    size_t len;
    int too_big;
    int busy;                     /* answered 503 on arrival: the rest is discarded */
} upload;

static const struct { const char *url; int kind; } posts[] = {
    {"/v1/completions", SRV_COMPLETIONS}, {"/v1/chat/completions", SRV_CHAT},
    {"/tokenize", SRV_TOKENIZE}, {"/detokenize", SRV_DETOKENIZE},
};

static enum MHD_Result route(server *sv, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *data,
                             size_t *data_size, void **con_cls) {
    /* HEAD is GET without the body, which libmicrohttpd leaves out. */
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    int kind = -1;
    for (size_t i = 0; i < sizeof(posts) / sizeof(posts[0]); i++)
        if (!strcmp(url, posts[i].url)) kind = posts[i].kind;
    const int getter = !strcmp(url, "/health") || !strcmp(url, "/v1/models") ||
                       !strcmp(url, "/version") || !strncmp(url, "/v1/models/", 11) ||
                       !strcmp(url, "/metrics") || !strcmp(url, "/tokenizer_info");
    if (!*con_cls) {
        upload *u = calloc(1, sizeof(*u));
        if (!u) return MHD_NO;
        *con_cls = u;
        __atomic_add_fetch(&sv->open, 1, __ATOMIC_SEQ_CST);
        /* Idle and slow clients hold connections, not rows: past the limit
         * a request is refused at once, so that a client learns why
         * rather than waiting for a connection that never comes. */
        const int conns = __atomic_load_n(&sv->conns, __ATOMIC_SEQ_CST);
        if (conns > sv->max_conns) {
            char msg[128];
            snprintf(msg, sizeof(msg), "%d connections are open, more than --max-connections %d",
                     conns, sv->max_conns);
            u->busy = 1;
            return fail(c, 503, "unavailable", NULL, msg);
        }
        return MHD_YES;
    }
    upload *u = *con_cls;
    if (u->busy) {
        *data_size = 0;
        return MHD_YES;
    }
    if (*data_size) {
        if (u->len + *data_size > sv->max_body) {
            u->too_big = 1;
        } else if (!u->too_big) {
            char *p = realloc(u->body, u->len + *data_size + 1);
            if (!p) return MHD_NO;
            u->body = p;
            memcpy(u->body + u->len, data, *data_size);
            u->len += *data_size;
        }
        *data_size = 0;
        return MHD_YES;
    }
    if (getter && get) return serve_get(sv, c, url);
    if (getter || (kind >= 0 && !post))
        return fail(c, 405, "invalid_request_error", NULL, getter ? "use GET" : "use POST");
    if (kind < 0) return fail(c, 404, "invalid_request_error", NULL, "no such endpoint");
    if (u->too_big) {
        char msg[96];
        snprintf(msg, sizeof(msg), "the body is over %zu bytes (--max-body)", sv->max_body);
        return fail(c, 413, "invalid_request_error", NULL, msg);
    }
    if (sv->stopping) return fail(c, 503, "unavailable", NULL, "the server is shutting down");
    srv_request r;
    srv_error e;
    if (srv_request_parse(kind, u->body ? u->body : "", u->len, sv->info.n_vocab, &r, &e)) {
        srv_request_free(&r);
        return send_error(c, &e);
    }
    /* A request for another model is not answered by this one (OpenAI:
     * 404 model_not_found), so that a client pointed at the wrong server
     * learns it. */
    if (r.model && strcmp(r.model, sv->name)) {
        char msg[512];
        snprintf(msg, sizeof(msg), "no model '%.200s' here; this server serves '%.200s'", r.model,
                 sv->name);
        srv_request_free(&r);
        return fail(c, 404, "invalid_request_error", "model", msg);
    }
    if (kind == SRV_TOKENIZE) return serve_tokenize(sv, c, &r);
    if (kind == SRV_DETOKENIZE) return serve_detokenize(sv, c, &r);
    return serve_generate(sv, c, &r, !strcmp(version, MHD_HTTP_VERSION_1_1));
}

/* libmicrohttpd calls this for a request's headers, for each piece of its
 * body, and once more when the body is in; the call that queues the answer
 * counts the request in /metrics. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *data_size, void **con_cls) {
    server *sv = cls;
    answered = 0;
    const enum MHD_Result rc = route(sv, c, url, method, version, data, data_size, con_cls);
    if (answered) srv_metrics_request(&sv->metrics, srv_metrics_endpoint(url), answered);
    return rc;
}

/* libmicrohttpd's own messages: while the daemon starts, the server's one
 * line says what failed (a port in use, say) and these would repeat it;
 * once it listens, they are shown, marked as the library's. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    server *sv = cls;
    if (!__atomic_load_n(&sv->listening, __ATOMIC_SEQ_CST)) {
        vsnprintf(sv->start_msg, sizeof(sv->start_msg), fmt, ap);
        return;
    }
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    /* One write a message, so that threads' lines do not interleave. */
    fprintf(stderr, "ds4ref-server: libmicrohttpd: %s%s", line,
            line[0] && line[strlen(line) - 1] == '\n' ? "" : "\n");
}

/* Connections counted from accept to close (MHD_OPTION_NOTIFY_CONNECTION). */
static void connection(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe) {
    (void)c, (void)socket_context;
    server *sv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) __atomic_add_fetch(&sv->conns, 1, __ATOMIC_SEQ_CST);
    else __atomic_sub_fetch(&sv->conns, 1, __ATOMIC_SEQ_CST);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    server *sv = cls;
    upload *u = *con_cls;
    if (!u) return;
    __atomic_sub_fetch(&sv->open, 1, __ATOMIC_SEQ_CST);
    free(u->body);
    free(u);
    *con_cls = NULL;
}

/* ---- the program -------------------------------------------------------- */

/* The model file's SHA-256, on a thread of its own: a model of 150 GB takes
 * a minute to read, and the server answers meanwhile (/v1/models gives the
 * digest once it is known).  A folder (a checkpoint) has none. */
static void *digest(void *arg) {
    server *sv = arg;
    char hex[65];
    ds4ref_error e;
    if (ds4ref_file_sha256(sv->root, hex, &sv->digest_cancel, &e) == 0) {
        memcpy(sv->model_sha256 + 1, hex + 1, 64);
        __atomic_store_n(&sv->model_sha256[0], hex[0], __ATOMIC_RELEASE);
    }
    return NULL;
}

static void usage_text(FILE *f) {
    fprintf(f,
            "usage: ds4ref-server -m MODEL [--mtp FILE] [--host ADDR] [--port N] [-c N]\n"
            "                     [-t N] [--parallel N] [--queue N] [--max-body BYTES]\n"
            "                     [--timeout S] [--max-connections N]\n"
            "                     [--qat on|off] [--chunk N] [--name NAME]\n"
            "                     [--chat-release v4|0731]\n"
            "\n"
            "An OpenAI-compatible endpoint over ds4ref: /v1/completions,\n"
            "/v1/chat/completions, /v1/models, /health, /version, /metrics,\n"
            "/tokenize, /detokenize, /tokenizer_info.\n"
            "Requests in flight are decoded together, and no bit of a response\n"
            "depends on what else is in flight (docs/SERVER.md).\n"
            "\n"
            "  -m, --model PATH   a DS4 GGUF or a checkpoint's folder\n"
            "  --mtp FILE         the MTP head (loaded; the server decodes without drafts)\n"
            "  --host ADDR        IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N           port (default 8080; 0: any free one)\n"
            "  -c, --ctx N        positions a request may use, prompt and output (default:\n"
            "                     the model's, at most 32768, as ds4ref's; at most the model's)\n"
            "  -t, --threads N    threads of each forward pass\n"
            "  --parallel N       requests decoded together (default 16)\n"
            "  --queue N          requests waiting beyond them before 429 (default 64)\n"
            "  --max-body BYTES   largest request body (default 1048576; else 413)\n"
            "  --timeout S        a connection idle this many seconds is closed: keep-alive\n"
            "                     clients, and clients that stop sending (default 60)\n"
            "  --max-connections N  connections open (idle ones too) beyond which a request\n"
            "                     is answered 503 at once (default 256, at most 900)\n"
            "  --qat on|off       the official FP8/FP4 roundings (default on)\n"
            "  --chunk N          prompt tokens of a row a forward pass\n"
            "  --name NAME        the model's id in responses (default: the file's name)\n"
            "  --chat-release R   the chat encoder: v4 (default, DeepSeek-V4-Flash: efforts\n"
            "                     high and max) or 0731 (low, the default, high and max)\n"
            "  -h, --help, --version\n"
            "\n"
            "It prints 'ds4ref-server: listening on http://ADDR:PORT' when ready and\n"
            "stops on SIGINT or SIGTERM, cancelling what is in flight, with status 0.\n");
}

enum { O_HELP, O_VERSION, O_MODEL, O_MTP, O_HOST, O_PORT, O_CTX, O_THREADS, O_PARALLEL, O_QUEUE,
       O_BODY, O_QAT, O_CHUNK, O_NAME, O_RELEASE, O_TIMEOUT, O_MAX_CONNS };

static const ds4ref_option options[] = {
    {"-h", O_HELP, false}, {"--help", O_HELP, false}, {"--version", O_VERSION, false},
    {"-m", O_MODEL, true}, {"--model", O_MODEL, true}, {"--mtp", O_MTP, true},
    {"--host", O_HOST, true}, {"--port", O_PORT, true}, {"--ctx", O_CTX, true},
    {"-c", O_CTX, true}, {"-t", O_THREADS, true}, {"--threads", O_THREADS, true}, {"--parallel", O_PARALLEL, true},
    {"--queue", O_QUEUE, true}, {"--max-body", O_BODY, true}, {"--qat", O_QAT, true},
    {"--timeout", O_TIMEOUT, true}, {"--max-connections", O_MAX_CONNS, true},
    {"--chunk", O_CHUNK, true}, {"--name", O_NAME, true}, {"--chat-release", O_RELEASE, true},
};

/* A decimal in [lo, hi] for option `name`. */
static int number(const char *name, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "ds4ref-server: %s expects an integer in [%lld, %lld], got '%s'\n", name,
                lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    ds4ref_wait_policy(argv);
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    const char *host = "127.0.0.1", *name = NULL;
    int release = DS4REF_CHAT_V4;
    long long port = 8080, ctx = 0, threads = 0, parallel = 16, queue = 64, body = 1 << 20,
              chunk = 0, timeout = 60, max_conns = 256;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int id = ds4ref_option_next("ds4ref-server", options, sizeof(options) / sizeof(options[0]),
                                    argc, argv, &i, &v);
        int bad = 0;
        switch (id) {
        case -1: return DS4REF_E_ARG;
        case O_HELP: usage_text(stdout); return 0;
        case O_VERSION: printf("ds4ref-server %s\n", ds4ref_version()); return 0;
        case O_MODEL: mo.path = v; break;
        case O_MTP: mo.mtp_path = v; break;
        case O_HOST: host = v; break;
        case O_PORT: bad = number("--port", v, 0, 65535, &port); break;
        case O_CTX: bad = number("--ctx", v, 1, 1 << 20, &ctx); break;
        case O_THREADS: bad = number("-t", v, 1, 4096, &threads); break;
        case O_PARALLEL: bad = number("--parallel", v, 1, 1024, &parallel); break;
        case O_QUEUE: bad = number("--queue", v, 0, 1 << 20, &queue); break;
        case O_BODY: bad = number("--max-body", v, 1024, 1LL << 30, &body); break;
        case O_TIMEOUT: bad = number("--timeout", v, 1, 86400, &timeout); break;
        /* libmicrohttpd's select() takes descriptors below FD_SETSIZE (1024)
         * only: the slack and the server's own files stay under it. */
        case O_MAX_CONNS: bad = number("--max-connections", v, 1, 900, &max_conns); break;
        case O_CHUNK: bad = number("--chunk", v, 1, 1 << 20, &chunk); break;
        case O_NAME: name = v; break;
        case O_RELEASE:
            if (strcmp(v, "v4") && strcmp(v, "0731")) {
                fprintf(stderr, "ds4ref-server: --chat-release expects v4 or 0731, got '%s'\n", v);
                return DS4REF_E_ARG;
            }
            release = strcmp(v, "0731") ? DS4REF_CHAT_V4 : DS4REF_CHAT_V4_0731;
            break;
        case O_QAT:
            if (strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr, "ds4ref-server: --qat expects on or off, got '%s'\n", v);
                return DS4REF_E_ARG;
            }
            mo.qat = !strcmp(v, "on");
            break;
        }
        if (bad) return DS4REF_E_ARG;
    }
    if (!mo.path) {
        fprintf(stderr, "ds4ref-server: no model: give -m MODEL (see --help)\n");
        return DS4REF_E_ARG;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "ds4ref-server: --host expects an IPv4 address, got '%s'\n", host);
        return DS4REF_E_ARG;
    }
    if (threads) ds4ref_set_threads((int)threads);
    /* SIGINT and SIGTERM go to sigwait below, not to whichever thread: every
     * thread started from here on inherits the mask.  A client that leaves
     * mid-write must not kill the server. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    server sv = {.max_body = (size_t)body, .created = (long long)time(NULL),
                 .max_conns = (int)max_conns};
    ds4ref_error err;
    mo.max_batch = 256;
    if (ds4ref_model_open(&mo, &sv.m, &err)) {
        fprintf(stderr, "ds4ref-server: %s\n", err.message);
        return err.code;
    }
    ds4ref_model_get_info(sv.m, &sv.info);
    if (!sv.info.has_tokenizer) {
        fprintf(stderr, "ds4ref-server: %s has no tokenizer; the server needs one\n", mo.path);
        ds4ref_model_close(sv.m);
        return DS4REF_E_MODEL;
    }
    /* ds4ref's default context (ds4_generate_session_opts): the model's,
     * capped so that a 1M-token model does not promise what a row's state
     * would not hold; 4096 when the model declares none. */
    const uint32_t declared = sv.info.context_length;
    sv.ctx = ctx ? (uint32_t)ctx : !declared ? 4096 : declared < 32768 ? declared : 32768;
    if (declared && sv.ctx > declared) sv.ctx = declared;
    const char *base = strrchr(mo.path, '/');
    sv.name = name ? name : base && base[1] ? base + 1 : mo.path;
    sv.release = release;
    if (!realpath(mo.path, sv.root)) snprintf(sv.root, sizeof(sv.root), "%s", mo.path);
    srv_metrics_init(&sv.metrics);
    char version[128], model[256], kernels[128];
    srv_metrics_label(ds4ref_version(), version, sizeof(version));
    srv_metrics_label(sv.name, model, sizeof(model));
    srv_metrics_label(ds4ref_kernels(), kernels, sizeof(kernels));
    snprintf(sv.info_labels, sizeof(sv.info_labels),
             "version=\"%s\",model_name=\"%s\",kernels=\"%s\"", version, model, kernels);

    srv_sched_options so = {(uint32_t)parallel, (uint32_t)queue, (uint32_t)chunk, (int)threads};
    char msg[256];
    if (srv_sched_start(sv.m, &so, &sv.sched, msg, sizeof(msg))) {
        fprintf(stderr, "ds4ref-server: %s\n", msg);
        srv_metrics_free(&sv.metrics);
        ds4ref_model_close(sv.m);
        return DS4REF_E_NOMEM;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
            MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, handle, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, &sv,
        MHD_OPTION_NOTIFY_COMPLETED, completed, &sv, MHD_OPTION_NOTIFY_CONNECTION, connection,
        &sv, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout,
        /* Past max_conns requests get a 503 from handle(); MHD itself
         * refuses (closes) only past this slack, kept for those answers. */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(max_conns + SERVER_CONN_SLACK), MHD_OPTION_END);
    if (!d) {
        /* errno is the bind's when that failed; otherwise libmicrohttpd's
         * own last message says why. */
        const int why = errno;
        size_t k = strlen(sv.start_msg);
        while (k && sv.start_msg[k - 1] == '\n') sv.start_msg[--k] = '\0';
        fprintf(stderr, "ds4ref-server: cannot listen on %s:%lld: %s\n", host, port,
                why ? strerror(why) : sv.start_msg[0] ? sv.start_msg : "libmicrohttpd did not start");
        srv_sched_stop(sv.sched);
        srv_sched_free(sv.sched);
        srv_metrics_free(&sv.metrics);
        ds4ref_model_close(sv.m);
        return DS4REF_E_IO;
    }
    __atomic_store_n(&sv.listening, 1, __ATOMIC_SEQ_CST);
    struct stat sb;
    const int digesting = stat(sv.root, &sb) == 0 && S_ISREG(sb.st_mode) &&
                          pthread_create(&sv.digest_thread, NULL, digest, &sv) == 0;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "ds4ref-server: listening on http://%s:%u (model %s, kernels %s)\n", host,
            di ? di->port : (unsigned)port, sv.name, ds4ref_kernels());
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "ds4ref-server: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    /* Stop accepting, end what is in flight, let each connection answer
     * (its jobs have ended), then free. */
    sv.stopping = 1;
    const MHD_socket listener = MHD_quiesce_daemon(d);
    if (listener != MHD_INVALID_SOCKET) close(listener);
    srv_sched_stop(sv.sched);
    /* A request whose jobs were just cancelled is answered 503 by its
     * connection's thread; stopping the daemon before that answer is sent
     * would close its socket under it.  At most 10 s, for a client that
     * never finishes sending. */
    for (int i = 0; i < 1000 && __atomic_load_n(&sv.open, __ATOMIC_SEQ_CST) > 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    MHD_stop_daemon(d);
    sv.digest_cancel = 1;
    if (digesting) pthread_join(sv.digest_thread, NULL);
    srv_sched_free(sv.sched);
    srv_metrics_free(&sv.metrics);
    ds4ref_model_close(sv.m);
    fprintf(stderr, "ds4ref-server: stopped\n");
    return 0;
}
