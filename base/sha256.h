/* SHA-256 (FIPS 180-4), used to identify model data and to digest logits in
 * golden files. */
#ifndef DS4_SHA256_H
#define DS4_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct ds4_sha256 {
    uint32_t h[8];
    uint64_t len;        /* bytes hashed so far */
    uint8_t buf[64];
    size_t fill;
} ds4_sha256;

void ds4_sha256_init(ds4_sha256 *s);
void ds4_sha256_update(ds4_sha256 *s, const void *data, size_t n);
void ds4_sha256_final(ds4_sha256 *s, uint8_t out[32]);

/* One-shot digest as 64 lowercase hex characters + NUL. */
void ds4_sha256_hex(const void *data, size_t n, char out[65]);

#endif
