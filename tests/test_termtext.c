/* The terminal filter for generated text (programs/termtext.h), against the
 * bytes it must write for hand-made inputs: each case is the Unicode
 * standard's treatment of the sequence (valid characters kept, U+FFFD per
 * maximal invalid subpart) written out by hand, with the control pictures
 * for the control characters, whatever the splitting of the input into
 * tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../programs/termtext.h"

#define R "\xef\xbf\xbd"   /* U+FFFD */

/* The filter's output for in[0..n), given in pieces of `piece` bytes. */
static char *filtered(const char *in, size_t n, size_t piece) {
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    ds4ref_termtext t = {0};
    for (size_t i = 0; i < n; i += piece)
        ds4ref_termtext_put(&t, (const uint8_t *)in + i, n - i < piece ? n - i : piece, f);
    ds4ref_termtext_end(&t, f);
    fclose(f);
    return out;
}

static void expect(const char *in, size_t n, const char *want) {
    for (size_t piece = 1; piece <= n + 1; piece++) {
        char *got = filtered(in, n, piece);
        if (strcmp(got, want))
            fail_msg("pieces of %zu: got \"%s\", want \"%s\"", piece, got, want);
        free(got);
    }
}

#define EXPECT(in, want) expect(in, sizeof(in) - 1, want)

static void test_valid_text_unchanged(void **state) {
    (void)state;
    EXPECT("plain ascii\n\tand tab", "plain ascii\n\tand tab");
    EXPECT("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80");
    EXPECT("\xef\xbf\xbf\xf4\x8f\xbf\xbf", "\xef\xbf\xbf\xf4\x8f\xbf\xbf");   /* U+FFFF, U+10FFFF */
    EXPECT("\xc2\xa0", "\xc2\xa0");   /* U+00A0, the first after the C1 controls */
}

static void test_controls_shown(void **state) {
    (void)state;
    EXPECT("\x1b[31mred", "\xe2\x90\x9b[31mred");           /* ESC: U+241B */
    EXPECT("a\rb\x7f\x01", "a\xe2\x90\x8d" "b\xe2\x90\xa1\xe2\x90\x81");
    EXPECT(" \x00 ", " \xe2\x90\x80 ");                      /* NUL: U+2400 */
    EXPECT("\xc2\x9b" "2J", R "2J");                         /* C1 CSI */
    EXPECT("\xc2\x80\xc2\x9f", R R);
}

static void test_invalid_replaced(void **state) {
    (void)state;
    EXPECT("\xff", R);
    EXPECT("a\x80" "b", "a" R "b");                          /* stray continuation */
    EXPECT("\xc0\xaf", R R);                                  /* overlong '/' */
    EXPECT("\xe0\x80\xaf", R R R);                            /* overlong, 3 bytes */
    EXPECT("\xed\xa0\x80", R R R);                            /* surrogate */
    EXPECT("\xf4\x90\x80\x80", R R R R);                      /* beyond U+10FFFF */
    EXPECT("\xf5\x80", R R);
    EXPECT("\xe2\x82" "A", R "A");                            /* cut short by A */
    EXPECT("\xf0\x9f\x98" "\xe2\x82\xac", R "\xe2\x82\xac");  /* cut short by a lead */
    EXPECT("end\xe2\x82", "end" R);                           /* cut short by the end */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_text_unchanged),
        cmocka_unit_test(test_controls_shown),
        cmocka_unit_test(test_invalid_replaced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
