/* Tests for the pre-tokenizer (ref/text/pretok.c), the tokenizer
 * (ref/text/tokenizer.c) and the tokenizer.json reader (ref/text/hf_vocab.c).
 *
 * Independent references:
 *   - a tiny hand-built vocabulary whose BPE results are derived by hand;
 *   - pre-tokenizer pieces derived by hand from the official regexes (and
 *     cross-checked with the Hugging Face Rust tokenizer when written);
 *   - ../shared/tokenizer/peer_tokenize.jsonl: ids from transformers.js on the
 *     DeepSeek vocabulary, for 65 strings;
 *   - a table of ids from the Hugging Face Rust tokenizer (npm "tokenizers"
 *     0.23.2, Tokenizer.fromFile on the same tokenizer.json, encode with
 *     addSpecialTokens=false) for strings where the regex engine's Unicode
 *     classes matter;
 *   - round trips bytes -> ids -> bytes, which must be the identity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/text/json.h"
#include "ref/text/pretok.h"
#include "ref/text/tokenizer.h"
#include "testutil.h"
#include "xzvocab.h"

#define SHARED_TOKENIZER "../shared/tokenizer/deepseek_v3_tokenizer.json.xz"
#define SHARED_PEER "../shared/tokenizer/peer_tokenize.jsonl"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* ------------------------------------------------------- tiny vocab */

/* GPT-2's byte alphabet, derived the way its bytes_to_unicode does it: the
 * printable bytes keep their code point, the rest get 256, 257, ... in byte
 * order. */
static uint32_t gpt2_char(unsigned b) {
    uint32_t next = 256;
    for (unsigned i = 0; i < 256; i++) {
        bool printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
        if (i == b) return printable ? i : next;
        if (!printable) next++;
    }
    return 0;
}

typedef struct tiny {
    ds4_strref tok[300];
    int32_t types[300];
    uint32_t n;
    ds4_strref merges[32];
    uint32_t nm;
    char store[4096];
    size_t used;
} tiny;

static const char *tiny_save(tiny *v, const char *s, size_t n) {
    char *p = v->store + v->used;
    memcpy(p, s, n);
    v->used += n;
    return p;
}

static int32_t tiny_tok(tiny *v, const char *s, int32_t type) {
    v->tok[v->n].ptr = tiny_save(v, s, strlen(s));
    v->tok[v->n].len = strlen(s);
    v->types[v->n] = type;
    return (int32_t)v->n++;
}

static void tiny_merge(tiny *v, const char *s) {
    v->merges[v->nm].ptr = tiny_save(v, s, strlen(s));
    v->merges[v->nm++].len = strlen(s);
}

/* Ids 0..255: the byte tokens, id = byte value.  Then: */
enum { T_HE = 256, T_LL, T_HELL, T_HELLO, T_GW, T_OR, T_GWOR, T_GWORLD, T_AA, T_BC, T_AB,
       T_XY, T_YZ, T_BOS, T_EOS, T_USER, T_ASSISTANT, T_THINK, T_THINK_END, T_DSML,
       T_CTL, T_CTLX, T_UNUSED, T_COUNT };

static void tiny_build(tiny *v) {
    memset(v, 0, sizeof(*v));
    for (unsigned b = 0; b < 256; b++) {
        unsigned char u[4];
        uint32_t cp = gpt2_char(b);
        size_t n;
        if (cp < 0x80) { u[0] = (unsigned char)cp; n = 1; }
        else { u[0] = (unsigned char)(0xC0 | (cp >> 6)); u[1] = (unsigned char)(0x80 | (cp & 63)); n = 2; }
        v->tok[v->n].ptr = tiny_save(v, (const char *)u, n);
        v->tok[v->n].len = n;
        v->types[v->n++] = DS4_TOKTYPE_NORMAL;
    }
    static const char *const normal[] = {"he", "ll", "hell", "hello", "\xC4\xA0w", "or",
                                         "\xC4\xA0wor", "\xC4\xA0world", "aa", "bc", "ab", "xy",
                                         "yz"};
    for (size_t i = 0; i < sizeof(normal) / sizeof(normal[0]); i++)
        tiny_tok(v, normal[i], DS4_TOKTYPE_NORMAL);
    /* The seven specials, typed NORMAL on purpose: they are added tokens
     * whatever their type says. */
    for (int s = 0; s < DS4_SPECIAL_COUNT; s++) tiny_tok(v, ds4_tok_special_str(s), DS4_TOKTYPE_NORMAL);
    tiny_tok(v, "<ctl>", DS4_TOKTYPE_CONTROL);
    tiny_tok(v, "<ctl>x", DS4_TOKTYPE_USER_DEFINED);
    tiny_tok(v, "<unused>", DS4_TOKTYPE_UNUSED);
    assert_int_equal(v->n, T_COUNT);
    tiny_merge(v, "h e");                 /* 0 */
    tiny_merge(v, "l l");                 /* 1 */
    tiny_merge(v, "he ll");               /* 2 */
    tiny_merge(v, "hell o");              /* 3 */
    tiny_merge(v, "\xC4\xA0 w");          /* 4  Ġ w */
    tiny_merge(v, "o r");                 /* 5 */
    tiny_merge(v, "\xC4\xA0w or");        /* 6 */
    tiny_merge(v, "\xC4\xA0wor l");       /* 7  result "Ġworl" is not a token */
    tiny_merge(v, "\xC4\xA0worl d");      /* 8 */
    tiny_merge(v, "a a");                 /* 9 */
    tiny_merge(v, "b c");                 /* 10 */
    tiny_merge(v, "a b");                 /* 11 */
    tiny_merge(v, "x y");                 /* 12, repeated as 14 */
    tiny_merge(v, "y z");                 /* 13 */
    tiny_merge(v, "x y");                 /* 14: the later rank wins */
    tiny_merge(v, "zz z");                /* 15: "zz" can never form */
}

static void tiny_init(ds4_tokenizer *t, tiny *v) {
    tiny_build(v);
    ds4err err = {0};
    if (ds4_tok_init(t, v->tok, v->n, v->types, v->merges, v->nm, &err))
        fail_msg("tiny tokenizer: %s", err.msg);
}

static void expect_ids(const ds4_tokenizer *t, const char *s, size_t n, unsigned flags,
                       const int32_t *want, size_t nwant) {
    ds4_tokens ids = {0};
    ds4err err = {0};
    if (ds4_tok_encode(t, s, n, flags, &ids, &err)) fail_msg("encode: %s", err.msg);
    if (ids.n != nwant || (nwant && memcmp(ids.ids, want, nwant * sizeof(int32_t)))) {
        fprintf(stderr, "encoding \"%.*s\": got", (int)n, s);
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %d", ids.ids[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < nwant; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
        fail();
    }
    ds4_tokens_free(&ids);
}

#define EXPECT(t, s, flags, ...)                                                 \
    do {                                                                         \
        const int32_t want_[] = {__VA_ARGS__};                                   \
        expect_ids(t, s, sizeof(s) - 1, flags, want_, sizeof(want_) / sizeof(int32_t)); \
    } while (0)

static void test_bpe_hand_built(void **state) {
    (void)state;
    tiny v;
    ds4_tokenizer t;
    tiny_init(&t, &v);
    /* Pieces "hello" and " world"; merges 0-3 and 4-8 build whole words,
     * through the non-token "Ġworl". */
    EXPECT(&t, "hello world", 0, T_HELLO, T_GWORLD);
    /* "Ġworl" survives: it falls back to the byte tokens of " worl". */
    EXPECT(&t, " worl", 0, ' ', 'w', 'o', 'r', 'l');
    EXPECT(&t, "hell", 0, T_HELL);
    EXPECT(&t, "helo", 0, T_HE, 'l', 'o');
    /* Equal ranks merge leftmost first. */
    EXPECT(&t, "aaa", 0, T_AA, 'a');
    EXPECT(&t, "aaaaa", 0, T_AA, T_AA, 'a');
    /* Lower rank first, wherever it is: "b c" (10) before "a b" (11). */
    EXPECT(&t, "abc", 0, 'a', T_BC);
    EXPECT(&t, "ab", 0, T_AB);
    /* "x y" is listed twice; its later rank 14 loses to "y z" (13). */
    EXPECT(&t, "xyz", 0, 'x', T_YZ);
    EXPECT(&t, "zzz", 0, 'z', 'z', 'z');
    ds4_tok_free(&t);
}

static void test_bpe_empty_input(void **state) {
    (void)state;
    tiny v;
    ds4_tokenizer t;
    tiny_init(&t, &v);
    ds4_tokens ids = {0};
    ds4err err = {0};
    assert_int_equal(ds4_tok_encode(&t, "", 0, DS4_TOK_ADDED, &ids, &err), 0);
    assert_int_equal(ids.n, 0);
    ds4_tokens_free(&ids);
    ds4_tok_free(&t);
}

static void test_added_tokens(void **state) {
    (void)state;
    tiny v;
    ds4_tokenizer t;
    tiny_init(&t, &v);
    /* Longest match at each position: "<ctl>x" over "<ctl>". */
    EXPECT(&t, "a<ctl>xb<ctl>", DS4_TOK_ADDED, 'a', T_CTLX, 'b', T_CTL);
    /* Plain mode: ordinary text, pre-tokenized as [a][<ctl][>xb][<ctl][>]. */
    EXPECT(&t, "a<ctl>xb<ctl>", 0, 'a', '<', 'c', 't', 'l', '>', 'x', 'b', '<', 'c', 't', 'l', '>');
    /* UNUSED tokens are never cut out of text. */
    EXPECT(&t, "<unused>", DS4_TOK_ADDED, '<', 'u', 'n', 'u', 's', 'e', 'd', '>');
    /* The specials are added tokens even when typed NORMAL; the text between
     * them is pre-tokenized on its own. */
    EXPECT(&t, "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C><\xEF\xBD\x9CUser"
               "\xEF\xBD\x9C>hello world<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C></think>hello",
           DS4_TOK_ADDED, T_BOS, T_USER, T_HELLO, T_GWORLD, T_ASSISTANT, T_THINK_END, T_HELLO);
    /* A prefix of a special is text. */
    EXPECT(&t, "<think", DS4_TOK_ADDED, '<', 't', 'h', 'i', 'n', 'k');
    for (int s = 0; s < DS4_SPECIAL_COUNT; s++) assert_int_equal(ds4_tok_special(&t, s), T_BOS + s);
    assert_true(ds4_tok_is_added(&t, T_CTL));
    assert_true(ds4_tok_is_added(&t, T_DSML));
    assert_false(ds4_tok_is_added(&t, T_UNUSED));
    assert_false(ds4_tok_is_added(&t, 'a'));
    assert_false(ds4_tok_is_added(&t, T_COUNT));
    assert_int_equal(ds4_tok_lookup(&t, "hello", 5), T_HELLO);
    assert_int_equal(ds4_tok_lookup(&t, "hellox", 6), -1);
    ds4err err = {0};
    assert_int_equal(ds4_tok_require_specials(&t, &err), 0);
    ds4_tok_free(&t);
}

static void test_decode(void **state) {
    (void)state;
    tiny v;
    ds4_tokenizer t;
    tiny_init(&t, &v);
    const int32_t ids[] = {T_BOS, T_HELLO, T_GWORLD, 0x0A, 0xFF, 0x00, T_CTL};
    ds4_buf out = {0};
    ds4err err = {0};
    assert_int_equal(ds4_tok_decode(&t, ids, 7, &out, &err), 0);
    const char want[] = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
                        "hello world\n\xFF" "\0<ctl>";
    assert_int_equal(out.len, sizeof(want) - 1);
    assert_memory_equal(out.p, want, sizeof(want) - 1);
    ds4_buf_free(&out);

    const int32_t bad[] = {'a', T_COUNT};
    assert_int_equal(ds4_tok_decode(&t, bad, 2, &out, &err), -1);
    assert_int_equal(err.code, DS4_E_RANGE);
    assert_non_null(strstr(err.msg, "token id 279 out of range [0, 279)"));
    const int32_t neg[] = {-1};
    assert_int_equal(ds4_tok_decode(&t, neg, 1, &out, &err), -1);
    assert_int_equal(err.code, DS4_E_RANGE);
    ds4_buf_free(&out);

    ds4_strref s;
    assert_int_equal(ds4_tok_text(&t, T_GWORLD, &s, &err), 0);
    assert_int_equal(s.len, 7);
    assert_memory_equal(s.ptr, "\xC4\xA0world", 7);
    assert_int_equal(ds4_tok_text(&t, 99999, &s, &err), -1);
    assert_int_equal(err.code, DS4_E_RANGE);
    ds4_tok_free(&t);
}

static void expect_init_error(tiny *v, const char *needle) {
    ds4_tokenizer t;
    ds4err err = {0};
    assert_int_equal(ds4_tok_init(&t, v->tok, v->n, v->types, v->merges, v->nm, &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
}

static void test_init_errors(void **state) {
    (void)state;
    tiny v;
    tiny_build(&v);
    v.tok['q'].ptr = "Q";   /* no token for byte 'q' any more */
    expect_init_error(&v, "no token for byte 0x71");

    static const char *const bad_merges[] = {"ab", " a", "a ", "a  b", "a b c", ""};
    for (size_t i = 0; i < sizeof(bad_merges) / sizeof(bad_merges[0]); i++) {
        tiny_build(&v);
        v.merges[3].ptr = bad_merges[i];
        v.merges[3].len = strlen(bad_merges[i]);
        expect_init_error(&v, "tokenizer.ggml.merges[3]: expected \"left right\"");
    }

    ds4_tokenizer t;
    ds4err err = {0};
    assert_int_equal(ds4_tok_init(&t, v.tok, 0, NULL, NULL, 0, &err), -1);
    assert_int_equal(err.code, DS4_E_MODEL);

    /* Missing specials load, and are reported by name when required. */
    tiny_build(&v);
    v.tok[T_THINK_END].ptr = "</thonk>";
    assert_int_equal(ds4_tok_init(&t, v.tok, v.n, NULL, v.merges, v.nm, &err), 0);
    assert_int_equal(ds4_tok_special(&t, DS4_SPECIAL_THINK_END), -1);
    assert_int_equal(ds4_tok_require_specials(&t, &err), -1);
    assert_non_null(strstr(err.msg, "\"</think>\" is missing"));
    /* Without types only the specials are added tokens. */
    EXPECT(&t, "<ctl><think>", DS4_TOK_ADDED, '<', 'c', 't', 'l', '>', T_THINK);
    ds4_tok_free(&t);
}

/* Random bytes: valid and invalid UTF-8, NULs, long runs, special strings. */
static size_t random_bytes(char *buf, size_t cap) {
    static const char *const frags[] = {
        "<\xEF\xBD\x9CUser\xEF\xBD\x9C>", "</think>", "<ctl>", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80",
        "\xC3\xA9", "\xED\xA0\x80", "\xC0\xAF", "\xE4\xB8", "\r\n", "  ", "123", "\xC2\x85", "\xEF\xBD\x9C",
    };
    size_t n = 0, len = rnd() % 200;
    while (n < len && n + 16 < cap) {
        uint32_t r = rnd() % 10;
        if (r < 3) {
            buf[n++] = (char)(rnd() & 0xFF);
        } else if (r < 6) {
            buf[n++] = (char)(' ' + rnd() % 95);
        } else if (r < 9) {
            const char *f = frags[rnd() % (sizeof(frags) / sizeof(frags[0]))];
            memcpy(buf + n, f, strlen(f));
            n += strlen(f);
        } else {
            size_t run = rnd() % 16;
            char c = (char)(rnd() & 0xFF);
            for (size_t i = 0; i < run && n + 16 < cap; i++) buf[n++] = c;
        }
    }
    return n;
}

static void round_trip(const ds4_tokenizer *t, int iters) {
    char buf[4096];
    for (int it = 0; it < iters; it++) {
        size_t n = random_bytes(buf, sizeof(buf));
        for (unsigned flags = 0; flags <= DS4_TOK_ADDED; flags++) {
            ds4_tokens ids = {0};
            ds4_buf out = {0};
            ds4err err = {0};
            if (ds4_tok_encode(t, buf, n, flags, &ids, &err) ||
                ds4_tok_decode(t, ids.ids, ids.n, &out, &err))
                fail_msg("round trip: %s", err.msg);
            assert_int_equal(out.len, n);
            if (n) assert_memory_equal(out.p, buf, n);
            ds4_tokens_free(&ids);
            ds4_buf_free(&out);
        }
    }
    /* A long run through one BPE piece and one whitespace piece. */
    static char big[200000];
    memset(big, 'a', sizeof(big) / 2);
    memset(big + sizeof(big) / 2, ' ', sizeof(big) / 2);
    ds4_tokens ids = {0};
    ds4_buf out = {0};
    ds4err err = {0};
    assert_int_equal(ds4_tok_encode(t, big, sizeof(big), DS4_TOK_ADDED, &ids, &err), 0);
    assert_int_equal(ds4_tok_decode(t, ids.ids, ids.n, &out, &err), 0);
    assert_int_equal(out.len, sizeof(big));
    assert_memory_equal(out.p, big, sizeof(big));
    ds4_tokens_free(&ids);
    ds4_buf_free(&out);
}

static void test_round_trip_tiny(void **state) {
    (void)state;
    tiny v;
    ds4_tokenizer t;
    tiny_init(&t, &v);
    round_trip(&t, getenv("DS4REF_VALGRIND") ? 100 : 1000);
    ds4_tok_free(&t);
}

/* ------------------------------------------------------ pre-tokenizer */

static void expect_pieces(const ds4_pretok *p, const char *s, size_t n, const char *const *want,
                          size_t nwant) {
    ds4_spans sp = {0};
    ds4err err = {0};
    if (ds4_pretok_split(p, s, n, &sp, &err)) fail_msg("split: %s", err.msg);
    bool ok = sp.n == nwant;
    for (size_t i = 0; ok && i < nwant; i++)
        ok = sp.v[i].len == strlen(want[i]) && memcmp(s + sp.v[i].off, want[i], sp.v[i].len) == 0;
    if (!ok) {
        fprintf(stderr, "pieces of \"%.*s\":", (int)n, s);
        for (size_t i = 0; i < sp.n; i++) fprintf(stderr, " [%.*s]", (int)sp.v[i].len, s + sp.v[i].off);
        fprintf(stderr, "\n");
        fail();
    }
    ds4_pretok_spans_free(&sp);
}

#define PIECES(p, s, ...)                                                        \
    do {                                                                         \
        const char *const want_[] = {__VA_ARGS__};                               \
        expect_pieces(p, s, sizeof(s) - 1, want_, sizeof(want_) / sizeof(char *)); \
    } while (0)

static void test_pretok_pieces(void **state) {
    (void)state;
    ds4_pretok p;
    ds4err err = {0};
    assert_int_equal(ds4_pretok_init(&p, &err), 0);
    PIECES(&p, "Hello world", "Hello", " world");
    /* Regex 1: digits in threes. */
    PIECES(&p, "12345678", "123", "456", "78");
    PIECES(&p, "x  123", "x", "  ", "123");
    /* \p{N} is every number: Roman numeral, superscript, fraction. */
    PIECES(&p, "\xE2\x85\xAB\xC2\xB2\xC2\xBD" "4", "\xE2\x85\xAB\xC2\xB2\xC2\xBD", "4");
    /* Regex 2: CJK and kana runs are isolated before the letter rule. */
    PIECES(&p, "abc\xE4\xB8\xAD\xE6\x96\x87", "abc", "\xE4\xB8\xAD\xE6\x96\x87");
    PIECES(&p, "\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE\xE3\x83\x86", "\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE\xE3\x83\x86");
    /* Regex 3: whitespace keeps its last character for the next word ... */
    PIECES(&p, "a  b", "a", " ", " b");
    PIECES(&p, "  $HOME/x", " ", " $", "HOME", "/x");
    PIECES(&p, "foo.bar(baz)", "foo", ".bar", "(baz", ")");
    PIECES(&p, "it's", "it", "'s");
    /* ... and newlines end whitespace pieces. */
    PIECES(&p, "a \n x", "a", " \n", " x");
    PIECES(&p, "x \t\n\ty", "x", " \t\n", "\ty");
    /* Unicode whitespace: NBSP, ideographic space, and NEL (U+0085), which
     * Oniguruma's \s includes (so the second piece is one whitespace run). */
    PIECES(&p, "x\xC2\xA0\xC2\xA0y", "x", "\xC2\xA0", "\xC2\xA0y");
    PIECES(&p, "a\xE3\x80\x80\xE3\x80\x80" "b", "a", "\xE3\x80\x80", "\xE3\x80\x80" "b");
    PIECES(&p, "a \xC2\x85", "a", " \xC2\x85");
    /* U+180E is not whitespace (PCRE2's own \s would say it is); nor are
     * the C0 separators U+001C..001F. */
    PIECES(&p, "a \xE1\xA0\x8E", "a", " ", "\xE1\xA0\x8E");
    PIECES(&p, "a \x1C", "a", " ", "\x1C");
    PIECES(&p, "a\xC2\x85" "b", "a", "\xC2\x85" "b");
    /* Non-ASCII punctuation is punctuation. */
    PIECES(&p, "\xEF\xBC\x9F\xEF\xBC\x81" "a", "\xEF\xBC\x9F\xEF\xBC\x81", "a");
    /* Controls match no alternative: gaps become pieces.  NULs included:
     * "\0\0" is one piece, "\0NUL\0" is [\0NUL][\0]. */
    ds4_spans nul = {0};
    assert_int_equal(ds4_pretok_split(&p, "\0\0", 2, &nul, &err), 0);
    assert_int_equal(nul.n, 1);
    assert_int_equal(nul.v[0].len, 2);
    nul.n = 0;
    assert_int_equal(ds4_pretok_split(&p, "\0NUL\0", 5, &nul, &err), 0);
    assert_int_equal(nul.n, 2);
    assert_int_equal(nul.v[0].len, 4);
    assert_int_equal(nul.v[1].off, 4);
    ds4_pretok_spans_free(&nul);
    /* Invalid UTF-8: each run of bad bytes is a piece of its own. */
    PIECES(&p, "a\xFF\xFE" "b c", "a", "\xFF\xFE", "b", " c");
    PIECES(&p, "\xE4\xB8\xAD\xE6", "\xE4\xB8\xAD", "\xE6");
    PIECES(&p, "x\xED\xA0\x80y", "x", "\xED\xA0\x80", "y");
    ds4_spans sp = {0};
    assert_int_equal(ds4_pretok_split(&p, "", 0, &sp, &err), 0);
    assert_int_equal(sp.n, 0);
    ds4_pretok_spans_free(&sp);
    ds4_pretok_free(&p);
}

static void test_pretok_unicode_version(void **state) {
    (void)state;
    char v[32];
    int n = ds4_pretok_unicode_version(v, sizeof(v));
    assert_true(n >= 5);   /* "M.m.p" */
    assert_int_equal((size_t)n, strlen(v));
    assert_int_equal(strspn(v, "0123456789."), (size_t)n);
    printf("PCRE2 Unicode tables: %s\n", v);
    assert_int_equal(ds4_pretok_unicode_version(v, 2), -1);
}

/* Pieces tile the input: in order, non-empty, no gaps, for any bytes. */
static void test_pretok_tiles(void **state) {
    (void)state;
    ds4_pretok p;
    ds4err err = {0};
    assert_int_equal(ds4_pretok_init(&p, &err), 0);
    char buf[4096];
    for (int it = 0; it < 500; it++) {
        size_t n = random_bytes(buf, sizeof(buf));
        ds4_spans sp = {0};
        assert_int_equal(ds4_pretok_split(&p, buf, n, &sp, &err), 0);
        size_t at = 0;
        for (size_t i = 0; i < sp.n; i++) {
            assert_int_equal(sp.v[i].off, at);
            assert_true(sp.v[i].len > 0);
            at += sp.v[i].len;
        }
        assert_int_equal(at, n);
        ds4_pretok_spans_free(&sp);
    }
    ds4_pretok_free(&p);
}

/* --------------------------------------------- the official vocabulary */

static bool shared_ok(const char *path) {
    if (access(path, R_OK) != 0) {
        printf("skipping: %s not found (no ../shared next to the repository)\n", path);
        return false;
    }
    if (system("xz --version >/dev/null 2>&1") != 0) {
        printf("skipping: xz is not installed, cannot read %s\n", path);
        return false;
    }
    return true;
}

typedef struct official {
    ds4_vocab v;
    ds4_tokenizer t;
} official;

static int official_setup(void **state) {
    if (!shared_ok(SHARED_TOKENIZER)) {
        *state = NULL;
        return 0;
    }
    official *o = calloc(1, sizeof(*o));
    ds4err err = {0};
    if (!o || xz_hf_vocab(&o->v, SHARED_TOKENIZER, &err) ||
        ds4_tok_init(&o->t, o->v.tokens, o->v.n_tokens, o->v.types, o->v.merges, o->v.n_merges, &err)) {
        fprintf(stderr, "loading %s: %s\n", SHARED_TOKENIZER, err.msg);
        free(o);
        return -1;
    }
    *state = o;
    return 0;
}

static int official_teardown(void **state) {
    official *o = *state;
    if (o) {
        ds4_tok_free(&o->t);
        ds4_hf_vocab_free(&o->v);
        free(o);
    }
    return 0;
}

/* The official vocabulary of the group's setup, or the test skips (cmocka's
 * skip() leaves the test from here). */
static official *need_official(void **state) {
    official *o = *state;
    if (!o) {
        tu_skipping("%s or xz not available", SHARED_TOKENIZER);
        skip();
    }
    return o;
}

static void test_official_vocab(void **state) {
    official *o = need_official(state);
    /* The DeepSeek V3 tokenizer.json: 128000 BPE tokens, added tokens up to
     * id 128814, 127741 merges, the first being "Ġ t". */
    assert_int_equal(o->v.n_tokens, 128815);
    assert_int_equal(o->v.n_merges, 127741);
    assert_int_equal(o->v.merges[0].len, 4);
    assert_memory_equal(o->v.merges[0].ptr, "\xC4\xA0 t", 4);
    assert_int_equal(o->v.types[0], DS4_TOKTYPE_CONTROL);         /* BOS: special */
    assert_int_equal(o->v.types[128803], DS4_TOKTYPE_USER_DEFINED);  /* <｜User｜>: not special */
    assert_int_equal(o->v.types[1000], DS4_TOKTYPE_NORMAL);
    assert_int_equal(ds4_tok_special(&o->t, DS4_SPECIAL_BOS), 0);
    assert_int_equal(ds4_tok_special(&o->t, DS4_SPECIAL_EOS), 1);
    assert_int_equal(ds4_tok_special(&o->t, DS4_SPECIAL_USER), 128803);
    assert_int_equal(ds4_tok_special(&o->t, DS4_SPECIAL_ASSISTANT), 128804);
    /* V3 has no <think>: V4 added it. */
    assert_int_equal(ds4_tok_special(&o->t, DS4_SPECIAL_THINK), -1);
}

/* The regexes ds4ref documents as official are the ones in the file. */
static void test_official_regexes(void **state) {
    official *o = need_official(state);
    (void)o;
    FILE *f = popen("xz -dc " SHARED_TOKENIZER, "r");
    assert_non_null(f);
    ds4_buf raw = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) ds4_buf_put(&raw, chunk, n);
    assert_int_equal(pclose(f), 0);
    ds4_json_doc *doc;
    ds4err err = {0};
    assert_int_equal(ds4_json_parse(raw.p, raw.len, "tokenizer.json", &doc, &err), 0);
    const ds4_json *pre = ds4_json_get(ds4_json_root(doc), "pre_tokenizer");
    const ds4_json *seq = ds4_json_get(pre, "pretokenizers");
    assert_non_null(seq);
    assert_int_equal(seq->n, 4);
    for (int i = 0; i < 3; i++) {
        const ds4_json *step = &seq->elems[i];
        assert_true(ds4_json_is_str(ds4_json_get(step, "type"), "Split"));
        assert_true(ds4_json_is_str(ds4_json_get(step, "behavior"), "Isolated"));
        assert_int_equal(ds4_json_get(step, "invert")->type, DS4_JSON_FALSE);
        const ds4_json *re = ds4_json_get(ds4_json_get(step, "pattern"), "Regex");
        assert_true(ds4_json_is_str(re, ds4_pretok_official[i]));
    }
    const ds4_json *bl = &seq->elems[3];
    assert_true(ds4_json_is_str(ds4_json_get(bl, "type"), "ByteLevel"));
    assert_int_equal(ds4_json_get(bl, "add_prefix_space")->type, DS4_JSON_FALSE);
    assert_int_equal(ds4_json_get(bl, "use_regex")->type, DS4_JSON_FALSE);
    ds4_json_free(doc);
    ds4_buf_free(&raw);
}

/* All 65 strings of the peer fixture, ids identical. */
static void test_official_peer(void **state) {
    official *o = need_official(state);
    FILE *f = fopen(SHARED_PEER, "rb");
    if (!f) {
        printf("skipping: %s not found\n", SHARED_PEER);
        skip();
    }
    static char line[1 << 20];
    int lines = 0, bad = 0;
    while (fgets(line, sizeof(line), f)) {
        ds4_json_doc *doc;
        ds4err err = {0};
        if (ds4_json_parse(line, strlen(line), SHARED_PEER, &doc, &err)) fail_msg("%s", err.msg);
        const ds4_json *text = ds4_json_get(ds4_json_root(doc), "text");
        const ds4_json *want = ds4_json_get(ds4_json_root(doc), "ids");
        assert_non_null(text);
        assert_non_null(want);
        ds4_tokens ids = {0};
        assert_int_equal(ds4_tok_encode(&o->t, text->str, text->len, DS4_TOK_ADDED, &ids, &err), 0);
        bool same = ids.n == want->n;
        for (size_t i = 0; same && i < ids.n; i++) same = ids.ids[i] == (int32_t)want->elems[i].num;
        if (!same) {
            fprintf(stderr, "peer line %d (\"%.40s\"): ids differ\n", lines + 1, text->str);
            bad++;
        }
        ds4_buf back = {0};
        assert_int_equal(ds4_tok_decode(&o->t, ids.ids, ids.n, &back, &err), 0);
        assert_int_equal(back.len, text->len);
        assert_memory_equal(back.p, text->str, text->len);
        ds4_buf_free(&back);
        ds4_tokens_free(&ids);
        ds4_json_free(doc);
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, 65);
    assert_int_equal(bad, 0);
}

/* Ids from the Hugging Face Rust tokenizer (see the header comment). */
static const struct {
    const char *text;
    size_t len;
    int32_t ids[12];
} hf_rust[] = {
#define S(x) x, sizeof(x) - 1
    {S("a\xC2\x85" "b"), {67, 129, 230, 68, -1}},
    {S("x \xC2\x85y"), {90, 223, 129, 230, 91, -1}},
    {S("a \xC2\x85"), {67, 1203, 230, -1}},
    {S("a \xE1\xA0\x8E"), {67, 223, 115522, 239, -1}},
    {S("a \x1C"), {67, 223, 219, -1}},
    {S("\xEF\xBB\xBF" "BOM text"), {15251, 36, 7239, 3051, -1}},
    {S("tab\vvt\f!"), {14278, 202, 31616, 203, 3, -1}},
    {S("<\xEF\xBD\x9CUser\xEF\xBD\x9C><\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"), {128803, 128804, -1}},
    {S("<\xEF\xBD\x9CUser"), {30, 28217, 6756, -1}},
    {S("a<|EOT|>b"), {67, 128805, 68, -1}},
    {S("<\xEF\xBD\x9C\xE2\x96\x81pad\xE2\x96\x81\xEF\xBD\x9C>x"), {2, 90, -1}},
    {S("x<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>y"), {90, 0, 91, -1}},
    {S("\xE2\x85\xAB\xC2\xB2\xC2\xBD \xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"),
     {23603, 107, 1628, 23951, 223, 63468, 76647, 127056, 152, 100, -1}},
    {S("e\xCC\x81\xCC\x81x"), {71, 17793, 17793, 90, -1}},
    {S("\r\n\r\n  \r\n"), {204, 201, 204, 201, 262, 204, 201, -1}},
    {S("1234567"), {6895, 18009, 25, -1}},
    {S("\xEF\xBD\x81\xEF\xBD\x82\xEF\xBD\x83\xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93"),
     {108152, 5879, 227, 5879, 228, 127167, 25081, -1}},
    {S("\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7"),
     {25730, 104, 46088, 25730, 105, 46088, 25730, 103, -1}},
    {S("$$$\n\n"), {9237, 28146, -1}},
    {S(" !x"), {4050, 90, -1}},
    {S("Hello\xE2\x80\xA8World"), {19923, 300, 104, 21133, -1}},
    {S("\xE3\x80\x80\xE3\x80\x80indent"), {18524, 18524, 655, 309, -1}},
    {S("\xEF\xBD\xB6\xEF\xBE\x80\xEF\xBD\xB6\xEF\xBE\x85"), {5879, 117, 55241, 225, 5879, 117, 55241, 230, -1}},
    {S("\0NUL\0"), {191, 48, 7975, 191, -1}},
    {S("don't stop\tme  now\n\n\nok"), {20385, 1664, 6409, 200, 2083, 223, 1928, 6328, 633, -1}},
    {S("   \n"), {14320, -1}},
    {S("<think>x</think>"), {30, 37947, 117306, 1718, 37947, 32, -1}},
    {S("<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>def<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>"),
     {128801, 3465, 128800, -1}},
#undef S
};

static void test_official_hf_rust(void **state) {
    official *o = need_official(state);
    for (size_t k = 0; k < sizeof(hf_rust) / sizeof(hf_rust[0]); k++) {
        size_t n = 0;
        while (hf_rust[k].ids[n] >= 0) n++;
        expect_ids(&o->t, hf_rust[k].text, hf_rust[k].len, DS4_TOK_ADDED, hf_rust[k].ids, n);
    }
    /* Decoding, as the Rust tokenizer's decode(ids, skip_special_tokens=false). */
    const int32_t ids[] = {128803, 67, 0, 2, 129, 230};
    ds4_buf out = {0};
    ds4err err = {0};
    assert_int_equal(ds4_tok_decode(&o->t, ids, 6, &out, &err), 0);
    const char want[] = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>a<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81"
                        "sentence\xEF\xBD\x9C><\xEF\xBD\x9C\xE2\x96\x81pad\xE2\x96\x81\xEF\xBD\x9C>\xC2\x85";
    assert_int_equal(out.len, sizeof(want) - 1);
    assert_memory_equal(out.p, want, sizeof(want) - 1);
    ds4_buf_free(&out);
}

static void test_official_round_trip(void **state) {
    official *o = need_official(state);
    round_trip(&o->t, getenv("DS4REF_VALGRIND") ? 50 : 500);
}

/* One tokenizer, many threads: same ids as one thread. */
static void test_official_threads(void **state) {
    official *o = need_official(state);
    enum { N = 64 };
    static char text[N][256];
    static size_t len[N];
    ds4_tokens seq[N], par[N];
    for (int i = 0; i < N; i++) {
        len[i] = random_bytes(text[i], sizeof(text[i]));
        memset(&seq[i], 0, sizeof(seq[i]));
        memset(&par[i], 0, sizeof(par[i]));
        ds4err err = {0};
        assert_int_equal(ds4_tok_encode(&o->t, text[i], len[i], DS4_TOK_ADDED, &seq[i], &err), 0);
    }
    int failures = 0;
#pragma omp parallel for reduction(+ : failures)
    for (int i = 0; i < N; i++) {
        ds4err err = {0};
        failures += ds4_tok_encode(&o->t, text[i], len[i], DS4_TOK_ADDED, &par[i], &err) != 0;
    }
    assert_int_equal(failures, 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(par[i].n, seq[i].n);
        if (seq[i].n) assert_memory_equal(par[i].ids, seq[i].ids, seq[i].n * sizeof(int32_t));
        ds4_tokens_free(&seq[i]);
        ds4_tokens_free(&par[i]);
    }
}

/* --------------------------------------------------- tokenizer.json */

static char *write_temp(const char *content) {
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/ds4ref_tok_XXXXXX.json");
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    size_t n = strlen(content);
    assert_int_equal(write(fd, content, n), (ssize_t)n);
    close(fd);
    return path;
}

static void test_hf_json_reader(void **state) {
    (void)state;
    /* Merges in both notations, a gap at id 6, special and non-special
     * added tokens, one repeating a vocab entry (id 0). */
    const char *path = write_temp(
        "{\"added_tokens\": [{\"id\": 5, \"content\": \"<s>\", \"special\": true},"
        " {\"id\": 7, \"content\": \"<u>\", \"special\": false},"
        " {\"id\": 0, \"content\": \"a\", \"special\": true}],"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"c\": 3, \"abc\": 4},"
        " \"merges\": [\"a b\", [\"ab\", \"c\"]]}}");
    ds4_vocab v;
    ds4err err = {0};
    if (xz_hf_vocab(&v, path, &err)) fail_msg("%s", err.msg);
    unlink(path);
    static const char *const want[] = {"a", "b", "ab", "c", "abc", "<s>", "[PAD6]", "<u>"};
    static const int32_t types[] = {3, 1, 1, 1, 1, 3, 5, 4};
    assert_int_equal(v.n_tokens, 8);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(v.tokens[i].len, strlen(want[i]));
        assert_memory_equal(v.tokens[i].ptr, want[i], strlen(want[i]));
        assert_int_equal(v.types[i], types[i]);
    }
    assert_int_equal(v.n_merges, 2);
    assert_int_equal(v.merges[0].len, 3);
    assert_memory_equal(v.merges[0].ptr, "a b", 3);
    assert_int_equal(v.merges[1].len, 4);
    assert_memory_equal(v.merges[1].ptr, "ab c", 4);
    /* Not a byte-level vocabulary: the tokenizer refuses it. */
    ds4_tokenizer t;
    assert_int_equal(ds4_tok_init(&t, v.tokens, v.n_tokens, v.types, v.merges, v.n_merges, &err), -1);
    assert_non_null(strstr(err.msg, "no token for byte 0x00"));
    ds4_hf_vocab_free(&v);
}

static void expect_reader_error(const char *json, const char *needle) {
    const char *path = write_temp(json);
    ds4_vocab v;
    ds4err err = {0};
    assert_int_equal(xz_hf_vocab(&v, path, &err), -1);
    unlink(path);
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    assert_null(v.tokens);
}

static void test_hf_json_errors(void **state) {
    (void)state;
    expect_reader_error("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a  b\"]}}",
                        "model.merges[0]");
    expect_reader_error("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [[\"a b\", \"c\"]]}}",
                        "model.merges[0]");
    expect_reader_error("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}}",
                        "model.merges[0]");
    expect_reader_error("{\"model\": {\"vocab\": {\"a\": 1.5}, \"merges\": []}}",
                        "id must be an integer");
    expect_reader_error("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
                        "id 0 is \"b\" but was already \"a\"");
    expect_reader_error("{\"added_tokens\": [{\"id\": 0, \"content\": \"x\"}],"
                        " \"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}}",
                        "added_tokens: id 0 is \"x\"");
    expect_reader_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": {}, \"merges\": []}}",
                        "expected a BPE");
    expect_reader_error("{\"model\": {\"vocab\": {}, \"merges\": []}}", "vocabulary is empty");
    expect_reader_error("{\"model\": {\"vocab\": {\"a\": 0}}}", "model.merges");
    expect_reader_error("[1, 2", "byte 5");

    ds4_vocab v;
    ds4err err = {0};
    assert_int_equal(xz_hf_vocab(&v, "/nonexistent/tokenizer.json", &err), -1);
    assert_int_equal(err.code, DS4_E_IO);
    assert_int_equal(xz_hf_vocab(&v, "/nonexistent/tokenizer.json.xz", &err), -1);
    assert_int_equal(err.code, DS4_E_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/tokenizer.json.xz"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_hand_built),
        cmocka_unit_test(test_bpe_empty_input),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_round_trip_tiny),
        cmocka_unit_test(test_pretok_pieces),
        cmocka_unit_test(test_pretok_tiles),
        cmocka_unit_test(test_pretok_unicode_version),
        cmocka_unit_test(test_hf_json_reader),
        cmocka_unit_test(test_hf_json_errors),
    };
    const struct CMUnitTest official_tests[] = {
        cmocka_unit_test(test_official_vocab),
        cmocka_unit_test(test_official_regexes),
        cmocka_unit_test(test_official_peer),
        cmocka_unit_test(test_official_hf_rust),
        cmocka_unit_test(test_official_round_trip),
        cmocka_unit_test(test_official_threads),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    fails += cmocka_run_group_tests_name("official vocabulary", official_tests, official_setup,
                                         official_teardown);
    return fails;
}
