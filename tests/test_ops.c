/* Every op of the forward pass against a formula computed naively in double
 * on the op's own inputs, one test per op, independent of the forward pass
 * and of the goldens (in the spirit of llama.cpp's test-backend-ops).
 *
 * The naive side is written from the official DeepSeek V4 definitions
 * (model.py and kernel.py, as vectors/official/README.md and the oracle
 * README §5 state them): double arithmetic in plain loops, the C library's
 * exp/log1p/sqrt, weights decoded by tests/refquant.c rather than by
 * quant/formats.c, and the matrix kernels checked against OpenBLAS's
 * cblas_dgemm on those decoded weights (this is the only binary that links
 * OpenBLAS).  Two things come from the library because they have exact tests
 * of their own: the cos/sin of RoPE angles where an op applies RoPE
 * (ds4_rope_cos_sin, bit-checked against the official tables in test_rope;
 * the RoPE test here rebuilds them too) and the IQ2_XXS grid (test_formats).
 *
 * ds4ref stores every activation as f32 and the naive side keeps double, so
 * each comparison states its bound: the f32 rounding of the op's outputs
 * (2^-24 relative) plus the rounding of the double sums, or, for the
 * sublayers whose f32 intermediates feed later steps, a relative bound ~100x
 * above what was measured and far below what any mutation of
 * `make mutants` moves. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <cmocka.h>

#include "ref/forward/attention.h"
#include "ref/forward/compressor.h"
#include "ref/forward/engine.h"
#include "ref/forward/head.h"
#include "ref/forward/hyperconn.h"
#include "ref/forward/indexer.h"
#include "ref/forward/moe.h"
#include "ref/forward/norm.h"
#include "ref/forward/rope.h"
#include "ref/model/model.h"
#include "quant/actround.h"
#include "quant/dot.h"
#include "quant/types.h"
#include "refquant.h"
#include "testutil.h"

/* ---- helpers ---- */

static uint64_t rng;

/* Each test starts its own stream, so its inputs do not depend on which
 * tests ran before it. */
static void seed(uint64_t s) { rng = s * 0x9b1e5c3d27f4a865ull; }

static uint64_t rnd(void) {
    return tu_splitmix64(&rng);
}

/* Uniform in [lo, hi). */
static double uni(double lo, double hi) {
    return lo + (hi - lo) * ((double)(rnd() >> 11) * 0x1p-53);
}

static void fill(float *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)uni(-scale, scale);
}

static const double F32_EPS = 0x1p-24;   /* relative rounding of one f32 store */

/* |got - want| <= rel * |want| + abs, or fail naming the op and index. */
static void near(double got, double want, double rel, double abs, const char *what, size_t i) {
    double d = fabs(got - want);
    if (!(d <= rel * fabs(want) + abs))
        fail_msg("%s[%zu]: got %.17g, want %.17g (|d| %.3g > %.3g)", what, i, got, want, d,
                 rel * fabs(want) + abs);
}

/* max |got - want| / max |want|: the error of a whole output, relative to
 * its scale. */
static double rel_err(const float *got, const double *want, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(got[i] - want[i]) > d) d = fabs(got[i] - want[i]);
        if (fabs(want[i]) > m) m = fabs(want[i]);
    }
    return d / m;
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* A weight matrix decoded by refquant: [W->rows][W->cols] doubles. */
static double *decode(const ds4_mat *W) {
    double *a = malloc(sizeof(double) * W->rows * W->cols);
    for (uint64_t r = 0; r < W->rows; r++)
        for (uint64_t c = 0; c < W->cols; c++)
            a[r * W->cols + c] = rq_elem(W->type, W->data + r * W->row_bytes, c);
    return a;
}

/* y[r] = sum_c A[r][c] x[c], naively. */
static void mat_vec(const double *A, uint64_t rows, uint64_t cols, const double *x, double *y) {
    for (uint64_t r = 0; r < rows; r++) {
        double s = 0;
        for (uint64_t c = 0; c < cols; c++) s += A[r * cols + c] * x[c];
        y[r] = s;
    }
}

static void widen(const float *x, double *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = x[i];
}

static void naive_rms_norm(const double *x, const float *w, uint32_t n, double eps, double *out) {
    double ss = 0;
    for (uint32_t i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++) out[i] = x[i] * r * (w ? (double)w[i] : 1.0);
}

/* The official rotation of interleaved pairs (x[2j], x[2j+1]) by the angles
 * whose f32 cos/sin are cs, conjugated for the inverse. */
static void naive_rotate(double *x, const float *cs, uint32_t n_pairs, bool inverse) {
    for (uint32_t j = 0; j < n_pairs; j++) {
        double c = cs[2 * j], s = inverse ? -(double)cs[2 * j + 1] : cs[2 * j + 1];
        double x0 = x[2 * j], x1 = x[2 * j + 1];
        x[2 * j] = x0 * c - x1 * s;
        x[2 * j + 1] = x0 * s + x1 * c;
    }
}

/* The synthetic tiny model (ds4 quant mix, ratios 0 0 4 128, hash layers
 * 0-2, score layer 3): real weights for the sublayer tests. */
static tu_model *tiny(void) {
    ds4err err = {0};
    tu_model *t = tu_model_new("tiny", 17, false, &err);
    if (!t) fail_msg("%s", err.msg);
    return t;
}

/* ---- RMSNorm ---- */

/* out = x * (mean(x^2) + eps)^-1/2 * w.  The library sums the squares in the
 * canonical order and rounds each output once: 2^-24 relative plus the sum's
 * double rounding.  Inputs of magnitude 1e-3 make mean(x^2) smaller than
 * eps, so a wrong eps moves every output. */
static void test_rms_norm(void **state) {
    (void)state;
    seed(1);
    static const uint32_t sizes[] = {1, 37, 256, 1001};
    static const double scales[] = {1.0, 1e-3};
    static const float epss[] = {1e-6f, 1e-5f};
    float x[1001], w[1001], out[1001];
    double xd[1001], want[1001];
    for (size_t si = 0; si < 4; si++)
        for (size_t ci = 0; ci < 2; ci++)
            for (size_t ei = 0; ei < 2; ei++)
                for (int with_w = 0; with_w < 2; with_w++) {
                    uint32_t n = sizes[si];
                    fill(x, n, scales[ci]);
                    fill(w, n, 2.0);
                    widen(x, xd, n);
                    naive_rms_norm(xd, with_w ? w : NULL, n, (double)epss[ei], want);
                    ds4_norm_rms(x, with_w ? w : NULL, n, epss[ei], out);
                    for (uint32_t i = 0; i < n; i++)
                        near(out[i], want[i], F32_EPS + 1e-12, 0, "rms_norm", i);
                    /* out may alias x */
                    ds4_norm_rms(x, with_w ? w : NULL, n, epss[ei], x);
                    assert_memory_equal(x, out, sizeof(float) * n);
                }
}

/* ---- Sinkhorn ---- */

/* The comb part of the official hc_split_sinkhorn (kernel.py), in double:
 *   comb = softmax(logits, -1) + eps
 *   comb = comb / (comb.sum(-2) + eps)
 *   iters - 1 times: comb = comb / (comb.sum(-1) + eps)
 *                    comb = comb / (comb.sum(-2) + eps)
 * row i is an input stream, column j an output stream; sum(-1) sums a row,
 * sum(-2) a column. */
static void naive_sinkhorn(double *m, uint32_t hc, uint32_t iters, double eps) {
    for (uint32_t i = 0; i < hc; i++) {
        double mx = -INFINITY, s = 0;
        for (uint32_t j = 0; j < hc; j++) mx = fmax(mx, m[i * hc + j]);
        for (uint32_t j = 0; j < hc; j++) s += exp(m[i * hc + j] - mx);
        for (uint32_t j = 0; j < hc; j++) m[i * hc + j] = exp(m[i * hc + j] - mx) / s + eps;
    }
    for (uint32_t it = 0; it < iters; it++) {
        for (uint32_t i = 0; it > 0 && i < hc; i++) {
            double s = 0;
            for (uint32_t j = 0; j < hc; j++) s += m[i * hc + j];
            for (uint32_t j = 0; j < hc; j++) m[i * hc + j] /= s + eps;
        }
        for (uint32_t j = 0; j < hc; j++) {
            double s = 0;
            for (uint32_t i = 0; i < hc; i++) s += m[i * hc + j];
            for (uint32_t i = 0; i < hc; i++) m[i * hc + j] /= s + eps;
        }
    }
}

/* Equal to the naive iteration to 1e-13 (the two differ only in exp's last
 * bit, and every entry is <= 1).  After the model's 20 iterations, for
 * logits in [-3, 3]: columns sum to 1 within 2 eps (the last pass divides a
 * column summing to ~1 by its sum + eps) and rows within 1e-2 (20
 * iterations do not converge fully: measured 6.6e-4 here, up to 4.2e-3
 * with other draws). */
static void test_sinkhorn(void **state) {
    (void)state;
    seed(2);
    static const uint32_t hcs[] = {4, 8}, iters[] = {1, 2, 3, 20};
    const double eps = 1e-6;
    double worst_row = 0;
    for (size_t h = 0; h < 2; h++)
        for (size_t it = 0; it < 4; it++)
            for (int trial = 0; trial < 50; trial++) {
                uint32_t hc = hcs[h];
                double m[64], want[64];
                for (uint32_t k = 0; k < hc * hc; k++) m[k] = want[k] = uni(-3, 3);
                ds4_hc_sinkhorn(m, hc, iters[it], eps);
                naive_sinkhorn(want, hc, iters[it], eps);
                for (uint32_t k = 0; k < hc * hc; k++) near(m[k], want[k], 0, 1e-13, "sinkhorn", k);
                for (uint32_t j = 0; j < hc; j++) {
                    double col = 0, row = 0;
                    for (uint32_t i = 0; i < hc; i++) col += m[i * hc + j], row += m[j * hc + i];
                    if (iters[it] == 20) {
                        near(col, 1.0, 0, 2 * eps, "sinkhorn column sum", j);
                        near(row, 1.0, 0, 1e-2, "sinkhorn row sum", j);
                        worst_row = fmax(worst_row, fabs(row - 1));
                    }
                }
            }
    printf("  Sinkhorn, 20 iterations: rows sum to 1 within %.3g\n", worst_row);
}

/* ---- hyper-connections ---- */

/* mix[k] = (fn row k . x) * (mean(x^2) + rms_eps)^-1/2 over the whole state
 * (the official F.linear on the flattened streams, then the norm factor). */
static void naive_mixes(const ds4_config *c, const double *fn, uint32_t n_mix, const float *x,
                        double *mix) {
    uint32_t n = c->n_hc * c->n_embd;
    double ss = 0;
    for (uint32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double rs = 1.0 / sqrt(ss / n + (double)c->rms_eps);
    for (uint32_t k = 0; k < n_mix; k++) {
        double s = 0;
        for (uint32_t i = 0; i < n; i++) s += fn[(size_t)k * n + i] * x[i];
        mix[k] = s * rs;
    }
}

/* hc_post on a width that is not a multiple of its spans of elements (the
 * models' widths all are): every element is the formula's own sum, in the
 * same order, to the bit. */
static void test_hc_post_tail(void **state) {
    (void)state;
    seed(5);
    ds4_config c = {0};
    c.n_hc = 4;
    c.n_embd = 100;
    const uint32_t hc = c.n_hc, n = c.n_embd;
    float x[4 * 100], f[100], post[4], comb[16], out[4 * 100];
    fill(x, hc * n, 2.0);
    fill(f, n, 1.0);
    fill(post, hc, 1.0);
    fill(comb, hc * hc, 0.5);
    ds4_hc_post(&c, f, x, post, comb, out);
    for (uint32_t j = 0; j < hc; j++)
        for (uint32_t d = 0; d < n; d++) {
            double want = (double)post[j] * (double)f[d];
            for (uint32_t i = 0; i < hc; i++) want += (double)comb[i * hc + j] * (double)x[i * n + d];
            float w = (float)want;
            if (memcmp(&w, &out[j * n + d], sizeof w))
                fail_msg("hc_post element %u of stream %u: %.9g, want %.9g", d, j, out[j * n + d], w);
        }
}

/* Official Block.hc_pre: pre = sigmoid(mix*s0 + b) + eps, post =
 * 2 sigmoid(mix*s1 + b), comb = Sinkhorn(mix*s2 + b); y = sum_h pre_h x_h.
 * Official hc_post: out_j = post_j f + sum_i comb_ij x_i.  Official
 * ParallelHead.hc_head: y = sum_h (sigmoid(mix_h s0 + b_h) + eps) x_h.
 * Bounds: each output is one f32 rounding of a double value that the
 * library's own double rounding moves by < 1e-12 of the sum of the
 * magnitudes it adds. */
static void test_hyper_connections(void **state) {
    (void)state;
    seed(3);
    tu_model *t = tiny();
    const ds4_config *c = &t->m.cfg;
    const ds4_layer *L = &t->m.layers[1];
    uint32_t hc = c->n_hc, n = c->n_embd, n_mix = (2 + hc) * hc;
    double *fn = decode(&L->hc_attn_fn), *hfn = decode(&t->m.output_hc_fn);
    assert_int_equal(L->hc_attn_fn.rows, n_mix);
    float *x = malloc(sizeof(float) * hc * n), *f = malloc(sizeof(float) * n);
    float y[256], post[16], comb[256], *out = malloc(sizeof(float) * hc * n);
    for (int trial = 0; trial < 4; trial++) {
        fill(x, (size_t)hc * n, trial % 2 ? 3.0 : 0.3);
        fill(f, n, 1.0);
        ds4_hc_pre(c, &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base, x, y, post, comb);
        double mix[64], pre[16], cm[256];
        const float *s = L->hc_attn_scale.v, *b = L->hc_attn_base.v;
        naive_mixes(c, fn, n_mix, x, mix);
        for (uint32_t h = 0; h < hc; h++) {
            pre[h] = sigmoid(mix[h] * s[0] + b[h]) + (double)c->hc_eps;
            near(post[h], 2 * sigmoid(mix[hc + h] * s[1] + b[hc + h]), F32_EPS, 1e-12, "hc_pre post", h);
        }
        for (uint32_t k = 0; k < hc * hc; k++) cm[k] = mix[2 * hc + k] * s[2] + b[2 * hc + k];
        naive_sinkhorn(cm, hc, c->sinkhorn_iter, (double)c->hc_eps);
        for (uint32_t k = 0; k < hc * hc; k++) near(comb[k], cm[k], F32_EPS, 1e-12, "hc_pre comb", k);
        for (uint32_t d = 0; d < n; d++) {
            double want = 0, mag = 0;
            for (uint32_t h = 0; h < hc; h++) {
                want += pre[h] * x[h * n + d];
                mag += fabs(pre[h] * x[h * n + d]);
            }
            near(y[d], want, F32_EPS, 1e-12 * mag, "hc_pre y", d);
        }
        /* hc_post on the library's own post and comb (its inputs). */
        ds4_hc_post(c, f, x, post, comb, out);
        for (uint32_t j = 0; j < hc; j++)
            for (uint32_t d = 0; d < n; d++) {
                double want = (double)post[j] * f[d], mag = fabs(want);
                for (uint32_t i = 0; i < hc; i++) {
                    want += (double)comb[i * hc + j] * x[i * n + d];
                    mag += fabs((double)comb[i * hc + j] * x[i * n + d]);
                }
                near(out[j * n + d], want, F32_EPS, 1e-12 * mag, "hc_post", j * n + d);
            }
        /* hc_head with the output head's weights. */
        ds4_hc_head(c, &t->m.output_hc_fn, &t->m.output_hc_scale, &t->m.output_hc_base, x, y);
        naive_mixes(c, hfn, hc, x, mix);
        for (uint32_t h = 0; h < hc; h++)
            pre[h] = sigmoid(mix[h] * t->m.output_hc_scale.v[0] + t->m.output_hc_base.v[h]) +
                     (double)c->hc_eps;
        for (uint32_t d = 0; d < n; d++) {
            double want = 0, mag = 0;
            for (uint32_t h = 0; h < hc; h++) {
                want += pre[h] * x[h * n + d];
                mag += fabs(pre[h] * x[h * n + d]);
            }
            near(y[d], want, F32_EPS, 1e-12 * mag, "hc_head", d);
        }
    }
    free(x);
    free(f);
    free(out);
    free(fn);
    free(hfn);
    tu_model_free(t);
}

/* v to the nearest binary16 value, halves to even, by scaling its
 * quantum to 1 (exact in double) rather than by bits as the library does. */
static double f16_round(double v) {
    if (v == 0) return v;
    int e = ilogb(v);
    if (e < -14) e = -14;   /* subnormals share the smallest quantum */
    return ldexp(nearbyint(ldexp(v, 10 - e)), e - 10);
}

/* Under the ggml-act profile an F16 hc_fn's mixes are llama.cpp's: the
 * state normalized first as ggml_rms_norm does it (squares in f32 summed
 * in double, mean and scale in f32), each value rounded to binary16, then
 * the product, with no norm factor after it. */
static void test_hyper_connections_ggml_act(void **state) {
    (void)state;
    seed(5);
    tu_model *t = tiny();
    const ds4_config *c = &t->m.cfg;
    ds4_layer *L = &t->m.layers[1];
    uint32_t hc = c->n_hc, n = hc * c->n_embd, n_mix = (2 + hc) * hc;
    assert_int_equal(L->hc_attn_fn.type, DS4_TYPE_F16);
    L->hc_attn_fn.act = DS4_ACT_F16;
    double *fn = decode(&L->hc_attn_fn);
    float *x = malloc(sizeof(float) * n), y[256], post[16], comb[256];
    for (int trial = 0; trial < 4; trial++) {
        fill(x, n, trial % 2 ? 3.0 : 0.3);
        ds4_hc_pre(c, &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base, x, y, post, comb);
        double ss = 0, mix[64];
        for (uint32_t i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
        float scale = 1.0f / sqrtf((float)(ss / n) + c->rms_eps);
        for (uint32_t k = 0; k < n_mix; k++) {
            mix[k] = 0;
            for (uint32_t i = 0; i < n; i++) mix[k] += fn[(size_t)k * n + i] * f16_round(x[i] * scale);
        }
        const float *s = L->hc_attn_scale.v, *b = L->hc_attn_base.v;
        for (uint32_t h = 0; h < hc; h++)
            near(post[h], 2 * sigmoid(mix[hc + h] * s[1] + b[hc + h]), F32_EPS, 1e-12, "ggml-act post", h);
    }
    free(x);
    free(fn);
    tu_model_free(t);
}

/* ---- the output head ---- */

/* Official ParallelHead: HC collapse, RMSNorm with output_norm, LM head.
 * The library rounds the collapse, the norm and each logit to f32: a logit
 * may move by 3 roundings of the magnitudes it adds (4 2^-24 sum|W y|).
 * T = 1 (decode) and T = 3 take different paths. */
static void test_output_head(void **state) {
    (void)state;
    seed(4);
    tu_model *t = tiny();
    const ds4_model *m = &t->m;
    const ds4_config *c = &m->cfg;
    uint32_t hc = c->n_hc, n = c->n_embd, V = c->n_vocab;
    double *hfn = decode(&m->output_hc_fn), *W = decode(&m->output);
    float *x = malloc(sizeof(float) * 3 * hc * n), *hy = malloc(sizeof(float) * 3 * n);
    float *logits = malloc(sizeof(float) * 3 * V);
    for (uint32_t T = 1; T <= 3; T += 2) {
        fill(x, (size_t)T * hc * n, 1.0);
        ds4_head_output(m, &m->output_hc_fn, &m->output_hc_scale, &m->output_hc_base,
                        &m->output_norm, x, T, hy, NULL, logits);
        for (uint32_t tk = 0; tk < T; tk++) {
            const float *xt = x + (size_t)tk * hc * n;
            double mix[16], y[256], yn[256];
            naive_mixes(c, hfn, hc, xt, mix);
            for (uint32_t d = 0; d < n; d++) {
                y[d] = 0;
                for (uint32_t h = 0; h < hc; h++)
                    y[d] += (sigmoid(mix[h] * m->output_hc_scale.v[0] + m->output_hc_base.v[h]) +
                             (double)c->hc_eps) * xt[h * n + d];
            }
            naive_rms_norm(y, m->output_norm.v, n, (double)c->rms_eps, yn);
            for (uint32_t v = 0; v < V; v++) {
                double want = 0, mag = 0;
                for (uint32_t d = 0; d < n; d++) {
                    want += W[(size_t)v * n + d] * yn[d];
                    mag += fabs(W[(size_t)v * n + d] * yn[d]);
                }
                near(logits[(size_t)tk * V + v], want, 0, 4 * F32_EPS * mag, "output head", v);
            }
        }
    }
    free(x);
    free(hy);
    free(logits);
    free(hfn);
    free(W);
    tu_model_free(t);
}

/* ---- RoPE with YaRN past the original context ---- */

/* The official precompute_freqs_cis in its f32 steps (oracle README §5.2),
 * with the correction range in double and the power, cos and sin in long
 * double rounded to f32:
 *   freq_j = fl32(1 / fl32(base^(2j/dim)))
 *   D(n) = dim ln(orig / (2 pi n)) / (2 ln base),
 *   low = max(floor(D(beta_fast)), 0), high = min(ceil(D(beta_slow)), dim-1)
 *   ramp_j = clamp((j - low) / (high - low), 0, 1) (high - low + 0.001 when
 *            equal), smooth = 1 - ramp
 *   freq_j = freq_j / factor * (1 - smooth) + freq_j * smooth
 *   angle = fl32(fl32(pos) * freq_j). */
static void naive_cos_sin(uint32_t dim, double base, const ds4_yarn *y, uint32_t pos, float *cs) {
    float lo = 0, span = 1;
    if (y) {
        const double pi = 3.14159265358979323846;
        double dl = dim * log(y->orig_ctx / (y->beta_fast * 2 * pi)) / (2 * log(base));
        double dh = dim * log(y->orig_ctx / (y->beta_slow * 2 * pi)) / (2 * log(base));
        double low = fmax(floor(dl), 0), high = fmin(ceil(dh), dim - 1);
        lo = (float)low;
        span = high == low ? 0.001f : (float)(high - low);
    }
    for (uint32_t j = 0; j < dim / 2; j++) {
        float f = 1.0f / (float)powl((long double)(float)base, (long double)(2 * j) / dim);
        if (y) {
            float ramp = ((float)j - lo) / span;
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float smooth = 1.0f - ramp, fac = (float)y->factor;
            f = f / fac * (1.0f - smooth) + f * smooth;
        }
        float angle = (float)pos * f;
        cs[2 * j] = (float)cosl(angle);
        cs[2 * j + 1] = (float)sinl(angle);
    }
}

/* ds4_rope_apply at positions past YaRN's original context (the real model's
 * 65536 and the oracle model's 64), forward and inverse, against the naive
 * table and rotation: each output is the rounding of x0 c -/+ x1 s, so it is
 * within 2^-23 (|x0| + |x1|) of the long double value (allowing either
 * rounding of cos/sin). */
static void test_rope_yarn(void **state) {
    (void)state;
    seed(5);
    static const struct { double base; ds4_yarn yarn; uint32_t pos[4]; } cases[] = {
        {160000.0, {16.0, 65536, 32.0, 1.0}, {65537, 100003, 1000000, 4000000}},
        {160000.0, {16.0, 64, 32.0, 1.0}, {65, 347, 4099, 123457}},
        {10000.0, {40.0, 4096, 32.0, 1.0}, {4097, 8191, 50000, 300001}},
    };
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        ds4_rope r;
        ds4err err = {0};
        assert_int_equal(ds4_rope_init(&r, 64, cases[ci].base, &cases[ci].yarn, &err), 0);
        for (int pi = 0; pi < 4; pi++) {
            uint32_t pos = cases[ci].pos[pi];
            float cs[64], x[64], got[64];
            naive_cos_sin(64, cases[ci].base, &cases[ci].yarn, pos, cs);
            for (int inv = 0; inv < 2; inv++) {
                fill(x, 64, 4.0);
                memcpy(got, x, sizeof(x));
                ds4_rope_apply(&r, got, pos, inv);
                for (int j = 0; j < 32; j++) {
                    long double c = cs[2 * j], s = inv ? -(long double)cs[2 * j + 1] : cs[2 * j + 1];
                    long double x0 = x[2 * j], x1 = x[2 * j + 1];
                    double bound = 0x1p-23 * (fabsl(x0) + fabsl(x1));
                    near(got[2 * j], (double)(x0 * c - x1 * s), 0, bound, "rope x0", (size_t)j);
                    near(got[2 * j + 1], (double)(x0 * s + x1 * c), 0, bound, "rope x1", (size_t)j);
                }
            }
        }
    }
}

/* ---- the compressor ---- */

/* Official Compressor (oracle README §5.4): entry j of ratio r pools the
 * positions [j r, (j+1) r) of dimension d with softmax weights of their
 * gate scores + APE; ratio 4 overlaps: the previous window's positions join
 * through the first half of the width (column d) and the current window
 * uses the second half (column dim + d).  Then RMSNorm, RoPE of the last
 * n_rot dims at position j r, and for the indexer the Hadamard rotation
 * x H / sqrt(dim) (QAT off: no FP8/FP4 rounding; test_qat covers those). */
static void naive_comp_row(uint32_t r, uint32_t dim, const float *kv, const float *sc,
                           const float *ape, uint32_t width, const float *norm, double eps,
                           const ds4_rope *rope, uint32_t n_rot, uint32_t j, bool indexer,
                           double *out) {
    bool overlap = r == 4;
    for (uint32_t d = 0; d < dim; d++) {
        double s[16 + 256], v[16 + 256], mx = -INFINITY;
        uint32_t n = 0;
        for (uint32_t p = overlap && j ? (j - 1) * r : j * r; p < (j + 1) * r; p++) {
            uint32_t col = overlap && p >= j * r ? dim + d : d;
            s[n] = (double)sc[(size_t)p * width + col] + ape[(size_t)(p % r) * width + col];
            v[n] = kv[(size_t)p * width + col];
            mx = fmax(mx, s[n++]);
        }
        double num = 0, den = 0;
        for (uint32_t i = 0; i < n; i++) {
            num += exp(s[i] - mx) * v[i];
            den += exp(s[i] - mx);
        }
        out[d] = num / den;
    }
    naive_rms_norm(out, norm, dim, eps, out);
    float cs[2 * DS4_ROPE_MAX_PAIRS];
    ds4_rope_cos_sin(rope, j * r, cs);
    naive_rotate(out + dim - n_rot, cs, n_rot / 2, false);
    if (indexer) {
        double h[256];
        for (uint32_t a = 0; a < dim; a++) {
            h[a] = 0;
            for (uint32_t b = 0; b < dim; b++)
                h[a] += out[b] * (__builtin_popcount(a & b) & 1 ? -1.0 : 1.0);
        }
        for (uint32_t a = 0; a < dim; a++) out[a] = h[a] / sqrt((double)dim);
    }
}

/* ds4_compressor_store of every position in order, ds4_compressor_emit when a position
 * completes a window, on a state with a small ring (2 ratio + 5 slots, so it
 * wraps), against the naive pooling over the whole history.  The library
 * rounds the score + APE sum, the pooled row, the norm and the rotation to
 * f32: each row within 1e-5 of its largest value (measured: < 1e-7). */
static double check_compressor(uint32_t r, bool indexer) {
    const uint32_t dim = 64, n_rot = 32, width = (r == 4 ? 2 : 1) * dim;
    const uint32_t n_pos = r == 4 ? 26 : 2 * r + 7;
    ds4_rope rope;
    ds4err err = {0};
    ds4_yarn y = {16.0, 64, 32.0, 1.0};
    assert_int_equal(ds4_rope_init(&rope, n_rot, 160000.0, &y, &err), 0);
    float *kv = malloc(sizeof(float) * n_pos * width), *sc = malloc(sizeof(float) * n_pos * width);
    float *ape = malloc(sizeof(float) * r * width), norm[64];
    fill(kv, (size_t)n_pos * width, 1.0);
    fill(sc, (size_t)n_pos * width, 2.0);
    fill(ape, (size_t)r * width, 0.5);
    fill(norm, dim, 1.5);
    ds4_mat ape_m = {.type = RQ_F32, .cols = width, .rows = r, .row_bytes = sizeof(float) * width, .data = (const uint8_t *)ape};
    ds4_vec norm_v = {norm, dim};
    ds4_comp_state cs = {.ratio = r, .width = width, .dim = dim, .hist_cap = 2 * r + 5,
                         .rows_cap = n_pos / r};
    cs.hist_kv = malloc(sizeof(float) * cs.hist_cap * width);
    cs.hist_sc = malloc(sizeof(float) * cs.hist_cap * width);
    cs.rows = malloc(sizeof(float) * cs.rows_cap * dim);
    uint32_t emitted = 0;
    double worst = 0;
    for (uint32_t p = 0; p < n_pos; p++) {
        ds4_compressor_store(&cs, &ape_m, p, kv + (size_t)p * width, sc + (size_t)p * width);
        if ((p + 1) % r) continue;
        ds4_compressor_emit(&cs, &norm_v, 1e-6f, &rope, n_rot, p, indexer, false, false);
        double want[64];
        uint32_t j = p / r;
        naive_comp_row(r, dim, kv, sc, ape, width, norm, (double)1e-6f, &rope, n_rot, j, indexer,
                       want);
        double e = rel_err(ds4_comp_row(&cs, j), want, dim);
        if (!(e <= 1e-5)) fail_msg("ratio %u%s row %u: relative error %.3g", r, indexer ? " indexer" : "", j, e);
        worst = fmax(worst, e);
        emitted++;
    }
    assert_int_equal(emitted, n_pos / r);
    free(kv);
    free(sc);
    free(ape);
    free(cs.hist_kv);
    free(cs.hist_sc);
    free(cs.rows);
    return worst;
}

static void test_compressor(void **state) {
    (void)state;
    seed(6);
    double a = check_compressor(4, false), b = check_compressor(4, true);
    double c = check_compressor(128, false);
    printf("  compressor: relative error %.3g (ratio 4), %.3g (ratio 4, indexer), %.3g (ratio 128)\n",
           a, b, c);
}

/* ---- the indexer ---- */

/* Official Indexer: score(t) = sum_h relu(q_h . k_t) w_h / sqrt(dim) /
 * sqrt(heads) over the visible entries; the top_k by score, a tie going to
 * the lower entry (ds4ref's rule, docs/NUMERICS.md §6), returned ascending.
 * The naive selection sorts every entry by that rule. */
static uint32_t naive_topk(const double *score, uint32_t n, uint32_t k, uint32_t *sel) {
    uint32_t *idx = malloc(sizeof(uint32_t) * n);
    for (uint32_t i = 0; i < n; i++) idx[i] = i;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            if (score[idx[j]] > score[idx[i]] || (score[idx[j]] == score[idx[i]] && idx[j] < idx[i])) {
                uint32_t tmp = idx[i];
                idx[i] = idx[j];
                idx[j] = tmp;
            }
    if (k > n) k = n;
    bool *in = calloc(n, sizeof(bool));
    for (uint32_t i = 0; i < k; i++) in[idx[i]] = true;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (in[i]) sel[m++] = i;
    free(in);
    free(idx);
    return m;
}

typedef enum { ROWS_RANDOM, ROWS_TIED, ROWS_ZERO } rows_kind;

/* The naive score of one entry, and the sum of the magnitudes it adds (for
 * the bound). */
static double naive_index_score(const ds4_config *c, const float *q, const float *w,
                                const float *k, double *mag) {
    uint32_t D = c->idx_dim, H = c->idx_head;
    double s = 0;
    *mag = 0;
    for (uint32_t h = 0; h < H; h++) {
        double dot = 0, dmag = 0;
        for (uint32_t d = 0; d < D; d++) {
            dot += (double)q[h * D + d] * k[d];
            dmag += fabs((double)q[h * D + d] * k[d]);
        }
        double wh = (double)w[h] / sqrt((double)D) / sqrt((double)H);
        s += (dot > 0 ? dot : 0) * wh;
        *mag += dmag * wh;
    }
    return s;
}

/* Entries of one indexer state and the naive check of one selection.
 * ROWS_TIED: with R the best random entry, entries 2 and 5 are 4 R and 3 R,
 * entries 4, 9, 13 and 17 all 2 R and the rest halved, so (relu sums being
 * positively homogeneous) the four copies tie bit for bit for places 3 to 6
 * of top 5; ROWS_ZERO: every q.k but two is negative, so all other scores
 * are exactly 0 and tie. */
static void check_indexer(rows_kind kind) {
    ds4_config c;
    memset(&c, 0, sizeof(c));
    c.idx_head = 8;
    c.idx_dim = 64;
    c.idx_topk = 5;
    const uint32_t pos = 93, n_vis = (pos + 1) / 4, D = c.idx_dim, H = c.idx_head;
    ds4_comp_state idx = {.ratio = 4, .dim = D, .rows_cap = n_vis};
    idx.rows = malloc(sizeof(float) * n_vis * D);
    float q[8 * 64], w[8], R[64];
    double mag;
    fill(q, (size_t)H * D, 1.0);
    for (uint32_t h = 0; h < H; h++) w[h] = (float)uni(0.1, 1.0);
    fill(idx.rows, (size_t)n_vis * D, 1.0);
    if (kind == ROWS_TIED) {
        uint32_t best = 0;
        for (uint32_t t = 1; t < n_vis; t++)
            if (naive_index_score(&c, q, w, idx.rows + t * D, &mag) >
                naive_index_score(&c, q, w, idx.rows + best * D, &mag))
                best = t;
        memcpy(R, idx.rows + best * D, sizeof(R));
        assert_true(naive_index_score(&c, q, w, R, &mag) > 0);
        for (uint32_t t = 0; t < n_vis; t++) {
            bool copy = t == 4 || t == 9 || t == 13 || t == 17;
            float f = t == 2 ? 4.0f : t == 5 ? 3.0f : copy ? 2.0f : 0.5f;
            for (uint32_t d = 0; d < D; d++)
                idx.rows[t * D + d] = f * (t == 2 || t == 5 || copy ? R[d] : idx.rows[t * D + d]);
        }
    } else if (kind == ROWS_ZERO) {
        for (uint32_t h = 1; h < H; h++) memcpy(q + h * D, q, sizeof(float) * D);
        for (uint32_t t = 0; t < n_vis; t++)
            for (uint32_t d = 0; d < D; d++)
                idx.rows[t * D + d] = (t == 6 || t == 15 ? 1.0f : -1.0f) * q[d] * (float)uni(0.5, 1.5);
    }
    double score[64], want[64];
    uint32_t sel[8], wsel[8], n_scored;
    uint32_t n = ds4_indexer_select(&c, &idx, q, w, pos, sel, score, &n_scored);
    assert_int_equal(n_scored, n_vis);
    for (uint32_t t = 0; t < n_vis; t++) {
        want[t] = naive_index_score(&c, q, w, idx.rows + t * D, &mag);
        near(score[t], want[t], 0, 1e-13 * mag, "indexer score", t);
    }
    uint32_t m = naive_topk(want, n_vis, c.idx_topk, wsel);
    assert_int_equal(n, m);
    for (uint32_t i = 0; i < n; i++) assert_int_equal(sel[i], wsel[i]);
    if (kind == ROWS_TIED) {
        /* The fixture has the tie where it matters: three of the four
         * copies kept, the highest-numbered one dropped. */
        assert_true(score[4] == score[9] && score[9] == score[13] && score[13] == score[17]);
        uint32_t want_sel[5] = {2, 4, 5, 9, 13};
        assert_memory_equal(sel, want_sel, sizeof(want_sel));
    } else if (kind == ROWS_ZERO) {
        uint32_t want_sel[5] = {0, 1, 2, 6, 15};
        assert_true(score[0] == 0 && score[3] == 0);
        assert_memory_equal(sel, want_sel, sizeof(want_sel));
    }
    /* Fewer entries than top_k: all of them, nothing scored. */
    n = ds4_indexer_select(&c, &idx, q, w, 4 * 3 + 2, sel, score, &n_scored);
    assert_int_equal(n, 3);
    assert_int_equal(n_scored, 0);
    for (uint32_t i = 0; i < 3; i++) assert_int_equal(sel[i], i);
    free(idx.rows);
}

static void test_indexer(void **state) {
    (void)state;
    seed(7);
    check_indexer(ROWS_RANDOM);
    check_indexer(ROWS_TIED);
    check_indexer(ROWS_ZERO);
}

/* ---- the MoE ---- */

/* Official Gate + Expert + MoE on the layer's weights (oracle README §5.4):
 * router logits W_r a, s_e = sqrt(softplus(logit)); hash layers take
 * tid2eid[token] in row order, score layers the top-k of s_e + bias_e (a tie
 * to the lower expert, descending); weights s_e / sum s * route_scale;
 * expert out = W_down (silu(min(g, L)) clamp(u, -L, L) * weight) with
 * g = W_gate a, u = W_up a; sum of the routed outputs plus the shared
 * expert.  The library rounds the router logits, g, u, the SwiGLU output
 * and each expert's output to f32: weights within 1e-6 relative, the output
 * within 1e-5 of its largest value (measured: 1e-7). */
typedef struct naive_moe {
    int32_t sel[8];
    double w[8], *out;
} naive_moe;

/* A layer's MoE weights decoded once: router, and per expert (the shared
 * one last) gate, up and down. */
typedef struct moe_w {
    uint32_t n_expert;
    double *router, *gate[65], *up[65], *down[65];
} moe_w;

static moe_w decode_moe(const ds4_layer *L, uint32_t n_expert) {
    moe_w w = {n_expert, decode(&L->gate_inp), {0}, {0}, {0}};
    for (uint32_t x = 0; x <= n_expert; x++) {
        ds4_mat g = x < n_expert ? ds4_dot_expert(&L->gate_exps, x) : L->sh_gate;
        ds4_mat u = x < n_expert ? ds4_dot_expert(&L->up_exps, x) : L->sh_up;
        ds4_mat d = x < n_expert ? ds4_dot_expert(&L->down_exps, x) : L->sh_down;
        w.gate[x] = decode(&g);
        w.up[x] = decode(&u);
        w.down[x] = decode(&d);
    }
    return w;
}

static void moe_w_free(moe_w *w) {
    free(w->router);
    for (uint32_t x = 0; x <= w->n_expert; x++) {
        free(w->gate[x]);
        free(w->up[x]);
        free(w->down[x]);
    }
}

/* acc += W_down (silu(min(g, limit)) clamp(u, -limit, limit) weight), no
 * clamp when limit <= 0. */
static void expert(const moe_w *W, uint32_t x, const double *a, double weight, float limit,
                   uint32_t n, uint32_t ff, double *acc) {
    double *gv = malloc(sizeof(double) * ff), *uv = malloc(sizeof(double) * ff);
    double *h = malloc(sizeof(double) * ff), *o = malloc(sizeof(double) * n);
    mat_vec(W->gate[x], ff, n, a, gv);
    mat_vec(W->up[x], ff, n, a, uv);
    for (uint32_t f = 0; f < ff; f++) {
        double gg = gv[f], uu = uv[f];
        if (limit > 0) {
            gg = fmin(gg, limit);
            uu = fmax(fmin(uu, limit), -limit);
        }
        h[f] = gg * sigmoid(gg) * uu * weight;
    }
    mat_vec(W->down[x], n, ff, h, o);
    for (uint32_t d = 0; d < n; d++) acc[d] += o[d];
    free(gv);
    free(uv);
    free(h);
    free(o);
}

static void naive_moe_token(const ds4_config *c, const ds4_layer *L, const moe_w *W,
                            const float *a32, int32_t token, naive_moe *r) {
    uint32_t n = c->n_embd, k = c->n_expert_used, E = c->n_expert;
    double a[256], logit[64], s[64], b[64];
    widen(a32, a, n);
    mat_vec(W->router, E, n, a, logit);
    for (uint32_t x = 0; x < E; x++) s[x] = sqrt(softplus(logit[x]));
    if (L->hash) {
        memcpy(r->sel, L->tid2eid + (size_t)token * k, sizeof(int32_t) * k);
    } else {
        bool used[64] = {false};
        for (uint32_t x = 0; x < E; x++) b[x] = s[x] + (double)L->exp_bias.v[x];
        for (uint32_t i = 0; i < k; i++) {
            int best = -1;
            for (uint32_t x = 0; x < E; x++)
                if (!used[x] && (best < 0 || b[x] > b[best])) best = (int)x;   /* ties: lower x */
            used[best] = true;
            r->sel[i] = best;
        }
    }
    double sum = 0;
    for (uint32_t i = 0; i < k; i++) sum += s[r->sel[i]];
    r->out = calloc(n, sizeof(double));
    for (uint32_t i = 0; i < k; i++) {
        r->w[i] = s[r->sel[i]] / sum * (double)c->expert_scale;
        expert(W, (uint32_t)r->sel[i], a, r->w[i], L->clamp_exp, n, c->n_ff, r->out);
    }
    expert(W, E, a, 1.0, L->clamp_shexp, n, c->n_ff, r->out);
}

static double check_moe(tu_model *t, const ds4_layer *L, uint32_t T, const int32_t *tokens) {
    const ds4_model *m = &t->m;
    const ds4_config *c = &m->cfg;
    uint32_t n = c->n_embd, k = c->n_expert_used;
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts fo = {.qat = false};
    if (ds4_engine_init(&e, m, &fo, T, &err)) fail_msg("%s", err.msg);
    fill(e.scr->a, (size_t)T * n, 1.0);
    for (uint32_t tk = 0; tk < T; tk++) e.scr->tok[tk].id = tokens[tk];
    ds4_moe(&e, L, T);
    moe_w W = decode_moe(L, c->n_expert);
    double worst = 0;
    for (uint32_t tk = 0; tk < T; tk++) {
        naive_moe r;
        naive_moe_token(c, L, &W, e.scr->a + (size_t)tk * n, tokens[tk], &r);
        for (uint32_t i = 0; i < k; i++) {
            assert_int_equal(e.scr->sel[tk * k + i], r.sel[i]);
            near(e.scr->selw[tk * k + i], r.w[i], 1e-6, 0, "moe weight", i);
        }
        double err_rel = rel_err(e.scr->out + (size_t)tk * n, r.out, n);
        if (!(err_rel <= 1e-5)) fail_msg("moe output of token %u: relative error %.3g", tk, err_rel);
        worst = fmax(worst, err_rel);
        free(r.out);
    }
    moe_w_free(&W);
    ds4_engine_free(&e);
    return worst;
}

/* Hash routing (layer 0), score routing with the router bias (layer 3),
 * and score routing with exact ties: experts 1 and 6 given the same router
 * row and bias as expert 3 tie with it bit for bit, and the lower ones must
 * win. */
static void test_moe(void **state) {
    (void)state;
    seed(8);
    tu_model *t = tiny();
    const ds4_model *m = &t->m;
    const ds4_config *c = &m->cfg;
    assert_true(m->layers[0].hash && !m->layers[3].hash);
    const int32_t tokens[5] = {3, 511, 256, 42, 100};
    double worst = check_moe(t, &m->layers[0], 1, tokens);
    worst = fmax(worst, check_moe(t, &m->layers[0], 5, tokens));
    worst = fmax(worst, check_moe(t, &m->layers[3], 1, tokens));
    worst = fmax(worst, check_moe(t, &m->layers[3], 5, tokens));

    ds4_layer tied = m->layers[3];
    uint32_t n = c->n_embd, E = c->n_expert;
    float *router = malloc(sizeof(float) * E * n), bias[64];
    double *R = decode(&tied.gate_inp);
    for (uint32_t x = 0; x < E; x++)
        for (uint32_t d = 0; d < n; d++) router[x * n + d] = (float)R[x * n + d];
    memcpy(bias, tied.exp_bias.v, sizeof(float) * E);
    /* Expert 3 made the clear favourite, 1 and 6 its copies. */
    for (uint32_t d = 0; d < n; d++) router[3 * n + d] *= 4.0f;
    bias[3] += 10.0f;
    memcpy(router + 1 * n, router + 3 * n, sizeof(float) * n);
    memcpy(router + 6 * n, router + 3 * n, sizeof(float) * n);
    bias[1] = bias[6] = bias[3];
    tied.gate_inp = (ds4_mat){.type = RQ_F32, .cols = n, .rows = E, .row_bytes = sizeof(float) * n, .data = (const uint8_t *)router};
    tied.exp_bias.v = bias;
    worst = fmax(worst, check_moe(t, &tied, 5, tokens));
    printf("  moe: relative error %.3g\n", worst);
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts fo = {.qat = false};
    assert_int_equal(ds4_engine_init(&e, m, &fo, 1, &err), 0);
    fill(e.scr->a, n, 1.0);
    ds4_moe(&e, &tied, 1);
    /* Of the three tied experts the two lower ids take the two slots (the
     * favourite's score beats every other expert's for these inputs). */
    assert_int_equal(e.scr->sel[0], 1);
    assert_int_equal(e.scr->sel[1], 3);
    ds4_engine_free(&e);
    free(R);
    free(router);
    tu_model_free(t);
}

/* ---- attention: the sink and the sliding window ---- */

/* The official Attention.forward of a ratio-0 layer with QAT off, naively
 * for the token at position p given every earlier position's input:
 *   qr = RMSNorm(W_qa a) q_a_norm; q_h = RMSNorm(W_qb qr)_h; kv =
 *   RMSNorm(W_kv a) kv_norm; RoPE on the last n_rot dims of q_h and kv at
 *   their positions; for head h, softmax over the window rows
 *   (positions max(0, p - window + 1) .. p) and the head's sink logit,
 *   which takes part in the denominator only; o_h = sum p_j kv_j,
 *   un-rotated at p; low_g = W_oa[g] o[heads of group g]; out = W_ob low.
 * window and use_sink let the test show that a wrong window or a missing
 * sink is outside the bound. */
typedef struct attn_w {
    double *qa, *qb, *kv, *oa, *ob;
} attn_w;

static void naive_attention(const ds4_engine *e, const ds4_layer *L, const attn_w *W,
                            const float *a, uint32_t n_pos, uint32_t window, bool use_sink,
                            double *out) {
    const ds4_config *c = &e->m->cfg;
    uint32_t n = c->n_embd, hd = c->head_dim, H = c->n_head, nope = hd - c->n_rot;
    double *kvr = malloc(sizeof(double) * n_pos * hd), *q = malloc(sizeof(double) * H * hd);
    double *o = malloc(sizeof(double) * H * hd), qr[1024], low[1024], ad[1024], p[1024];
    float cs[2 * DS4_ROPE_MAX_PAIRS];
    for (uint32_t i = 0; i < n_pos; i++) {
        widen(a + (size_t)i * n, ad, n);
        mat_vec(W->kv, hd, n, ad, kvr + (size_t)i * hd);
        naive_rms_norm(kvr + (size_t)i * hd, L->kv_norm.v, hd, (double)c->rms_eps, kvr + (size_t)i * hd);
        ds4_rope_cos_sin(&e->rope_dense, i, cs);
        naive_rotate(kvr + (size_t)i * hd + nope, cs, c->n_rot / 2, false);
    }
    for (uint32_t i = 0; i < n_pos; i++) {
        widen(a + (size_t)i * n, ad, n);
        mat_vec(W->qa, c->q_lora, n, ad, qr);
        naive_rms_norm(qr, L->q_a_norm.v, c->q_lora, (double)c->rms_eps, qr);
        mat_vec(W->qb, (uint64_t)H * hd, c->q_lora, qr, q);
        ds4_rope_cos_sin(&e->rope_dense, i, cs);
        uint32_t w0 = i + 1 >= window ? i + 1 - window : 0;
        for (uint32_t h = 0; h < H; h++) {
            double *qh = q + (size_t)h * hd, *oh = o + (size_t)h * hd;
            naive_rms_norm(qh, NULL, hd, (double)c->rms_eps, qh);
            naive_rotate(qh + nope, cs, c->n_rot / 2, false);
            double mx = use_sink ? (double)L->sinks.v[h] : -INFINITY;
            for (uint32_t j = w0; j <= i; j++) {
                p[j] = 0;
                for (uint32_t d = 0; d < hd; d++) p[j] += qh[d] * kvr[(size_t)j * hd + d];
                p[j] /= sqrt((double)hd);
                mx = fmax(mx, p[j]);
            }
            double den = use_sink ? exp((double)L->sinks.v[h] - mx) : 0;
            for (uint32_t j = w0; j <= i; j++) den += exp(p[j] - mx);
            for (uint32_t d = 0; d < hd; d++) oh[d] = 0;
            for (uint32_t j = w0; j <= i; j++)
                for (uint32_t d = 0; d < hd; d++) oh[d] += exp(p[j] - mx) / den * kvr[(size_t)j * hd + d];
            naive_rotate(oh + nope, cs, c->n_rot / 2, true);
        }
        uint32_t gin = H * hd / c->o_groups;
        for (uint32_t g = 0; g < c->o_groups; g++)
            mat_vec(W->oa + (size_t)g * c->o_lora * gin, c->o_lora, gin, o + (size_t)g * gin,
                    low + (size_t)g * c->o_lora);
        mat_vec(W->ob, n, (uint64_t)c->o_groups * c->o_lora, low, out + (size_t)i * n);
    }
    free(kvr);
    free(q);
    free(o);
}

/* 2 window + 7 positions of one sequence in two passes (20 then 19 tokens;
 * the window ring holds window + 20 rows, so it wraps), against the naive
 * sublayer.  The library rounds q, kv, the attention output and the
 * low-rank projection to f32: every output within 1e-5 of its token's
 * largest value (measured: 2e-7).  Without the sink, or with a window one
 * longer or shorter, the naive values are far outside that bound: the test
 * can see both. */
static void test_attention(void **state) {
    (void)state;
    seed(9);
    tu_model *t = tiny();
    const ds4_model *m = &t->m;
    const ds4_config *c = &m->cfg;
    const ds4_layer *L = &m->layers[0];
    assert_int_equal(L->ratio, 0);
    const uint32_t n = c->n_embd, n_pos = 2 * c->swa + 7, first = 20;
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts fo = {.qat = false};
    if (ds4_engine_init(&e, m, &fo, first, &err)) fail_msg("%s", err.msg);
    ds4_kv kv;
    if (ds4_kv_init(&kv, c, c->ratio, c->n_layer, 64, first, 0, &err)) fail_msg("%s", err.msg);
    assert_true(kv.L[0].raw_cap < n_pos);
    float *a = malloc(sizeof(float) * n_pos * n), *got = malloc(sizeof(float) * n_pos * n);
    fill(a, (size_t)n_pos * n, 1.0);
    for (uint32_t done = 0; done < n_pos;) {
        uint32_t T = done ? n_pos - done : first;
        memcpy(e.scr->a, a + (size_t)done * n, sizeof(float) * T * n);
        for (uint32_t tk = 0; tk < T; tk++) e.scr->tok[tk] = (ds4_tok){&kv, done + tk, 0};
        if (ds4_attention(&e, L, 0, &e.rope_dense, T, &err)) fail_msg("%s", err.msg);
        memcpy(got + (size_t)done * n, e.scr->out, sizeof(float) * T * n);
        done += T;
    }
    attn_w W = {decode(&L->q_a), decode(&L->q_b), decode(&L->kv), decode(&L->out_a), decode(&L->out_b)};
    double *want = malloc(sizeof(double) * n_pos * n);
    double worst = 0, nosink = 0, wider = 0, narrower = 0;
    naive_attention(&e, L, &W, a, n_pos, c->swa, true, want);
    for (uint32_t i = 0; i < n_pos; i++) worst = fmax(worst, rel_err(got + (size_t)i * n, want + (size_t)i * n, n));
    /* The alternatives, at the position each moves most. */
    double *alt = malloc(sizeof(double) * n_pos * n);
    naive_attention(&e, L, &W, a, n_pos, c->swa, false, alt);
    for (uint32_t i = 0; i < n_pos; i++) nosink = fmax(nosink, rel_err(got + (size_t)i * n, alt + (size_t)i * n, n));
    naive_attention(&e, L, &W, a, n_pos, c->swa + 1, true, alt);
    for (uint32_t i = 0; i < n_pos; i++) wider = fmax(wider, rel_err(got + (size_t)i * n, alt + (size_t)i * n, n));
    naive_attention(&e, L, &W, a, n_pos, c->swa - 1, true, alt);
    for (uint32_t i = 0; i < n_pos; i++) narrower = fmax(narrower, rel_err(got + (size_t)i * n, alt + (size_t)i * n, n));
    printf("  attention: relative error %.3g; without the sink %.3g, window +1 %.3g, window -1 %.3g\n",
           worst, nosink, wider, narrower);
    assert_true(worst <= 1e-5);
    assert_true(nosink > 1e-3 && wider > 1e-3 && narrower > 1e-3);
    free(W.qa);
    free(W.qb);
    free(W.kv);
    free(W.oa);
    free(W.ob);
    free(alt);
    free(want);
    free(a);
    free(got);
    ds4_kv_free(&kv);
    ds4_engine_free(&e);
    tu_model_free(t);
}

/* ---- the matrix kernels against OpenBLAS ---- */

/* A random finite half of magnitude 2^-3 .. 2^2 (a block scale or an F16
 * weight); a random bfloat16 likewise. */
static uint16_t rnd_half(void) {
    return (uint16_t)((rnd() & 0x8000) | (12 + rnd() % 5) << 10 | (rnd() & 0x3ff));
}

static uint16_t rnd_bf16(void) {
    return (uint16_t)((rnd() & 0x8000) | (124 + rnd() % 5) << 7 | (rnd() & 0x7f));
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* rows x cols weights of `type`: random bytes with every scale (and every
 * F16/BF16 value) a finite half of moderate size. */
static uint8_t *random_weights(uint32_t type, uint64_t rows, uint64_t cols, uint64_t *row_bytes) {
    uint64_t nb = cols / rq_block_elems(type), bb = rq_block_bytes(type);
    *row_bytes = nb * bb;
    uint8_t *w = malloc(rows * *row_bytes);
    for (uint64_t b = 0; b < rows * nb; b++) {
        uint8_t *p = w + b * bb;
        for (uint64_t i = 0; i < bb; i++) p[i] = (uint8_t)rnd();
        switch (type) {
        case RQ_F32: {
            float f = (float)uni(-2, 2);
            memcpy(p, &f, 4);
            break;
        }
        case RQ_F16: put16(p, rnd_half()); break;
        case RQ_BF16: put16(p, rnd_bf16()); break;
        case RQ_Q8_0: case RQ_IQ2_XXS: put16(p, rnd_half()); break;
        case RQ_Q2_K: put16(p + 80, rnd_half()); put16(p + 82, rnd_half()); break;
        case RQ_Q4_K: put16(p, rnd_half()); put16(p + 2, rnd_half()); break;
        }
    }
    return w;
}

typedef struct kcase {
    uint32_t type;
    const char *name;
    uint64_t cols[2];    /* a short and a multi-chunk row */
} kcase;

static const kcase kcases[] = {
    {RQ_F32, "f32", {37, 777}},       {RQ_F16, "f16", {37, 777}},
    {RQ_BF16, "bf16", {37, 777}},     {RQ_Q8_0, "q8_0", {32, 800}},
    {RQ_Q2_K, "q2_K", {256, 768}},    {RQ_Q4_K, "q4_K", {256, 768}},
    {RQ_IQ2_XXS, "iq2_xxs", {256, 768}},
};

/* The reference for y = W x: cblas_dgemm on the refquant-decoded W and the
 * inputs widened to double, and sum |W_rc x_c| for the bound.  Both sides
 * sum exactly formed products in double, each with an error below
 * cols 2^-53 sum|W x|; ds4ref then rounds to f32 where it stores an
 * activation: |y - ref| <= 2^-24 |ref| + 2 cols 2^-53 sum|W x|. */
typedef struct kref {
    double *y, *mag;     /* [T][rows] */
} kref;

static kref reference(const ds4_mat *W, const float *x, uint64_t ldx, int T) {
    double *A = decode(W), *X = malloc(sizeof(double) * (size_t)T * W->cols);
    kref r = {malloc(sizeof(double) * (size_t)T * W->rows), malloc(sizeof(double) * (size_t)T * W->rows)};
    for (int t = 0; t < T; t++) widen(x + (size_t)t * ldx, X + (size_t)t * W->cols, W->cols);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, (int)W->rows, (int)W->cols, 1.0, X,
                (int)W->cols, A, (int)W->cols, 0.0, r.y, (int)W->rows);
    for (int t = 0; t < T; t++)
        for (uint64_t o = 0; o < W->rows; o++) {
            double s = 0;
            for (uint64_t i = 0; i < W->cols; i++) s += fabs(A[o * W->cols + i] * X[(size_t)t * W->cols + i]);
            r.mag[(size_t)t * W->rows + o] = s;
        }
    free(A);
    free(X);
    return r;
}

static void check_y(const float *y, uint64_t ldy, const kref *r, const ds4_mat *W, int T,
                    const char *what) {
    for (int t = 0; t < T; t++)
        for (uint64_t o = 0; o < W->rows; o++) {
            size_t i = (size_t)t * W->rows + o;
            near(y[(size_t)t * ldy + o], r->y[i], F32_EPS, 2.0 * W->cols * 0x1p-53 * r->mag[i], what, i);
        }
}

/* Every public kernel entry point of quant/dot.h, for every weight type,
 * at decode (T = 1) and blocked prefill shapes (T = 9: one tile, short of
 * TILE_T = 16; T = 17: two tiles, of 9 and 8 tokens; neither a multiple of
 * the register blocks' tokens), with row counts that are not
 * multiples of the row blocks (37; 67 with the multi-chunk rows, large
 * enough to be split over threads), strided inputs and outputs.  `label`
 * names the kernel variant being checked (test_kernels runs it for each). */
static void check_kernels(const char *label) {
    static const int Ts[] = {1, 9, 17};
    static const uint64_t rows_for[2] = {37, 67};
    uint32_t checked = 0;
    for (size_t ci = 0; ci < sizeof(kcases) / sizeof(kcases[0]); ci++)
        for (int si = 0; si < 2; si++) {
            const kcase *k = &kcases[ci];
            uint64_t rows = rows_for[si], cols = k->cols[si], rb;
            uint8_t *data = random_weights(k->type, rows, cols, &rb);
            ds4_mat W = {.type = k->type, .cols = cols, .rows = rows, .row_bytes = rb, .data = data};
            for (int ti = 0; ti < 3; ti++) {
                int T = Ts[ti];
                uint64_t ldx = cols + 3, ldy = rows + 5;
                float *x = malloc(sizeof(float) * T * ldx), *y = malloc(sizeof(float) * T * ldy);
                float *y2 = malloc(sizeof(float) * T * ldy);
                fill(x, (size_t)T * ldx, 1.0);
                kref r = reference(&W, x, ldx, T);
                char what[96];
                snprintf(what, sizeof(what), "%s %s %llux%llu T=%d", label, k->name,
                         (unsigned long long)rows, (unsigned long long)cols, T);
                ds4_dot_matmul(&W, x, ldx, T, y, ldy);
                check_y(y, ldy, &r, &W, T, what);
                /* The same product inside a batch of products, and a row
                 * range of it, give the same bits. */
                ds4_mat half = W;
                half.rows = rows / 2;
                float *yh = malloc(sizeof(float) * T * ldy);
                ds4_matmul_op ops[2] = {{&W, x, ldx, T, y2, ldy}, {&half, x, ldx, T, yh, ldy}};
                ds4_dot_matmul_many(ops, 2);
                for (int t = 0; t < T; t++) {
                    assert_memory_equal(y2 + t * ldy, y + t * ldy, sizeof(float) * rows);
                    assert_memory_equal(yh + t * ldy, y + t * ldy, sizeof(float) * half.rows);
                }
                ds4_dot_matmul_rows(&W, 3, rows, x, ldx, T, y2, ldy);
                for (int t = 0; t < T; t++)
                    assert_memory_equal(y2 + t * ldy + 3, y + t * ldy + 3, sizeof(float) * (rows - 3));
                /* One row at a time, unrounded. */
                for (int t = 0; t < T; t++)
                    for (uint64_t o = 0; o < rows; o++) {
                        size_t i = (size_t)t * rows + o;
                        double d = ds4_dot_row(k->type, data + o * rb, x + (size_t)t * ldx, cols);
                        near(d, r.y[i], 0, 2.0 * cols * 0x1p-53 * r.mag[i], what, i);
                    }
                checked++;
                free(r.y);
                free(r.mag);
                free(x);
                free(y);
                free(y2);
                free(yh);
            }
            free(data);
        }
    assert_int_equal(checked, sizeof(kcases) / sizeof(kcases[0]) * 2 * 3);
}

/* Every kernel variant this build and CPU can run (ds4_dot_available),
 * then back to the default one. */
static void test_kernels(void **state) {
    (void)state;
    char list[64], best[16];
    snprintf(list, sizeof(list), "%s", ds4_dot_available());
    snprintf(best, sizeof(best), "%s", ds4_dot_kernels());
    int n = 0;
    for (char *name = strtok(list, " "); name; name = strtok(NULL, " ")) {
        ds4err err = {0};
        if (ds4_dot_use(name, &err)) fail_msg("%s", err.msg);
        seed(10);
        check_kernels(name);
        n++;
    }
    assert_true(n >= 1);
    ds4err err = {0};
    assert_int_equal(ds4_dot_use(best, &err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_sinkhorn),
        cmocka_unit_test(test_hyper_connections),
        cmocka_unit_test(test_hc_post_tail),
        cmocka_unit_test(test_hyper_connections_ggml_act),
        cmocka_unit_test(test_output_head),
        cmocka_unit_test(test_rope_yarn),
        cmocka_unit_test(test_compressor),
        cmocka_unit_test(test_indexer),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
