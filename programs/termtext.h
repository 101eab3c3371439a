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

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ds4ref.h"

typedef struct ds4ref_termtext {
    unsigned char seq[4];      /* a character begun and not yet complete */
    unsigned n, len;           /* bytes held, bytes it needs */
} ds4ref_termtext;

static const char ds4ref_replacement[] = "\xef\xbf\xbd";   /* U+FFFD */

/* The length of the character seq[0..n) begins, when these bytes can still
 * begin (or are) a well-formed one; 0 when they cannot.  The library's rule,
 * ds4ref_utf8_char, judges whole characters, so seq is completed to four
 * bytes once with the lowest continuation byte, 0x80, and once with the
 * highest, 0xBF: beyond being continuation bytes, only a character's second
 * byte is restricted (after E0, ED, F0 and F4, against overlong forms,
 * surrogates and code points past U+10FFFF), each time to a range that holds
 * 0x80 or 0xBF, so one of the two completions is well-formed whenever any
 * completion is. */
static unsigned ds4ref_utf8_begun(const unsigned char *seq, unsigned n) {
    static const unsigned char fill[2] = {0x80, 0xbf};
    for (int k = 0; k < 2; k++) {
        uint8_t c[4];
        memset(c, fill[k], sizeof(c));
        memcpy(c, seq, n);
        size_t len = ds4ref_utf8_char(c, sizeof(c));
        if (len >= n) return (unsigned)len;
    }
    return 0;
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
            t->seq[t->n] = b;
            if (ds4ref_utf8_begun(t->seq, t->n + 1)) {
                if (++t->n == t->len) {
                    ds4ref_termtext_char(t->seq, t->n, out);
                    t->n = 0;
                }
                continue;
            }
            /* The character was cut short; b starts afresh. */
            fputs(ds4ref_replacement, out);
            t->n = 0;
        }
        t->seq[0] = b;
        t->len = ds4ref_utf8_begun(t->seq, 1);
        if (!t->len) {
            fputs(ds4ref_replacement, out);
        } else if (t->len == 1) {
            ds4ref_termtext_char(t->seq, 1, out);
        } else {
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
