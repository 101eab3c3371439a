/* DeepSeek pre-tokenizer on PCRE2; see pretok.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "ref/text/pretok.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

/* As in the "pre_tokenizer" of DeepSeek's tokenizer.json.  The \r and \n in
 * the third one are literal CR and LF characters there too (JSON escapes). */
const char *const ds4_pretok_official[3] = {
    "\\p{N}{1,3}",
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*"
    "|\\s*[\r\n]+"
    "|\\s+(?!\\S)"
    "|\\s+",
};

/* What PCRE2 compiles.  The first two are the official patterns.  In the
 * third, \s and \S are spelled out: the official tokenizer runs Oniguruma,
 * whose Unicode \s is TAB..CR, U+0085 (NEL) and the Z categories, while
 * PCRE2's \s under PCRE2_UCP also takes U+180E MONGOLIAN VOWEL SEPARATOR (a
 * format character since Unicode 6.3).  Everything else (\p{..} general
 * categories, the ASCII classes, the order of the alternatives and
 * backtracking) means the same in both engines. */
#define WS "[\\t-\\r\\x{85}\\p{Z}]"
#define NOT_WS "[^\\t-\\r\\x{85}\\p{Z}]"
static const char *const compiled_patterns[3] = {
    "\\p{N}{1,3}",
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*"
    "|" WS "*[\r\n]+"
    "|" WS "+(?!" NOT_WS ")"
    "|" WS "+",
};

int ds4_pretok_init(ds4_pretok *p, ds4err *err) {
    for (int i = 0; i < 3; i++) p->re[i] = NULL;
    for (int i = 0; i < 3; i++) {
        int code;
        PCRE2_SIZE at;
        p->re[i] = pcre2_compile((PCRE2_SPTR)compiled_patterns[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof(msg));
            ds4_pretok_free(p);
            return ds4_err_set(err, DS4_E_INTERNAL,
                              "pre-tokenizer: PCRE2 cannot compile regex %d at offset %zu: %s",
                              i + 1, (size_t)at, (const char *)msg);
        }
    }
    return 0;
}

void ds4_pretok_free(ds4_pretok *p) {
    for (int i = 0; i < 3; i++) {
        pcre2_code_free(p->re[i]);
        p->re[i] = NULL;
    }
}

int ds4_pretok_unicode_version(char *buf, size_t cap) {
    char v[64];   /* pcre2_config's documented need for this item is 24 */
    int n = pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, v);
    if (n <= 0 || (size_t)n > cap) return -1;   /* n counts the NUL */
    memcpy(buf, v, (size_t)n);
    return n - 1;
}

void ds4_pretok_spans_free(ds4_spans *s) {
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

static int spans_add(ds4_spans *s, size_t off, size_t len, ds4err *err) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(ds4_span)) cap = 0;
        ds4_span *nv = cap ? realloc(s->v, cap * sizeof(ds4_span)) : NULL;
        if (!nv) return ds4_err_set(err, DS4_E_NOMEM, "pre-tokenizer: out of memory");
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n].off = off;
    s->v[s->n].len = len;
    s->n++;
    return 0;
}

/* Per-call PCRE2 state: match data is written by every match, so it is
 * never shared between threads. */
typedef struct matcher {
    pcre2_match_data *md;
    pcre2_match_context *mc;
} matcher;

/* One Split step with behavior Isolated: every piece in `in` is searched as
 * its own subject; each match and each non-empty gap becomes a piece. */
static int split_isolated(const pcre2_code *re, const matcher *m, const char *text,
                          const ds4_spans *in, ds4_spans *out, ds4err *err) {
    out->n = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
    for (size_t k = 0; k < in->n; k++) {
        PCRE2_SPTR subj = (PCRE2_SPTR)(text + in->v[k].off);
        size_t len = in->v[k].len, pos = 0;
        while (pos < len) {
            /* The text was validated as UTF-8 by the caller; without
             * NO_UTF_CHECK PCRE2 would re-validate the whole subject on every
             * call, which is quadratic. */
            int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, m->md, m->mc);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof(msg));
                return ds4_err_set(err, DS4_E_INTERNAL, "pre-tokenizer: PCRE2 match failed: %s",
                                  (const char *)msg);
            }
            size_t ms = ov[0], me = ov[1];
            /* None of the patterns can match the empty string. */
            if (me <= ms) return ds4_err_set(err, DS4_E_INTERNAL, "pre-tokenizer: empty match");
            if (ms > pos && spans_add(out, in->v[k].off + pos, ms - pos, err)) return -1;
            if (spans_add(out, in->v[k].off + ms, me - ms, err)) return -1;
            pos = me;
        }
        if (pos < len && spans_add(out, in->v[k].off + pos, len - pos, err)) return -1;
    }
    return 0;
}

/* The three-step cascade over one run of well-formed UTF-8. */
static int split_valid(const ds4_pretok *p, const matcher *m, const char *text, size_t off,
                       size_t len, ds4_spans tmp[2], ds4_spans *out, ds4err *err) {
    ds4_spans seg = {0};
    ds4_span whole = {off, len};
    seg.v = &whole;
    seg.n = seg.cap = 1;
    if (split_isolated(p->re[0], m, text, &seg, &tmp[0], err)) return -1;
    if (split_isolated(p->re[1], m, text, &tmp[0], &tmp[1], err)) return -1;
    if (split_isolated(p->re[2], m, text, &tmp[1], &tmp[0], err)) return -1;
    for (size_t i = 0; i < tmp[0].n; i++)
        if (spans_add(out, tmp[0].v[i].off, tmp[0].v[i].len, err)) return -1;
    return 0;
}

int ds4_pretok_split(const ds4_pretok *p, const char *text, size_t len, ds4_spans *out,
                     ds4err *err) {
    matcher m;
    m.md = pcre2_match_data_create(1, NULL);
    m.mc = pcre2_match_context_create(NULL);
    if (!m.md || !m.mc) {
        pcre2_match_data_free(m.md);
        pcre2_match_context_free(m.mc);
        return ds4_err_set(err, DS4_E_NOMEM, "pre-tokenizer: out of memory");
    }
    /* Every match is linear in the piece it scans, but PCRE2's default limits
     * count backtracking steps and could refuse a multi-megabyte whitespace
     * run; the input size is the real bound. */
    pcre2_set_match_limit(m.mc, UINT32_MAX);
    pcre2_set_depth_limit(m.mc, UINT32_MAX);

    const unsigned char *s = (const unsigned char *)text;
    ds4_spans tmp[2] = {{0}, {0}};
    int rc = 0;
    size_t i = 0;
    while (i < len && rc == 0) {
        size_t start = i;
        uint32_t cp;
        size_t n;
        while (i < len && (n = ds4_utf8_next(s + i, len - i, &cp)) != 0) i += n;
        if (i > start) rc = split_valid(p, &m, text, start, i - start, tmp, out, err);
        if (rc) break;
        start = i;
        while (i < len && ds4_utf8_next(s + i, len - i, &cp) == 0) i++;
        if (i > start) rc = spans_add(out, start, i - start, err);
    }
    ds4_pretok_spans_free(&tmp[0]);
    ds4_pretok_spans_free(&tmp[1]);
    pcre2_match_data_free(m.md);
    pcre2_match_context_free(m.mc);
    return rc;
}
