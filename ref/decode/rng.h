/* Seeded random numbers and sampling from logits, defined down to the bit so
 * that any other implementation can reproduce ds4ref's sampled streams.
 *
 * Generator: SplitMix64 (Steele, Lea, Flood 2014).  The state is one 64-bit
 * word s; each draw adds the golden-ratio increment and returns a mix of it:
 *
 *     s = s + 0x9E3779B97F4A7C15                       (mod 2^64)
 *     z = s
 *     z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9         (mod 2^64)
 *     z = (z ^ (z >> 27)) * 0x94D049BB133111EB         (mod 2^64)
 *     return z ^ (z >> 31)
 *
 * Seeding: a generator for (seed, stream) starts from s = seed ^ mix(stream),
 * where mix() is the three mixing lines above applied to `stream` itself
 * (mix(0) = 0, so stream 0 is the plain SplitMix64 sequence of `seed`:
 * seed 0 gives 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F).
 *
 * Uniform: u = (draw >> 11) * 2^-53, a double in [0, 1) with 53 random bits.
 *
 * Sampling a token from logits l[0..n) at temperature T > 0, all in double,
 * in token-id order:
 * (logits are finite, -inf or NaN; NaN and -inf get weight 0):
 *   1. m = the largest l[i] that is not NaN;
 *   2. w[i] = ds4_det_exp(((double)l[i] - (double)m) / T), and 0 for NaN logits
 *      (ds4_det_exp is ds4ref's own correctly rounded exp, base/detmath.h);
 *   3. S = w[0] + w[1] + ... + w[n-1], added left to right;
 *   4. one uniform u; t = u * S;
 *   5. walk c = w[0] + ... + w[i] (the same left-to-right sums) and return the
 *      first i with w[i] > 0 and t < c; if rounding leaves t >= c at the end,
 *      return the last i with w[i] > 0.
 * The same walk over any non-negative weights is ds4_rng_pick. */
#ifndef DS4_RNG_H
#define DS4_RNG_H

#include <stdint.h>

typedef struct ds4_rng {
    uint64_t s;
} ds4_rng;

void ds4_rng_init(ds4_rng *r, uint64_t seed, uint64_t stream);
uint64_t ds4_rng_next(ds4_rng *r);
double ds4_rng_uniform(ds4_rng *r);

/* Steps 1-3: w[0..n) (caller's array) and their sum S, which is 0 only when
 * every logit is NaN. */
double ds4_rng_temp_weights(const float *logits, uint32_t n, double temp, double *w);

/* Steps 4-5 over weights w[0..n) summing (left to right) to S > 0: one
 * uniform.  -1 when S <= 0 (no uniform drawn). */
int32_t ds4_rng_pick(ds4_rng *r, const double *w, uint32_t n, double S);

/* A token sampled from logits at temperature temp > 0 (steps 1-5); w is
 * scratch of n doubles.  -1 if every logit is NaN. */
int32_t ds4_rng_sample(ds4_rng *r, const float *logits, uint32_t n, double temp, double *w);

#endif
