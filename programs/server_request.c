/* ds4ref-server's request bodies (server_request.h). */
#include "server_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_error_set(srv_error *e, int status, const char *type, const char *param,
                  const char *fmt, ...) {
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -1;
}

static int bad(srv_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(srv_error *e, const char *param, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return srv_error_set(e, 400, "invalid_request_error", param, "%s", msg);
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A string used as a name (a role, a model, a level).  Bodies may carry
 * JSON's \u0000 in text, which keeps its length; a name holding one would
 * compare equal to its first part, so it is no name. */
static bool plain_string(const json_t *v) {
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

/* An optional boolean field (absent or null: def). */
static int get_bool(json_t *o, const char *key, int def, int *out, srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return bad(e, key, "'%s' must be a boolean, not %s", key, type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* An optional integer field in [lo, hi] (absent or null: def). */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long def,
                   long long *out, srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) return bad(e, key, "'%s' must be an integer, not %s", key, type_name(v));
    const long long x = json_integer_value(v);
    if (x < lo || x > hi) return bad(e, key, "'%s' must be in [%lld, %lld], not %lld", key, lo, hi, x);
    *out = x;
    return 0;
}

/* An optional number field in [lo, hi] (absent or null: def). */
static int get_num(json_t *o, const char *key, double lo, double hi, double def, double *out,
                   srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return bad(e, key, "'%s' must be a number, not %s", key, type_name(v));
    const double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return bad(e, key, "'%s' must be in [%g, %g], not %g", key, lo, hi, x);
    *out = x;
    return 0;
}

/* Token ids: an array of integers in [0, n_vocab). */
static int get_ids(json_t *a, const char *param, uint32_t n_vocab, srv_prompt *p, srv_error *e) {
    const size_t n = json_array_size(a);
    p->ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!p->ids) return srv_error_set(e, 500, "server_error", param, "out of memory");
    p->n_ids = n;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v))
            return bad(e, param, "'%s': token %zu must be an integer id, not %s", param, i, type_name(v));
        const long long id = json_integer_value(v);
        if (id < 0 || id >= (long long)n_vocab)
            return bad(e, param, "'%s': token %zu is %lld, outside the vocabulary [0, %u)", param,
                       i, id, n_vocab);
        p->ids[i] = (int32_t)id;
    }
    return 0;
}

static int add_prompt(srv_request *r, srv_error *e) {
    if (r->n_prompts == SRV_MAX_PROMPTS)
        return bad(e, "prompt", "at most %d prompts a request", SRV_MAX_PROMPTS);
    r->n_prompts++;
    return 0;
}

/* "prompt": a string, token ids, or an array of either. */
static int get_prompts(json_t *o, uint32_t n_vocab, srv_request *r, srv_error *e) {
    json_t *p = json_object_get(o, "prompt");
    if (!p) return bad(e, "prompt", "'prompt' is required");
    if (json_is_string(p)) {
        if (add_prompt(r, e)) return -1;
        r->prompts[0].text = json_string_value(p);
        r->prompts[0].len = json_string_length(p);
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return bad(e, "prompt", "'prompt' must be a string, token ids or a non-empty array of "
                   "them, not %s", json_is_array(p) ? "an empty array" : type_name(p));
    if (json_is_integer(json_array_get(p, 0))) {
        if (add_prompt(r, e)) return -1;
        return get_ids(p, "prompt", n_vocab, &r->prompts[0], e);
    }
    for (size_t i = 0; i < json_array_size(p); i++) {
        json_t *v = json_array_get(p, i);
        if (add_prompt(r, e)) return -1;
        srv_prompt *sp = &r->prompts[r->n_prompts - 1];
        if (json_is_string(v)) {
            sp->text = json_string_value(v);
            sp->len = json_string_length(v);
        } else if (json_is_array(v)) {
            if (get_ids(v, "prompt", n_vocab, sp, e)) return -1;
        } else {
            return bad(e, "prompt", "'prompt' %zu must be a string or token ids, not %s", i,
                       type_name(v));
        }
    }
    return 0;
}

/* "stop": a string or up to SRV_MAX_STOP of them; empty strings ignored. */
static int get_stop(json_t *o, srv_request *r, srv_error *e) {
    json_t *s = json_object_get(o, "stop");
    if (!s || json_is_null(s)) return 0;
    if (json_is_string(s)) {
        if (json_string_length(s)) {
            r->stop[0] = json_string_value(s);
            r->stop_len[r->n_stop++] = json_string_length(s);
        }
        return 0;
    }
    if (!json_is_array(s) || json_array_size(s) > SRV_MAX_STOP)
        return bad(e, "stop", "'stop' must be a string or an array of at most %d strings",
                   SRV_MAX_STOP);
    for (size_t i = 0; i < json_array_size(s); i++) {
        json_t *v = json_array_get(s, i);
        if (!json_is_string(v)) return bad(e, "stop", "'stop' %zu must be a string, not %s", i, type_name(v));
        if (!json_string_length(v)) continue;
        r->stop[r->n_stop] = json_string_value(v);
        r->stop_len[r->n_stop++] = json_string_length(v);
    }
    return 0;
}

/* Text of a message's "content": a string, or an array of {"type": "text",
 * "text": ...} parts, which must then be one part (the template takes
 * one string a turn). */
static int get_content(json_t *m, size_t i, ds4ref_chat_message *out, srv_error *e) {
    json_t *c = json_object_get(m, "content");
    if (json_is_array(c) && json_array_size(c) == 1) {
        json_t *part = json_array_get(c, 0);
        json_t *t = json_object_get(part, "type");
        if (!plain_string(t) || strcmp(json_string_value(t), "text"))
            return bad(e, "messages", "message %zu: only text content is supported", i);
        c = json_object_get(part, "text");
    }
    if (!json_is_string(c))
        return bad(e, "messages", "message %zu: 'content' must be a string (or one text part)", i);
    out->content = json_string_value(c);
    out->len = json_string_length(c);
    return 0;
}

static int get_messages(json_t *o, srv_request *r, srv_error *e) {
    json_t *ms = json_object_get(o, "messages");
    if (!json_is_array(ms) || json_array_size(ms) == 0)
        return bad(e, "messages", "'messages' must be a non-empty array of messages");
    if (json_array_size(ms) > SRV_MAX_MESSAGES)
        return bad(e, "messages", "at most %d messages a request", SRV_MAX_MESSAGES);
    static const char *const roles[] = {"system", "user", "assistant"};
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *m = json_array_get(ms, i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !plain_string(role))
            return bad(e, "messages", "message %zu must be an object with a string 'role' (no "
                       "NUL character)", i);
        int k = 0;
        while (k < 3 && strcmp(json_string_value(role), roles[k])) k++;
        if (k == 3)
            return bad(e, "messages", "message %zu: role '%s' is not system, user or assistant", i,
                       json_string_value(role));
        r->msgs[i].role = k;
        if (get_content(m, i, &r->msgs[i], e)) return -1;
        r->n_msgs++;
    }
    return 0;
}

/* Sampling parameters that would change the output and that ds4ref does
 * not implement are refused rather than ignored: a reference that quietly
 * dropped them would be compared against as if it had used them. */
static int refuse_unsupported(json_t *o, srv_error *e) {
    static const struct { const char *key; double neutral; } knobs[] = {
        {"top_p", 1}, {"frequency_penalty", 0}, {"presence_penalty", 0},
        {"repetition_penalty", 1}, {"min_p", 0}, {"top_k", -1},
    };
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
        json_t *v = json_object_get(o, knobs[i].key);
        if (!v || json_is_null(v)) continue;
        if (!json_is_number(v) || json_number_value(v) != knobs[i].neutral)
            return bad(e, knobs[i].key, "'%s' is not supported (only %g, its neutral value): "
                       "ds4ref samples from the full distribution at 'temperature'",
                       knobs[i].key, knobs[i].neutral);
    }
    json_t *lb = json_object_get(o, "logit_bias");
    if (lb && !json_is_null(lb) && !(json_is_object(lb) && json_object_size(lb) == 0))
        return bad(e, "logit_bias", "'logit_bias' is not supported");
    long long n;
    if (get_int(o, "n", 1, 1, 1, &n, e)) {
        snprintf(e->message, sizeof(e->message), "'n' must be 1: one completion a prompt");
        return -1;
    }
    return 0;
}

/* "model", which every endpoint takes: the server checks it names its model. */
static int get_model(json_t *o, srv_request *r, srv_error *e) {
    json_t *m = json_object_get(o, "model");
    if (m && !json_is_null(m) && !json_is_string(m))
        return bad(e, "model", "'model' must be a string, not %s", type_name(m));
    if (m && json_is_string(m) && !plain_string(m))
        return bad(e, "model", "'model' must not contain a NUL character");
    r->model = m && json_is_string(m) ? json_string_value(m) : NULL;
    return 0;
}

/* The fields each endpoint reads (lists end with NULL): the generation
 * endpoints' shared ones, then each one's own. */
static const char *const generation_fields[] = {
    "model", "max_tokens", "max_completion_tokens", "temperature", "seed", "stop", "stream",
    "ignore_eos", "return_tokens_as_token_ids", "n", "top_p", "frequency_penalty",
    "presence_penalty", "repetition_penalty", "min_p", "top_k", "logit_bias", "user",
    "stream_options", "prompt_logprobs", NULL};
static const char *const completion_fields[] = {"prompt", "logprobs", "echo", NULL};
static const char *const chat_fields[] = {"messages", "logprobs", "top_logprobs", "thinking",
                                          "chat_template_kwargs", "reasoning_effort", NULL};
static const char *const tokenize_fields[] = {"model", "prompt", "messages", "special",
                                              "add_special_tokens", NULL};
static const char *const detokenize_fields[] = {"model", "tokens", NULL};

static bool listed(const char *const *list, const char *key) {
    for (size_t i = 0; list && list[i]; i++)
        if (!strcmp(list[i], key)) return true;
    return false;
}

/* Every field of the body is one the endpoint reads (in own, or in shared
 * when not NULL): what it does not implement is refused by name (OpenAI's
 * best_of, suffix, tools, response_format, stream_options, vLLM's
 * prompt_logprobs, ...), never ignored. */
static int only_known(json_t *o, const char *const *own, const char *const *shared,
                      srv_error *e) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (!listed(own, key) && !listed(shared, key))
            return bad(e, key, "'%.100s' is not supported by ds4ref-server (docs/SERVER.md lists "
                       "the fields each endpoint takes)", key);
    }
    return 0;
}

/* OpenAI's "stream_options", which only a stream takes (OpenAI and vLLM
 * refuse it otherwise): "include_usage" adds a last chunk with the usage.
 * vLLM's "continuous_usage_stats" is not implemented, so it is refused. */
static int get_stream_options(json_t *o, srv_request *r, srv_error *e) {
    json_t *so = json_object_get(o, "stream_options");
    if (!so || json_is_null(so)) return 0;
    if (!r->stream)
        return bad(e, "stream_options", "'stream_options' is only allowed with 'stream': true");
    if (!json_is_object(so))
        return bad(e, "stream_options", "'stream_options' must be an object, not %s",
                   type_name(so));
    static const char *const known[] = {"include_usage", NULL};
    const char *key;
    json_t *v;
    json_object_foreach(so, key, v) {
        if (!listed(known, key))
            return bad(e, "stream_options", "'stream_options.%.100s' is not supported (only "
                       "include_usage)", key);
    }
    return get_bool(so, "include_usage", 0, &r->include_usage, e);
}

/* The fields completions and chat share.  max_tokens 0 is prompt scoring
 * (completions with echo: the prompt's logprobs, nothing generated). */
static int get_generation(json_t *o, srv_request *r, srv_error *e) {
    long long seed, plp;
    json_t *mt = json_object_get(o, "max_completion_tokens");
    const char *mt_key = mt && !json_is_null(mt) ? "max_completion_tokens" : "max_tokens";
    const int completions = r->kind == SRV_COMPLETIONS;
    if (refuse_unsupported(o, e) ||
        get_int(o, mt_key, completions ? 0 : 1, 1 << 30, completions ? 16 : -1, &r->max_tokens,
                e) ||
        get_num(o, "temperature", 0, 100, 0, &r->temperature, e) ||
        get_int(o, "seed", 0, INT64_MAX, 1, &seed, e) || get_stop(o, r, e) ||
        get_bool(o, "stream", 0, &r->stream, e) || get_bool(o, "ignore_eos", 0, &r->ignore_eos, e) ||
        get_bool(o, "return_tokens_as_token_ids", 0, &r->token_ids, e) ||
        get_stream_options(o, r, e) ||
        get_int(o, "prompt_logprobs", 0, SRV_MAX_TOP, -1, &plp, e))
        return -1;
    r->seed = (uint64_t)seed;
    r->prompt_logprobs = (int)plp;
    if (r->stream && plp >= 0)
        return bad(e, "prompt_logprobs", "'prompt_logprobs' is not given in streams (as vLLM)");
    return get_model(o, r, e);
}

static int parse_completions(json_t *o, uint32_t n_vocab, srv_request *r, srv_error *e) {
    long long lp;
    if (get_prompts(o, n_vocab, r, e) || get_generation(o, r, e) ||
        get_int(o, "logprobs", 0, SRV_MAX_TOP, -1, &lp, e) || get_bool(o, "echo", 0, &r->echo, e))
        return -1;
    r->logprobs = (int)lp;
    if (r->max_tokens == 0 && !r->echo)
        return bad(e, "max_tokens", "'max_tokens' 0 generates nothing: it is prompt scoring, "
                   "which needs 'echo': true");
    return 0;
}

/* OpenAI's "reasoning_effort", the official encoder's levels only; which
 * of them the model's release knows, the chat encoder checks. */
static int get_effort(json_t *o, srv_request *r, srv_error *e) {
    json_t *v = json_object_get(o, "reasoning_effort");
    if (!v || json_is_null(v)) return 0;
    const char *s = plain_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "low") && strcmp(s, "high") && strcmp(s, "max"))
        return bad(e, "reasoning_effort", "'reasoning_effort' must be \"low\", \"high\" or "
                   "\"max\" (the model's levels)");
    r->effort = s;
    return 0;
}

static int parse_chat(json_t *o, srv_request *r, srv_error *e) {
    int want = 0;
    long long top;
    if (get_messages(o, r, e) || get_generation(o, r, e) || get_bool(o, "logprobs", 0, &want, e) ||
        get_int(o, "top_logprobs", 0, SRV_MAX_TOP, 0, &top, e))
        return -1;
    if (json_object_get(o, "top_logprobs") && !json_is_null(json_object_get(o, "top_logprobs")) && !want)
        return bad(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->logprobs = want ? (int)top : -1;
    /* Thinking: "thinking": true, or chat_template_kwargs' "thinking" (or
     * "enable_thinking") as vLLM passes it to the template. */
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    int t1 = 0, t2 = 0, t3 = 0;
    if (get_bool(o, "thinking", 0, &t1, e) || (kw && get_bool(kw, "thinking", 0, &t2, e)) ||
        (kw && get_bool(kw, "enable_thinking", 0, &t3, e)))
        return -1;
    r->thinking = t1 || (kw && (t2 || t3));
    return get_effort(o, r, e);
}

static int parse_tokenize(json_t *o, srv_request *r, srv_error *e) {
    json_t *p = json_object_get(o, "prompt");
    if (json_object_get(o, "messages")) {
        int add = 0;
        if (get_bool(o, "add_special_tokens", 0, &add, e)) return -1;
        if (add)
            return bad(e, "add_special_tokens", "'add_special_tokens': true is for a 'prompt': "
                       "rendered messages begin with BOS already");
        return get_messages(o, r, e);
    }
    if (!json_is_string(p)) return bad(e, "prompt", "'prompt' (a string) or 'messages' is required");
    r->prompts[0].text = json_string_value(p);
    r->prompts[0].len = json_string_length(p);
    r->n_prompts = 1;
    return get_bool(o, "special", 1, &r->special, e) ||
           get_bool(o, "add_special_tokens", 0, &r->add_bos, e);
}

static int parse_detokenize(json_t *o, uint32_t n_vocab, srv_request *r, srv_error *e) {
    json_t *t = json_object_get(o, "tokens");
    if (!json_is_array(t)) return bad(e, "tokens", "'tokens' (an array of token ids) is required");
    r->n_prompts = 1;
    return get_ids(t, "tokens", n_vocab, &r->prompts[0], e);
}

int srv_request_parse(int kind, const char *body, size_t len, uint32_t n_vocab, srv_request *r,
                      srv_error *e) {
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    r->logprobs = -1;
    r->prompt_logprobs = -1;
    r->max_tokens = -1;
    json_error_t je;
    /* JSON's \u0000 is valid in a string; text keeps its length throughout,
     * and names are checked by plain_string. */
    r->root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!r->root)
        return bad(e, "", "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                   je.column);
    if (!json_is_object(r->root)) return bad(e, "", "the body must be a JSON object");
    switch (kind) {
    case SRV_COMPLETIONS:
        if (only_known(r->root, completion_fields, generation_fields, e)) return -1;
        return parse_completions(r->root, n_vocab, r, e);
    case SRV_CHAT:
        if (only_known(r->root, chat_fields, generation_fields, e)) return -1;
        return parse_chat(r->root, r, e);
    case SRV_TOKENIZE:
        if (only_known(r->root, tokenize_fields, NULL, e) || get_model(r->root, r, e)) return -1;
        return parse_tokenize(r->root, r, e);
    default:
        if (only_known(r->root, detokenize_fields, NULL, e) || get_model(r->root, r, e)) return -1;
        return parse_detokenize(r->root, n_vocab, r, e);
    }
}

void srv_request_free(srv_request *r) {
    for (size_t i = 0; i < SRV_MAX_PROMPTS; i++) free(r->prompts[i].ids);
    if (r->root) json_decref(r->root);
    memset(r, 0, sizeof(*r));
}
