/* Generated text on a terminal, made safe to show.
 *
 * A model's tokens are bytes: a token may end in the middle of a UTF-8
 * character (the next one completes it), may hold bytes that are not UTF-8
 * at all, and may hold control characters, which a terminal obeys: an
 * escape sequence can move the cursor, recolour or retitle the window, or
 * hide the text before it.  So on a terminal the text goes through this
 * filter, which
 *   - writes complete, valid UTF-8 characters as they are, holding back the
 *     first bytes of one until the bytes that complete it arrive;
 *   - writes U+FFFD for every byte that cannot start or continue a valid
 *     character (overlong forms, surrogates, beyond U+10FFFF, stray
 *     continuation bytes, a character cut short), as the Unicode standard's
 *     "maximal subpart" practice does;
 *   - shows the control characters other than newline and tab as their
 *     Unicode control pictures (ESC as U+241B, CR as U+240D, DEL as
 *     U+2421), and the C1 controls U+0080..U+009F, which some terminals also
 *     obey, as U+FFFD.
 * Elsewhere (a file, a pipe) the programs write the bytes unchanged.
 * Included by the programs that print generated text. */
#ifndef DS4REF_TERMTEXT_H
#define DS4REF_TERMTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct ds4ref_termtext {
    unsigned char seq[4];      /* a character begun and not yet complete */
    unsigned n, len;           /* bytes held, bytes it needs */
} ds4ref_termtext;

static const char ds4ref_replacement[] = "\xef\xbf\xbd";   /* U+FFFD */

/* How many bytes a character starting with b has; 0 when b cannot start one. */
static unsigned ds4ref_utf8_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) return 2;
    if (b >= 0xe0 && b <= 0xef) return 3;
    if (b >= 0xf0 && b <= 0xf4) return 4;
    return 0;
}

/* Whether b may follow the n bytes of seq: a continuation byte, narrower
 * after the leads whose next byte would make an overlong form, a surrogate
 * or a code point beyond U+10FFFF. */
static bool ds4ref_utf8_continues(const unsigned char *seq, unsigned n, unsigned char b) {
    if (b < 0x80 || b > 0xbf) return false;
    if (n > 1) return true;
    switch (seq[0]) {
    case 0xe0: return b >= 0xa0;
    case 0xed: return b <= 0x9f;
    case 0xf0: return b >= 0x90;
    case 0xf4: return b <= 0x8f;
    }
    return true;
}

/* One complete, valid character. */
static void ds4ref_termtext_char(const unsigned char *s, unsigned n, FILE *out) {
    if (n == 1 && (s[0] == '\n' || s[0] == '\t' || (s[0] >= 0x20 && s[0] < 0x7f))) {
        fputc(s[0], out);
    } else if (n == 1) {
        /* U+2400 + c for c < 0x20, U+2421 for DEL. */
        unsigned char pic[3] = {0xe2, 0x90, (unsigned char)(s[0] == 0x7f ? 0xa1 : 0x80 + s[0])};
        fwrite(pic, 1, 3, out);
    } else if (n == 2 && s[0] == 0xc2 && s[1] < 0xa0) {
        fputs(ds4ref_replacement, out);
    } else {
        fwrite(s, 1, n, out);
    }
}

/* Write bytes[0..n), the next piece of the text. */
static void ds4ref_termtext_put(ds4ref_termtext *t, const uint8_t *bytes, size_t n, FILE *out) {
    for (size_t i = 0; i < n; i++) {
        unsigned char b = bytes[i];
        if (t->n) {
            if (ds4ref_utf8_continues(t->seq, t->n, b)) {
                t->seq[t->n++] = b;
                if (t->n == t->len) {
                    ds4ref_termtext_char(t->seq, t->n, out);
                    t->n = 0;
                }
                continue;
            }
            /* The character was cut short; b starts afresh. */
            fputs(ds4ref_replacement, out);
            t->n = 0;
        }
        t->len = ds4ref_utf8_len(b);
        if (!t->len) {
            fputs(ds4ref_replacement, out);
        } else if (t->len == 1) {
            ds4ref_termtext_char(&b, 1, out);
        } else {
            t->seq[0] = b;
            t->n = 1;
        }
    }
}

/* The end of the text: a character still incomplete is cut short. */
static void ds4ref_termtext_end(ds4ref_termtext *t, FILE *out) {
    if (t->n) fputs(ds4ref_replacement, out);
    t->n = 0;
}

#endif
