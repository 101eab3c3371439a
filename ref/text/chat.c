/* The official DeepSeek V4 chat encoder in C; see chat.h.
 *
 * encoding_dsv4.py renders in three steps, and so does this file:
 *   1. merge_tool_messages: tool results become blocks of a user turn, and a
 *      user message following a user turn joins it;
 *   2. sort_tool_results_by_call_order, then (thinking mode, dropping
 *      thinking) _drop_thinking_messages;
 *   3. render_message for every turn, each followed by the transition tokens
 *      that depend on the next turn.
 * Whatever Python's str.format would print for a value, this prints too;
 * where the Python code would crash on an input, this returns an error. */
#include "ref/text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/text/pyjson.h"

/* String constants of the official encoder.  Macros, so that they concatenate
 * into the templates below. */
#define FW_BAR "\xEF\xBD\x9C"   /* U+FF5C FULLWIDTH VERTICAL LINE */
#define DSML FW_BAR "DSML" FW_BAR
#define USER_TOK "<" FW_BAR "User" FW_BAR ">"
#define ASSISTANT_TOK "<" FW_BAR "Assistant" FW_BAR ">"
#define LATEST_REMINDER_TOK "<" FW_BAR "latest_reminder" FW_BAR ">"
#define THINK "<think>"
#define THINK_END "</think>"

static const char *const task_names[] = {"action", "query", "authority", "domain", "title",
                                         "read_url"};
static const char *const task_tokens[] = {
    "<" FW_BAR "action" FW_BAR ">", "<" FW_BAR "query" FW_BAR ">",
    "<" FW_BAR "authority" FW_BAR ">", "<" FW_BAR "domain" FW_BAR ">",
    "<" FW_BAR "title" FW_BAR ">", "<" FW_BAR "read_url" FW_BAR ">",
};
#define N_TASKS (sizeof(task_names) / sizeof(task_names[0]))

/* The reasoning-effort prompts.  The first release's encoder has one,
 * REASONING_EFFORT_MAX, for "max" ("high" adds nothing); 0731's
 * REASONING_EFFORT_PROMPTS moved that text to "high" and gave "max" a new
 * one ("low", its default, adds nothing).  Either goes before the first
 * message, in thinking mode only. */
static const char effort_absolute[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";
static const char effort_beyond[] =
    "Reasoning Effort: Beyond maximum \xe2\x80\x94 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every causal "
    "chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

static const char *const effort_names[] = {
    [DS4_EFFORT_LOW] = "low", [DS4_EFFORT_HIGH] = "high", [DS4_EFFORT_MAX] = "max"};

int ds4_chat_effort_parse(const char *name, ds4_chat_effort *effort) {
    for (int e = DS4_EFFORT_LOW; e <= DS4_EFFORT_MAX; e++)
        if (name && !strcmp(name, effort_names[e])) {
            *effort = (ds4_chat_effort)e;
            return 0;
        }
    return -1;
}

/* The prompt an effort puts before the first message in thinking mode, or
 * an error for an effort the release's encoder refuses (its assert). */
static int effort_prefix(const ds4_chat_opts *o, const char **prefix, ds4err *err) {
    *prefix = "";
    if (o->release == DS4_CHAT_V4_0731) {
        if (o->effort == DS4_EFFORT_HIGH) *prefix = effort_absolute;
        if (o->effort == DS4_EFFORT_MAX) *prefix = effort_beyond;
        return 0;
    }
    if (o->effort == DS4_EFFORT_LOW)
        return ds4_err_set(err, DS4_E_ARG, "chat: reasoning effort \"low\": the first V4 "
                           "release's encoder knows high and max only (low is 0731's)");
    if (o->effort == DS4_EFFORT_MAX) *prefix = effort_absolute;
    return 0;
}

/* TOOLS_TEMPLATE with its tokens filled in, around {tool_schemas}. */
static const char tools_head[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<" DSML "tool_calls>\" block like the following:\n\n"
    "<" DSML "tool_calls>\n"
    "<" DSML "invoke name=\"$TOOL_NAME\">\n"
    "<" DSML "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" DSML
    "parameter>\n"
    "...\n"
    "</" DSML "invoke>\n"
    "<" DSML "invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" DSML "invoke>\n"
    "</" DSML "tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by " THINK "), you MUST output your complete "
    "reasoning inside " THINK "..." THINK_END " BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after " THINK_END " with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
static const char tools_tail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

static const char response_format_head[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

/* -------------------------------------------------------------- turns */

/* One message after merge_tool_messages.  A user turn owns a run of blocks:
 * the texts of the user messages and the results of the tool messages that
 * were merged into it. */
typedef struct block {
    bool tool;
    const ds4_chat_msg *src;
} block;

typedef struct turn {
    ds4_chat_role role;
    const ds4_chat_msg *m;   /* the message that opened the turn */
    size_t b0, nb;           /* user turns: blocks[b0 .. b0+nb) */
} turn;

typedef struct conv {
    turn *turns;
    size_t n;
    block *blocks;
    size_t nblocks;
} conv;

/* A user turn opened by a tool message carries no task: merge_tool_messages
 * builds it from scratch. */
static const char *turn_task(const turn *t) {
    return t->m->role == DS4_ROLE_TOOL ? NULL : t->m->task;
}

static int merge_messages(const ds4_chat_msg *msgs, size_t n, conv *c, ds4err *err) {
    c->turns = malloc((n ? n : 1) * sizeof(turn));
    c->blocks = malloc((n ? n : 1) * sizeof(block));
    if (!c->turns || !c->blocks) return ds4_err_set(err, DS4_E_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < n; i++) {
        const ds4_chat_msg *m = &msgs[i];
        turn *last = c->n ? &c->turns[c->n - 1] : NULL;
        bool is_tool = m->role == DS4_ROLE_TOOL;
        if (is_tool || m->role == DS4_ROLE_USER) {
            c->blocks[c->nblocks].tool = is_tool;
            c->blocks[c->nblocks].src = m;
            /* Blocks of one turn stay contiguous: only the newest turn grows. */
            if (last && last->role == DS4_ROLE_USER && (is_tool || !turn_task(last))) {
                last->nb++;
            } else {
                c->turns[c->n++] = (turn){DS4_ROLE_USER, m, c->nblocks, 1};
            }
            c->nblocks++;
        } else {
            c->turns[c->n++] = (turn){m->role, m, 0, 0};
        }
    }
    return 0;
}

static const ds4_json *tool_call_id(const ds4_json *tc) {
    const ds4_json *id = ds4_json_get(tc, "id");
    return ds4_pyjson_truthy(id) ? id : ds4_json_get(ds4_json_get(tc, "function"), "id");
}

static bool same_id(const ds4_json *a, const ds4_json *b) {
    return a && b && a->type == DS4_JSON_STRING && b->type == DS4_JSON_STRING &&
           a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
}

/* Position of a tool result's call in the last assistant tool-call list (the
 * last position when an id repeats, as a dict keeps it); 0 when absent. */
static size_t call_order(const ds4_json *calls, const ds4_json *id) {
    size_t pos = 0;
    for (size_t i = 0; calls && i < calls->n; i++) {
        const ds4_json *cid = tool_call_id(&calls->elems[i]);
        if (ds4_pyjson_truthy(cid) && same_id(cid, id)) pos = i;
    }
    return pos;
}

static bool has_call_ids(const ds4_json *calls) {
    for (size_t i = 0; i < calls->n; i++)
        if (ds4_pyjson_truthy(tool_call_id(&calls->elems[i]))) return true;
    return false;
}

/* sort_tool_results_by_call_order: within each user turn with more than one
 * tool result, order the results as the latest assistant turn called them.
 * Python's sort is stable and the texts keep their slots; `tmp` has room for
 * every block. */
static void sort_tool_results(conv *c, block *tmp) {
    const ds4_json *calls = NULL;
    for (size_t i = 0; i < c->n; i++) {
        const turn *t = &c->turns[i];
        if (t->role == DS4_ROLE_ASSISTANT && ds4_pyjson_truthy(t->m->tool_calls) &&
            t->m->tool_calls->type == DS4_JSON_ARRAY) {
            calls = has_call_ids(t->m->tool_calls) ? t->m->tool_calls : NULL;
            continue;
        }
        if (t->role != DS4_ROLE_USER || !calls) continue;
        block *b = c->blocks + t->b0;
        size_t nt = 0;
        for (size_t k = 0; k < t->nb; k++) {
            if (!b[k].tool) continue;
            /* Insertion into tmp[0..nt), after every entry of equal order. */
            size_t key = call_order(calls, b[k].src->tool_call_id), j = nt++;
            while (j > 0 && call_order(calls, tmp[j - 1].src->tool_call_id) > key) {
                tmp[j] = tmp[j - 1];
                j--;
            }
            tmp[j] = b[k];
        }
        if (nt < 2) continue;
        for (size_t k = 0, j = 0; k < t->nb; k++)
            if (b[k].tool) b[k] = tmp[j++];
    }
}

static int find_last_user(const conv *c) {
    for (size_t i = c->n; i-- > 0;)
        if (c->turns[i].role == DS4_ROLE_USER || c->turns[i].role == DS4_ROLE_DEVELOPER)
            return (int)i;
    return -1;
}

/* _drop_thinking_messages: developer turns before the last user turn go.
 * (It also strips reasoning_content from earlier assistant turns, which
 * render_message leaves out there anyway.) */
static void drop_thinking(conv *c) {
    int last_user = find_last_user(c);
    size_t w = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->turns[i].role != DS4_ROLE_DEVELOPER || (int)i >= last_user)
            c->turns[w++] = c->turns[i];
    c->n = w;
}

/* ---------------------------------------------------------- rendering */

typedef struct renderer {
    const conv *c;
    const ds4_chat_opts *o;
    bool drop;           /* the effective drop_thinking */
    int last_user;
    const char *effort;  /* the reasoning-effort prompt of thinking mode */
    ds4_buf *out;
    ds4err *err;
} renderer;

static void put_str(renderer *r, const char *s, size_t n) {
    ds4_buf_put(r->out, s, n);
}

static void put(renderer *r, const char *s) {
    ds4_buf_puts(r->out, s);
}

/* "{x}".format(x) for a value that must be a string (None prints "None"). */
static int put_formatted(renderer *r, const ds4_json *v, const char *what) {
    if (!v || v->type == DS4_JSON_NULL) put(r, "None");
    else if (v->type == DS4_JSON_STRING) put_str(r, v->str, v->len);
    else return ds4_err_set(r->err, DS4_E_ARG, "chat: %s must be a string (byte %zu)", what, v->offset);
    return 0;
}

static int put_tools(renderer *r, const ds4_json *tools) {
    if (tools->type != DS4_JSON_ARRAY)
        return ds4_err_set(r->err, DS4_E_ARG, "chat: \"tools\" must be a list (byte %zu)", tools->offset);
    put(r, "\n\n");
    put(r, tools_head);
    for (size_t i = 0; i < tools->n; i++) {
        const ds4_json *fn = ds4_json_get(&tools->elems[i], "function");
        if (!fn)
            return ds4_err_set(r->err, DS4_E_ARG, "chat: tools[%zu] has no \"function\" (byte %zu)",
                              i, tools->elems[i].offset);
        if (i) put(r, "\n");
        ds4_pyjson_dumps(r->out, fn);
    }
    put(r, tools_tail);
    return 0;
}

/* The tools and response_format sections of system and developer turns. */
static int put_extras(renderer *r, const ds4_chat_msg *m) {
    if (ds4_pyjson_truthy(m->tools) && put_tools(r, m->tools)) return -1;
    if (ds4_pyjson_truthy(m->response_format)) {
        put(r, "\n\n");
        put(r, response_format_head);
        ds4_pyjson_dumps(r->out, m->response_format);
    }
    return 0;
}

static int put_tool_result(renderer *r, const ds4_chat_msg *m) {
    put(r, "<tool_result>");
    if (m->content_list) {
        const ds4_json *l = m->content_list;
        for (size_t i = 0; i < l->n; i++) {
            const ds4_json *b = &l->elems[i];
            const ds4_json *type = ds4_json_get(b, "type");
            if (b->type != DS4_JSON_OBJECT)
                return ds4_err_set(r->err, DS4_E_ARG, "chat: tool content block %zu is not an "
                                  "object (byte %zu)", i, b->offset);
            if (i) put(r, "\n\n");
            if (ds4_json_is_str(type, "text")) {
                const ds4_json *text = ds4_json_get(b, "text");
                if (text && put_formatted(r, text, "a text block's \"text\"")) return -1;
            } else {
                put(r, "[Unsupported ");
                if (put_formatted(r, type, "a content block's \"type\"")) return -1;
                put(r, "]");
            }
        }
    } else if (m->content) {
        put_str(r, m->content, m->content_len);
    }
    put(r, "</tool_result>");
    return 0;
}

static int put_user(renderer *r, const turn *t) {
    put(r, USER_TOK);
    for (size_t k = 0; k < t->nb; k++) {
        const block *b = &r->c->blocks[t->b0 + k];
        if (k) put(r, "\n\n");
        if (b->tool) {
            if (put_tool_result(r, b->src)) return -1;
        } else if (b->src->content) {
            put_str(r, b->src->content, b->src->content_len);
        }
    }
    return 0;
}

/* encode_arguments_to_dsml: one <｜DSML｜parameter> line per argument. */
static int put_arguments(renderer *r, const ds4_json *args) {
    ds4_json_doc *doc = NULL;
    const ds4_json *obj = NULL;
    if (args->type == DS4_JSON_STRING) {
        ds4err perr;
        if (ds4_json_parse(args->str, args->len, "arguments", &doc, &perr) == 0) {
            obj = ds4_json_root(doc);
            if (obj->type != DS4_JSON_OBJECT) {
                ds4_json_free(doc);
                return ds4_err_set(r->err, DS4_E_ARG, "chat: tool call arguments (byte %zu) are "
                                  "JSON but not an object", args->offset);
            }
        }
    }
    if (!obj) {
        /* Not JSON text: the encoder passes it on as one argument named
         * "arguments". */
        put(r, "<" DSML "parameter name=\"arguments\" string=\"");
        put(r, args->type == DS4_JSON_STRING ? "true\">" : "false\">");
        if (args->type == DS4_JSON_STRING) put_str(r, args->str, args->len);
        else ds4_pyjson_dumps(r->out, args);
        put(r, "</" DSML "parameter>");
        return 0;
    }
    bool first = true;
    for (size_t i = 0; i < obj->n; i++) {
        long k = ds4_pyjson_dict_member(obj, i);
        if (k < 0) continue;
        const ds4_json *v = &obj->elems[k];
        if (!first) put(r, "\n");
        first = false;
        put(r, "<" DSML "parameter name=\"");
        put_str(r, obj->keys[i].str, obj->keys[i].len);
        put(r, v->type == DS4_JSON_STRING ? "\" string=\"true\">" : "\" string=\"false\">");
        if (v->type == DS4_JSON_STRING) put_str(r, v->str, v->len);
        else ds4_pyjson_dumps(r->out, v);
        put(r, "</" DSML "parameter>");
    }
    ds4_json_free(doc);
    return 0;
}

static int put_tool_calls(renderer *r, const ds4_json *calls) {
    if (calls->type != DS4_JSON_ARRAY)
        return ds4_err_set(r->err, DS4_E_ARG, "chat: \"tool_calls\" must be a list (byte %zu)",
                          calls->offset);
    put(r, "\n\n<" DSML "tool_calls>\n");
    for (size_t i = 0; i < calls->n; i++) {
        const ds4_json *fn = ds4_json_get(&calls->elems[i], "function");
        const ds4_json *name = ds4_json_get(fn, "name");
        const ds4_json *args = ds4_json_get(fn, "arguments");
        if (!name || !args)
            return ds4_err_set(r->err, DS4_E_ARG, "chat: tool_calls[%zu] (byte %zu) needs "
                              "function.name and function.arguments", i, calls->elems[i].offset);
        if (i) put(r, "\n");
        put(r, "<" DSML "invoke name=\"");
        if (put_formatted(r, name, "a tool call's name")) return -1;
        put(r, "\">\n");
        if (put_arguments(r, args)) return -1;
        put(r, "\n</" DSML "invoke>");
    }
    put(r, "\n</" DSML "tool_calls>");
    return 0;
}

static int put_assistant(renderer *r, size_t idx) {
    const ds4_chat_msg *m = r->c->turns[idx].m;
    bool prev_has_task = idx > 0 && turn_task(&r->c->turns[idx - 1]) != NULL;
    if (r->o->thinking && !prev_has_task && (!r->drop || (int)idx > r->last_user)) {
        if (m->reasoning) put_str(r, m->reasoning, m->reasoning_len);
        put(r, THINK_END);
    }
    if (m->content) put_str(r, m->content, m->content_len);
    if (ds4_pyjson_truthy(m->tool_calls) && put_tool_calls(r, m->tool_calls)) return -1;
    if (!m->wo_eos) put(r, ds4_tok_special_str(DS4_SPECIAL_EOS));
    return 0;
}

/* What follows a turn when the next one is an assistant or latest_reminder
 * turn, or when it is the last: a task token, or the assistant prompt. */
static int put_transition(renderer *r, size_t idx) {
    const turn *t = &r->c->turns[idx];
    if (idx + 1 < r->c->n) {
        ds4_chat_role next = r->c->turns[idx + 1].role;
        if (next != DS4_ROLE_ASSISTANT && next != DS4_ROLE_LATEST_REMINDER) return 0;
    }
    const char *task = turn_task(t);
    if (task) {
        size_t k = 0;
        while (k < N_TASKS && strcmp(task, task_names[k]) != 0) k++;
        if (k == N_TASKS) return ds4_err_set(r->err, DS4_E_ARG, "chat: invalid task \"%s\"", task);
        if (k != 0) {
            put(r, task_tokens[k]);
        } else {
            put(r, ASSISTANT_TOK);
            put(r, r->o->thinking ? THINK : THINK_END);
            put(r, task_tokens[k]);
        }
    } else if (t->role == DS4_ROLE_USER || t->role == DS4_ROLE_DEVELOPER) {
        put(r, ASSISTANT_TOK);
        bool think = r->o->thinking && (!r->drop || (int)idx >= r->last_user);
        put(r, think ? THINK : THINK_END);
    }
    return 0;
}

static int render_turn(renderer *r, size_t idx) {
    const turn *t = &r->c->turns[idx];
    const ds4_chat_msg *m = t->m;
    if (idx == 0 && r->o->thinking) put(r, r->effort);
    switch (t->role) {
    case DS4_ROLE_SYSTEM:
        if (m->content) put_str(r, m->content, m->content_len);
        if (put_extras(r, m)) return -1;
        break;
    case DS4_ROLE_DEVELOPER:
        if (!m->content || m->content_len == 0)
            return ds4_err_set(r->err, DS4_E_ARG, "chat: a developer message needs content");
        put(r, USER_TOK);
        put_str(r, m->content, m->content_len);
        if (put_extras(r, m)) return -1;
        break;
    case DS4_ROLE_USER:
        if (put_user(r, t)) return -1;
        break;
    case DS4_ROLE_LATEST_REMINDER:
        put(r, LATEST_REMINDER_TOK);
        if (m->content) put_str(r, m->content, m->content_len);
        else put(r, "None");
        break;
    case DS4_ROLE_ASSISTANT:
        if (put_assistant(r, idx)) return -1;
        break;
    case DS4_ROLE_TOOL:
        return ds4_err_set(r->err, DS4_E_INTERNAL, "chat: unmerged tool message");
    }
    return put_transition(r, idx);
}

int ds4_chat_render(const ds4_chat_msg *msgs, size_t n, const ds4_chat_opts *opts, ds4_buf *out,
                    ds4err *err) {
    const char *effort;
    if (effort_prefix(opts, &effort, err)) return -1;
    conv c = {0};
    block *tmp = malloc((n ? n : 1) * sizeof(block));
    int rc = tmp ? merge_messages(msgs, n, &c, err)
                 : ds4_err_set(err, DS4_E_NOMEM, "chat: out of memory");
    if (rc == 0) {
        sort_tool_results(&c, tmp);
        renderer r = {&c, opts, !opts->keep_thinking, -1, effort, out, err};
        for (size_t i = 0; i < c.n; i++)
            if (c.turns[i].role != DS4_ROLE_USER && ds4_pyjson_truthy(c.turns[i].m->tools)) r.drop = false;
        if (opts->thinking && r.drop) drop_thinking(&c);
        r.last_user = find_last_user(&c);
        if (!opts->no_bos) put(&r, ds4_tok_special_str(DS4_SPECIAL_BOS));
        for (size_t i = 0; i < c.n && rc == 0; i++) rc = render_turn(&r, i);
        if (rc == 0 && out->failed)
            rc = ds4_err_set(err, DS4_E_NOMEM, "chat: out of memory while rendering");
    }
    free(tmp);
    free(c.turns);
    free(c.blocks);
    return rc;
}

/* ------------------------------------------------------------- tokens */

/* A special string the rendered text will contain must be an added token of
 * the vocabulary, or it would silently be tokenized as plain text. */
static int need_added(const ds4_tokenizer *t, const char *s, ds4err *err) {
    int32_t id = ds4_tok_lookup(t, s, strlen(s));
    if (id < 0 || !ds4_tok_is_added(t, id))
        return ds4_err_set(err, DS4_E_MODEL,
                          "chat: the vocabulary has no added token \"%s\" to render this chat", s);
    return 0;
}

int ds4_chat_render_ids(const ds4_tokenizer *t, const ds4_chat_msg *msgs, size_t n,
                        const ds4_chat_opts *opts, ds4_tokens *out, ds4err *err) {
    if (ds4_tok_require_specials(t, err)) return -1;
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].role == DS4_ROLE_LATEST_REMINDER && need_added(t, LATEST_REMINDER_TOK, err))
            return -1;
        for (size_t k = 0; msgs[i].task && k < N_TASKS; k++)
            if (strcmp(msgs[i].task, task_names[k]) == 0 && need_added(t, task_tokens[k], err))
                return -1;
    }
    ds4_buf text = {0};
    int rc = ds4_chat_render(msgs, n, opts, &text, err);
    if (rc == 0) rc = ds4_tok_encode(t, text.p ? text.p : "", text.len, DS4_TOK_ADDED, out, err);
    ds4_buf_free(&text);
    return rc;
}

int ds4_chat_prompt_ids(const ds4_tokenizer *t, const char *system, size_t system_len,
                        const char *prompt, size_t prompt_len, const ds4_chat_opts *opts,
                        ds4_tokens *out, ds4err *err) {
    const char *bos = ds4_tok_special_str(DS4_SPECIAL_BOS);
    size_t bos_len = strlen(bos);
    if (prompt_len >= bos_len && memcmp(prompt, bos, bos_len) == 0)
        return ds4_tok_encode(t, prompt, prompt_len, DS4_TOK_ADDED, out, err);
    ds4_chat_msg msgs[2];
    size_t n = 0;
    memset(msgs, 0, sizeof(msgs));
    if (system) {
        msgs[n].role = DS4_ROLE_SYSTEM;
        msgs[n].content = system;
        msgs[n++].content_len = system_len;
    }
    msgs[n].role = DS4_ROLE_USER;
    msgs[n].content = prompt;
    msgs[n++].content_len = prompt_len;
    return ds4_chat_render_ids(t, msgs, n, opts, out, err);
}
