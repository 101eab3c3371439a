/* The KV compressor: gated softmax pooling of `ratio` consecutive positions
 * into one compressed KV row (official Compressor).
 *
 * Every position stores its projected kv and gate score (+ the learned
 * absolute position embedding of its offset in the window).  When a position
 * completes a window, the window is pooled: per dimension, a softmax over the
 * window's scores weights its kv values.  Ratio-4 compressors overlap: their
 * projections are twice as wide, the first half of the previous window's
 * entries joins the softmax of the current window's second half, so each
 * compressed row sees 8 positions.  The pooled row is RMS-normed, RoPE'd at
 * the window's first position and, with QAT, rounded the official way (FP8 for
 * attention rows; Hadamard + FP4 for indexer rows). */
#include "ref/forward/compressor.h"

#include <math.h>
#include <string.h>

#include "base/detmath.h"
#include "ref/forward/norm.h"
#include "quant/qat.h"
#include "quant/actround.h"
#include "quant/types.h"

void ds4_compressor_store(ds4_comp_state *cs, const ds4_mat *ape, uint32_t pos,
                    const float *kv, const float *sc) {
    float ape_row[DS4_MAX_COMP_WIDTH];
    uint32_t w = cs->width;
    ds4_types_dequant_row(ape->type, ape->data + (uint64_t)(pos % cs->ratio) * ape->row_bytes,
                    ape_row, w);
    float *hk = ds4_comp_hist_kv(cs, pos), *hs = ds4_comp_hist_sc(cs, pos);
    memcpy(hk, kv, sizeof(float) * w);
    for (uint32_t i = 0; i < w; i++) hs[i] = sc[i] + ape_row[i];
}

/* Pool dimension d of the window ending at pos.  Entries in the official
 * order: the previous window's first-half lanes (ratio 4 only), then the
 * current window's lanes.  sum(e*kv)/sum(e) with e = exp(score - max), all in
 * double, one rounding. */
static float pool_dim(const ds4_comp_state *cs, uint32_t pos, uint32_t d) {
    uint32_t r = cs->ratio, start = pos + 1 - r;
    bool overlap = r == 4;
    uint32_t first = overlap && start >= r ? start - r : start;
    double mx = -INFINITY;
    for (uint32_t p = first; p <= pos; p++) {
        uint32_t col = overlap && p >= start ? cs->dim + d : d;
        double s = ds4_comp_hist_sc(cs, p)[col];
        if (s > mx) mx = s;
    }
    double den = 0, num = 0;
    for (uint32_t p = first; p <= pos; p++) {
        uint32_t col = overlap && p >= start ? cs->dim + d : d;
        double e = ds4_det_exp((double)ds4_comp_hist_sc(cs, p)[col] - mx);
        den += e;
        num += e * (double)ds4_comp_hist_kv(cs, p)[col];
    }
    return (float)(num / den);
}

void ds4_compressor_emit(ds4_comp_state *cs, const ds4_vec *norm, float eps, const ds4_rope *rope,
                   uint32_t n_rot, uint32_t pos, bool indexer, bool qat, bool f16_rows) {
    uint32_t dim = cs->dim, start = pos + 1 - cs->ratio;
    float *out = ds4_comp_row(cs, pos / cs->ratio);
    for (uint32_t d = 0; d < dim; d++) out[d] = pool_dim(cs, pos, d);
    ds4_norm_rms(out, norm->v, dim, eps, out);
    ds4_rope_apply(rope, out + dim - n_rot, start, false);
    /* Sizes were checked at load: dim is a power of two for the indexer,
     * dim - n_rot a multiple of 64 for attention rows. */
    if (indexer) {
        ds4_qat_hadamard_f32(out, dim, NULL);
        if (qat) ds4_qat_fp4_e2m1(out, dim, NULL);
    } else if (qat) {
        ds4_qat_fp8_e4m3(out, dim - n_rot, NULL);
    }
    if (f16_rows) ds4_actround_row(DS4_ACT_F16, out, out, dim);
}
