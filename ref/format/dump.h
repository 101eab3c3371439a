/* ds4's --dump-logprobs JSON (docs/FORMATS.md §2), written from a
 * golden so ds4's tooling reads ds4ref's numbers, and read so a ds4 dump
 * from any backend can be compared against a golden.
 *
 * Layout, byte for byte as ds4_cli.c prints it (only "source" differs):
 *
 *   {
 *     "source":"ds4ref",
 *     "prompt_tokens":P,
 *     "ctx":C,
 *     "top_k":K,
 *     "steps":[
 *       {"step":0,"selected":TOK,"top_logprobs":[{"token":TOK,"logit":x,"logprob":y},...]},
 *       ...
 *     ]
 *   }
 *
 * TOK = {"id":n,"text":"...","bytes":[b,...]}.  Numbers are f32 printed with
 * "%.9g" (ds4 keeps logit and logprob as float; a golden's double logprob is
 * rounded to f32 first).  `text` escapes '"' '\\' \n \r \t, other bytes
 * below 0x20 as \u00xx, and -- when the token's bytes are not valid UTF-8 --
 * every byte >= 0x80 as \u00XX; `bytes` is authoritative and the reader
 * ignores `text` beyond checking it is a string. */
#ifndef DS4_DS4DUMP_H
#define DS4_DS4DUMP_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "ref/format/golden.h"

#define DS4_DUMP_SOURCE "ds4ref"

/* Needs ids and logits (a ds4ref golden, or a dump read back). */
int ds4_dump_format(const ds4_golden *g, ds4_buf *out, ds4err *err);
/* Into a writer the caller opened on the target beforehand (so that a path
 * that cannot be written failed then): committed, or aborted on failure. */
int ds4_dump_write(const ds4_golden *g, ds4_afile *dst, ds4err *err);

/* Reads into a DS4_TRACE_DUMP golden: ids, bytes, f32 logits and logprobs of
 * every listed token, prompt token count, ctx, top_k.  Keys other than the
 * ones above are ignored, so additions in later ds4 versions still read.
 * Errors (DS4_E_FORMAT) name the JSON path, e.g.
 * "out.json: steps[3].top_logprobs[2].logprob: expected a number". */
int ds4_dump_parse(const char *buf, size_t len, const char *name, ds4_golden *g,
                   ds4err *err);

#endif
