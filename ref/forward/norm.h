/* RMSNorm (official RMSNorm): x * rsqrt(mean(x^2) + eps) * w, with the sum
 * of squares in the canonical order (quant/dot.h) and every product in
 * double, rounded to f32 once per element. */
#ifndef DS4_NORM_H
#define DS4_NORM_H

#include <stdint.h>

/* 1/sqrt(mean(x^2) + eps) of n values, in double. */
double ds4_norm_rms_scale(const float *x, uint32_t n, float eps);

/* RMSNorm with weight (w may be NULL for no weight); out may alias x. */
void ds4_norm_rms(const float *x, const float *w, uint32_t n, float eps, float *out);

#endif
