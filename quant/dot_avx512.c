/* The AVX-512 kernels (AVX-512F/DQ + FMA + F16C): the canonical order of
 * dot_lanes.h with 8-double registers, dequantizers that produce the f32
 * values of formats.c 16 at a time, and fused kernels that make the block
 * types' weights in registers.  This file
 * is compiled with the AVX-512 target flags and used only on CPUs that have
 * them (dot.c). */
#include "quant/dot_kern.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <pthread.h>

#include "quant/dot_lanes.h"
#include "quant/formats.h"
#include "quant/types.h"
#include "base/bits.h"

/* Fused multiply-add.  These kernels accumulate with fma(w, x, acc) where
 * the portable code writes acc + (double)w * (double)x.  The two are the
 * same number: w and x are f32 values (24 significant bits each), so w*x
 * has at most 48 significant bits and an exponent far inside double's range
 * (|w*x| < 2^256, and nonzero products are >= 2^-298, far above double's
 * smallest subnormal 2^-1074): the product is exact in double, and fma's
 * single rounding of w*x + acc is the rounding of the addition.  That holds
 * for signed zeros and infinities too; only which NaN payload comes out of
 * a NaN input may differ, and NaN payloads are not part of the contract
 * (x86-64 and aarch64 already propagate them differently).  The build keeps
 * -ffp-contract=off, so the compiler never fuses anything else. */

static inline void lanes_add(double *restrict l, const float *restrict a, const float *restrict b,
                      uint64_t n) {
    __m512d lo = _mm512_loadu_pd(l), hi = _mm512_loadu_pd(l + 8);
    uint64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        lo = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + i)),
                             _mm512_cvtps_pd(_mm256_loadu_ps(b + i)), lo);
        hi = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + i + 8)),
                             _mm512_cvtps_pd(_mm256_loadu_ps(b + i + 8)), hi);
    }
    _mm512_storeu_pd(l, lo);
    _mm512_storeu_pd(l + 8, hi);
    lanes_add_portable(l, a + i, b + i, n - i);
}

/* nr is a compile-time constant at every call site (see rows_fma), so a[][]
 * lives in registers: 2*nr accumulators of 8 lanes each.  The activations
 * are widened once per 16 elements for all nr rows. */
static inline __attribute__((always_inline)) void
rows_fma_n(double (*restrict acc)[LANES], const int nr, const float *restrict w,
           const float *restrict x, uint64_t m) {
    __m512d a[RB][2];
    for (int j = 0; j < nr; j++) {
        a[j][0] = _mm512_loadu_pd(acc[j]);
        a[j][1] = _mm512_loadu_pd(acc[j] + 8);
    }
    uint64_t i = 0;
    for (; i + LANES <= m; i += LANES) {
        const __m512d x0 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        const __m512d x1 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        for (int j = 0; j < nr; j++) {
            const float *wj = w + (uint64_t)j * CHUNK + i;
            a[j][0] = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(wj)), x0, a[j][0]);
            a[j][1] = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(wj + 8)), x1, a[j][1]);
        }
    }
    for (int j = 0; j < nr; j++) {
        _mm512_storeu_pd(acc[j], a[j][0]);
        _mm512_storeu_pd(acc[j] + 8, a[j][1]);
    }
    if (i < m) rows_fma_portable(acc, nr, w + i, x + i, m - i);
}

static inline void rows_fma(double (*restrict acc)[LANES], int nr, const float *restrict w,
                     const float *restrict x, uint64_t m) {
    switch (nr) {
    case 4: rows_fma_n(acc, 4, w, x, m); break;
    case 3: rows_fma_n(acc, 3, w, x, m); break;
    case 2: rows_fma_n(acc, 2, w, x, m); break;
    default: rows_fma_n(acc, 1, w, x, m); break;
    }
}

/* AVX-512 dequantizers: the f32 operations of formats.c, in the same order,
 * 16 elements at a time; test_dot compares them with ds4_types_dequant_row bit for
 * bit.  Block scales go through the hardware f16 conversion, which is exact
 * for every finite half and Inf; a chunk with a NaN-or-Inf scale (exponent
 * field 31) is left to the portable code so even those keep their bits. */


static inline int f16_special(uint32_t h) {
    return (h & 0x7c00u) == 0x7c00u;
}

static inline float f16_scale(uint32_t h) {
    return _cvtsh_ss((unsigned short)h);
}

static inline __m512i load16_u8(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

/* d * q - m for the K-quants' f32 weights, q a small integer: the product
 * is exact in f32 (Q2_K: an f16 scale times a 4-bit scale times a 2-bit q,
 * 17 significant bits; Q4_K: 6-bit scales and 4-bit q, 21), so the fused
 * form's one rounding is the subtraction's, signed zeros included (IEEE
 * 754 gives fma's exact zeros the signs of the addition), and one
 * instruction does the two. */
static inline __m512 scale_sub(__m512 d, __m512i q, __m512 m) {
    return _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(q), m);
}

/* Q4_K: the six-bit scale and min of sub-block j (formats.c). */
static void q4k_scale_min(int j, const uint8_t *s, uint32_t *sc, uint32_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xfu) | (uint32_t)(s[j - 4] >> 6) << 4;
        *m = (uint32_t)(s[j + 4] >> 4) | (uint32_t)(s[j] >> 6) << 4;
    }
}

/* Q4_K: the factors of a block's 8 sub-blocks, d1[j] = d * sc and
 * m1[j] = dmin * m, for the fused products and the direct weights; 0
 * when d or dmin is Inf or NaN (such blocks go the portable way). */
static inline int q4k_block_scales(const uint8_t *p, float d1[8], float m1[8]) {
    const uint32_t hd = ds4_bits_le16(p), hm = ds4_bits_le16(p + 2);
    if (f16_special(hd) || f16_special(hm)) return 0;
    const float d = f16_scale(hd), dmin = f16_scale(hm);
    for (int j = 0; j < 8; j++) {
        uint32_t sc, mn;
        q4k_scale_min(j, p + 4, &sc, &mn);
        d1[j] = d * (float)sc;
        m1[j] = dmin * (float)mn;
    }
    return 1;
}

/* F16 elements: exact hardware conversion unless a NaN or Inf is among
 * them; returns how many elements were done (a multiple of 16). */
static uint64_t dq_f16(const uint8_t *p, float *w, uint64_t n) {
    const __m256i expo = _mm256_set1_epi16(0x7c00);
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)(p + 2 * i));
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_and_si256(h, expo), expo))) break;
        _mm512_storeu_ps(w + i, _mm512_cvtph_ps(h));
    }
    return i;
}

static uint64_t dq_bf16(const uint8_t *p, float *w, uint64_t n) {
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
        _mm512_storeu_ps(w + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    return i;
}

/* The official checkpoint's FP8 (E4M3FN) weights, 16 at a time, as
 * blockfp.c's span computes them: a normal code's exponent rebiased and
 * its mantissa moved up (f32 bits (code & 0x7f) << 20 plus 120 << 23), a
 * subnormal's m * 2^-9, the sign bit set, then times the block's scale.
 * Stops before a group with the NaN code or a NaN scale (the span gives
 * those); returns the elements done, a multiple of 16. */
static uint64_t dq_fp8(const uint8_t *row, const uint8_t *srow, uint64_t off, float *w, uint64_t m) {
    const __m512i low7 = _mm512_set1_epi32(0x7f), rebias = _mm512_set1_epi32(120 << 23);
    const __m512i sub_below = _mm512_set1_epi32(8), sign = _mm512_set1_epi32(0x80);
    uint64_t i = 0;
    for (; i + 16 <= m; i += 16) {
        const uint64_t k = off + i;
        const uint8_t sb = srow[k / DS4_BLOCKFP_FP8_BLOCK];
        const __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + k)));
        const __m512i mag = _mm512_and_si512(u, low7);
        if (sb == 255 || _mm512_cmpeq_epi32_mask(mag, low7)) break;
        __m512 v = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), rebias));
        v = _mm512_mask_mul_ps(v, _mm512_cmplt_epi32_mask(mag, sub_below), _mm512_cvtepi32_ps(mag),
                               _mm512_set1_ps(0x1p-9f));
        v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v),
                                                _mm512_slli_epi32(_mm512_and_si512(u, sign), 24)));
        _mm512_storeu_ps(w + i, _mm512_mul_ps(v, _mm512_set1_ps(ds4_blockfp_e8m0(sb))));
    }
    return i;
}

/* FP4 (E2M1) weights, two a byte, low nibble first, 16 at a time: each
 * byte read twice, shifted by 0 or 4, the nibble looking up its value in
 * a register, times the scale of its 32.  Stops before a NaN scale. */
static uint64_t dq_fp4(const uint8_t *row, const uint8_t *srow, uint64_t off, float *w, uint64_t m) {
    static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const __m512 table = _mm512_loadu_ps(e2m1);
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i nibble = _mm512_set1_epi32(15);
    uint64_t i = 0;
    for (; i + 16 <= m; i += 16) {
        const uint64_t k = off + i;
        const uint8_t sb = srow[k / DS4_BLOCKFP_FP4_BLOCK];
        if (sb == 255) break;
        const __m128i b = _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(row + k / 2)), twice);
        const __m512i code = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(b), shift), nibble);
        _mm512_storeu_ps(w + i, _mm512_mul_ps(_mm512_permutexvar_ps(code, table),
                                              _mm512_set1_ps(ds4_blockfp_e8m0(sb))));
    }
    return i;
}

static inline void dequant_chunk(const ds4_type_info *t, const uint8_t *row, const uint8_t *srow,
                                 uint64_t off, float *w, uint64_t m) {
    const uint8_t *p = row + off / t->blck * t->bytes;
    uint64_t done = 0;
    switch (t->id) {
    case DS4_TYPE_F16: done = dq_f16(p, w, m); break;
    case DS4_TYPE_BF16: done = dq_bf16(p, w, m); break;
    case DS4_TYPE_F32: memcpy(w, p, sizeof(float) * m); done = m; break;
    case DS4_TYPE_FP8_B128: done = dq_fp8(row, srow, off, w, m); break;
    case DS4_TYPE_FP4_B32: done = dq_fp4(row, srow, off, w, m); break;
    case DS4_TYPE_Q8_0:
    case DS4_TYPE_Q2_K:
    case DS4_TYPE_Q4_K:
    case DS4_TYPE_IQ2_XXS:
    case DS4_TYPE_I32: break;
    }
    /* The rest (a tail, a special scale or code, another type) the
     * portable way; done is a whole number of blocks.  Q8_0, Q2_K, Q4_K and
     * IQ2_XXS come here only from a row or chunk with a NaN or Inf scale,
     * which the fused kernels and the direct weights decline: the portable
     * way then keeps every bit, and their vector dequantizers would have
     * declined too. */
    if (done < m) dequant_portable(t, row, srow, off + done, w + done, m - done);
}

/* ---- One or two tokens: dequantization fused with the multiply-adds ----
 *
 * For one token (decode) the weights are used once, and for two (a verify
 * batch of depth 1, two rows of a batch) twice, so they go from the block
 * straight into registers, without the f32 buffer, and meet each token's
 * activations there: a[j][k] holds the lanes of row j and token k (nt <=
 * FUSED_T tokens, x + k * ldx).  The values are formats.c's f32 weights
 * and the order of additions is the canonical one: per row and
 * token, blocks in increasing order and inside a block 16 elements at a
 * time in increasing order, element i into lane i % 16. */

typedef struct acc16 {
    __m512d lo, hi;   /* lanes 0-7, 8-15 */
} acc16;

/* The 16 activations at x as doubles (exact). */
static inline acc16 widen16(const float *x) {
    acc16 v = {_mm512_cvtps_pd(_mm256_loadu_ps(x)), _mm512_cvtps_pd(_mm256_loadu_ps(x + 8))};
    return v;
}

/* 16 f32 values as doubles (exact). */
static inline acc16 wide16(__m512 w) {
    const __m256 whi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w), 1));
    acc16 v = {_mm512_cvtps_pd(_mm512_castps512_ps256(w)), _mm512_cvtps_pd(whi)};
    return v;
}

/* a += w * x, lane by lane (see "Fused multiply-add" above). */
static inline void fma16(acc16 *a, acc16 w, acc16 x) {
    a->lo = _mm512_fmadd_pd(w.lo, x.lo, a->lo);
    a->hi = _mm512_fmadd_pd(w.hi, x.hi, a->hi);
}

static inline void prefetch_rows(const uint8_t *const *rows, int nr, uint64_t pos) {
    for (int j = 0; j < nr; j++) __builtin_prefetch(rows[j] + pos);
}

/* Weights 8g..8g+7 of the Q8_0 block at p, whose scale is d, in double. */
static inline __m512d q8_0_weights8(const uint8_t *p, int g, __m512d d) {
    return _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_cvtepi8_epi64(_mm_loadl_epi64((const __m128i *)(p + 2 + 8 * g)))),
                         d);
}

/* The scales of the nbk <= 8 consecutive Q8_0 blocks at p as doubles (the
 * f16 values, exact), converted together: one block at a time, the scale
 * went through the scalar side (an insert, two conversions and a
 * broadcast), a quarter of the vector work of a block's 32 weights, where
 * now each block's scale is a broadcast from memory.  0 when one is NaN
 * or Inf. */
static inline int q8_0_scales(const uint8_t *p, int nbk, double d[8]) {
    __m128i h = _mm_setzero_si128();
    if (nbk == 8) {
        h = _mm_insert_epi16(h, (int)ds4_bits_le16(p), 0);
        h = _mm_insert_epi16(h, (int)ds4_bits_le16(p + 34), 1);
        h = _mm_insert_epi16(h, (int)ds4_bits_le16(p + 68), 2);
        h = _mm_insert_epi16(h, (int)ds4_bits_le16(p + 102), 3);
        h = _mm_insert_epi16(h, (int)ds4_bits_le16(p + 136), 4);
        h = _mm_insert_epi16(h, (int)ds4_bits_le16(p + 170), 5);
        h = _mm_insert_epi16(h, (int)ds4_bits_le16(p + 204), 6);
        h = _mm_insert_epi16(h, (int)ds4_bits_le16(p + 238), 7);
    } else {
        uint16_t hs[8] = {0};
        for (int k = 0; k < nbk; k++) hs[k] = (uint16_t)ds4_bits_le16(p + 34 * k);
        h = _mm_loadu_si128((const __m128i *)hs);
    }
    const __m128i expo = _mm_set1_epi16(0x7c00);
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, expo), expo))) return 0;
    _mm512_storeu_pd(d, _mm512_cvtps_pd(_mm256_cvtph_ps(h)));
    return 1;
}

/* Each fused kernel returns 0, having stored nothing, when a block scale is
 * NaN or Inf; the caller then takes the buffered path, which handles it. */
/* Q8_0 in double: (double)q * (double)d is exactly the f32 weight q * d
 * (8 + 11 significant bits), so the weights are made 8 at a time straight
 * in double, without the f32 stage and its widening.  The scales of 8
 * blocks are made at once (q8_0_scales). */
static inline __attribute__((always_inline)) int
fused_q8_0(const uint8_t *const *rows, const int nr, const float *x, uint64_t ldx, const int nt,
           uint64_t nb, acc16 (*a)[FUSED_T]) {
    for (uint64_t b0 = 0; b0 < nb; b0 += 8) {
        const int nbk = nb - b0 < 8 ? (int)(nb - b0) : 8;
        double ds[RB][8];
        for (int j = 0; j < nr; j++)
            if (!q8_0_scales(rows[j] + 34 * b0, nbk, ds[j])) return 0;
        for (int k8 = 0; k8 < nbk; k8++) {
            const uint64_t b = b0 + (uint64_t)k8;
            acc16 x0[FUSED_T], x1[FUSED_T];
            for (int k = 0; k < nt; k++) {
                x0[k] = widen16(x + k * ldx + 32 * b);
                x1[k] = widen16(x + k * ldx + 32 * b + 16);
            }
            if ((b & 1) == 0) prefetch_rows(rows, nr, 34 * b + 768);
            for (int j = 0; j < nr; j++) {
                const uint8_t *p = rows[j] + 34 * b;
                const __m512d d = _mm512_set1_pd(ds[j][k8]);
                __m512d w[4];
                for (int g = 0; g < 4; g++) w[g] = q8_0_weights8(p, g, d);
                for (int k = 0; k < nt; k++) {
                    fma16(&a[j][k], (acc16){w[0], w[1]}, x0[k]);
                    fma16(&a[j][k], (acc16){w[2], w[3]}, x1[k]);
                }
            }
        }
    }
    return 1;
}

/* Q2_K by table.  A sub-block's weights take only 4 values, dl * q - ml
 * for q = 0..3, the f32 values of formats.c (scale_sub); so per block and
 * row the 16 sub-blocks' 4 values are made once, as doubles, and each 8
 * weights are a lookup: the bytes' q bits as 64-bit lanes index a permute
 * of the sub-block's table, which a
 * 256-bit broadcast repeats into entries 4-7 so that the bit above q (the
 * next q's) may stay in the index.  Per 8 weights that is a shift and a
 * permute where the f32 way took a shift, a mask, a conversion, the
 * multiply-subtract and the widening to double.  tab[g] holds sub-block g's
 * 4 values; 0 when d or dmin is NaN or Inf. */
static inline int q2_K_tables(const uint8_t *p, double tab[16][4]) {
    const uint32_t hd = ds4_bits_le16(p + 80), hm = ds4_bits_le16(p + 82);
    if (f16_special(hd) || f16_special(hm)) return 0;
    const __m512i sc = load16_u8(p);
    const __m512 dl = _mm512_mul_ps(_mm512_set1_ps(f16_scale(hd)),
                                    _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15))));
    const __m512 ml = _mm512_mul_ps(_mm512_set1_ps(f16_scale(hm)), _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)));
    __m512 t[4];
    for (int q = 0; q < 4; q++) t[q] = scale_sub(dl, _mm512_set1_epi32(q), ml);
    /* t[q] has sub-block g in lane g; transpose so that sub-block g's 4
     * values are adjacent: u[k] holds sub-blocks k, k+4, k+8 and k+12, one
     * in each 128-bit lane. */
    const __m512d a0 = _mm512_castps_pd(_mm512_unpacklo_ps(t[0], t[1]));
    const __m512d a1 = _mm512_castps_pd(_mm512_unpackhi_ps(t[0], t[1]));
    const __m512d b0 = _mm512_castps_pd(_mm512_unpacklo_ps(t[2], t[3]));
    const __m512d b1 = _mm512_castps_pd(_mm512_unpackhi_ps(t[2], t[3]));
    const __m512d u[4] = {_mm512_unpacklo_pd(a0, b0), _mm512_unpackhi_pd(a0, b0),
                          _mm512_unpacklo_pd(a1, b1), _mm512_unpackhi_pd(a1, b1)};
    for (int k = 0; k < 4; k++) {
        const acc16 v = wide16(_mm512_castpd_ps(u[k]));
        _mm256_storeu_pd(tab[k], _mm512_castpd512_pd256(v.lo));
        _mm256_storeu_pd(tab[k + 4], _mm512_extractf64x4_pd(v.lo, 1));
        _mm256_storeu_pd(tab[k + 8], _mm512_castpd512_pd256(v.hi));
        _mm256_storeu_pd(tab[k + 12], _mm512_extractf64x4_pd(v.hi, 1));
    }
    return 1;
}

/* The 8 bytes at p as 64-bit lanes, the index of a table permute (Q2_K's
 * and Q4_K's), which reads only its low bits: shifted right, the same
 * lanes index by the next q. */
static inline __m512i bytes_index8(const uint8_t *p) {
    return _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)p));
}

/* The 8 weights of sub-block table tab whose q are the low 2 bits of idx. */
static inline __m512d q2_K_lookup8(const double tab[4], __m512i idx) {
    return _mm512_permutexvar_pd(idx, _mm512_broadcast_f64x4(_mm256_loadu_pd(tab)));
}

/* Sub-block g = 8*half + 2*s + sub covers elements 16g..16g+15, whose q
 * are bits 2s, 2s+1 of bytes 16 + 32*half + 16*sub + 0..15: per half the
 * bytes are read once and shifted by 2 for each s. */
static inline __attribute__((always_inline)) int
fused_q2_K(const uint8_t *const *rows, const int nr, const float *x, uint64_t ldx, const int nt,
           uint64_t nb, acc16 (*a)[FUSED_T]) {
    for (uint64_t b = 0; b < nb; b++) {
        double tab[RB][16][4];
        prefetch_rows(rows, nr, 84 * b + 512);
        prefetch_rows(rows, nr, 84 * b + 576);
        for (int j = 0; j < nr; j++)
            if (!q2_K_tables(rows[j] + 84 * b, tab[j])) return 0;
        for (int half = 0; half < 2; half++) {
            __m512i q[RB][2][2];   /* row, sub, lanes 0-7 and 8-15 */
            for (int j = 0; j < nr; j++)
                for (int sub = 0; sub < 2; sub++)
                    for (int h = 0; h < 2; h++)
                        q[j][sub][h] = bytes_index8(rows[j] + 84 * b + 16 + 32 * half + 16 * sub + 8 * h);
            for (int s = 0; s < 4; s++)
                for (int sub = 0; sub < 2; sub++) {
                    const int g = 8 * half + 2 * s + sub;
                    acc16 xv[FUSED_T];
                    for (int k = 0; k < nt; k++) xv[k] = widen16(x + k * ldx + 256 * b + 16 * g);
                    for (int j = 0; j < nr; j++) {
                        const acc16 w = {q2_K_lookup8(tab[j][g], q[j][sub][0]),
                                         q2_K_lookup8(tab[j][g], q[j][sub][1])};
                        for (int k = 0; k < nt; k++) fma16(&a[j][k], w, xv[k]);
                        q[j][sub][0] = _mm512_srli_epi64(q[j][sub][0], 2);
                        q[j][sub][1] = _mm512_srli_epi64(q[j][sub][1], 2);
                    }
                }
        }
    }
    return 1;
}

/* Q4_K by table, as Q2_K: a sub-block's 32 weights take 16 values, d1 *
 * q - m1 for q = 0..15 (the f32 values of formats.c), made once as 16
 * doubles in two registers (value q in lane q of the pair), and each 8
 * weights are a two-register permute indexed by their nibbles as 64-bit
 * lanes (it reads the low 4 bits of each, so the high nibble may stay in
 * the index of the low one). */
static inline acc16 q4_K_table(float d1, float m1) {
    return wide16(scale_sub(_mm512_set1_ps(d1),
                            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_ps(m1)));
}

static inline __m512d q4_K_lookup8(acc16 t, __m512i idx) {
    return _mm512_permutex2var_pd(t.lo, idx, t.hi);
}

/* Sub-blocks 2i and 2i+1 share bytes 16 + 32i .. 16 + 32i + 31, the low
 * nibbles 2i's and the high 2i+1's: the bytes are read once per pair. */
static inline __attribute__((always_inline)) int
fused_q4_K(const uint8_t *const *rows, const int nr, const float *x, uint64_t ldx, const int nt,
           uint64_t nb, acc16 (*a)[FUSED_T]) {
    for (uint64_t b = 0; b < nb; b++) {
        float d1[RB][8], m1[RB][8];
        prefetch_rows(rows, nr, 144 * b + 576);
        prefetch_rows(rows, nr, 144 * b + 640);
        prefetch_rows(rows, nr, 144 * b + 704);
        for (int j = 0; j < nr; j++)
            if (!q4k_block_scales(rows[j] + 144 * b, d1[j], m1[j])) return 0;
        for (int i = 0; i < 4; i++) {
            __m512i q[RB][4];
            for (int j = 0; j < nr; j++)
                for (int e = 0; e < 4; e++) q[j][e] = bytes_index8(rows[j] + 144 * b + 16 + 32 * i + 8 * e);
            for (int k = 2 * i; k < 2 * i + 2; k++) {
                acc16 xv[FUSED_T][2];
                for (int t = 0; t < nt; t++) {
                    xv[t][0] = widen16(x + t * ldx + 256 * b + 32 * k);
                    xv[t][1] = widen16(x + t * ldx + 256 * b + 32 * k + 16);
                }
                for (int j = 0; j < nr; j++) {
                    const acc16 tab = q4_K_table(d1[j][k], m1[j][k]);
                    for (int h = 0; h < 2; h++) {
                        const acc16 w = {q4_K_lookup8(tab, q[j][2 * h]), q4_K_lookup8(tab, q[j][2 * h + 1])};
                        for (int t = 0; t < nt; t++) fma16(&a[j][t], w, xv[t][h]);
                    }
                    if (k == 2 * i)
                        for (int e = 0; e < 4; e++) q[j][e] = _mm512_srli_epi64(q[j][e], 4);
                }
            }
        }
    }
    return 1;
}

/* IQ2_XXS in double.  The f32 weight is (db * grid) * (+-1), all exact
 * (16 + 6 significant bits), so (grid * (+-1)) * db in double is that
 * weight, and its product with x (22 + 24 bits) is exact too.  The grid
 * points are therefore looked up as 8
 * doubles each (grid_d, 16 KiB, built once), and a sign pattern is a mask
 * under which a lane becomes 0 - grid, exactly -grid (the grid values are
 * 8, 25 and 43).  The mask costs one operation per 8 weights where a table
 * of signs cost a load and a multiply: 10-13% on the one-token kernel. */
static double grid_d[256][8] __attribute__((aligned(64)));
static pthread_once_t iq2_once = PTHREAD_ONCE_INIT;

static void iq2_tables_init(void) {
    for (int i = 0; i < 256; i++)
        for (int k = 0; k < 8; k++) grid_d[i][k] = (double)((ds4_formats_iq2xxs_grid[i] >> (8 * k)) & 0xff);
}

/* Per block and row, everything the inner loop needs besides the tables,
 * computed 8 groups at a time in vector registers: the group scales db (as
 * doubles, from the f32 formula), the byte offsets of each 8 weights'
 * grid_d rows and their sign indices.  The 64 bytes after the f16 scale are the 8
 * groups: 4 grid indices, then the u32 with the 4 sign indices and the
 * 4-bit scale. */
typedef struct iq2_prep {
    double db[8];
    uint32_t grid_off[4][8], sign_idx[4][8];
} iq2_prep;

static inline void iq2_prepare(const uint8_t *blk, float d, iq2_prep *o) {
    const __m512i q = _mm512_loadu_si512(blk + 2);
    const __m256i lo = _mm512_cvtepi64_epi32(q);                      /* grid indices */
    const __m256i aux = _mm512_cvtepi64_epi32(_mm512_srli_epi64(q, 32));
    const __m256 s = _mm256_cvtepi32_ps(_mm256_srli_epi32(aux, 28));
    const __m256 db = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), _mm256_add_ps(_mm256_set1_ps(0.5f), s)),
                                    _mm256_set1_ps(0.25f));
    _mm512_storeu_pd(o->db, _mm512_cvtps_pd(db));
    const __m256i m127 = _mm256_set1_epi32(127), m255 = _mm256_set1_epi32(255);
    for (int l = 0; l < 4; l++) {
        const __m256i gi = _mm256_and_si256(_mm256_srli_epi32(lo, 8 * l), m255);
        const __m256i si = _mm256_and_si256(_mm256_srli_epi32(aux, 7 * l), m127);
        _mm256_storeu_si256((__m256i *)o->grid_off[l], _mm256_slli_epi32(gi, 6));
        _mm256_storeu_si256((__m256i *)o->sign_idx[l], si);
    }
}

/* Group l of sub-block ib's 8 weights, (grid * (+-1)) * db with db the
 * sub-block's scale: exact.  The tables must be built (iq2_once). */
static inline __m512d iq2_weights8(const iq2_prep *pr, int l, int ib, __m512d db) {
    const __m512d g = _mm512_load_pd((const uint8_t *)grid_d + pr->grid_off[l][ib]);
    const __mmask8 neg = _cvtu32_mask8(ds4_formats_ksigns_iq2xs[pr->sign_idx[l][ib]]);
    return _mm512_mul_pd(_mm512_mask_sub_pd(g, neg, _mm512_setzero_pd(), g), db);
}

static inline __attribute__((always_inline)) int
fused_iq2_xxs(const uint8_t *const *rows, const int nr, const float *x, uint64_t ldx, const int nt,
              uint64_t nb, acc16 (*a)[FUSED_T]) {
    pthread_once(&iq2_once, iq2_tables_init);
    for (uint64_t b = 0; b < nb; b++) {
        iq2_prep pr[RB];
        prefetch_rows(rows, nr, 66 * b + 512);
        prefetch_rows(rows, nr, 66 * b + 576);
        for (int j = 0; j < nr; j++) {
            const uint32_t h = ds4_bits_le16(rows[j] + 66 * b);
            if (f16_special(h)) return 0;
            iq2_prepare(rows[j] + 66 * b, f16_scale(h), &pr[j]);
        }
        for (int ib = 0; ib < 8; ib++) {
            __m512d xl[FUSED_T][4];
            for (int k = 0; k < nt; k++) {
                const acc16 x0 = widen16(x + k * ldx + 256 * b + 32 * ib);
                const acc16 x1 = widen16(x + k * ldx + 256 * b + 32 * ib + 16);
                xl[k][0] = x0.lo, xl[k][1] = x0.hi, xl[k][2] = x1.lo, xl[k][3] = x1.hi;
            }
            for (int j = 0; j < nr; j++) {
                const __m512d db = _mm512_set1_pd(pr[j].db[ib]);
                for (int l = 0; l < 4; l++) {
                    const __m512d w = iq2_weights8(&pr[j], l, ib, db);
                    for (int k = 0; k < nt; k++) {
                        if (l & 1) a[j][k].hi = _mm512_fmadd_pd(w, xl[k][l], a[j][k].hi);
                        else a[j][k].lo = _mm512_fmadd_pd(w, xl[k][l], a[j][k].lo);
                    }
                }
            }
        }
    }
    return 1;
}

/* ---- Several tokens: weights straight into double ------------------------
 *
 * For the blocked multiply (dot_job.h's KERN_DEQUANT_WIDE), the types whose
 * f32 weight is a product of exact factors are made in double directly,
 * without the f32 stage and its widening, with the same values as the
 * fused kernels above: Q8_0 as (double)q * (double)d, IQ2_XXS as
 * (grid * (+-1)) * db, Q2_K and Q4_K looked up in their sub-blocks'
 * tables of f32 values.  Each declines (returns 0) at a NaN-or-Inf scale;
 * the caller's f32 way then writes the whole chunk again. */
static int wide_q8_0(const uint8_t *p, double *wd, uint64_t nb) {
    for (uint64_t b0 = 0; b0 < nb; b0 += 8) {
        const int nbk = nb - b0 < 8 ? (int)(nb - b0) : 8;
        double ds[8];
        if (!q8_0_scales(p + 34 * b0, nbk, ds)) return 0;
        for (int k = 0; k < nbk; k++) {
            const uint8_t *q = p + 34 * (b0 + (uint64_t)k);
            const __m512d d = _mm512_set1_pd(ds[k]);
            for (int g = 0; g < 4; g++) _mm512_storeu_pd(wd + 32 * (b0 + (uint64_t)k) + 8 * g, q8_0_weights8(q, g, d));
        }
    }
    return 1;
}

static int wide_q2_K(const uint8_t *p, double *wd, uint64_t nb) {
    for (uint64_t b = 0; b < nb; b++, p += 84, wd += 256) {
        double tab[16][4];
        if (!q2_K_tables(p, tab)) return 0;
        for (int half = 0; half < 2; half++)
            for (int sub = 0; sub < 2; sub++)
                for (int h = 0; h < 2; h++) {
                    __m512i q = bytes_index8(p + 16 + 32 * half + 16 * sub + 8 * h);
                    for (int s = 0; s < 4; s++) {
                        const int g = 8 * half + 2 * s + sub;
                        _mm512_storeu_pd(wd + 16 * g + 8 * h, q2_K_lookup8(tab[g], q));
                        q = _mm512_srli_epi64(q, 2);
                    }
                }
    }
    return 1;
}

static int wide_iq2_xxs(const uint8_t *p, double *wd, uint64_t nb) {
    pthread_once(&iq2_once, iq2_tables_init);
    for (uint64_t b = 0; b < nb; b++, p += 66, wd += 256) {
        const uint32_t h = ds4_bits_le16(p);
        if (f16_special(h)) return 0;
        iq2_prep pr;
        iq2_prepare(p, f16_scale(h), &pr);
        for (int ib = 0; ib < 8; ib++) {
            const __m512d db = _mm512_set1_pd(pr.db[ib]);
            for (int l = 0; l < 4; l++)
                _mm512_storeu_pd(wd + 32 * ib + 8 * l, iq2_weights8(&pr, l, ib, db));
        }
    }
    return 1;
}

static int wide_q4_K(const uint8_t *p, double *wd, uint64_t nb) {
    for (uint64_t b = 0; b < nb; b++, p += 144, wd += 256) {
        float d1[8], m1[8];
        if (!q4k_block_scales(p, d1, m1)) return 0;
        for (int i = 0; i < 4; i++) {
            const acc16 lo = q4_K_table(d1[2 * i], m1[2 * i]);
            const acc16 hi = q4_K_table(d1[2 * i + 1], m1[2 * i + 1]);
            for (int e = 0; e < 4; e++) {
                const __m512i q = bytes_index8(p + 16 + 32 * i + 8 * e);
                _mm512_storeu_pd(wd + 64 * i + 8 * e, q4_K_lookup8(lo, q));
                _mm512_storeu_pd(wd + 64 * i + 32 + 8 * e, q4_K_lookup8(hi, _mm512_srli_epi64(q, 4)));
            }
        }
    }
    return 1;
}

static int dequant_chunk_wide(const ds4_type_info *t, const uint8_t *row, const uint8_t *srow, uint64_t off,
                              double *wd, uint64_t m) {
    (void)srow;
    switch (t->id) {
    case DS4_TYPE_Q8_0: return wide_q8_0(row + off / 32 * 34, wd, m / 32);
    case DS4_TYPE_Q2_K: return wide_q2_K(row + off / 256 * 84, wd, m / 256);
    case DS4_TYPE_Q4_K: return wide_q4_K(row + off / 256 * 144, wd, m / 256);
    case DS4_TYPE_IQ2_XXS: return wide_iq2_xxs(row + off / 256 * 66, wd, m / 256);
    case DS4_TYPE_F32:
    case DS4_TYPE_F16:
    case DS4_TYPE_BF16:
    case DS4_TYPE_I32:
    case DS4_TYPE_FP8_B128:
    case DS4_TYPE_FP4_B32: return 0;
    }
    return 0;
}

/* nr rows of type t (whole rows of n elements) against nt tokens (x + k *
 * ldx): acc[k][j] gets the lanes of row j and token k.  Returns 0 when the
 * type has no fused kernel or a scale is special (acc untouched). */
static inline __attribute__((always_inline)) int
fused_n(const ds4_type_info *t, const uint8_t *const *rows, const int nr, const float *x,
        uint64_t ldx, const int nt, uint64_t n, double (*acc)[RB][LANES]) {
    acc16 a[RB][FUSED_T];
    for (int j = 0; j < nr; j++)
        for (int k = 0; k < nt; k++) a[j][k].lo = a[j][k].hi = _mm512_setzero_pd();
    const uint64_t nb = n / t->blck;
    int ok = 0;
    switch (t->id) {
    case DS4_TYPE_Q8_0: ok = fused_q8_0(rows, nr, x, ldx, nt, nb, a); break;
    case DS4_TYPE_Q2_K: ok = fused_q2_K(rows, nr, x, ldx, nt, nb, a); break;
    case DS4_TYPE_Q4_K: ok = fused_q4_K(rows, nr, x, ldx, nt, nb, a); break;
    case DS4_TYPE_IQ2_XXS: ok = fused_iq2_xxs(rows, nr, x, ldx, nt, nb, a); break;
    case DS4_TYPE_F32:
    case DS4_TYPE_F16:
    case DS4_TYPE_BF16:
    case DS4_TYPE_I32:
    case DS4_TYPE_FP8_B128:
    case DS4_TYPE_FP4_B32: ok = 0; break;
    }
    if (!ok) return 0;
    for (int j = 0; j < nr; j++)
        for (int k = 0; k < nt; k++) {
            _mm512_storeu_pd(acc[k][j], a[j][k].lo);
            _mm512_storeu_pd(acc[k][j] + 8, a[j][k].hi);
        }
    return 1;
}

/* The shapes as compile-time constants, so the accumulators are registers
 * (4 rows x 2 tokens: 16 of the 32). */
static inline int fused_rows(const ds4_type_info *t, const uint8_t *const *rows, int nr,
                             const float *x, uint64_t ldx, int nt, uint64_t n,
                             double (*acc)[RB][LANES]) {
    switch (nr * 8 + nt) {
    case 4 * 8 + 2: return fused_n(t, rows, 4, x, ldx, 2, n, acc);
    case 3 * 8 + 2: return fused_n(t, rows, 3, x, ldx, 2, n, acc);
    case 2 * 8 + 2: return fused_n(t, rows, 2, x, ldx, 2, n, acc);
    case 1 * 8 + 2: return fused_n(t, rows, 1, x, ldx, 2, n, acc);
    case 4 * 8 + 1: return fused_n(t, rows, 4, x, ldx, 1, n, acc);
    case 3 * 8 + 1: return fused_n(t, rows, 3, x, ldx, 1, n, acc);
    case 2 * 8 + 1: return fused_n(t, rows, 2, x, ldx, 1, n, acc);
    default: return fused_n(t, rows, 1, x, ldx, 1, n, acc);
    }
}


/* ---- Several tokens: the blocked multiply (dot_job.h) -------------------
 *
 * R rows x K tokens of a chunk, weights and activations already in double.
 * The lanes of one half (lanes 0-7, then 8-15) of every (row, token) pair
 * stay in registers over the whole chunk: R*K accumulators, R weight
 * registers and one activation register, at most 4 x 4 + 4 + 1 = 21 of the
 * 32.  Each loaded weight vector serves K tokens and each activation vector
 * R rows.  The two halves are independent chains, so doing one after the
 * other moves no addition.
 *
 * mma_block is the same loop in dot_avx2.c, dot_avx512.c and dot_neon.c,
 * written out in each: what differs is the instruction set's (vector type,
 * width, aligned or unaligned loads, the operand order of its fused
 * multiply-add) and the block that fits its registers, and one shared body
 * would take a macro for each of those inside the innermost loop. */
static inline __attribute__((always_inline)) void
mma_block(double (*restrict acc)[TILE_T][LANES], const int R, const int K, int k0,
          const double *restrict wd, const double *restrict xd, uint64_t groups) {
    for (int h = 0; h < 2; h++) {
        __m512d a[4][4];
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) a[r][k] = _mm512_load_pd(acc[r][k0 + k] + 8 * h);
        /* Two pointers walk the chunk; rows and tokens are constant
         * offsets from them. */
        const double *wp = wd + 8 * h, *xp = xd + (uint64_t)k0 * BCHUNK + 8 * h;
        for (uint64_t g = 0; g < groups; g++, wp += LANES, xp += LANES) {
            __m512d w[4];
            for (int r = 0; r < R; r++) w[r] = _mm512_load_pd(wp + r * BCHUNK);
            for (int k = 0; k < K; k++) {
                const __m512d xv = _mm512_load_pd(xp + k * BCHUNK);
                for (int r = 0; r < R; r++) a[r][k] = _mm512_fmadd_pd(w[r], xv, a[r][k]);
            }
        }
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) _mm512_store_pd(acc[r][k0 + k] + 8 * h, a[r][k]);
    }
}

/* The block shapes as compile-time constants, so the accumulators are
 * registers: up to 4 rows x 4 tokens here, 4 x 2 in dot_avx2.c, whose
 * mma_shape is this switch over its own, smaller set of shapes. */
static inline void mma_shape(double (*restrict acc)[TILE_T][LANES], int R, int K, int k0,
                             const double *restrict wd, const double *restrict xd,
                             uint64_t groups) {
    switch (R * 8 + K) {
    case 4 * 8 + 4: mma_block(acc, 4, 4, k0, wd, xd, groups); break;
    case 4 * 8 + 3: mma_block(acc, 4, 3, k0, wd, xd, groups); break;
    case 4 * 8 + 2: mma_block(acc, 4, 2, k0, wd, xd, groups); break;
    case 4 * 8 + 1: mma_block(acc, 4, 1, k0, wd, xd, groups); break;
    case 3 * 8 + 4: mma_block(acc, 3, 4, k0, wd, xd, groups); break;
    case 3 * 8 + 3: mma_block(acc, 3, 3, k0, wd, xd, groups); break;
    case 3 * 8 + 2: mma_block(acc, 3, 2, k0, wd, xd, groups); break;
    case 3 * 8 + 1: mma_block(acc, 3, 1, k0, wd, xd, groups); break;
    case 2 * 8 + 4: mma_block(acc, 2, 4, k0, wd, xd, groups); break;
    case 2 * 8 + 3: mma_block(acc, 2, 3, k0, wd, xd, groups); break;
    case 2 * 8 + 2: mma_block(acc, 2, 2, k0, wd, xd, groups); break;
    case 2 * 8 + 1: mma_block(acc, 2, 1, k0, wd, xd, groups); break;
    case 1 * 8 + 4: mma_block(acc, 1, 4, k0, wd, xd, groups); break;
    case 1 * 8 + 3: mma_block(acc, 1, 3, k0, wd, xd, groups); break;
    case 1 * 8 + 2: mma_block(acc, 1, 2, k0, wd, xd, groups); break;
    default: mma_block(acc, 1, 1, k0, wd, xd, groups); break;
    }
}

static inline void mma(double (*restrict acc)[TILE_T][LANES], int nr, int nt,
                       const double *restrict wd, const double *restrict xd, uint64_t m) {
    const uint64_t groups = m / LANES;
    for (int k0 = 0; k0 < nt; k0 += 4)
        mma_shape(acc, nr, nt - k0 < 4 ? nt - k0 : 4, k0, wd, xd, groups);
    if (m % LANES) mma_portable(acc, nr, nt, wd + groups * LANES, xd + groups * LANES, m % LANES);
}

#define KERN_LANES_ADD lanes_add
#define KERN_ROWS_FMA rows_fma
#define KERN_DEQUANT dequant_chunk
#define KERN_DEQUANT_WIDE dequant_chunk_wide
#define KERN_FUSED fused_rows
/* A job of two tokens of a type with fused kernels takes them rather than
 * the blocked multiply, which writes each chunk's weights as doubles and
 * reads them back for every tile of tokens: for every such type, the pair
 * was faster on both machines measured; from 3 tokens on, on the Intel one
 * at 16 threads, the blocked multiply was as fast or faster
 * (docs/PERFORMANCE.md). */
#define KERN_FUSED_MULTI 1
#define KERN_MMA mma
#include "quant/dot_job.h"

const ds4_dot_kern ds4_dot_avx512 = {"avx512", kern_dot_f32, kern_row_dot, kern_job};

#endif
