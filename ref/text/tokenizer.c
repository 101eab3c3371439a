/* Byte-level BPE tokenizer with DeepSeek's official semantics; see
 * tokenizer.h for the contract and docs/TOKENIZER.md for the reasoning.
 *
 * BPE works on ids, not strings: every merge "left right" is resolved once at
 * load time into (left id, right id) -> (rank, result id), so encoding a
 * piece is a loop over a priority queue of adjacent pairs with no string
 * building at all.  This is Hugging Face's Word::merge_all algorithm: pop the
 * pair with the lowest rank (the leftmost one on ties), merge it, queue the
 * two new pairs it forms with its neighbours; it takes O(n log n) for a piece
 * of n bytes where the textbook loop is quadratic. */
#include "ref/text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

static const char *const special_strs[DS4_SPECIAL_COUNT] = {
    "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<\xEF\xBD\x9CUser\xEF\xBD\x9C>",
    "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>",
    "<think>",
    "</think>",
    "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C",
};

const char *ds4_tok_special_str(enum ds4_special which) {
    return (unsigned)which < DS4_SPECIAL_COUNT ? special_strs[which] : "";
}

/* ------------------------------------------------------ byte alphabet */

uint32_t ds4_tok_byte_cp(uint8_t b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    if (b <= 32) return 256 + b;
    if (b <= 160) return 256 + 33 + (b - 127);
    return 256 + 67;   /* 173 */
}

static int cp_to_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp < 256 + 33) return (int)(cp - 256);
    if (cp >= 256 + 33 && cp < 256 + 67) return (int)(127 + cp - (256 + 33));
    if (cp == 256 + 67) return 173;
    return -1;
}

/* Raw bytes of a byte-alphabet string; -1 if it holds any other character. */
static int alphabet_to_bytes(const char *s, size_t n, ds4_buf *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, start = out->len;
    while (i < n) {
        uint32_t cp;
        size_t k = ds4_utf8_next(u + i, n - i, &cp);
        int b = k ? cp_to_byte(cp) : -1;
        if (b < 0) {
            out->len = start;   /* drop the partial output */
            if (out->p) out->p[start] = '\0';
            return -1;
        }
        unsigned char c = (unsigned char)b;
        ds4_buf_put(out, &c, 1);
        i += k;
    }
    return 0;
}

/* ---------------------------------------------------------- hashing */

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Smallest power of two >= 2n (load factor <= 1/2), or 0 on overflow. */
static size_t table_size(size_t n) {
    size_t sz = 16;
    while (sz < 2 * n) {
        if (sz > SIZE_MAX / 4) return 0;
        sz *= 2;
    }
    return sz;
}

static bool tok_eq(const ds4_strref *t, const char *s, size_t n) {
    return t->len == n && (n == 0 || memcmp(t->ptr, s, n) == 0);
}

int32_t ds4_tok_lookup(const ds4_tokenizer *t, const char *s, size_t len) {
    size_t i = hash_bytes(s, len) & t->tok_mask;
    for (;;) {
        int32_t id = t->tok_hash[i];
        if (id < 0) return -1;
        if (tok_eq(&t->tokens[id], s, len)) return id;
        i = (i + 1) & t->tok_mask;
    }
}

/* Insert ids in increasing order; a repeated string takes the later id. */
static void tok_insert(ds4_tokenizer *t, int32_t id) {
    const ds4_strref *s = &t->tokens[id];
    size_t i = hash_bytes(s->ptr, s->len) & t->tok_mask;
    while (t->tok_hash[i] >= 0 && !tok_eq(&t->tokens[t->tok_hash[i]], s->ptr, s->len))
        i = (i + 1) & t->tok_mask;
    t->tok_hash[i] = id;
}

struct ds4_merge_slot {
    uint64_t key;      /* left << 32 | right; EMPTY_KEY when free */
    int32_t rank;
    int32_t result;
};

#define EMPTY_KEY UINT64_MAX

static const ds4_merge_slot *merge_find(const ds4_tokenizer *t, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = hash_u64(key) & t->merge_mask;
    for (;;) {
        const ds4_merge_slot *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == EMPTY_KEY) return NULL;
        i = (i + 1) & t->merge_mask;
    }
}

/* A later duplicate of a pair overwrites the earlier rank, as both Hugging
 * Face (a HashMap built in list order) and ds4 do. */
static void merge_insert(ds4_tokenizer *t, int32_t left, int32_t right, int32_t rank,
                         int32_t result) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = hash_u64(key) & t->merge_mask;
    while (t->merges[i].key != key && t->merges[i].key != EMPTY_KEY) i = (i + 1) & t->merge_mask;
    t->merges[i].key = key;
    t->merges[i].rank = rank;
    t->merges[i].result = result;
}

/* ------------------------------------------------- virtual symbols */

/* Merge results that are not tokens.  A well-formed vocabulary has none
 * (Hugging Face refuses to load one that does), but small synthetic GGUFs
 * do; such a symbol still takes part in later merges and, if it survives to
 * the end of BPE, is emitted as the byte tokens of its bytes. */
typedef struct virt_map {
    int32_t *slot;     /* virtual index, -1 when free */
    size_t mask;
    size_t off_cap;    /* entries allocated in t->virt_off */
    ds4_buf str;       /* concatenated strings */
} virt_map;

static int32_t virt_find(const ds4_tokenizer *t, const virt_map *vm, const char *s, size_t n) {
    if (!vm->slot) return -1;
    size_t i = hash_bytes(s, n) & vm->mask;
    for (;; i = (i + 1) & vm->mask) {
        int32_t k = vm->slot[i];
        if (k < 0) return -1;
        size_t len = t->virt_off[k + 1] - t->virt_off[k];
        if (len == n && memcmp(vm->str.p + t->virt_off[k], s, n) == 0) return k;
    }
}

static int virt_rehash(ds4_tokenizer *t, virt_map *vm, size_t size, ds4err *err) {
    int32_t *slot = malloc(size * sizeof(int32_t));
    if (!slot) return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
    memset(slot, 0xff, size * sizeof(int32_t));
    for (uint32_t k = 0; k < t->n_virtual; k++) {
        size_t i = hash_bytes(vm->str.p + t->virt_off[k], t->virt_off[k + 1] - t->virt_off[k]);
        for (i &= size - 1; slot[i] >= 0; i = (i + 1) & (size - 1)) {}
        slot[i] = (int32_t)k;
    }
    free(vm->slot);
    vm->slot = slot;
    vm->mask = size - 1;
    return 0;
}

static int32_t virt_add(ds4_tokenizer *t, virt_map *vm, const char *s, size_t n, ds4err *err) {
    int32_t k = virt_find(t, vm, s, n);
    if (k >= 0) return k;
    if ((uint64_t)t->n_vocab + t->n_virtual + 1 > INT32_MAX) {
        ds4_err_set(err, DS4_E_MODEL, "tokenizer: too many merge results");
        return -1;
    }
    if (t->n_virtual + 2 > vm->off_cap) {
        size_t cap = vm->off_cap ? vm->off_cap * 2 : 64;
        size_t *off = realloc(t->virt_off, cap * sizeof(size_t));
        if (!off) {
            ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
            return -1;
        }
        t->virt_off = off;
        vm->off_cap = cap;
    }
    size_t *off = t->virt_off;
    if (t->n_virtual == 0) off[0] = 0;
    ds4_buf_put(&vm->str, s, n);
    if (vm->str.failed) {
        ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
        return -1;
    }
    k = (int32_t)t->n_virtual++;
    off[k + 1] = vm->str.len;
    if (!vm->slot || 2 * (size_t)t->n_virtual > vm->mask + 1) {
        if (virt_rehash(t, vm, table_size(t->n_virtual), err)) return -1;
    } else {
        size_t i = hash_bytes(s, n) & vm->mask;
        while (vm->slot[i] >= 0) i = (i + 1) & vm->mask;
        vm->slot[i] = k;
    }
    return k;
}

/* A symbol string: a token, else a merge result seen so far, else -1. */
static int32_t symbol_id(const ds4_tokenizer *t, const virt_map *vm, const char *s, size_t n) {
    int32_t id = ds4_tok_lookup(t, s, n);
    if (id >= 0) return id;
    int32_t k = virt_find(t, vm, s, n);
    return k < 0 ? -1 : (int32_t)t->n_vocab + k;
}

/* -------------------------------------------------------------- init */

static int split_merge(const ds4_strref *m, uint32_t r, size_t *space, ds4err *err) {
    const char *sp = m->len ? memchr(m->ptr, ' ', m->len) : NULL;
    if (!sp || sp == m->ptr || (size_t)(sp - m->ptr) + 1 == m->len ||
        memchr(sp + 1, ' ', m->len - (size_t)(sp - m->ptr) - 1))
        return ds4_err_set(err, DS4_E_MODEL,
                          "tokenizer.ggml.merges[%u]: expected \"left right\" with exactly one "
                          "space, got %zu bytes \"%.*s\"",
                          r, (size_t)m->len, (int)(m->len > 60 ? 60 : m->len),
                          m->ptr ? m->ptr : "");
    *space = (size_t)(sp - m->ptr);
    return 0;
}

static int build_merges(ds4_tokenizer *t, const ds4_strref *merges, uint32_t n_merges,
                        ds4err *err) {
    int rc = -1;
    virt_map vm = {0};
    ds4_buf cat = {0};
    int32_t *result = malloc((n_merges ? n_merges : 1) * sizeof(int32_t));
    size_t size = table_size(n_merges);
    t->merges = size ? malloc(size * sizeof(ds4_merge_slot)) : NULL;
    if (!result || !t->merges) {
        ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory for %u merges", n_merges);
        goto done;
    }
    t->merge_mask = size - 1;
    for (size_t i = 0; i < size; i++) t->merges[i].key = EMPTY_KEY;

    /* Pass 1: the symbol each merge produces.  All results are known before
     * any operand is resolved, because an operand may be the result of a
     * merge further down the list. */
    for (uint32_t r = 0; r < n_merges; r++) {
        size_t sp;
        if (split_merge(&merges[r], r, &sp, err)) goto done;
        cat.len = 0;
        ds4_buf_put(&cat, merges[r].ptr, sp);
        ds4_buf_put(&cat, merges[r].ptr + sp + 1, merges[r].len - sp - 1);
        if (cat.failed) {
            ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
            goto done;
        }
        result[r] = ds4_tok_lookup(t, cat.p, cat.len);
        if (result[r] < 0) {
            int32_t k = virt_add(t, &vm, cat.p, cat.len, err);
            if (k < 0) goto done;
            result[r] = (int32_t)t->n_vocab + k;
        }
    }
    /* Pass 2: operands.  One that is neither a token nor a merge result can
     * never be formed, so its merge can never apply and is left out. */
    for (uint32_t r = 0; r < n_merges; r++) {
        size_t sp;
        split_merge(&merges[r], r, &sp, err);
        int32_t left = symbol_id(t, &vm, merges[r].ptr, sp);
        int32_t right = symbol_id(t, &vm, merges[r].ptr + sp + 1, merges[r].len - sp - 1);
        if (left >= 0 && right >= 0) merge_insert(t, left, right, (int32_t)r, result[r]);
    }
    t->virt_str = vm.str.p;   /* keep the strings for the byte fallback */
    vm.str.p = NULL;
    rc = 0;
done:
    free(result);
    free(vm.slot);
    ds4_buf_free(&vm.str);
    ds4_buf_free(&cat);
    return rc;
}

struct ds4_trie_node {
    int32_t child, sibling;   /* -1: none */
    int32_t id;               /* token ending here, or -1 */
    unsigned char byte;
};

static int trie_add(ds4_tokenizer *t, uint32_t *cap, const char *s, size_t n, int32_t id,
                    ds4err *err) {
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int32_t ch = t->trie[node].child;
        while (ch >= 0 && t->trie[ch].byte != c) ch = t->trie[ch].sibling;
        if (ch < 0) {
            if (t->n_trie == *cap) {
                uint32_t ncap = *cap * 2;
                ds4_trie_node *nt = ncap > *cap ? realloc(t->trie, ncap * sizeof(*nt)) : NULL;
                if (!nt) return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
                t->trie = nt;
                *cap = ncap;
            }
            ch = (int32_t)t->n_trie++;
            t->trie[ch].child = -1;
            t->trie[ch].sibling = t->trie[node].child;
            t->trie[ch].id = -1;
            t->trie[ch].byte = c;
            t->trie[node].child = ch;
        }
        node = ch;
    }
    t->trie[node].id = id;
    return 0;
}

/* The strings cut out of text before pre-tokenization: what Hugging Face
 * calls added tokens.  A GGUF keeps them as types CONTROL (special added
 * tokens) and USER_DEFINED (the others); the seven specials count even when
 * the types are missing or say otherwise. */
bool ds4_tok_is_added(const ds4_tokenizer *t, int32_t id) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return false;
    if (t->types && (t->types[id] == DS4_TOKTYPE_CONTROL ||
                     t->types[id] == DS4_TOKTYPE_USER_DEFINED))
        return true;
    for (int s = 0; s < DS4_SPECIAL_COUNT; s++)
        if (t->special[s] == id) return true;
    return false;
}

static int build_trie(ds4_tokenizer *t, ds4err *err) {
    uint32_t cap = 256;
    t->trie = malloc(cap * sizeof(ds4_trie_node));
    if (!t->trie) return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
    t->trie[0].child = t->trie[0].sibling = t->trie[0].id = -1;
    t->trie[0].byte = 0;
    t->n_trie = 1;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        const ds4_strref *s = &t->tokens[id];
        if (s->len == 0 || !ds4_tok_is_added(t, (int32_t)id)) continue;
        /* Where strings repeat, the id lookup gives wins here too. */
        if (trie_add(t, &cap, s->ptr, s->len, ds4_tok_lookup(t, s->ptr, s->len), err)) return -1;
        t->first_byte[(unsigned char)s->ptr[0]] = true;
    }
    return 0;
}

int ds4_tok_init(ds4_tokenizer *t, const ds4_strref *tokens, uint32_t n_tokens,
                 const int32_t *types, const ds4_strref *merges, uint32_t n_merges,
                 ds4err *err) {
    memset(t, 0, sizeof(*t));
    if (n_tokens == 0 || n_tokens > INT32_MAX)
        return ds4_err_set(err, DS4_E_MODEL, "tokenizer.ggml.tokens: %u tokens, expected 1..%d",
                          n_tokens, INT32_MAX);
    if (n_merges > INT32_MAX)
        return ds4_err_set(err, DS4_E_MODEL, "tokenizer.ggml.merges: %u merges, at most %d",
                          n_merges, INT32_MAX);
    t->n_vocab = n_tokens;
    t->tokens = tokens;
    if (ds4_pretok_init(&t->pretok, err)) return -1;
    size_t size = table_size(n_tokens);
    if (size) t->tok_hash = malloc(size * sizeof(int32_t));
    if (types) t->types = malloc((size_t)n_tokens * sizeof(int32_t));
    if (!t->tok_hash || (types && !t->types)) {
        ds4_tok_free(t);
        return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory for %u tokens", n_tokens);
    }
    if (types) memcpy(t->types, types, (size_t)n_tokens * sizeof(int32_t));
    t->tok_mask = size - 1;
    memset(t->tok_hash, 0xff, size * sizeof(int32_t));
    for (uint32_t id = 0; id < n_tokens; id++) {
        if (tokens[id].len && !tokens[id].ptr) {
            ds4_tok_free(t);
            return ds4_err_set(err, DS4_E_MODEL, "tokenizer.ggml.tokens[%u]: no string", id);
        }
        tok_insert(t, (int32_t)id);
    }

    for (unsigned b = 0; b < 256; b++) {
        unsigned char u[4];
        size_t n = ds4_utf8_put(ds4_tok_byte_cp(b), u);
        t->byte_tok[b] = ds4_tok_lookup(t, (const char *)u, n);
        if (t->byte_tok[b] < 0) {
            ds4_tok_free(t);
            return ds4_err_set(err, DS4_E_MODEL,
                              "tokenizer.ggml.tokens: no token for byte 0x%02X (the string "
                              "\"%.*s\"); not a byte-level BPE vocabulary",
                              b, (int)n, (const char *)u);
        }
    }
    for (int s = 0; s < DS4_SPECIAL_COUNT; s++)
        t->special[s] = ds4_tok_lookup(t, special_strs[s], strlen(special_strs[s]));
    if (build_merges(t, merges, n_merges, err) || build_trie(t, err)) {
        ds4_tok_free(t);
        return -1;
    }
    return 0;
}

void ds4_tok_free(ds4_tokenizer *t) {
    free(t->types);
    free(t->tok_hash);
    free(t->merges);
    free(t->virt_off);
    free(t->virt_str);
    free(t->trie);
    ds4_pretok_free(&t->pretok);
    memset(t, 0, sizeof(*t));
}

int ds4_tok_require_specials(const ds4_tokenizer *t, ds4err *err) {
    for (int s = 0; s < DS4_SPECIAL_COUNT; s++)
        if (t->special[s] < 0)
            return ds4_err_set(err, DS4_E_MODEL,
                              "tokenizer.ggml.tokens: required token \"%s\" is missing",
                              special_strs[s]);
    return 0;
}

int32_t ds4_tok_special(const ds4_tokenizer *t, enum ds4_special which) {
    return (unsigned)which < DS4_SPECIAL_COUNT ? t->special[which] : -1;
}

/* ------------------------------------------------------------ tokens */

int ds4_tokens_push(ds4_tokens *v, int32_t id, ds4err *err) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *ni = cap <= SIZE_MAX / sizeof(int32_t) ? realloc(v->ids, cap * sizeof(int32_t))
                                                        : NULL;
        if (!ni) return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory for %zu ids", cap);
        v->ids = ni;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

void ds4_tokens_free(ds4_tokens *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

/* --------------------------------------------------------------- BPE */

typedef struct pair_entry {
    int32_t rank;
    uint32_t pos;       /* index of the left symbol */
    int32_t left, right;
} pair_entry;

typedef struct bpe_scratch {
    int32_t *sym;       /* symbol id at each position; -1 once merged away */
    int32_t *prev, *next;
    size_t cap;
    pair_entry *heap;
    size_t hn, hcap;
    ds4_spans spans;
    ds4_buf bytes;
} bpe_scratch;

static void scratch_free(bpe_scratch *s) {
    free(s->sym);
    free(s->prev);
    free(s->next);
    free(s->heap);
    ds4_pretok_spans_free(&s->spans);
    ds4_buf_free(&s->bytes);
}

static bool pair_less(const pair_entry *a, const pair_entry *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int heap_push(bpe_scratch *s, const pair_entry *e, ds4err *err) {
    if (s->hn == s->hcap) {
        size_t cap = s->hcap ? s->hcap * 2 : 64;
        pair_entry *nh = cap <= SIZE_MAX / sizeof(pair_entry)
                             ? realloc(s->heap, cap * sizeof(pair_entry)) : NULL;
        if (!nh) return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
        s->heap = nh;
        s->hcap = cap;
    }
    size_t i = s->hn++;
    while (i > 0 && pair_less(e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = *e;
    return 0;
}

static pair_entry heap_pop(bpe_scratch *s) {
    pair_entry top = s->heap[0], last = s->heap[--s->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->hn) break;
        if (c + 1 < s->hn && pair_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!pair_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->hn) s->heap[i] = last;
    return top;
}

/* Queue the pair starting at symbol position i, if it has a merge. */
static int queue_pair(const ds4_tokenizer *t, bpe_scratch *s, int32_t i, ds4err *err) {
    if (i < 0 || s->next[i] < 0) return 0;
    const ds4_merge_slot *m = merge_find(t, s->sym[i], s->sym[s->next[i]]);
    if (!m) return 0;
    pair_entry e = {m->rank, (uint32_t)i, s->sym[i], s->sym[s->next[i]]};
    return heap_push(s, &e, err);
}

static int emit_symbol(const ds4_tokenizer *t, bpe_scratch *s, int32_t id, ds4_tokens *out,
                       ds4err *err) {
    if (id < (int32_t)t->n_vocab) return ds4_tokens_push(out, id, err);
    /* A merge result with no token of its own: its byte tokens. */
    uint32_t k = (uint32_t)id - t->n_vocab;
    s->bytes.len = 0;
    if (alphabet_to_bytes(t->virt_str + t->virt_off[k], t->virt_off[k + 1] - t->virt_off[k],
                          &s->bytes) || s->bytes.failed)
        return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < s->bytes.len; i++)
        if (ds4_tokens_push(out, t->byte_tok[(unsigned char)s->bytes.p[i]], err)) return -1;
    return 0;
}

static int bpe_piece(const ds4_tokenizer *t, bpe_scratch *s, const unsigned char *p, size_t n,
                     ds4_tokens *out, ds4err *err) {
    if (n == 1) return ds4_tokens_push(out, t->byte_tok[p[0]], err);
    if (n > INT32_MAX) return ds4_err_set(err, DS4_E_UNSUPPORTED, "tokenizer: piece of %zu bytes", n);
    if (n > s->cap) {
        free(s->sym); free(s->prev); free(s->next);
        s->sym = malloc(n * sizeof(int32_t));
        s->prev = malloc(n * sizeof(int32_t));
        s->next = malloc(n * sizeof(int32_t));
        s->cap = s->sym && s->prev && s->next ? n : 0;
        if (!s->cap) return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = t->byte_tok[p[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->hn = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (queue_pair(t, s, (int32_t)i, err)) return -1;
    while (s->hn) {
        pair_entry e = heap_pop(s);
        int32_t i = (int32_t)e.pos, j;
        /* Entries go stale when a neighbour merges first: skip any whose two
         * symbols are no longer the ones it was queued for. */
        if (s->sym[i] != e.left || (j = s->next[i]) < 0 || s->sym[j] != e.right) continue;
        s->sym[i] = merge_find(t, e.left, e.right)->result;
        s->sym[j] = -1;
        s->next[i] = s->next[j];
        if (s->next[j] >= 0) s->prev[s->next[j]] = i;
        if (queue_pair(t, s, s->prev[i], err) || queue_pair(t, s, i, err)) return -1;
    }
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if (emit_symbol(t, s, s->sym[i], out, err)) return -1;
    return 0;
}

/* Pre-tokenize and BPE a span that holds no added token. */
static int encode_plain(const ds4_tokenizer *t, bpe_scratch *s, const char *text, size_t len,
                        ds4_tokens *out, ds4err *err) {
    if (len == 0) return 0;
    s->spans.n = 0;
    if (ds4_pretok_split(&t->pretok, text, len, &s->spans, err)) return -1;
    for (size_t k = 0; k < s->spans.n; k++)
        if (bpe_piece(t, s, (const unsigned char *)text + s->spans.v[k].off, s->spans.v[k].len,
                      out, err))
            return -1;
    return 0;
}

/* Longest added-token string at s[0..n): its length, 0 if none. */
static size_t trie_match(const ds4_tokenizer *t, const unsigned char *s, size_t n, int32_t *id) {
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t ch = t->trie[node].child;
        while (ch >= 0 && t->trie[ch].byte != s[i]) ch = t->trie[ch].sibling;
        if (ch < 0) break;
        node = ch;
        if (t->trie[node].id >= 0) {
            best = i + 1;
            *id = t->trie[node].id;
        }
    }
    return best;
}

int ds4_tok_encode(const ds4_tokenizer *t, const char *text, size_t len, unsigned flags,
                   ds4_tokens *out, ds4err *err) {
    bpe_scratch s = {0};
    const unsigned char *u = (const unsigned char *)text;
    size_t seg = 0;
    int rc = 0;
    if (flags & DS4_TOK_ADDED) {
        for (size_t i = 0; i < len && rc == 0;) {
            int32_t id;
            size_t m = t->first_byte[u[i]] ? trie_match(t, u + i, len - i, &id) : 0;
            if (!m) {
                i++;
                continue;
            }
            rc = encode_plain(t, &s, text + seg, i - seg, out, err);
            if (rc == 0) rc = ds4_tokens_push(out, id, err);
            i += m;
            seg = i;
        }
    }
    if (rc == 0) rc = encode_plain(t, &s, text + seg, len - seg, out, err);
    scratch_free(&s);
    return rc;
}

/* ------------------------------------------------------------ decode */

static int check_id(const ds4_tokenizer *t, int32_t id, ds4err *err) {
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return ds4_err_set(err, DS4_E_RANGE, "token id %d out of range [0, %u)", id, t->n_vocab);
    return 0;
}

int ds4_tok_decode(const ds4_tokenizer *t, const int32_t *ids, size_t n, ds4_buf *out,
                   ds4err *err) {
    for (size_t i = 0; i < n; i++) {
        if (check_id(t, ids[i], err)) return -1;
        const ds4_strref *s = &t->tokens[ids[i]];
        /* Hugging Face's ByteLevel decoder: a token made only of byte-alphabet
         * characters gives their bytes; any other token (<｜User｜> and the
         * like) is copied as it is. */
        if (alphabet_to_bytes(s->ptr, s->len, out)) ds4_buf_put(out, s->ptr, s->len);
    }
    if (out->failed) return ds4_err_set(err, DS4_E_NOMEM, "tokenizer: out of memory while decoding");
    return 0;
}

int ds4_tok_text(const ds4_tokenizer *t, int32_t id, ds4_strref *out, ds4err *err) {
    if (check_id(t, id, err)) return -1;
    *out = t->tokens[id];
    return 0;
}
