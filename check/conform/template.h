/* The backend contract of ds4ref-conform: a command line with placeholders,
 * run through /bin/sh once per cell of the matrix (docs/CONFORM.md).
 *
 *   {model} {mtp}            the model files ({mtp} empty without one)
 *   {tokens_file}            row 0's prompt token ids, one per line
 *   {prompt_file}            row 0's prompt bytes (the rendered chat text)
 *   {batch_tokens}           every row's ids, one row per line
 *   {n} {draft} {chunk} {batch} {ctx} {top_k} {temp} {seed}
 *   {conf}                   a DSpark drafter's confidence threshold, 0 to 1
 *                            (never absent in a group: 0 is a threshold)
 *   {out}                    where the backend writes its result (a ds4
 *                            --dump-logprobs JSON or a ds4ref golden); with
 *                            {batch} > 1, one file per row: {out}.ROW
 *   {ds4ref}                 this build's ds4ref program (for the preset)
 *   {port}                   a server template's (--server-cmd): the free
 *                            port the engine is to listen on
 *   {model_f32} {mtp_f32}    the models' unquantized twins
 *   {ctx_total} {chunk_total}  ctx and chunk times batch
 *   {model_sha256}           the model file's SHA-256
 *
 * With {batch} > 1, {tokens_file}.ROW and {prompt_file}.ROW hold row ROW's
 * prompt (ROW = 0 .. batch-1).  Values are inserted shell-quoted.  "{[ ...
 * ]}" is an optional group: it is dropped when a placeholder inside it
 * expands to nothing or to 0 (say, "{[--mtp {mtp} --mtp-draft {draft}]}"
 * for a backend that refuses --mtp-draft 0).  "{{" is a literal "{", and so
 * is "]}" outside a group. */
#ifndef DS4_CONFORM_TEMPLATE_H
#define DS4_CONFORM_TEMPLATE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

/* The placeholders, as bits of a template's "uses" mask. */
enum ds4_cf_var {
    DS4_CF_MODEL, DS4_CF_MTP, DS4_CF_TOKENS_FILE, DS4_CF_PROMPT_FILE, DS4_CF_BATCH_TOKENS,
    DS4_CF_N, DS4_CF_DRAFT, DS4_CF_CHUNK, DS4_CF_BATCH, DS4_CF_CTX, DS4_CF_TOP_K, DS4_CF_TEMP,
    DS4_CF_SEED, DS4_CF_CTX_TOTAL, DS4_CF_CHUNK_TOTAL, DS4_CF_OUT, DS4_CF_DS4REF,
    DS4_CF_MODEL_F32, DS4_CF_MTP_F32, DS4_CF_PORT, DS4_CF_MODEL_SHA256, DS4_CF_CONF, DS4_CF_NVARS
};

/* One cell's values.  With several rows, chunk and ctx are each row's:
 * chunk tokens of every row go into a forward pass (chunk_total =
 * chunk x batch in all), and each row has a context of ctx positions
 * (ctx_total = ctx x batch, for an engine that splits one context among
 * its sequences, as llama.cpp's n_ctx does). */
typedef struct ds4_cf_vars {
    const char *model, *mtp, *tokens_file, *prompt_file, *batch_tokens, *out, *ds4ref;
    const char *model_f32, *mtp_f32;   /* the unquantized twins (quant/gguf_twin.h) */
    const char *model_sha256;          /* the model file's SHA-256, lowercase hex */
    uint32_t n, draft, chunk, batch, ctx, top_k, port;
    double temp;
    double conf;           /* 0 .. 1 */
    uint64_t seed;
} ds4_cf_vars;

/* Check a template's syntax and say which placeholders it uses (a mask of
 * 1u << ds4_cf_var).  It must write {out} and read a prompt ({tokens_file},
 * {prompt_file} or {batch_tokens}). */
int ds4chk_template_check(const char *tmpl, uint32_t *uses, ds4err *err);

/* The same for a server's command (--server-cmd): it must say where the
 * engine listens ({port}); it writes no {out}, reads no prompt. */
int ds4chk_template_check_server(const char *tmpl, uint32_t *uses, ds4err *err);

/* The command line of one cell. */
int ds4chk_template_expand(const char *tmpl, const ds4_cf_vars *v, ds4_buf *out, ds4err *err);

/* The shipped presets: "ds4ref" (this build, the self-check) and "ds4"
 * (antirez/ds4's command line).  NULL for another name. */
const char *ds4chk_template_preset(const char *name);

/* The server presets (--server-cmd NAME): an engine started with its
 * current release's flags for MTP depth and prefill chunk.  NULL for
 * another name. */
const char *ds4chk_template_server_preset(const char *name);

/* The dialect of server preset `name` ("ids", "text", "llama" or
 * "sglang"), and how it takes prompts ("ids" or "text"); "ids" for a name
 * that is no preset. */
const char *ds4chk_template_server_dialect(const char *name);
const char *ds4chk_template_server_prompt(const char *name);

/* Name and template of server preset i, for --backend-help; false past
 * the last. */
bool ds4chk_template_server_preset_at(uint32_t i, const char **name, const char **tmpl,
                                      const char **about);

/* Name of placeholder i (enum ds4_cf_var) and a line about it, for
 * --backend-help; false past the last. */
bool ds4chk_template_var_at(uint32_t i, const char **name, const char **about);

/* Name and template of preset i, for --backend-help; false past the last. */
bool ds4chk_template_preset_at(uint32_t i, const char **name, const char **tmpl, const char **about);

#endif
