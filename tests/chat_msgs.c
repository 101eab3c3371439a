/* Chat messages from JSON (chat_msgs.h). */
#include "chat_msgs.h"

#include <stdlib.h>
#include <string.h>

#include "ref/text/pyjson.h"

static const struct { const char *name; ds4_chat_role role; } role_names[] = {
    {"system", DS4_ROLE_SYSTEM},       {"user", DS4_ROLE_USER},
    {"assistant", DS4_ROLE_ASSISTANT}, {"developer", DS4_ROLE_DEVELOPER},
    {"latest_reminder", DS4_ROLE_LATEST_REMINDER}, {"tool", DS4_ROLE_TOOL},
};

/* An optional string member; null counts as absent. */
static int opt_string(const ds4_json *m, const char *key, size_t i, const char **s, size_t *len,
                      ds4err *err) {
    const ds4_json *v = ds4_json_get(m, key);
    *s = NULL;
    *len = 0;
    if (!v || v->type == DS4_JSON_NULL) return 0;
    if (v->type != DS4_JSON_STRING)
        return ds4_err_set(err, DS4_E_ARG, "chat: messages[%zu].%s must be a string (byte %zu)", i,
                          key, v->offset);
    *s = v->str;
    *len = v->len;
    return 0;
}

static const ds4_json *opt_json(const ds4_json *m, const char *key) {
    const ds4_json *v = ds4_json_get(m, key);
    return v && v->type != DS4_JSON_NULL ? v : NULL;
}

static int msg_from_json(const ds4_json *m, size_t i, ds4_chat_msg *out, ds4err *err) {
    memset(out, 0, sizeof(*out));
    const ds4_json *role = ds4_json_get(m, "role");
    size_t k = 0;
    while (k < sizeof(role_names) / sizeof(role_names[0]) && !ds4_json_is_str(role, role_names[k].name))
        k++;
    if (m->type != DS4_JSON_OBJECT || k == sizeof(role_names) / sizeof(role_names[0]))
        return ds4_err_set(err, DS4_E_ARG, "chat: messages[%zu] (byte %zu) needs a \"role\" of "
                          "system, user, assistant, developer, latest_reminder or tool", i, m->offset);
    out->role = role_names[k].role;
    const ds4_json *content = ds4_json_get(m, "content");
    if (out->role == DS4_ROLE_TOOL && content && content->type == DS4_JSON_ARRAY) {
        out->content_list = content;
    } else if (opt_string(m, "content", i, &out->content, &out->content_len, err)) {
        return -1;
    }
    size_t task_len;
    if (opt_string(m, "reasoning_content", i, &out->reasoning, &out->reasoning_len, err) ||
        opt_string(m, "task", i, &out->task, &task_len, err))
        return -1;
    out->wo_eos = ds4_pyjson_truthy(ds4_json_get(m, "wo_eos"));
    out->tools = opt_json(m, "tools");
    out->response_format = opt_json(m, "response_format");
    out->tool_calls = opt_json(m, "tool_calls");
    out->tool_call_id = opt_json(m, "tool_call_id");
    return 0;
}

int chat_msgs_from_json(const ds4_json *arr, ds4_chat_msg **msgs, size_t *n, ds4err *err) {
    *msgs = NULL;
    *n = 0;
    if (!arr || arr->type != DS4_JSON_ARRAY)
        return ds4_err_set(err, DS4_E_ARG, "chat: expected a JSON array of messages");
    ds4_chat_msg *v = malloc((arr->n ? arr->n : 1) * sizeof(ds4_chat_msg));
    if (!v) return ds4_err_set(err, DS4_E_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < arr->n; i++) {
        if (msg_from_json(&arr->elems[i], i, &v[i], err)) {
            free(v);
            return -1;
        }
    }
    *msgs = v;
    *n = arr->n;
    return 0;
}
