/* Deterministic transcendental functions (docs/NUMERICS.md §4).
 *
 * ds4ref never calls the C library for exp, log, sin, cos or pow: libm
 * implementations round differently in the last bit (glibc versions, musl,
 * macOS), and a last-bit difference in one exp of a softmax is a golden diff.
 * These functions are built from + - * /, comparisons, sqrt and exact bit
 * manipulation only, evaluated in a fixed order, so they return the same bits
 * on every IEEE-754 machine that rounds each double operation to double
 * (x86-64 SSE2, aarch64) when compiled without FMA contraction
 * (-ffp-contract=off) and without -ffast-math.
 *
 * Accuracy: every double function is computed with about 100 bits internally
 * (double-double) and rounded once, so results are correctly rounded except
 * for arguments whose exact result lies within ~2^-64 relative of a rounding
 * boundary; the error is below 0.501 ulp everywhere in the supported domains
 * (exp overflow/underflow, subnormal log arguments, sin/cos of any finite
 * argument included).  Subnormal exp results are rounded once onto the
 * subnormal grid too. */
#ifndef DS4_DETMATH_H
#define DS4_DETMATH_H

/* e^x.  Overflows to +Inf above ~709.78, underflows through the subnormals to
 * +0; exp(-Inf) = 0, exp(+Inf) = +Inf, exp(NaN) = NaN. */
double ds4_det_exp(double x);

/* Natural logarithm: log(0) = -Inf, log(x < 0) = NaN, log(+Inf) = +Inf;
 * subnormal arguments are exact inputs like any other. */
double ds4_det_log(double x);

/* log(1 + x) without cancellation for small x: log1p(-1) = -Inf,
 * log1p(x < -1) = NaN, log1p(±0) = ±0. */
double ds4_det_log1p(double x);

/* Sine and cosine of any finite argument (the reduction by pi/2 is exact:
 * the argument is multiplied by 2/pi to 256 bits with integer arithmetic).
 * Inf and NaN give NaN. */
double ds4_det_sin(double x);
double ds4_det_cos(double x);
void ds4_det_sincos(double x, double *s, double *c);

/* b^e for b >= 0 (b < 0 gives NaN: ds4ref never needs odd integer powers of
 * negative numbers).  pow(b, 0) = pow(1, e) = 1; pow(0, e) = 0 (e > 0) or
 * +Inf (e < 0). */
double ds4_det_pow(double b, double e);

/* b^e correctly rounded to float: the ~100-bit internal result is rounded to
 * f32 once, not through a double (the RoPE frequency table needs the power
 * correctly rounded to f32, docs/NUMERICS.md §5). */
float ds4_det_pow_f32(double b, double e);

/* RN_f32(a + b) for doubles a and b, with the sum taken exactly: the f32
 * result of the exact sum, never a double rounding.  a*b of two floats is
 * exact in double, so RN_f32(x0*c - x1*s) is
 * ds4_det_round_sum_f32((double)x0*c, -((double)x1*s)). */
float ds4_det_round_sum_f32(double a, double b);

/* Activation helpers.  Each is computed in double and returned unrounded to
 * the caller, which rounds the final value to f32 once.
 *   sigmoid(x)  = 1/(1+exp(-x)) for x >= 0, exp(x)/(1+exp(x)) for x < 0
 *   silu(x)     = x/(1+exp(-x))                          (torch F.silu)
 *   softplus(x) = x if x > 20, else log1p(exp(x))  (torch F.softplus, beta 1,
 *                                                    threshold 20) */
double ds4_det_sigmoid(double x);
double ds4_det_silu(double x);
double ds4_det_softplus(double x);

#endif
