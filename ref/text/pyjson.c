/* Python's json.dumps and truth values, on parsed JSON (pyjson.h). */
#include "ref/text/pyjson.h"

#include <math.h>
#include <string.h>

#include "base/repr.h"

bool ds4_pyjson_truthy(const ds4_json *v) {
    if (!v) return false;
    switch (v->type) {
    case DS4_JSON_NULL: case DS4_JSON_FALSE: return false;
    case DS4_JSON_TRUE: return true;
    case DS4_JSON_NUMBER: return v->num != 0;
    case DS4_JSON_STRING: return v->len > 0;
    case DS4_JSON_ARRAY: case DS4_JSON_OBJECT: return v->n > 0;
    }
    return false;
}

static bool is_float_literal(const ds4_json *v) {
    return strpbrk(v->str, ".eE") != NULL;
}

/* repr(float) (base/repr.h), and json.dumps's spelling of the infinities
 * (a JSON number too large for a double reads as one). */
static void put_py_float(ds4_buf *b, double x) {
    if (isinf(x)) {
        ds4_buf_puts(b, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    char repr[DS4_REPR_MAX];
    ds4_buf_put(b, repr, ds4_repr_float(x, false, repr));
}

static bool same_key(const ds4_json *obj, size_t i, size_t j) {
    return obj->keys[i].len == obj->keys[j].len &&
           memcmp(obj->keys[i].str, obj->keys[j].str, obj->keys[i].len) == 0;
}

long ds4_pyjson_dict_member(const ds4_json *obj, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (same_key(obj, i, j)) return -1;
    size_t last = i;
    for (size_t j = i + 1; j < obj->n; j++)
        if (same_key(obj, i, j)) last = j;
    return (long)last;
}

void ds4_pyjson_dumps(ds4_buf *b, const ds4_json *v) {
    switch (v->type) {
    case DS4_JSON_NULL: ds4_buf_puts(b, "null"); return;
    case DS4_JSON_FALSE: ds4_buf_puts(b, "false"); return;
    case DS4_JSON_TRUE: ds4_buf_puts(b, "true"); return;
    case DS4_JSON_NUMBER:
        if (is_float_literal(v)) put_py_float(b, v->num);
        else if (strcmp(v->str, "-0") == 0) ds4_buf_puts(b, "0");   /* int("-0") == 0 */
        else ds4_buf_put(b, v->str, v->len);
        return;
    case DS4_JSON_STRING: ds4_json_put_str(b, v->str, v->len); return;
    case DS4_JSON_ARRAY:
        ds4_buf_put(b, "[", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i) ds4_buf_puts(b, ", ");
            ds4_pyjson_dumps(b, &v->elems[i]);
        }
        ds4_buf_put(b, "]", 1);
        return;
    case DS4_JSON_OBJECT: {
        ds4_buf_put(b, "{", 1);
        bool first = true;
        for (size_t i = 0; i < v->n; i++) {
            long k = ds4_pyjson_dict_member(v, i);
            if (k < 0) continue;
            if (!first) ds4_buf_puts(b, ", ");
            first = false;
            ds4_json_put_str(b, v->keys[i].str, v->keys[i].len);
            ds4_buf_puts(b, ": ");
            ds4_pyjson_dumps(b, &v->elems[k]);
        }
        ds4_buf_put(b, "}", 1);
        return;
    }
    }
}
