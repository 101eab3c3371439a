/* A value's bits and little-endian bytes: the one definition of each, for
 * the readers of file formats (GGUF, the block types) and the code that
 * works on a float's representation (the FP8/FP4 round trips, the jitter,
 * the deterministic math).  memcpy is the defined way to reinterpret bits
 * in C; compilers make it a register move. */
#ifndef DS4_BITS_H
#define DS4_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t ds4_bits_le16(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static inline uint32_t ds4_bits_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ds4_bits_le64(const uint8_t *p) {
    return ds4_bits_le32(p) | (uint64_t)ds4_bits_le32(p + 4) << 32;
}

/* The float whose bits are u, and the bits of f. */
static inline float ds4_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t ds4_bits_of_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline uint64_t ds4_bits_of_f64(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

#endif
