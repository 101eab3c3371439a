/* Python's repr() of a float: the shortest decimal that reads back as the
 * same value, the closest to it among equally short ones, in Python's
 * notation (positional when the decimal point falls within (-4, 16] digits
 * of the first digit, "1.0" for integral values, else d.ddde+XX).  The one
 * such rule of ds4ref: json.dumps of the chat encoder (text/pyjson.c) and
 * the GGUF listing's f32/f64 values (quant/gguf_inspect.c) use it. */
#ifndef DS4_REPR_H
#define DS4_REPR_H

#include <stdbool.h>
#include <stddef.h>

/* Enough for any finite double: sign, 17 digits, the point, the zeros of
 * 0.0000ddd... or of a 16-digit integral part, an exponent. */
enum { DS4_REPR_MAX = 32 };

/* repr(x) of a finite x into out, NUL-terminated; returns its length.
 * as_f32: x holds a float32 value, and the digits need only read back as
 * that float (GGUF stores f32 metadata; Python has no such type, and the
 * shortest digits of the float are what a reader wrote). */
size_t ds4_repr_float(double x, bool as_f32, char out[DS4_REPR_MAX]);

#endif
