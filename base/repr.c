/* Python's repr() of a float (repr.h). */
#include "base/repr.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether mant * 10^e10 reads back as x (as a float when as_f32). */
static bool reads_back(uint64_t mant, int e10, double x, bool as_f32) {
    char s[48];
    snprintf(s, sizeof(s), "%llue%d", (unsigned long long)mant, e10);
    return as_f32 ? strtof(s, NULL) == (float)x : strtod(s, NULL) == x;
}

/* The shortest decimal mant * 10^e10 that reads back as x > 0, the closest
 * to it among equally short ones.  For p digits the correctly rounded value
 * is tried first; at a power of two the rounding interval is lopsided, and
 * then only the next p-digit value on the wide side may read back. */
static void shortest_digits(double x, bool as_f32, uint64_t *mant_out, int *e10_out) {
    for (int prec = 1;; prec++) {
        char s[48];
        snprintf(s, sizeof(s), "%.*e", prec - 1, x);
        uint64_t mant = 0;
        char *p = s;
        for (; *p != 'e'; p++)
            if (*p != '.') mant = mant * 10 + (uint64_t)(*p - '0');
        int e10 = atoi(p + 1) - (prec - 1);
        /* 17 digits always read back. */
        if (prec == 17 || reads_back(mant, e10, x, as_f32)) { *mant_out = mant; *e10_out = e10; return; }
        if (reads_back(mant + 1, e10, x, as_f32)) { *mant_out = mant + 1; *e10_out = e10; return; }
        if (mant > 1 && reads_back(mant - 1, e10, x, as_f32)) { *mant_out = mant - 1; *e10_out = e10; return; }
    }
}

/* Appends s[0..n) at out[*o]. */
static void put(char *out, size_t *o, const char *s, size_t n) {
    memcpy(out + *o, s, n);
    *o += n;
}

static void put_zeros(char *out, size_t *o, int n) {
    for (int i = 0; i < n; i++) out[(*o)++] = '0';
}

size_t ds4_repr_float(double x, bool as_f32, char out[DS4_REPR_MAX]) {
    size_t o = 0;
    if (signbit(x)) {
        out[o++] = '-';
        x = -x;
    }
    if (x == 0) {
        put(out, &o, "0.0", 3);
        out[o] = '\0';
        return o;
    }
    uint64_t mant;
    int e10;
    shortest_digits(x, as_f32, &mant, &e10);
    while (mant % 10 == 0) {
        mant /= 10;
        e10++;
    }
    char digits[24];
    int nd = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)mant);
    int decpt = nd + e10;   /* value = 0.DIGITS * 10^decpt */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            put(out, &o, "0.", 2);
            put_zeros(out, &o, -decpt);
            put(out, &o, digits, (size_t)nd);
        } else if (decpt >= nd) {
            put(out, &o, digits, (size_t)nd);
            put_zeros(out, &o, decpt - nd);
            put(out, &o, ".0", 2);
        } else {
            put(out, &o, digits, (size_t)decpt);
            put(out, &o, ".", 1);
            put(out, &o, digits + decpt, (size_t)(nd - decpt));
        }
    } else {
        put(out, &o, digits, 1);
        if (nd > 1) {
            put(out, &o, ".", 1);
            put(out, &o, digits + 1, (size_t)nd - 1);
        }
        o += (size_t)snprintf(out + o, DS4_REPR_MAX - o, "e%c%02d", decpt - 1 < 0 ? '-' : '+',
                              abs(decpt - 1));
    }
    out[o] = '\0';
    return o;
}
