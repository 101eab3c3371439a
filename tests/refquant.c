#include "refquant.h"

#include <math.h>
#include <string.h>

#include "quant/formats.h"

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }

double rq_f16(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = INFINITY;
    else v = ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

double rq_bf16(uint16_t h) {
    const int e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 0) v = ldexp(m, -133);
    else if (e == 255) v = INFINITY;
    else v = ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -v : v;
}

int rq_parity7(int k) {
    int p = 0;
    for (int b = 0; b < 7; b++) p ^= (k >> b) & 1;
    return p;
}

/* Q2_K (ggml's block_q2_K): s = e/16 picks the scale, n = e/128, j = (e%128)/32,
 * h = (e%32)/16, l = e%16, q = (qs[32n + 16h + l] >> 2j) & 3. */
void rq_q2k_pos(int e, int *byte, int *shift) {
    const int n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16, l = e % 16;
    *byte = 32 * n + 16 * h + l;
    *shift = 2 * j;
}

float rq_q2k_elem(const uint8_t *blk, int e) {
    int byte, shift;
    rq_q2k_pos(e, &byte, &shift);
    const int q = (blk[16 + byte] >> shift) & 3;
    const int sc = blk[e / 16];
    const float d = (float)rq_f16((uint16_t)rd16(blk + 80));
    const float dmin = (float)rq_f16((uint16_t)rd16(blk + 82));
    const float dl = d * (float)(sc & 15);
    const float ml = dmin * (float)(sc >> 4);
    return dl * (float)q - ml;
}

/* Q4_K (ggml's block_q4_K).  Where each of the 96 bits of scales[12] goes,
 * described byte by byte (the implementation describes it by sub-block):
 *   bytes 0..3:  bits 0-5 = bits 0-5 of sc[i];   bits 6-7 = bits 4-5 of sc[i+4]
 *   bytes 4..7:  bits 0-5 = bits 0-5 of m[i-4];  bits 6-7 = bits 4-5 of m[i]
 *   bytes 8..11: bits 0-3 = bits 0-3 of sc[i-4]; bits 4-7 = bits 0-3 of m[i-4] */
void rq_q4k_bit_owner(int i, int k, int *is_min, int *j, int *weight) {
    if (i < 4) {
        *is_min = 0;
        *j = k < 6 ? i : i + 4;
        *weight = k < 6 ? 1 << k : 1 << (k - 6 + 4);
    } else if (i < 8) {
        *is_min = 1;
        *j = k < 6 ? i - 4 : i;
        *weight = k < 6 ? 1 << k : 1 << (k - 6 + 4);
    } else {
        *is_min = k >= 4;
        *j = i - 4;
        *weight = k < 4 ? 1 << k : 1 << (k - 4);
    }
}

static void q4k_unpack(const uint8_t *scales, int sc[8], int m[8]) {
    for (int j = 0; j < 8; j++) sc[j] = m[j] = 0;
    for (int i = 0; i < 12; i++)
        for (int k = 0; k < 8; k++) {
            if (!((scales[i] >> k) & 1)) continue;
            int is_min, j, w;
            rq_q4k_bit_owner(i, k, &is_min, &j, &w);
            if (is_min) m[j] += w;
            else sc[j] += w;
        }
}

/* Element e: j = e/32, k = e/64, low nibble if j is even, else high, of
 * qs[32k + e%32]; w = f16(d)*sc_j*q - f16(dmin)*m_j. */
float rq_q4k_elem(const uint8_t *blk, int e) {
    int sc[8], m[8];
    q4k_unpack(blk + 4, sc, m);
    const int j = e / 32, k = e / 64;
    const uint8_t byte = blk[16 + 32 * k + e % 32];
    const int q = (j % 2 == 0) ? (byte & 15) : (byte >> 4);
    const float d = (float)rq_f16((uint16_t)rd16(blk));
    const float dmin = (float)rq_f16((uint16_t)rd16(blk + 2));
    const float d1 = d * (float)sc[j];
    const float m1 = dmin * (float)m[j];
    return d1 * (float)q - m1;
}

/* IQ2_XXS (ggml's block_iq2_xxs).  Element e = 32*ib + 8*l + j of a block: grid index
 * g_l = byte l of the group's first u32, sign index k_l = bits 7l..7l+6 of
 * the second, scale s = its top 4 bits; element j is negative when bit j of
 * ksigns[k_l] is set (bit 7 being the parity of the 7 stored bits);
 * w = f16(d) * (0.5 + s) * 0.25 * grid[g_l][j] * (+-1). */
float rq_iq2_elem(const uint8_t *blk, int e) {
    const int ib = e / 32, l = (e % 32) / 8, j = e % 8;
    const uint8_t *grp = blk + 2 + 8 * ib;
    const uint32_t a1 = rd32(grp + 4);
    const int g = grp[l];
    const int k = (int)(a1 >> (7 * l)) & 127;
    const int s = (int)(a1 >> 28);
    const int neg = j < 7 ? (k >> j) & 1 : rq_parity7(k);
    const float d = (float)rq_f16((uint16_t)rd16(blk));
    const float db = d * (0.5f + (float)s) * 0.25f;
    const float v = (float)((ds4_formats_iq2xxs_grid[g] >> (8 * j)) & 0xff);
    return db * v * (neg ? -1.0f : 1.0f);
}

uint32_t rq_block_elems(uint32_t type) {
    switch (type) {
    case RQ_F32: case RQ_F16: case RQ_BF16: case RQ_I32: return 1;
    case RQ_Q8_0: return 32;
    case RQ_Q2_K: case RQ_Q4_K: case RQ_IQ2_XXS: return 256;
    default: return 0;
    }
}

uint32_t rq_block_bytes(uint32_t type) {
    switch (type) {
    case RQ_F32: case RQ_I32: return 4;
    case RQ_F16: case RQ_BF16: return 2;
    case RQ_Q8_0: return 34;
    case RQ_Q2_K: return 84;
    case RQ_Q4_K: return 144;
    case RQ_IQ2_XXS: return 66;
    default: return 0;
    }
}

float rq_elem(uint32_t type, const uint8_t *row, uint64_t e) {
    const uint8_t *blk = row + e / rq_block_elems(type) * rq_block_bytes(type);
    const int i = (int)(e % rq_block_elems(type));
    switch (type) {
    case RQ_F32: {
        uint32_t u = rd32(blk);
        float f;
        memcpy(&f, &u, sizeof(f));
        return f;
    }
    case RQ_I32: return (float)(int32_t)rd32(blk);
    case RQ_F16: return (float)rq_f16((uint16_t)rd16(blk));
    case RQ_BF16: return (float)rq_bf16((uint16_t)rd16(blk));
    case RQ_Q8_0: return (float)(int8_t)blk[2 + i] * (float)rq_f16((uint16_t)rd16(blk));
    case RQ_Q2_K: return rq_q2k_elem(blk, i);
    case RQ_Q4_K: return rq_q4k_elem(blk, i);
    default: return rq_iq2_elem(blk, i);
    }
}
