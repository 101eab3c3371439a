/* Bytes as text: lowercase hex (digests, token bytes in trace files) and
 * an escaped form for people to read. */
#ifndef DS4_HEX_H
#define DS4_HEX_H

#include <stddef.h>
#include <stdint.h>

/* 2n lowercase hex digits of bytes[0..n), then a NUL. */
void ds4_hex(const uint8_t *bytes, size_t n, char *out);

/* Hex digits (either case) to bytes: n must be even; -1 on a non-hex
 * character. */
int ds4_hex_decode(const char *s, size_t n, uint8_t *out);

/* s[0..n) as a SHA-256 in its one spelling: when it is 64 hex digits
 * (either case), their lowercase form into out (65 bytes with the NUL) and
 * 0; else -1. */
int ds4_hex_sha256(const char *s, size_t n, char out[65]);

/* Token bytes for humans: printable ASCII as is, everything else \xHH, cut
 * to about `max` output chars with "..." (always NUL-terminated). */
void ds4_hex_show(const uint8_t *b, uint32_t n, char *out, size_t max);

#endif
