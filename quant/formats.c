/* Block formats: IEEE half/bfloat conversions and exact dequantization of the
 * GGUF block types ds4ref reads.
 *
 * Every quantized weight has exactly one f32 value: the one ggml's
 * dequantize_row_* produces.  To get the same bits we perform the same f32
 * operations in the same order as ggml (see the comment at each block type);
 * the code is compiled with -ffp-contract=off so no multiply-add is fused.
 * In fact every product involved is exact in f32 (an 11-bit f16 scale times
 * integers of at most 8 bits, or 0.5+s, 0.25 and a grid byte for IQ2_XXS),
 * so the only rounding is the final "- min" of the K formats, and the value
 * is the correctly rounded result of the format's formula.
 * Blocks are read byte by byte (little-endian, as GGUF stores them), so
 * neither alignment nor host byte order matters. */
#include "quant/formats.h"

#include <string.h>

#include "base/bits.h"

/* ------------------------------------------------------------------------ */
/* IEEE binary16 and bfloat16                                               */
/* ------------------------------------------------------------------------ */

/* Half to float as a pure function of the bits.  It is written without
 * branches so the F16 row loop below vectorizes: every case is computed and
 * the right one selected.
 *
 *   exponent 1..30   normal: rebias the exponent from 15 to 127;
 *   exponent 31      Inf / NaN: all-ones f32 exponent, payload kept (shifted);
 *   exponent 0       zero or subnormal m * 2^-24.  With p the index of the
 *                    top set bit of m, the value is 2^(p-24) * m/2^p: f32
 *                    exponent p-24+127, and m shifted so its top bit lands on
 *                    the (implicit) bit 23. */
static inline uint32_t f16_to_f32_bits(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1f;
    const uint32_t m = h & 0x3ff;
    const uint32_t normal = ((e + 112) << 23) | (m << 13);
    const uint32_t infnan = 0x7f800000u | (m << 13);
    const uint32_t p = (uint32_t)(m >= 2) + (m >= 4) + (m >= 8) + (m >= 16) +
                       (m >= 32) + (m >= 64) + (m >= 128) + (m >= 256) + (m >= 512);
    const uint32_t sub = m ? ((p + 103) << 23) | ((m << (23 - p)) & 0x7fffffu) : 0;
    const uint32_t r = e == 0 ? sub : e == 31 ? infnan : normal;
    return sign | r;
}

float ds4_formats_f16_to_f32(uint16_t h) {
    return ds4_bits_to_f32(f16_to_f32_bits(h));
}

/* Float to half, round to nearest even.  Only simulated roundings and test
 * data use it, so it is written for clarity, not speed.  NaN becomes the
 * quiet NaN sign|0x7E00 (payload dropped, as ds4's f32_to_f16 does); values
 * from 65520 up (the midpoint between the largest half 65504 and 2^16, which
 * rounds to the even side) become Inf. */
uint16_t ds4_formats_f32_to_f16(float f) {
    const uint32_t u = ds4_bits_of_f32(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);   /* >= 2^16 */

    if (a >= 0x38800000u) {
        /* Normal half (|f| >= 2^-14): rebias the exponent (subtract 112 from
         * the f32 exponent field) and drop 13 mantissa bits.  A carry out of
         * the mantissa correctly bumps the exponent, up to Inf. */
        uint32_t h = (a - (112u << 23)) >> 13;
        const uint32_t rest = a & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }

    /* Subnormal half: the result is round(|f| / 2^-24).  2^-25 itself is a
     * tie between 0 and the smallest subnormal and goes to 0 (even). */
    if (a <= 0x33000000u) return (uint16_t)sign;
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;   /* |f| = mant * 2^(e-150) */
    const uint32_t shift = 126 - (a >> 23);              /* 14 .. 24 */
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) h++;   /* may carry into the
                                                            smallest normal */
    return (uint16_t)(sign | h);
}

float ds4_formats_bf16_to_f32(uint16_t h) {
    return ds4_bits_to_f32((uint32_t)h << 16);
}

/* Round to nearest even by adding 0x7FFF plus the lowest kept bit.  A NaN
 * keeps its sign and top payload bits and is forced quiet, so a payload that
 * lives only in the dropped bits cannot turn into Inf. */
uint16_t ds4_formats_f32_to_bf16(float f) {
    const uint32_t u = ds4_bits_of_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* ------------------------------------------------------------------------ */
/* IQ2_XXS tables                                                           */
/* ------------------------------------------------------------------------ */

/* The 256 points of the IQ2_XXS lattice, ggml's iq2xxs_grid.  Byte j of an
 * entry (little-endian order) is element j of the 8-element group, always
 * 8, 25 or 43 (0x08, 0x19, 0x2b).  The entries are sorted ascending. */
const uint64_t ds4_formats_iq2xxs_grid[256] = {
    0x0808080808080808, 0x080808080808082b, 0x0808080808081919, 0x0808080808082b08,
    0x0808080808082b2b, 0x0808080808190819, 0x0808080808191908, 0x08080808082b0808,
    0x08080808082b082b, 0x08080808082b2b08, 0x08080808082b2b2b, 0x0808080819080819,
    0x0808080819081908, 0x0808080819190808, 0x0808080819192b08, 0x08080808192b0819,
    0x08080808192b1908, 0x080808082b080808, 0x080808082b08082b, 0x080808082b082b2b,
    0x080808082b2b082b, 0x0808081908080819, 0x0808081908081908, 0x0808081908190808,
    0x0808081908191919, 0x0808081919080808, 0x080808192b081908, 0x080808192b192b08,
    0x0808082b08080808, 0x0808082b0808082b, 0x0808082b082b082b, 0x0808082b2b08082b,
    0x0808190808080819, 0x0808190808081908, 0x0808190808190808, 0x08081908082b0819,
    0x08081908082b1908, 0x0808190819080808, 0x080819081908082b, 0x0808190819082b08,
    0x08081908192b0808, 0x080819082b080819, 0x080819082b081908, 0x080819082b190808,
    0x080819082b2b1908, 0x0808191908080808, 0x080819190808082b, 0x0808191908082b08,
    0x08081919082b0808, 0x080819191908192b, 0x08081919192b2b19, 0x080819192b080808,
    0x080819192b190819, 0x0808192b08082b19, 0x0808192b08190808, 0x0808192b19080808,
    0x0808192b2b081908, 0x0808192b2b2b1908, 0x08082b0808080808, 0x08082b0808081919,
    0x08082b0808082b08, 0x08082b0808191908, 0x08082b08082b2b08, 0x08082b0819080819,
    0x08082b0819081908, 0x08082b0819190808, 0x08082b081919082b, 0x08082b082b082b08,
    0x08082b1908081908, 0x08082b1919080808, 0x08082b2b0808082b, 0x08082b2b08191908,
    0x0819080808080819, 0x0819080808081908, 0x0819080808190808, 0x08190808082b0819,
    0x0819080819080808, 0x08190808192b0808, 0x081908082b081908, 0x081908082b190808,
    0x081908082b191919, 0x0819081908080808, 0x0819081908082b08, 0x08190819082b0808,
    0x0819081919190808, 0x0819081919192b2b, 0x081908192b080808, 0x0819082b082b1908,
    0x0819082b19081919, 0x0819190808080808, 0x0819190808082b08, 0x08191908082b0808,
    0x08191908082b1919, 0x0819190819082b19, 0x081919082b080808, 0x0819191908192b08,
    0x08191919192b082b, 0x0819192b08080808, 0x0819192b0819192b, 0x08192b0808080819,
    0x08192b0808081908, 0x08192b0808190808, 0x08192b0819080808, 0x08192b082b080819,
    0x08192b1908080808, 0x08192b1908081919, 0x08192b192b2b0808, 0x08192b2b19190819,
    0x082b080808080808, 0x082b08080808082b, 0x082b080808082b2b, 0x082b080819081908,
    0x082b0808192b0819, 0x082b08082b080808, 0x082b08082b08082b, 0x082b0819082b2b19,
    0x082b081919082b08, 0x082b082b08080808, 0x082b082b0808082b, 0x082b190808080819,
    0x082b190808081908, 0x082b190808190808, 0x082b190819080808, 0x082b19081919192b,
    0x082b191908080808, 0x082b191919080819, 0x082b1919192b1908, 0x082b192b2b190808,
    0x082b2b0808082b08, 0x082b2b08082b0808, 0x082b2b082b191908, 0x082b2b2b19081908,
    0x1908080808080819, 0x1908080808081908, 0x1908080808190808, 0x1908080808192b08,
    0x19080808082b0819, 0x19080808082b1908, 0x1908080819080808, 0x1908080819082b08,
    0x190808081919192b, 0x19080808192b0808, 0x190808082b080819, 0x190808082b081908,
    0x190808082b190808, 0x1908081908080808, 0x19080819082b0808, 0x19080819192b0819,
    0x190808192b080808, 0x190808192b081919, 0x1908082b08080819, 0x1908082b08190808,
    0x1908082b19082b08, 0x1908082b1919192b, 0x1908082b192b2b08, 0x1908190808080808,
    0x1908190808082b08, 0x19081908082b0808, 0x190819082b080808, 0x190819082b192b19,
    0x190819190819082b, 0x19081919082b1908, 0x1908192b08080808, 0x19082b0808080819,
    0x19082b0808081908, 0x19082b0808190808, 0x19082b0819080808, 0x19082b0819081919,
    0x19082b1908080808, 0x19082b1919192b08, 0x19082b19192b0819, 0x19082b192b08082b,
    0x19082b2b19081919, 0x19082b2b2b190808, 0x1919080808080808, 0x1919080808082b08,
    0x1919080808190819, 0x1919080808192b19, 0x19190808082b0808, 0x191908082b080808,
    0x191908082b082b08, 0x1919081908081908, 0x191908191908082b, 0x191908192b2b1908,
    0x1919082b2b190819, 0x191919082b190808, 0x191919082b19082b, 0x1919191908082b2b,
    0x1919192b08080819, 0x1919192b19191908, 0x19192b0808080808, 0x19192b0808190819,
    0x19192b0808192b19, 0x19192b08192b1908, 0x19192b1919080808, 0x19192b2b08082b08,
    0x192b080808081908, 0x192b080808190808, 0x192b080819080808, 0x192b0808192b2b08,
    0x192b081908080808, 0x192b081919191919, 0x192b082b08192b08, 0x192b082b192b0808,
    0x192b190808080808, 0x192b190808081919, 0x192b191908190808, 0x192b19190819082b,
    0x192b19192b081908, 0x192b2b081908082b, 0x2b08080808080808, 0x2b0808080808082b,
    0x2b08080808082b2b, 0x2b08080819080819, 0x2b0808082b08082b, 0x2b08081908081908,
    0x2b08081908192b08, 0x2b08081919080808, 0x2b08082b08190819, 0x2b08190808080819,
    0x2b08190808081908, 0x2b08190808190808, 0x2b08190808191919, 0x2b08190819080808,
    0x2b081908192b0808, 0x2b08191908080808, 0x2b0819191908192b, 0x2b0819192b191908,
    0x2b08192b08082b19, 0x2b08192b19080808, 0x2b08192b192b0808, 0x2b082b080808082b,
    0x2b082b1908081908, 0x2b082b2b08190819, 0x2b19080808081908, 0x2b19080808190808,
    0x2b190808082b1908, 0x2b19080819080808, 0x2b1908082b2b0819, 0x2b1908190819192b,
    0x2b1908192b080808, 0x2b19082b19081919, 0x2b19190808080808, 0x2b191908082b082b,
    0x2b19190819081908, 0x2b19191919190819, 0x2b192b082b080819, 0x2b192b19082b0808,
    0x2b2b08080808082b, 0x2b2b080819190808, 0x2b2b08082b081919, 0x2b2b081908082b19,
    0x2b2b082b08080808, 0x2b2b190808192b08, 0x2b2b2b0819190808, 0x2b2b2b1908081908,
};

/* Sign patterns, ggml's ksigns_iq2xs: the 7 stored bits k give the signs of
 * elements 0..6; element 7 takes the bit that makes the number of minus signs
 * even, i.e. entry k = k | parity(k) << 7.  Bit j set means element j is
 * negative. */
const uint8_t ds4_formats_ksigns_iq2xs[128] = {
      0, 129, 130,   3, 132,   5,   6, 135, 136,   9,  10, 139,  12, 141, 142,  15,
    144,  17,  18, 147,  20, 149, 150,  23,  24, 153, 154,  27, 156,  29,  30, 159,
    160,  33,  34, 163,  36, 165, 166,  39,  40, 169, 170,  43, 172,  45,  46, 175,
     48, 177, 178,  51, 180,  53,  54, 183, 184,  57,  58, 187,  60, 189, 190,  63,
    192,  65,  66, 195,  68, 197, 198,  71,  72, 201, 202,  75, 204,  77,  78, 207,
     80, 209, 210,  83, 212,  85,  86, 215, 216,  89,  90, 219,  92, 221, 222,  95,
     96, 225, 226,  99, 228, 101, 102, 231, 232, 105, 106, 235, 108, 237, 238, 111,
    240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255,
};

/* ------------------------------------------------------------------------ */
/* Block dequantizers: one block in, blck floats out                        */
/* ------------------------------------------------------------------------ */

/* Q8_0, 34 bytes per 32 elements:
 *   0..1   d      f16 scale
 *   2..33  qs[32] int8
 * y[i] = (float)qs[i] * d. */
static void dequant_q8_0(const uint8_t *restrict b, float *restrict y) {
    const float d = ds4_formats_f16_to_f32((uint16_t)ds4_bits_le16(b));
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int i = 0; i < 32; i++) y[i] = (float)qs[i] * d;
}

/* Q2_K, 84 bytes per 256 elements:
 *   0..15  scales[16]  sub-block s (16 elements): low nibble scale, high min
 *   16..79 qs[64]      2-bit values, four per byte
 *   80..81 d           f16 super-scale of the scales
 *   82..83 dmin        f16 super-scale of the mins
 * Each half of 128 elements uses 32 qs bytes; the 2-bit field at shift 2j of
 * those bytes holds elements 32j..32j+31 of the half (bytes 0..15 the first
 * sub-block of 16, bytes 16..31 the second).  ggml's order of operations:
 *   dl = d * (sc & 15); ml = dmin * (sc >> 4); y = dl * q - ml. */
static void dequant_q2_K(const uint8_t *restrict b, float *restrict y) {
    const uint8_t *sc = b;
    const float d = ds4_formats_f16_to_f32((uint16_t)ds4_bits_le16(b + 80));
    const float dmin = ds4_formats_f16_to_f32((uint16_t)ds4_bits_le16(b + 82));
    for (int half = 0; half < 2; half++) {
        const uint8_t *qs = b + 16 + 32 * half;
        for (int shift = 0; shift < 8; shift += 2) {
            for (int sub = 0; sub < 2; sub++) {
                const float dl = d * (float)(*sc & 0xf);
                const float ml = dmin * (float)(*sc >> 4);
                const uint8_t *q = qs + 16 * sub;
                for (int l = 0; l < 16; l++)
                    y[l] = dl * (float)((q[l] >> shift) & 3) - ml;
                sc++;
                y += 16;
            }
        }
    }
}

/* Q4_K, 144 bytes per 256 elements:
 *   0..1    d           f16 super-scale of the scales
 *   2..3    dmin        f16 super-scale of the mins
 *   4..15   scales[12]  8 six-bit scales and 8 six-bit mins, packed
 *   16..143 qs[128]     4-bit values
 * Sub-block j (32 elements) has scale sc_j and min m_j (see q4k_scale_min);
 * qs bytes 32k..32k+31 hold sub-block 2k in their low and 2k+1 in their high
 * nibbles.  ggml's order: d1 = d * sc; m1 = dmin * m; y = d1 * q - m1. */
static void q4k_scale_min(int j, const uint8_t *s, uint32_t *sc, uint32_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        /* Low 4 bits in bytes 8..11, high 2 bits in the top bits of 0..7. */
        *sc = (s[j + 4] & 0xfu) | (uint32_t)(s[j - 4] >> 6) << 4;
        *m = (uint32_t)(s[j + 4] >> 4) | (uint32_t)(s[j] >> 6) << 4;
    }
}

static void dequant_q4_K(const uint8_t *restrict b, float *restrict y) {
    const float d = ds4_formats_f16_to_f32((uint16_t)ds4_bits_le16(b));
    const float dmin = ds4_formats_f16_to_f32((uint16_t)ds4_bits_le16(b + 2));
    const uint8_t *scales = b + 4;
    for (int j = 0; j < 8; j++) {
        uint32_t sc, m;
        q4k_scale_min(j, scales, &sc, &m);
        const float d1 = d * (float)sc;
        const float m1 = dmin * (float)m;
        const uint8_t *q = b + 16 + 32 * (j / 2);
        const int shift = 4 * (j & 1);
        for (int l = 0; l < 32; l++) y[l] = d1 * (float)((q[l] >> shift) & 0xf) - m1;
        y += 32;
    }
}

/* IQ2_XXS, 66 bytes per 256 elements:
 *   0..1   d       f16 scale
 *   2..65  8 groups of 8 bytes, one per 32 elements:
 *          bytes 0..3  four grid indices, one per 8 elements
 *          bytes 4..7  u32 LE: bits 7l..7l+6 sign index of the l-th 8
 *                      elements, bits 28..31 the group's 4-bit scale s
 * ggml's order: db = d * (0.5f + s) * 0.25f; y = db * grid * (+1 or -1). */
static void dequant_iq2_xxs(const uint8_t *restrict b, float *restrict y) {
    const float d = ds4_formats_f16_to_f32((uint16_t)ds4_bits_le16(b));
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *g = b + 2 + 8 * ib;
        const uint32_t aux = ds4_bits_le32(g + 4);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        /* Unpack the group's 32 grid values and sign bits first, so the
         * arithmetic is one loop the compiler can vectorize. */
        uint8_t v[32];
        uint32_t neg[32];
        for (int l = 0; l < 4; l++) {
            const uint64_t grid = ds4_formats_iq2xxs_grid[g[l]];
            const uint32_t signs = ds4_formats_ksigns_iq2xs[(aux >> (7 * l)) & 127];
            for (int j = 0; j < 8; j++) {
                v[8 * l + j] = (uint8_t)(grid >> (8 * j));
                neg[8 * l + j] = (signs >> j) & 1;
            }
        }
        /* The factor +1.0f / -1.0f is built from bits: random signs would
         * make a branch mispredict half the time. */
        for (int i = 0; i < 32; i++)
            y[i] = db * (float)v[i] * ds4_bits_to_f32(0x3f800000u | neg[i] << 31);
        y += 32;
    }
}

/* F16 rows.  Weights are almost never subnormal, Inf or NaN, so every
 * element is first converted by rebiasing its exponent (zero kept as zero),
 * which is right for all the others and cheap even where the compiler does
 * not vectorize (plain -O2); the rare special elements are then redone with
 * the full conversion. */
static inline int f16_is_special(uint32_t h) {
    const uint32_t e = h & 0x7c00u;
    return (e == 0 && (h & 0x3ffu)) || e == 0x7c00u;
}

static void dequant_f16(const uint8_t *restrict p, float *restrict y, uint64_t n) {
    uint32_t special = 0;
    for (uint64_t i = 0; i < n; i++) {
        const uint32_t h = ds4_bits_le16(p + 2 * i);
        const uint32_t em = h & 0x7fffu;
        special |= (uint32_t)f16_is_special(h);
        y[i] = ds4_bits_to_f32((h & 0x8000u) << 16 | (em ? (em << 13) + (112u << 23) : 0));
    }
    if (!special) return;
    for (uint64_t i = 0; i < n; i++) {
        const uint32_t h = ds4_bits_le16(p + 2 * i);
        if (f16_is_special(h)) y[i] = ds4_bits_to_f32(f16_to_f32_bits(h));
    }
}

/* ------------------------------------------------------------------------ */
/* Rows of whole blocks: the dequantizers of types.c's rows                 */
/* ------------------------------------------------------------------------ */

void ds4_formats_dequant_f32(const uint8_t *src, float *dst, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) dst[i] = ds4_bits_to_f32(ds4_bits_le32(src + 4 * i));
}

void ds4_formats_dequant_f16(const uint8_t *src, float *dst, uint64_t n) {
    dequant_f16(src, dst, n);
}

void ds4_formats_dequant_bf16(const uint8_t *src, float *dst, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) dst[i] = ds4_bits_to_f32(ds4_bits_le16(src + 2 * i) << 16);
}

/* Exact below 2^24 in magnitude, rounded to nearest even above. */
void ds4_formats_dequant_i32(const uint8_t *src, float *dst, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) dst[i] = (float)(int32_t)ds4_bits_le32(src + 4 * i);
}

void ds4_formats_dequant_q8_0(const uint8_t *src, float *dst, uint64_t n) {
    for (uint64_t i = 0; i < n / 32; i++) dequant_q8_0(src + 34 * i, dst + 32 * i);
}

void ds4_formats_dequant_q2_K(const uint8_t *src, float *dst, uint64_t n) {
    for (uint64_t i = 0; i < n / 256; i++) dequant_q2_K(src + 84 * i, dst + 256 * i);
}

void ds4_formats_dequant_q4_K(const uint8_t *src, float *dst, uint64_t n) {
    for (uint64_t i = 0; i < n / 256; i++) dequant_q4_K(src + 144 * i, dst + 256 * i);
}

void ds4_formats_dequant_iq2_xxs(const uint8_t *src, float *dst, uint64_t n) {
    for (uint64_t i = 0; i < n / 256; i++) dequant_iq2_xxs(src + 66 * i, dst + 256 * i);
}
