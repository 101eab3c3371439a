/* Rotary position embedding exactly as the official DeepSeek V4
 * precompute_freqs_cis + apply_rotary_emb (docs/NUMERICS.md §5).
 *
 * A ds4_rope holds the f32 inverse-frequency table of one (base, YaRN)
 * setting; DS4 Flash needs two: ratio-0 layers (and MTP) without YaRN, and
 * compressed layers with compress_rope_freq_base and YaRN.  (cos, sin) pairs
 * are computed on demand for a position, because a table for the whole
 * context would be large (1M positions x 32 pairs x 8 bytes) and the cost of
 * one position (32 sincos) is small next to the rows it rotates: compute them
 * once per position with ds4_rope_cos_sin() and rotate every head with
 * ds4_rope_rotate().  Everything here is thread-safe (no hidden state).
 *
 * Layout: the rotated dims are the LAST rope_dim dims of a head, as
 * interleaved pairs (x[2j], x[2j+1]) = (real, imag), j = 0 .. rope_dim/2-1;
 * callers pass a pointer to the first rotated dim. */
#ifndef DS4_ROPE_H
#define DS4_ROPE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

enum { DS4_ROPE_MAX_PAIRS = 128 };

/* YaRN parameters (official ModelArgs rope_factor, original_seq_len,
 * beta_fast, beta_slow). */
typedef struct ds4_yarn {
    double factor;
    uint32_t orig_ctx;
    double beta_fast;
    double beta_slow;
} ds4_yarn;

typedef struct ds4_rope {
    uint32_t n_pairs;               /* rope_dim / 2 */
    bool yarn;
    int32_t yarn_low, yarn_high;    /* find_correction_range result (YaRN only) */
    float freq[DS4_ROPE_MAX_PAIRS]; /* inverse frequencies, after YaRN */
} ds4_rope;

/* Build the table:
 *   freq_j = fl32(1 / fl32(base^fl32(2j/rope_dim)))   (power correctly rounded
 *            to f32 from fl32(base), as torch's f32 pow computes it)
 * and with YaRN, in f32 operations in the official order:
 *   ramp_j = clamp((j - low) / (high - low), 0, 1),  smooth_j = 1 - ramp_j
 *   freq_j = freq_j / factor * (1 - smooth_j) + freq_j * smooth_j
 * where low/high come from find_correction_range in double (floor/ceil,
 * clamped to [0, rope_dim-1]).  yarn == NULL disables YaRN. */
int ds4_rope_init(ds4_rope *r, uint32_t rope_dim, double base, const ds4_yarn *yarn,
                  ds4err *err);

/* cs[2j] = cos(a_j), cs[2j+1] = sin(a_j) rounded to f32, for the f32 angle
 * a_j = fl32(fl32(pos) * freq_j), j < n_pairs; sin/cos from detmath. */
void ds4_rope_cos_sin(const ds4_rope *r, uint32_t pos, float *cs);

/* Rotate n_pairs interleaved pairs of x by the angles of cs:
 *   x0' = RN_f32(x0*c - x1*s),  x1' = RN_f32(x0*s + x1*c)
 * with the products and the sum exact (rounded once to f32); inverse uses -s
 * (the conjugate, used to un-rotate the attention output). */
void ds4_rope_rotate(float *x, const float *cs, uint32_t n_pairs, bool inverse);

/* ds4_rope_cos_sin + ds4_rope_rotate for one row. */
void ds4_rope_apply(const ds4_rope *r, float *x, uint32_t pos, bool inverse);

#endif
