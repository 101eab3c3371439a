/* ds4ref-server: the reference as an OpenAI-compatible HTTP endpoint, over
 * the public API, with libmicrohttpd for HTTP and jansson for JSON.
 *
 *   ds4ref-server -m MODEL [--mtp F] [--host 127.0.0.1] [--port 8080]
 *                 [--ctx N] [-t N] [--parallel N] [--queue N]
 *
 * Requests are parsed and checked in server_request.c; every request in
 * flight is a row that server_sched.c decodes with all the others, one
 * shared forward pass at a time.  This file is the HTTP side: routing,
 * prompts into tokens, jobs into OpenAI responses (whole or as server-sent
 * events), clients that leave, and shutdown.  docs/SERVER.md says what
 * each endpoint takes and returns. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
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
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "ds4ref.h"

#include "options.h"
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
} server;

/* ---- responses ---------------------------------------------------------- */

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *body) {
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
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

static json_t *byte_list(const server *sv, int32_t id) {
    char *b = NULL;
    size_t n = 0;
    ds4ref_error e;
    json_t *a = json_array();
    if (ds4ref_detokenize(sv->m, &id, 1, &b, &n, &e) == 0)
        for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((uint8_t)b[i]));
    ds4ref_free(b);
    return a;
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
 * context: the prompt must fit, and max_tokens is cut to the room left
 * (the last token is never evaluated). */
static srv_job *new_job(const server *sv, const srv_request *r, int32_t *ids, size_t n,
                        srv_error *e) {
    if (n == 0) {
        free(ids);
        srv_error_set(e, 400, "invalid_request_error", "prompt", "the prompt has no tokens");
        return NULL;
    }
    if (n > sv->ctx) {
        free(ids);
        srv_error_set(e, 400, "invalid_request_error", r->kind == SRV_CHAT ? "messages" : "prompt",
                      "the prompt has %zu tokens, more than the context of %u (--ctx)", n, sv->ctx);
        return NULL;
    }
    srv_job *j = calloc(1, sizeof(*j));
    if (!j) {
        free(ids);
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    const uint64_t room = sv->ctx - n + 1;
    const uint64_t want = r->max_tokens > 0 ? (uint64_t)r->max_tokens : room;
    j->prompt = ids;
    j->n_prompt = n;
    j->max_tokens = (uint32_t)(want < room ? want : room);
    j->temperature = r->temperature;
    j->seed = r->seed;
    j->top = r->logprobs > 0 ? (uint32_t)r->logprobs : 0;
    j->prompt_logprobs = r->echo && r->logprobs >= 0;
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

/* Is the client gone?  The socket reads end of file (or fails) while the
 * request is being served. */
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {ci->connect_fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return 1;
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- completions and chat, whole -------------------------------------- */

/* The logprobs object of a completion choice: the prompt's tokens first
 * when echoed, then the generated ones. */
static json_t *completion_logprobs(const server *sv, const srv_request *r, const srv_job *j) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = 0;
    const size_t np = j->prompt_logprobs ? j->n_prompt : 0;
    for (size_t i = 0; i < np + j->n_steps; i++) {
        const srv_step *st = i < np ? &j->prompt_steps[i] : &j->steps[i - np];
        json_t *name = token_name(sv, st->id, r->token_ids);
        json_array_append_new(offs, json_integer((json_int_t)off));
        char *b = NULL;
        size_t nb = 0;
        ds4ref_error e;
        if (!ds4ref_detokenize(sv->m, &st->id, 1, &b, &nb, &e)) off += nb;
        ds4ref_free(b);
        json_array_append_new(toks, name);
        json_array_append_new(lps, i == 0 && np ? json_null() : json_real(st->logprob));
        if (i == 0 && np) {
            json_array_append_new(tops, json_null());
            continue;
        }
        json_t *d = json_object();
        for (uint32_t k = 0; k < st->n_top; k++) {
            json_t *kn = token_name(sv, st->top[k].id, r->token_ids);
            /* Keys by text can collide (two ids, one string): the first,
             * most likely, is kept, as an object holds one. */
            if (!json_object_get(d, json_string_value(kn)))
                json_object_set_new(d, json_string_value(kn), json_real(st->top[k].logprob));
            json_decref(kn);
        }
        json_array_append_new(tops, d);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
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

/* Chat: thinking text (before </think>) apart from the answer. */
static void split_thinking(const srv_job *j, int thinking, size_t *think_len, size_t *answer_at) {
    *think_len = 0;
    *answer_at = 0;
    if (!thinking) return;
    const char *end = j->text ? strstr(j->text, "</think>") : NULL;
    if (!end) {
        *think_len = j->text_len;
        *answer_at = j->text_len;
        return;
    }
    *think_len = (size_t)(end - j->text);
    *answer_at = *think_len + strlen("</think>");
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
    size_t tl, at;
    split_thinking(j, r->thinking, &tl, &at);
    json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                            utf8_text(j->text ? j->text + at : "", j->text_len - at));
    if (r->thinking)
        json_object_set_new(msg, "reasoning_content",
                            utf8_text(j->text ? j->text : "", tl));
    return json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs",
                     r->logprobs >= 0 ? chat_logprobs(sv, j) : json_null(), "finish_reason",
                     j->finish);
}

static json_t *whole_response(const server *sv, const srv_request *r, srv_job *const *jobs,
                              size_t n) {
    json_t *choices = json_array();
    size_t np = 0, nc = 0;
    for (size_t i = 0; i < n; i++) {
        const srv_job *j = jobs[i];
        np += j->n_prompt;
        nc += j->n_steps;
        if (r->kind == SRV_CHAT) {
            json_array_append_new(choices, chat_choice(sv, r, j));
            continue;
        }
        json_t *text = r->echo ? prompt_text(sv, j, j->text ? j->text : "", j->text_len)
                               : utf8_text(j->text ? j->text : "", j->text_len);
        json_array_append_new(choices, json_pack("{s:I, s:o, s:o, s:s}", "index", (json_int_t)i,
                                                 "text", text, "logprobs",
                                                 r->logprobs >= 0 ? completion_logprobs(sv, r, j)
                                                                  : json_null(),
                                                 "finish_reason", j->finish));
    }
    static uint64_t counter;
    const uint64_t id = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    return json_pack("{s:o, s:s, s:I, s:s, s:o, s:o}", "id",
                     json_sprintf("%s-%" PRIu64, r->kind == SRV_CHAT ? "chatcmpl" : "cmpl", id),
                     "object", r->kind == SRV_CHAT ? "chat.completion" : "text_completion",
                     "created", (json_int_t)time(NULL), "model", sv->name, "choices", choices,
                     "usage", usage(np, nc));
}

/* Wait for every job, the client watched; then answer. */
static enum MHD_Result serve_whole(server *sv, struct MHD_Connection *c, const srv_request *r,
                                   srv_job **jobs, size_t n) {
    for (size_t i = 0; i < n; i++)
        while (!srv_sched_wait(sv->sched, jobs[i], UINT32_MAX, 100, NULL, NULL))
            if (client_gone(c)) {
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
    else
        rc = send_json(c, MHD_HTTP_OK, whole_response(sv, r, jobs, n));
    for (size_t i = 0; i < n; i++) srv_job_free(sv->sched, jobs[i]);
    return rc;
}

/* ---- streaming (server-sent events) ------------------------------------ */

typedef struct stream {
    server *sv;
    struct MHD_Connection *c;
    srv_request r;
    srv_job *jobs[SRV_MAX_PROMPTS];
    size_t n;
    uint32_t seen[SRV_MAX_PROMPTS];       /* steps sent */
    size_t sent_text[SRV_MAX_PROMPTS];    /* bytes of text sent */
    int ended[SRV_MAX_PROMPTS], role_sent, done;
    char *out;                            /* formatted, not yet handed over */
    size_t out_len, out_off;
    /* a copy of a job's progress, taken under the scheduler's lock */
    srv_step *steps;
    uint32_t n_steps, cap;
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
    if (j->text_len + 1 > st->text_cap) {
        char *p = realloc(st->text, j->text_len + 1);
        if (!p) return;
        st->text = p;
        st->text_cap = j->text_len + 1;
    }
    memcpy(st->text, j->text ? j->text : "", j->text_len);
    st->text_len = j->text_len;
    st->finish = j->finish;
    snprintf(st->error, sizeof(st->error), "%s", j->error);
}

static void emit(stream *st, json_t *chunk) {
    char *text = chunk ? json_dumps(chunk, JSON_COMPACT) : NULL;
    if (chunk) json_decref(chunk);
    const char *body = text ? text : "[DONE]";
    const size_t add = strlen(body) + 8;
    char *p = realloc(st->out, st->out_len + add + 1);
    if (p) {
        st->out = p;
        st->out_len += (size_t)sprintf(st->out + st->out_len, "data: %s\n\n", body);
    }
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

/* The chunks for job i's new steps (one a token) and, when it has ended,
 * its last. */
static void job_chunks(stream *st, size_t i) {
    const srv_request *r = &st->r;
    const int chat = r->kind == SRV_CHAT;
    const int ended = st->finish != NULL;
    size_t upto = st->text_len;
    if (!ended) upto = upto > holdback(r) ? upto - holdback(r) : 0;
    if (!ended && upto > st->sent_text[i])
        upto = st->sent_text[i] + whole_chars(st->text + st->sent_text[i], upto - st->sent_text[i]);
    while (st->seen[i] < st->n_steps || (ended && !st->ended[i])) {
        const int last_step = st->seen[i] + 1 >= st->n_steps;
        size_t cut = last_step ? upto : st->sent_text[i];
        if (cut < st->sent_text[i]) cut = st->sent_text[i];
        json_t *text = utf8_text(st->text + st->sent_text[i], cut - st->sent_text[i]);
        st->sent_text[i] = cut;
        json_t *lp = json_null();
        if (r->logprobs >= 0 && st->seen[i] < st->n_steps) {
            srv_job view = *st->jobs[i];
            view.steps = st->steps + st->seen[i];
            view.n_steps = 1;
            view.prompt_logprobs = 0;
            lp = chat ? chat_logprobs(st->sv, &view) : completion_logprobs(st->sv, r, &view);
        }
        if (st->seen[i] < st->n_steps) st->seen[i]++;
        const int final = ended && st->seen[i] >= st->n_steps;
        json_t *choice;
        if (chat) {
            json_t *delta = json_pack("{s:o}", "content", text);
            if (!st->role_sent) json_object_set_new(delta, "role", json_string("assistant"));
            st->role_sent = 1;
            choice = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)i, "delta", delta,
                               "logprobs", lp, "finish_reason",
                               final ? json_string(st->finish) : json_null());
        } else {
            choice = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)i, "text", text,
                               "logprobs", lp, "finish_reason",
                               final ? json_string(st->finish) : json_null());
        }
        emit(st, json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", chat ? "chatcmpl-stream" : "cmpl-stream",
                           "object", chat ? "chat.completion.chunk" : "text_completion", "created",
                           (json_int_t)time(NULL), "model", st->sv->name, "choices", choice));
        if (final) st->ended[i] = 1;
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
            srv_sched_wait(st->sv->sched, st->jobs[i], st->seen[i], 50, copy_progress, st);
            if (st->error[0] || (st->finish && !strcmp(st->finish, "cancelled"))) {
                json_t *e = json_pack("{s:{s:s, s:s}}", "error", "message",
                                      st->error[0] ? st->error : "the server is shutting down",
                                      "type", st->error[0] ? "server_error" : "unavailable");
                emit(st, e);
                st->ended[i] = 1;
                continue;
            }
            job_chunks(st, i);
        }
        if (open == 0) {
            emit(st, NULL);
            st->done = 1;
        } else if (st->out_len == 0 && client_gone(st->c)) {
            return MHD_CONTENT_READER_END_WITH_ERROR;
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
    srv_request_free(&st->r);
    free(st->out);
    free(st->steps);
    free(st->text);
    free(st);
}

/* ---- routing ----------------------------------------------------------- */

static enum MHD_Result serve_generate(server *sv, struct MHD_Connection *c, srv_request *r) {
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
        enum MHD_Result rc = serve_whole(sv, c, r, jobs, n);
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
    srv_request_free(r);
    if (rc) return fail(c, 400, "invalid_request_error", "prompt", de.message);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
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

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *data_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    /* HEAD is GET without the body, which libmicrohttpd leaves out. */
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    int kind = -1;
    for (size_t i = 0; i < sizeof(posts) / sizeof(posts[0]); i++)
        if (!strcmp(url, posts[i].url)) kind = posts[i].kind;
    const int getter = !strcmp(url, "/health") || !strcmp(url, "/v1/models") ||
                       !strcmp(url, "/version") || !strncmp(url, "/v1/models/", 11);
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
    return serve_generate(sv, c, &r);
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

static void usage_text(FILE *f) {
    fprintf(f,
            "usage: ds4ref-server -m MODEL [--mtp FILE] [--host ADDR] [--port N] [-c N]\n"
            "                     [-t N] [--parallel N] [--queue N] [--max-body BYTES]\n"
            "                     [--timeout S] [--max-connections N]\n"
            "                     [--qat on|off] [--chunk N] [--name NAME]\n"
            "                     [--chat-release v4|0731]\n"
            "\n"
            "An OpenAI-compatible endpoint over ds4ref: /v1/completions,\n"
            "/v1/chat/completions, /v1/models, /health, /tokenize, /detokenize.\n"
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
    srv_sched_options so = {(uint32_t)parallel, (uint32_t)queue, (uint32_t)chunk, (int)threads};
    char msg[256];
    if (srv_sched_start(sv.m, &so, &sv.sched, msg, sizeof(msg))) {
        fprintf(stderr, "ds4ref-server: %s\n", msg);
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
        ds4ref_model_close(sv.m);
        return DS4REF_E_IO;
    }
    __atomic_store_n(&sv.listening, 1, __ATOMIC_SEQ_CST);
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
    srv_sched_free(sv.sched);
    ds4ref_model_close(sv.m);
    fprintf(stderr, "ds4ref-server: stopped\n");
    return 0;
}
