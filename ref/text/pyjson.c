/* Python's json.dumps and truth values, on parsed JSON (pyjson.h). */
#include "text/pyjson.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ds4_py_truthy(const ds4_json *v) {
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

/* Whether mant * 10^e10 reads back as x. */
static bool reads_back(uint64_t mant, int e10, double x) {
    char s[48];
    snprintf(s, sizeof(s), "%llue%d", (unsigned long long)mant, e10);
    return strtod(s, NULL) == x;
}

/* The shortest decimal mant * 10^e10 that reads back as |x|, the closest to
 * it among equally short ones: what Python's repr(float) prints.  For p
 * digits the correctly rounded value is tried first; at a power of two the
 * rounding interval is lopsided, and then only the next p-digit value on the
 * wide side may read back. */
static void shortest_digits(double x, uint64_t *mant_out, int *e10_out) {
    for (int prec = 1;; prec++) {
        char s[48];
        snprintf(s, sizeof(s), "%.*e", prec - 1, x);
        uint64_t mant = 0;
        char *p = s;
        for (; *p != 'e'; p++)
            if (*p != '.') mant = mant * 10 + (uint64_t)(*p - '0');
        int e10 = atoi(p + 1) - (prec - 1);
        /* 17 digits always read back. */
        if (prec == 17 || reads_back(mant, e10, x)) { *mant_out = mant; *e10_out = e10; return; }
        if (reads_back(mant + 1, e10, x)) { *mant_out = mant + 1; *e10_out = e10; return; }
        if (mant > 1 && reads_back(mant - 1, e10, x)) { *mant_out = mant - 1; *e10_out = e10; return; }
    }
}

/* repr(float): shortest digits, in fixed notation when the decimal point
 * falls in (-4, 16] digits from the first digit, else as d.ddde±XX. */
static void put_py_float(ds4_buf *b, double x) {
    if (isinf(x)) {
        ds4_buf_puts(b, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (x == 0) {
        ds4_buf_puts(b, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    if (x < 0) {
        ds4_buf_put(b, "-", 1);
        x = -x;
    }
    uint64_t mant;
    int e10;
    shortest_digits(x, &mant, &e10);
    while (mant % 10 == 0) {
        mant /= 10;
        e10++;
    }
    char digits[24];
    int nd = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)mant);
    int decpt = nd + e10;   /* value = 0.DIGITS * 10^decpt */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            ds4_buf_puts(b, "0.");
            for (int i = 0; i < -decpt; i++) ds4_buf_put(b, "0", 1);
            ds4_buf_put(b, digits, (size_t)nd);
        } else if (decpt >= nd) {
            ds4_buf_put(b, digits, (size_t)nd);
            for (int i = nd; i < decpt; i++) ds4_buf_put(b, "0", 1);
            ds4_buf_puts(b, ".0");
        } else {
            ds4_buf_put(b, digits, (size_t)decpt);
            ds4_buf_put(b, ".", 1);
            ds4_buf_put(b, digits + decpt, (size_t)(nd - decpt));
        }
        return;
    }
    char e[16];
    ds4_buf_put(b, digits, 1);
    if (nd > 1) {
        ds4_buf_put(b, ".", 1);
        ds4_buf_put(b, digits + 1, (size_t)nd - 1);
    }
    snprintf(e, sizeof(e), "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    ds4_buf_puts(b, e);
}

static bool same_key(const ds4_json *obj, size_t i, size_t j) {
    return obj->keys[i].len == obj->keys[j].len &&
           memcmp(obj->keys[i].str, obj->keys[j].str, obj->keys[i].len) == 0;
}

long ds4_py_dict_member(const ds4_json *obj, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (same_key(obj, i, j)) return -1;
    size_t last = i;
    for (size_t j = i + 1; j < obj->n; j++)
        if (same_key(obj, i, j)) last = j;
    return (long)last;
}

void ds4_py_dumps(ds4_buf *b, const ds4_json *v) {
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
            ds4_py_dumps(b, &v->elems[i]);
        }
        ds4_buf_put(b, "]", 1);
        return;
    case DS4_JSON_OBJECT: {
        ds4_buf_put(b, "{", 1);
        bool first = true;
        for (size_t i = 0; i < v->n; i++) {
            long k = ds4_py_dict_member(v, i);
            if (k < 0) continue;
            if (!first) ds4_buf_puts(b, ", ");
            first = false;
            ds4_json_put_str(b, v->keys[i].str, v->keys[i].len);
            ds4_buf_puts(b, ": ");
            ds4_py_dumps(b, &v->elems[k]);
        }
        ds4_buf_put(b, "}", 1);
        return;
    }
    }
}
