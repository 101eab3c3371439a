/* Any of the three token-stream formats read into one golden: ds4ref's
 * golden, ds4's --dump-logprobs JSON and an official.vec case, the kind told
 * from the content.  ds4ref-diff and the Python package read their inputs
 * through it. */
#ifndef DS4_TRACE_H
#define DS4_TRACE_H

#include "base/err.h"
#include "ref/format/golden.h"

/* Load any supported file, telling the kind from its content: a first line
 * that is a JSON object with a "format" key is a ds4ref golden, other JSON is
 * a ds4 dump, anything else an official.vec file.  For a .vec file case_id
 * picks the case (NULL: the file must hold exactly one). */
int ds4_trace_load(const char *path, const char *case_id, ds4_golden *g, ds4err *err);

/* "ds4ref golden", "ds4 dump", "official.vec case". */
const char *ds4_trace_kind_name(ds4_trace_kind k);

#endif
