/* Bytes as text (hex.h). */
#include "base/hex.h"

#include <string.h>

void ds4_hex(const uint8_t *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

int ds4_hex_decode(const char *s, size_t n, uint8_t *out) {
    if (n % 2) return -1;
    for (size_t i = 0; i < n; i += 2) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[i + (size_t)k];
            int d = c >= '0' && c <= '9' ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) return -1;
            v = v * 16 + d;
        }
        out[i / 2] = (uint8_t)v;
    }
    return 0;
}

int ds4_hex_sha256(const char *s, size_t n, char out[65]) {
    uint8_t d[32];
    if (n != 64 || ds4_hex_decode(s, n, d)) return -1;
    ds4_hex(d, sizeof(d), out);
    return 0;
}

void ds4_hex_show(const uint8_t *b, uint32_t n, char *out, size_t max) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (max < 8) {
        if (max) out[0] = '\0';
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        char piece[5];
        size_t len = 0;
        if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\' && b[i] != '"') {
            piece[len++] = (char)b[i];
        } else {
            piece[len++] = '\\';
            piece[len++] = 'x';
            piece[len++] = hex[b[i] >> 4];
            piece[len++] = hex[b[i] & 15];
        }
        if (o + len + 4 > max) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, piece, len);
        o += len;
    }
    out[o] = '\0';
}
