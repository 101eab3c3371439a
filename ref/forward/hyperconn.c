/* Hyper-connections (mHC) and their Sinkhorn projection.
 *
 * The residual stream of DeepSeek V4 is n_hc parallel copies of the hidden
 * state.  Before a sublayer, hc_pre mixes them into one input vector with
 * weights derived from the state itself (sigmoid "pre" weights) and prepares a
 * doubly-stochastic combine matrix (Sinkhorn) and "post" weights; after the
 * sublayer, hc_post writes the output back into every stream.  The output head
 * collapses the streams once more with sigmoid weights only.
 *
 * Mirrors the official Block.hc_pre / hc_post, ParallelHead.hc_head and
 * kernel.hc_split_sinkhorn.  The mixes, Sinkhorn iterates and pre weights are
 * internal doubles; post and comb are stored as f32 for hc_post, and every
 * output row is rounded to f32 once. */
#include "ref/forward/hyperconn.h"

#include <math.h>
#include <stdlib.h>

#include <omp.h>

#include "base/detmath.h"
#include "ref/forward/norm.h"
#include "quant/actround.h"

/* Under a numerics profile: the product's input as ggml's deepseek4 graph
 * makes it, the state normalized first (ggml_rms_norm: squares in f32
 * summed in double, mean and scale in f32, one f32 product per value),
 * then rounded as the engine rounds inputs for the weight's type
 * (quant/actround.h). */
static void hc_norm_rounded(const ds4_config *c, uint8_t act, const float *x, float *xr, uint32_t n) {
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + (float)c->rms_eps);
    for (uint32_t i = 0; i < n; i++) xr[i] = x[i] * scale;
    ds4_actround_row(act, xr, xr, n);
}

/* What a multiply-add of one row at a time through ds4_dot_row costs in
 * ds4_worth_threads's unit (a multiply-add of the vector kernels, about 0.1
 * ns): 0.3 ns on the lent 64-core machine (0.12 ms for one call's 24 rows
 * of 16384), 2 ns on the 2-core one. */
enum { ROW_DOT_WORK = 4 };

/* mix[k] = (fn row k . x) * rsqrt(mean(x^2) + eps), the official order
 * (F.linear on the raw state, then the norm factor); under a profile, fn
 * row k . (the rounded normalized state).  Called for one token outside
 * any parallel region (decode), the rows are spread over the threads;
 * inside the callers' per-token loops they are not, since a nested team
 * would be made of new threads every time. */
static void hc_mixes(const ds4_config *c, const ds4_mat *fn, const float *x, double *mix) {
    uint32_t n = c->n_hc * c->n_embd;
    double rs = ds4_norm_rms_scale(x, n, c->rms_eps);
    float *xr = NULL;
    if (fn->act) {
        xr = malloc(sizeof(float) * n);
        if (!xr) {
            for (uint64_t k = 0; k < fn->rows; k++) mix[k] = NAN;
            return;
        }
        hc_norm_rounded(c, fn->act, x, xr, n);
        x = xr;
        rs = 1.0;
    }
#pragma omp parallel for schedule(static) \
    if (omp_get_level() == 0 && ds4_worth_threads((double)fn->rows * n * ROW_DOT_WORK))
    for (uint64_t k = 0; k < fn->rows; k++)
        mix[k] = ds4_dot_row(fn->type, fn->data + k * fn->row_bytes, x, n) * rs;
    free(xr);
}

/* Elements the HC loops below keep in double at a time: each element's
 * additions keep their order, and a span of elements goes through each
 * step together, so the compiler can use vectors across the elements
 * (contiguous in every array) without reordering anything. */
enum { HC_SPAN = 64 };

/* y[d] = sum_h w[h] * x[h][d], h ascending, in double. */
static void hc_collapse(const ds4_config *c, const double *w, const float *x, float *y) {
    uint32_t n = c->n_embd;
    double acc[HC_SPAN];
    for (uint32_t d0 = 0; d0 < n; d0 += HC_SPAN) {
        uint32_t m = n - d0 < HC_SPAN ? n - d0 : HC_SPAN;
        for (uint32_t d = 0; d < m; d++) acc[d] = 0;
        for (uint32_t h = 0; h < c->n_hc; h++) {
            const float *xh = x + (uint64_t)h * n + d0;
            for (uint32_t d = 0; d < m; d++) acc[d] += w[h] * (double)xh[d];
        }
        for (uint32_t d = 0; d < m; d++) y[d0 + d] = (float)acc[d];
    }
}

/* Row softmax (+eps), then alternate column and row normalization: the
 * official hc_split_sinkhorn, which ends with a column pass.  cm is hc x hc,
 * row i = input stream, column j = output stream. */
void ds4_hc_sinkhorn(double *cm, uint32_t hc, uint32_t iters, double eps) {
    for (uint32_t i = 0; i < hc; i++) {
        double *row = cm + i * hc;
        double mx = row[0];
        for (uint32_t j = 1; j < hc; j++)
            if (row[j] > mx) mx = row[j];
        double s = 0;
        for (uint32_t j = 0; j < hc; j++) {
            row[j] = ds4_det_exp(row[j] - mx);
            s += row[j];
        }
        for (uint32_t j = 0; j < hc; j++) row[j] = row[j] / s + eps;
    }
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            for (uint32_t i = 0; i < hc; i++) {
                double s = 0;
                for (uint32_t j = 0; j < hc; j++) s += cm[i * hc + j];
                for (uint32_t j = 0; j < hc; j++) cm[i * hc + j] /= s + eps;
            }
        }
        for (uint32_t j = 0; j < hc; j++) {
            double s = 0;
            for (uint32_t i = 0; i < hc; i++) s += cm[i * hc + j];
            for (uint32_t i = 0; i < hc; i++) cm[i * hc + j] /= s + eps;
        }
    }
}

void ds4_hc_pre(const ds4_config *c, const ds4_mat *fn, const ds4_vec *scale,
                const ds4_vec *base, const float *x, float *y, float *post, float *comb) {
    uint32_t hc = c->n_hc;
    double mix[DS4_MAX_HC * (DS4_MAX_HC + 2)], pre[DS4_MAX_HC], cm[DS4_MAX_HC * DS4_MAX_HC];
    double eps = (double)c->hc_eps;
    const float *s = scale->v, *b = base->v;
    hc_mixes(c, fn, x, mix);
    for (uint32_t h = 0; h < hc; h++) {
        pre[h] = ds4_det_sigmoid(mix[h] * s[0] + b[h]) + eps;
        post[h] = (float)(2.0 * ds4_det_sigmoid(mix[hc + h] * s[1] + b[hc + h]));
    }
    for (uint32_t k = 0; k < hc * hc; k++) cm[k] = mix[2 * hc + k] * s[2] + b[2 * hc + k];
    ds4_hc_sinkhorn(cm, hc, c->sinkhorn_iter, eps);
    for (uint32_t k = 0; k < hc * hc; k++) comb[k] = (float)cm[k];
    hc_collapse(c, pre, x, y);
}

void ds4_hc_post(const ds4_config *c, const float *f, const float *x, const float *post,
                 const float *comb, float *out) {
    uint32_t hc = c->n_hc, n = c->n_embd;
    /* Each element adds post*f, then the streams in ascending order. */
    double acc[HC_SPAN];
    for (uint32_t j = 0; j < hc; j++)
        for (uint32_t d0 = 0; d0 < n; d0 += HC_SPAN) {
            uint32_t m = n - d0 < HC_SPAN ? n - d0 : HC_SPAN;
            for (uint32_t d = 0; d < m; d++) acc[d] = (double)post[j] * (double)f[d0 + d];
            for (uint32_t i = 0; i < hc; i++) {
                const double w = comb[i * hc + j];
                const float *xi = x + (uint64_t)i * n + d0;
                for (uint32_t d = 0; d < m; d++) acc[d] += w * (double)xi[d];
            }
            for (uint32_t d = 0; d < m; d++) out[(uint64_t)j * n + d0 + d] = (float)acc[d];
        }
}

void ds4_hc_head(const ds4_config *c, const ds4_mat *fn, const ds4_vec *scale,
                 const ds4_vec *base, const float *x, float *y) {
    double mix[DS4_MAX_HC], w[DS4_MAX_HC];
    hc_mixes(c, fn, x, mix);
    for (uint32_t h = 0; h < c->n_hc; h++)
        w[h] = ds4_det_sigmoid(mix[h] * scale->v[0] + base->v[h]) + (double)c->hc_eps;
    hc_collapse(c, w, x, y);
}
