/* DeepSeek V4 chat rendering: the official encoder (encoding_dsv4.py's
 * encode_messages) in C, plus ds4's command-line conventions on top.
 *
 * The official pipeline renders a conversation to text and tokenizes that
 * text with every added token recognised (ds4_tok_encode with
 * DS4_TOK_ADDED); ds4ref does the same.  Supported: roles system, user,
 * assistant, developer, latest_reminder and tool (tool results are merged into
 * user turns as the encoder does), reasoning_content and drop_thinking, tools
 * and response_format, assistant tool_calls in DSML, quick-instruction tasks,
 * wo_eos, and the reasoning efforts of the first release (high, max) and of
 * V4-Flash-0731 (low, high, max).  Not supported: the `context` argument
 * (render the whole conversation instead).  docs/TOKENIZER.md lists the
 * remaining edge cases. */
#ifndef DS4_CHAT_H
#define DS4_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "ref/text/json.h"
#include "ref/text/tokenizer.h"

/* ds4's default system prompt (no trailing period). */
#define DS4_CHAT_DEFAULT_SYSTEM "You are a helpful assistant"

typedef enum ds4_chat_role {
    DS4_ROLE_SYSTEM,
    DS4_ROLE_USER,
    DS4_ROLE_ASSISTANT,
    DS4_ROLE_DEVELOPER,
    DS4_ROLE_LATEST_REMINDER,
    DS4_ROLE_TOOL
} ds4_chat_role;

/* One message, mirroring the official encoder's message dict.  Strings are
 * byte ranges (not NUL-terminated); a NULL pointer is a missing key / None.
 * The JSON members are only needed for tools and tool calls; a caller that
 * builds plain turns by hand leaves them NULL. */
typedef struct ds4_chat_msg {
    ds4_chat_role role;
    const char *content;          /* "content" */
    size_t content_len;
    const char *reasoning;        /* assistant "reasoning_content" */
    size_t reasoning_len;
    const char *task;             /* "task": action, query, authority, domain, title, read_url */
    bool wo_eos;                  /* assistant "wo_eos": no end-of-sentence token */
    const ds4_json *tools;        /* system/developer: OpenAI-format tool list */
    const ds4_json *response_format;  /* system/developer */
    const ds4_json *tool_calls;   /* assistant: OpenAI-format tool calls */
    const ds4_json *content_list; /* tool: content given as a list of blocks */
    const ds4_json *tool_call_id; /* tool: "tool_call_id" */
} ds4_chat_msg;

/* Which release's encoder (encoding/encoding_dsv4.py of its model folder):
 * they differ only in the reasoning-effort prompts. */
typedef enum ds4_chat_release {
    DS4_CHAT_V4,          /* DeepSeek-V4-Flash: efforts high (no prompt) and max */
    DS4_CHAT_V4_0731      /* DeepSeek-V4-Flash-0731: low (no prompt), high, max */
} ds4_chat_release;

/* encode_messages' reasoning_effort; DEFAULT is None (0731: "low"). */
typedef enum ds4_chat_effort {
    DS4_EFFORT_DEFAULT,
    DS4_EFFORT_LOW,
    DS4_EFFORT_HIGH,
    DS4_EFFORT_MAX
} ds4_chat_effort;

/* encode_messages' options; all-zero is the first release's default in chat
 * mode. */
typedef struct ds4_chat_opts {
    bool thinking;        /* thinking_mode "thinking" (else "chat") */
    ds4_chat_effort effort;   /* has effect in thinking mode only */
    ds4_chat_release release;
    bool keep_thinking;   /* drop_thinking=False */
    bool no_bos;          /* add_default_bos_token=False */
} ds4_chat_opts;

/* "low", "high", "max" -> *effort; -1 for another name. */
int ds4_chat_effort_parse(const char *name, ds4_chat_effort *effort);

/* Render msgs[0..n) to text, appended to *out. */
int ds4_chat_render(const ds4_chat_msg *msgs, size_t n, const ds4_chat_opts *opts, ds4_buf *out,
                    ds4err *err);

/* Render and tokenize (added tokens recognised), appending to *out. */
int ds4_chat_render_ids(const ds4_tokenizer *t, const ds4_chat_msg *msgs, size_t n,
                        const ds4_chat_opts *opts, ds4_tokens *out, ds4err *err);

/* ds4's command line: `-sys SYSTEM -p PROMPT` with --think / --nothink /
 * --think-max.  A prompt that starts with the BOS string is taken as already
 * rendered and tokenized as it is (system and options ignored); otherwise it
 * is one user turn after an optional system turn (system == NULL: none; ""
 * renders nothing either).  Prompt bytes are used exactly as given. */
int ds4_chat_prompt_ids(const ds4_tokenizer *t, const char *system, size_t system_len,
                        const char *prompt, size_t prompt_len, const ds4_chat_opts *opts,
                        ds4_tokens *out, ds4err *err);

#endif
