/* A small strict JSON parser (RFC 8259) and a JSON string writer.
 *
 * ds4ref reads JSON in a few places: Hugging Face tokenizer.json files, the
 * official chat encoder's message lists and test fixtures.  None of them need
 * streaming, so the parser takes a whole buffer and builds a tree that lives
 * in one arena and is freed in one call.
 *
 * Strict means: no comments, no trailing commas, no NaN/Infinity, no leading
 * zeros, no raw control characters or invalid UTF-8 inside strings, no lone
 * surrogates in \u escapes, nothing but whitespace after the top value.
 * Errors name the buffer, the byte offset and what was expected.
 *
 * Object members keep their order and duplicates; ds4_json_get() returns the
 * last member of a name, like Python's json.loads (the official chat encoder
 * is Python, and its output depends on this). */
#ifndef DS4_JSON_H
#define DS4_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

/* Arrays and objects nested deeper than this are rejected: the parser is
 * recursive and must not run out of stack on hostile input. */
#define DS4_JSON_MAX_DEPTH 128

typedef enum ds4_json_type {
    DS4_JSON_NULL,
    DS4_JSON_FALSE,
    DS4_JSON_TRUE,
    DS4_JSON_NUMBER,
    DS4_JSON_STRING,
    DS4_JSON_ARRAY,
    DS4_JSON_OBJECT
} ds4_json_type;

typedef struct ds4_json ds4_json;
struct ds4_json {
    ds4_json_type type;
    size_t offset;      /* byte offset of the value's first byte in the buffer */
    /* STRING: the decoded UTF-8 text, NUL-terminated (it may itself contain
     * NUL bytes from \u0000: use len).  NUMBER: the literal as written. */
    const char *str;
    size_t len;
    double num;         /* NUMBER: the literal converted by strtod (C locale) */
    size_t n;           /* ARRAY: elements; OBJECT: members */
    ds4_json *elems;    /* ARRAY: the elements; OBJECT: the member values */
    ds4_json *keys;     /* OBJECT: keys[i] (a STRING) names elems[i] */
};

typedef struct ds4_json_doc ds4_json_doc;

/* Parse buf[0..len) into a new document.  `name` (a file name, say) prefixes
 * error messages.  On failure *out is NULL and nothing needs freeing. */
int ds4_json_parse(const char *buf, size_t len, const char *name, ds4_json_doc **out,
                   ds4err *err);
const ds4_json *ds4_json_root(const ds4_json_doc *doc);
void ds4_json_free(ds4_json_doc *doc);

/* The last member named `key` (NUL-terminated) of an object; NULL when there
 * is none or obj is not an object. */
const ds4_json *ds4_json_get(const ds4_json *obj, const char *key);

/* True when v is a NUMBER written as plain digits whose value is at most
 * max, stored in *out: the literal itself is read, not the double strtod
 * made of it, so sizes and counts written 1e3, 2.0, -0 or past max are
 * refused rather than rounded.  False for NULL (a member that is absent). */
bool ds4_json_uint(const ds4_json *v, uint64_t max, uint64_t *out);

/* True when v is a STRING equal to the NUL-terminated s. */
bool ds4_json_is_str(const ds4_json *v, const char *s);

/* Append s[0..n) as a JSON string literal with the escapes Python's
 * json.dumps(..., ensure_ascii=False) produces: \" \\ \b \f \n \r \t, other
 * bytes below 0x20 as \u00xx (lowercase hex), everything else verbatim. */
int ds4_json_put_str(ds4_buf *b, const char *s, size_t n);

#endif
