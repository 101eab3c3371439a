/* The few pieces of Python the official chat encoder's output depends on,
 * applied to values ds4_json_parse read (what Python's json.loads would
 * have given): json.dumps(v, ensure_ascii=False), with repr() of floats
 * (the shortest digits that read back) and dict semantics for repeated
 * keys, and the truth value of a value. */
#ifndef DS4_PYJSON_H
#define DS4_PYJSON_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "ref/text/json.h"

/* Append json.dumps(v, ensure_ascii=False). */
void ds4_pyjson_dumps(ds4_buf *b, const ds4_json *v);

/* Python dict semantics for a parsed object: a repeated key keeps the place
 * of its first occurrence and the value of its last.  Returns the index of
 * the value to use for member i, or -1 when i repeats an earlier key. */
long ds4_pyjson_dict_member(const ds4_json *obj, size_t i);

/* bool(v) in Python; false for NULL (a missing value). */
bool ds4_pyjson_truthy(const ds4_json *v);

#endif
