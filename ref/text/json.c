/* Strict JSON parser into an arena-allocated tree; see json.h.
 *
 * Recursive descent.  Children of the container being parsed are collected on
 * one shared scratch stack and copied into an exact-size arena array when the
 * container closes, so building a tree costs no reallocations of the tree
 * itself and freeing it is a walk over a handful of arena blocks. */
#include "ref/text/json.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

/* ---------------------------------------------------------------- arena */

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
} arena_block;

struct ds4_json_doc {
    ds4_json root;
    arena_block *blocks;
};

#define ARENA_BLOCK (1u << 20)

static void *arena_alloc(ds4_json_doc *d, size_t n) {
    const size_t align = alignof(max_align_t);
    if (n > SIZE_MAX - align) return NULL;
    n = (n + align - 1) & ~(align - 1);
    arena_block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        if (cap > SIZE_MAX - sizeof(arena_block)) return NULL;
        b = malloc(sizeof(arena_block) + cap);
        if (!b) return NULL;
        b->next = d->blocks;
        b->used = 0;
        b->cap = cap;
        d->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

void ds4_json_free(ds4_json_doc *doc) {
    if (!doc) return;
    arena_block *b = doc->blocks;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(doc);
}

const ds4_json *ds4_json_root(const ds4_json_doc *doc) {
    return doc ? &doc->root : NULL;
}

/* --------------------------------------------------------------- parser */

typedef struct parser {
    const unsigned char *s;
    size_t len, pos;
    const char *name;
    ds4_json_doc *doc;
    ds4_json *stack;     /* scratch: children of the open containers */
    size_t sp, scap;
    ds4err *err;
} parser;

static int fail(parser *p, size_t at, const char *what) {
    return ds4_err_set(p->err, DS4_E_FORMAT, "%s: byte %zu: %s", p->name, at, what);
}

static int nomem(parser *p) {
    return ds4_err_set(p->err, DS4_E_NOMEM, "%s: out of memory while parsing JSON", p->name);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int push(parser *p, const ds4_json *v) {
    if (p->sp == p->scap) {
        size_t cap = p->scap ? p->scap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(ds4_json)) return nomem(p);
        ds4_json *ns = realloc(p->stack, cap * sizeof(ds4_json));
        if (!ns) return nomem(p);
        p->stack = ns;
        p->scap = cap;
    }
    p->stack[p->sp++] = *v;
    return 0;
}

/* Move stack[from..sp) into a fresh arena array. */
static ds4_json *pop_to_arena(parser *p, size_t from, size_t count, size_t stride) {
    if (count == 0) return NULL;
    ds4_json *a = arena_alloc(p->doc, count * sizeof(ds4_json));
    if (!a) return NULL;
    for (size_t i = 0; i < count; i++) a[i] = p->stack[from + i * stride];
    return a;
}

static int hex4(parser *p, size_t at, uint32_t *out) {
    if (p->len - at < 4) return fail(p, at, "truncated \\u escape");
    uint32_t v = 0;
    for (size_t i = 0; i < 4; i++) {
        unsigned char c = p->s[at + i];
        uint32_t d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return fail(p, at + i, "expected 4 hex digits after \\u");
        v = (v << 4) | d;
    }
    *out = v;
    return 0;
}

/* One escape at s[pos] (just after the backslash); appends its UTF-8 to out
 * and advances p->pos past it. */
static int parse_escape(parser *p, unsigned char *out, size_t *olen) {
    size_t at = p->pos;
    if (at >= p->len) return fail(p, at, "unterminated string");
    unsigned char c = p->s[at];
    const char *simple = strchr("\"\\/bfnrt", c);
    if (c && simple) {
        static const char repl[] = "\"\\/\b\f\n\r\t";
        out[(*olen)++] = (unsigned char)repl[simple - "\"\\/bfnrt"];
        p->pos = at + 1;
        return 0;
    }
    if (c != 'u') return fail(p, at, "invalid escape (expected one of \" \\ / b f n r t u)");
    uint32_t cp;
    if (hex4(p, at + 1, &cp)) return -1;
    p->pos = at + 5;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return fail(p, at - 1, "lone low surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        /* A high surrogate must be followed by an escaped low one. */
        uint32_t lo;
        if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return fail(p, at - 1, "high surrogate not followed by a \\u low surrogate");
        if (hex4(p, p->pos + 2, &lo)) return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail(p, p->pos, "high surrogate not followed by a low surrogate");
        p->pos += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    *olen += ds4_utf8_put(cp, out + *olen);
    return 0;
}

/* String starting at the opening quote s[pos]. */
static int parse_string(parser *p, ds4_json *v) {
    size_t start = p->pos;
    /* First pass: find the closing quote.  The decoded text is never longer
     * than the raw span (an escape of n bytes decodes to at most n bytes). */
    size_t end = start + 1;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail(p, start, "unterminated string");
    unsigned char *out = arena_alloc(p->doc, end - start);
    if (!out) return nomem(p);
    size_t olen = 0;
    p->pos = start + 1;
    while (p->pos < end) {
        unsigned char c = p->s[p->pos];
        if (c == '\\') {
            p->pos++;
            if (parse_escape(p, out, &olen)) return -1;
        } else if (c < 0x20) {
            return fail(p, p->pos, "raw control character in string (must be escaped)");
        } else if (c < 0x80) {
            out[olen++] = c;
            p->pos++;
        } else {
            uint32_t cp;
            size_t n = ds4_utf8_next(p->s + p->pos, end - p->pos, &cp);
            if (!n) return fail(p, p->pos, "invalid UTF-8 in string");
            memcpy(out + olen, p->s + p->pos, n);
            olen += n;
            p->pos += n;
        }
    }
    out[olen] = '\0';
    p->pos = end + 1;
    v->type = DS4_JSON_STRING;
    v->str = (const char *)out;
    v->len = olen;
    return 0;
}

static size_t skip_digits(parser *p, size_t i) {
    while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
    return i;
}

static int parse_number(parser *p, ds4_json *v) {
    size_t start = p->pos, i = start;
    if (i < p->len && p->s[i] == '-') i++;
    if (i >= p->len || p->s[i] < '0' || p->s[i] > '9') return fail(p, i, "expected a digit");
    if (p->s[i] == '0') {
        i++;
        if (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
            return fail(p, i, "leading zero in number");
    } else {
        i = skip_digits(p, i);
    }
    if (i < p->len && p->s[i] == '.') {
        size_t d = ++i;
        i = skip_digits(p, i);
        if (i == d) return fail(p, i, "expected a digit after '.'");
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        size_t d = i;
        i = skip_digits(p, i);
        if (i == d) return fail(p, i, "expected a digit in exponent");
    }
    char *lit = arena_alloc(p->doc, i - start + 1);
    if (!lit) return nomem(p);
    memcpy(lit, p->s + start, i - start);
    lit[i - start] = '\0';
    v->type = DS4_JSON_NUMBER;
    v->str = lit;
    v->len = i - start;
    v->num = strtod(lit, NULL);
    p->pos = i;
    return 0;
}

static int parse_literal(parser *p, ds4_json *v) {
    static const struct { const char *word; ds4_json_type type; } lits[] = {
        {"true", DS4_JSON_TRUE}, {"false", DS4_JSON_FALSE}, {"null", DS4_JSON_NULL},
    };
    for (size_t k = 0; k < sizeof(lits) / sizeof(lits[0]); k++) {
        size_t n = strlen(lits[k].word);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, lits[k].word, n) == 0) {
            v->type = lits[k].type;
            p->pos += n;
            return 0;
        }
    }
    return fail(p, p->pos, "expected a value");
}

static int parse_value(parser *p, ds4_json *v, int depth);

/* parse_array and parse_object are the same comma-separated loop of RFC
 * 8259, each written out: an object's member is a key, ':' and a value,
 * with its own messages, and each loop reads as the grammar it parses. */
static int parse_array(parser *p, ds4_json *v, int depth) {
    size_t mark = p->sp;
    p->pos++;   /* '[' */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
    } else {
        for (;;) {
            ds4_json e;
            skip_ws(p);
            if (parse_value(p, &e, depth + 1) || push(p, &e)) return -1;
            skip_ws(p);
            if (p->pos >= p->len) return fail(p, p->pos, "unterminated array");
            if (p->s[p->pos] == ']') { p->pos++; break; }
            if (p->s[p->pos] != ',') return fail(p, p->pos, "expected ',' or ']' in array");
            p->pos++;
        }
    }
    v->type = DS4_JSON_ARRAY;
    v->n = p->sp - mark;
    v->elems = pop_to_arena(p, mark, v->n, 1);
    if (v->n && !v->elems) return nomem(p);
    p->sp = mark;
    return 0;
}

static int parse_object(parser *p, ds4_json *v, int depth) {
    size_t mark = p->sp;
    p->pos++;   /* '{' */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
    } else {
        for (;;) {
            ds4_json k, e;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return fail(p, p->pos, "expected a string key in object");
            memset(&k, 0, sizeof(k));
            k.offset = p->pos;
            if (parse_string(p, &k) || push(p, &k)) return -1;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return fail(p, p->pos, "expected ':' after object key");
            p->pos++;
            skip_ws(p);
            if (parse_value(p, &e, depth + 1) || push(p, &e)) return -1;
            skip_ws(p);
            if (p->pos >= p->len) return fail(p, p->pos, "unterminated object");
            if (p->s[p->pos] == '}') { p->pos++; break; }
            if (p->s[p->pos] != ',') return fail(p, p->pos, "expected ',' or '}' in object");
            p->pos++;
        }
    }
    v->type = DS4_JSON_OBJECT;
    v->n = (p->sp - mark) / 2;
    v->keys = pop_to_arena(p, mark, v->n, 2);
    v->elems = pop_to_arena(p, mark + 1, v->n, 2);
    if (v->n && (!v->keys || !v->elems)) return nomem(p);
    p->sp = mark;
    return 0;
}

static int parse_value(parser *p, ds4_json *v, int depth) {
    memset(v, 0, sizeof(*v));
    v->offset = p->pos;
    if (p->pos >= p->len) return fail(p, p->pos, "expected a value, found end of input");
    unsigned char c = p->s[p->pos];
    if (c == '{' || c == '[') {
        if (depth >= DS4_JSON_MAX_DEPTH)
            return ds4_err_set(p->err, DS4_E_FORMAT, "%s: byte %zu: nesting deeper than %d",
                              p->name, p->pos, DS4_JSON_MAX_DEPTH);
        return c == '{' ? parse_object(p, v, depth) : parse_array(p, v, depth);
    }
    if (c == '"') return parse_string(p, v);
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    return parse_literal(p, v);
}

int ds4_json_parse(const char *buf, size_t len, const char *name, ds4_json_doc **out,
                   ds4err *err) {
    *out = NULL;
    parser p = {0};
    p.s = (const unsigned char *)buf;
    p.len = len;
    p.name = name ? name : "JSON";
    p.err = err;
    p.doc = calloc(1, sizeof(ds4_json_doc));
    if (!p.doc) return nomem(&p);
    skip_ws(&p);
    int rc = parse_value(&p, &p.doc->root, 0);
    if (rc == 0) {
        skip_ws(&p);
        if (p.pos != p.len) rc = fail(&p, p.pos, "unexpected data after the JSON value");
    }
    free(p.stack);
    if (rc) {
        ds4_json_free(p.doc);
        return -1;
    }
    *out = p.doc;
    return 0;
}

/* --------------------------------------------------------------- access */

const ds4_json *ds4_json_get(const ds4_json *obj, const char *key) {
    if (!obj || obj->type != DS4_JSON_OBJECT) return NULL;
    size_t klen = strlen(key);
    for (size_t i = obj->n; i-- > 0;) {
        const ds4_json *k = &obj->keys[i];
        if (k->len == klen && memcmp(k->str, key, klen) == 0) return &obj->elems[i];
    }
    return NULL;
}

bool ds4_json_is_str(const ds4_json *v, const char *s) {
    return v && v->type == DS4_JSON_STRING && v->len == strlen(s) &&
           memcmp(v->str, s, v->len) == 0;
}

/* --------------------------------------------------------------- buffer */

bool ds4_json_uint(const ds4_json *v, uint64_t max, uint64_t *out) {
    if (!v || v->type != DS4_JSON_NUMBER || v->len == 0) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->str[i];
        uint64_t d = (uint64_t)(c - '0');
        if (c < '0' || c > '9' || d > max || x > (max - d) / 10) return false;
        x = x * 10 + d;
    }
    *out = x;
    return true;
}

int ds4_json_put_str(ds4_buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    ds4_buf_put(b, "\"", 1);
    size_t run = 0;   /* start of the pending verbatim run */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];
        size_t elen = 2;
        esc[0] = '\\';
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            if (c >= 0x20) continue;
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0';
            esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
            elen = 6;
        }
        ds4_buf_put(b, s + run, i - run);
        ds4_buf_put(b, esc, elen);
        run = i + 1;
    }
    ds4_buf_put(b, s + run, n - run);
    return ds4_buf_put(b, "\"", 1);
}
