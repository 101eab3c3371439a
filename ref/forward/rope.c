/* RoPE / YaRN tables and rotation (docs/NUMERICS.md §5).
 *
 * Mirrors the official DeepSeek V4 model.py (maxtext@8ddb0a60
 * tests/utils/deepseek4_reference/): precompute_freqs_cis builds the table in
 * torch float32 and apply_rotary_emb multiplies interleaved pairs by it as
 * complex numbers (conjugated for the inverse).  Computing the table any
 * other way (float64, or ds4's iterated theta_scale product) moves the
 * logits by ~2e-5, more than an entire f32 activation path costs.
 *
 * Why the results are portable:
 *   - every f32 step of the official table (1/pow, the YaRN blend, pos*freq)
 *     is one IEEE f32 operation here too, each rounded to float on its own
 *     (FLT_EVAL_METHOD 0, no contraction);
 *   - the one transcendental f32 step, base^(2j/dim), is taken correctly
 *     rounded from detmath (~100-bit internal result rounded once to f32),
 *     which is what the official table holds (a libm powf is 1 ulp off in
 *     a few entries);
 *   - YaRN's correction range uses detmath's log and exact floor/ceil;
 *   - cos/sin of the f32 angle come from detmath in double, rounded to f32;
 *     torch's f32 sin/cos differ from that in ~1% of the official entries by
 *     1 ulp, which we accept: ours is the reproducible choice;
 *   - the rotation forms exact products and rounds the exact sum once. */
#include "ref/forward/rope.h"

#include <float.h>
#include <math.h>
#include <stddef.h>

#include "base/detmath.h"

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "ds4ref needs each float/double operation rounded to its own type (SSE2, aarch64; no x87)"
#endif

static const double PI = 0x1.921fb54442d18p+1; /* Python's math.pi */

/* find_correction_dim: the pair index (in units of dims) whose wavelength
 * makes n_rot rotations over orig positions; evaluated in the official
 * order. */
static double correction_dim(double n_rot, uint32_t dim, double base, uint32_t orig) {
    return dim * ds4_det_log(orig / (n_rot * 2 * PI)) / (2 * ds4_det_log(base));
}

/* A floor/ceil result as an int; the clamp keeps the conversion defined and
 * never triggers for sane parameters. */
static int32_t to_int(double v) {
    if (!(v > -1e9))
        return -1000000000;
    if (v > 1e9)
        return 1000000000;
    return (int32_t)v;
}

static int check_params(uint32_t rope_dim, double base, const ds4_yarn *y, ds4err *err) {
    if (rope_dim < 2 || rope_dim % 2 || rope_dim / 2 > DS4_ROPE_MAX_PAIRS)
        return ds4_err_set(err, DS4_E_ARG, "rope: dimension %u is not an even number in 2..%d",
                          rope_dim, 2 * DS4_ROPE_MAX_PAIRS);
    if (!(base > 1.0) || base > FLT_MAX)
        return ds4_err_set(err, DS4_E_ARG, "rope: frequency base %g is not a float > 1", base);
    if (y && !(y->factor > 0.0 && y->factor <= FLT_MAX && y->orig_ctx > 0 &&
               y->beta_fast > 0.0 && y->beta_fast <= FLT_MAX &&
               y->beta_slow > 0.0 && y->beta_slow <= FLT_MAX))
        return ds4_err_set(err, DS4_E_ARG,
                          "rope: YaRN needs factor, original context and betas > 0 "
                          "(got %g, %u, %g, %g)",
                          y->factor, y->orig_ctx, y->beta_fast, y->beta_slow);
    return 0;
}

/* The official YaRN blend applied to r->freq (f32 operations). */
static void apply_yarn(ds4_rope *r, uint32_t dim, double base, const ds4_yarn *y) {
    int32_t low = to_int(floor(correction_dim(y->beta_fast, dim, base, y->orig_ctx)));
    int32_t high = to_int(ceil(correction_dim(y->beta_slow, dim, base, y->orig_ctx)));
    if (low < 0)
        low = 0;
    if (high > (int32_t)dim - 1)
        high = (int32_t)dim - 1;
    r->yarn_low = low;
    r->yarn_high = high;

    /* linear_ramp_factor: max += 0.001 when min == max, in Python doubles;
     * torch then divides the f32 tensor by that scalar in f32. */
    double span = low == high ? ((double)high + 0.001) - low : (double)high - low;
    float spanf = (float)span, lowf = (float)low, factor = (float)y->factor;
    for (uint32_t j = 0; j < r->n_pairs; j++) {
        float ramp = ((float)j - lowf) / spanf;
        if (ramp < 0.0f)
            ramp = 0.0f;
        if (ramp > 1.0f)
            ramp = 1.0f;
        float smooth = 1.0f - ramp;
        float f = r->freq[j];
        r->freq[j] = f / factor * (1.0f - smooth) + f * smooth;
    }
}

int ds4_rope_init(ds4_rope *r, uint32_t rope_dim, double base, const ds4_yarn *yarn,
                  ds4err *err) {
    if (check_params(rope_dim, base, yarn, err))
        return -1;
    r->n_pairs = rope_dim / 2;
    r->yarn = yarn != NULL;
    r->yarn_low = r->yarn_high = 0;

    /* torch: 1.0 / (base ** (arange(0, dim, 2, f32) / dim)), all f32. */
    float basef = (float)base, dimf = (float)rope_dim;
    for (uint32_t j = 0; j < r->n_pairs; j++) {
        float ex = (float)(2 * j) / dimf;
        r->freq[j] = 1.0f / ds4_det_pow_f32(basef, ex);
    }
    if (yarn)
        apply_yarn(r, rope_dim, base, yarn);
    return 0;
}

void ds4_rope_cos_sin(const ds4_rope *r, uint32_t pos, float *cs) {
    float p = (float)pos;
    for (uint32_t j = 0; j < r->n_pairs; j++) {
        float angle = p * r->freq[j];
        double s, c;
        ds4_det_sincos(angle, &s, &c);
        cs[2 * j] = (float)c;
        cs[2 * j + 1] = (float)s;
    }
}

void ds4_rope_rotate(float *x, const float *cs, uint32_t n_pairs, bool inverse) {
    for (uint32_t j = 0; j < n_pairs; j++) {
        double c = cs[2 * j], s = inverse ? -(double)cs[2 * j + 1] : cs[2 * j + 1];
        double x0 = x[2 * j], x1 = x[2 * j + 1];
        /* Products of two floats are exact in double. */
        x[2 * j] = ds4_det_round_sum_f32(x0 * c, -(x1 * s));
        x[2 * j + 1] = ds4_det_round_sum_f32(x0 * s, x1 * c);
    }
}

void ds4_rope_apply(const ds4_rope *r, float *x, uint32_t pos, bool inverse) {
    float cs[2 * DS4_ROPE_MAX_PAIRS];
    ds4_rope_cos_sin(r, pos, cs);
    ds4_rope_rotate(x, cs, r->n_pairs, inverse);
}
