/* RMSNorm (norm.h). */
#include "ref/forward/norm.h"

#include <math.h>

#include "quant/dot.h"

double ds4_norm_rms_scale(const float *x, uint32_t n, float eps) {
    double ss = ds4_dot_sumsq_f32(x, n);
    return 1.0 / sqrt(ss / n + (double)eps);
}

void ds4_norm_rms(const float *x, const float *w, uint32_t n, float eps, float *out) {
    double rs = ds4_norm_rms_scale(x, n, eps);
    for (uint32_t i = 0; i < n; i++) {
        double v = (double)x[i] * rs;
        if (w) v *= (double)w[i];
        out[i] = (float)v;
    }
}
