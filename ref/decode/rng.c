/* SplitMix64 and categorical sampling; rng.h defines every step. */
#include "ref/decode/rng.h"

#include "base/detmath.h"

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void ds4_rng_init(ds4_rng *r, uint64_t seed, uint64_t stream) {
    r->s = seed ^ mix(stream);
}

uint64_t ds4_rng_next(ds4_rng *r) {
    r->s += 0x9E3779B97F4A7C15ull;
    return mix(r->s);
}

double ds4_rng_uniform(ds4_rng *r) {
    return (double)(ds4_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double ds4_rng_temp_weights(const float *logits, uint32_t n, double temp, double *w) {
    double m = 0;
    int have = 0;
    for (uint32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (v != v) continue;
        if (!have || v > m) m = v;
        have = 1;
    }
    double S = 0;
    for (uint32_t i = 0; i < n; i++) {
        float v = logits[i];
        w[i] = v != v ? 0.0 : ds4_det_exp(((double)v - m) / temp);
        S += w[i];
    }
    return S;
}

int32_t ds4_rng_pick(ds4_rng *r, const double *w, uint32_t n, double S) {
    if (!(S > 0)) return -1;
    double t = ds4_rng_uniform(r) * S, c = 0;
    int32_t last = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!(w[i] > 0)) continue;
        c += w[i];
        last = (int32_t)i;
        if (t < c) return last;
    }
    return last;
}

int32_t ds4_rng_sample(ds4_rng *r, const float *logits, uint32_t n, double temp, double *w) {
    double S = ds4_rng_temp_weights(logits, n, temp, w);
    return ds4_rng_pick(r, w, n, S);
}
