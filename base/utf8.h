/* UTF-8: the one rule of well-formedness every part of ds4ref applies
 * (JSON, the pre-tokenizer, the byte-level alphabet, the synthetic
 * vocabulary, trace files, the GGUF listing's escaping, and, through the
 * public ds4ref_utf8_char, the programs' terminal filter programs/termtext.h),
 * decoding and encoding. */
#ifndef DS4_UTF8_H
#define DS4_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the well-formed UTF-8 sequence that starts s[0..n), with
 * its code point in *cp; 0 when the bytes there do not start one.  Well-formed
 * is RFC 3629 / Unicode table 3-7: no overlong forms, no surrogates
 * (U+D800..DFFF), nothing above U+10FFFF, no truncated sequence.  This is the
 * set of byte strings a Rust String (and so the Hugging Face tokenizer) can
 * hold. */
static inline size_t ds4_utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* Is s[0..n) well-formed UTF-8 (ds4_utf8_next's rule) throughout?  NUL
 * bytes are well-formed UTF-8; callers that need C strings check for them
 * themselves. */
static inline bool ds4_utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = ds4_utf8_next(s + i, n - i, &cp);
        if (!len) return false;
        i += len;
    }
    return true;
}

/* Encode a code point (<= U+10FFFF, not a surrogate) into out; returns the
 * number of bytes written (1..4). */
static inline size_t ds4_utf8_put(uint32_t cp, unsigned char out[4]) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
