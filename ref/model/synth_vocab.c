/* The vocabulary of a synthetic model (synth_vocab.h): a byte-level BPE
 * learned from a small fixed corpus, or a real tokenizer.json's. */
#include "ref/model/synth_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "ref/text/tokenizer.h"

/* The text the tiny vocabulary's merges are learned from. */
static const char corpus[] =
    "The quick brown fox jumps over the lazy dog. A reference implementation is the "
    "program other programs are checked against, so it must be right first and "
    "deterministic always. The model reads tokens, mixes them through layers of "
    "attention and experts, and writes the logits of the next token. Hello world! "
    "What is the capital of Italy? The capital of Italy is Rome. Ada Lovelace wrote "
    "the first program for a machine that did not exist yet. int main(void) { return 0; } "
    "for (int i = 0; i < n; i++) sum += x[i] * y[i]; The numbers 1, 2, 3 and 42 are "
    "small; 2026 is a year. def add(a, b): return a + b. Once upon a time there was a "
    "little model that wanted to predict the next word of every story it read.";

/* Byte b as its character of the byte-level alphabet, UTF-8 encoded. */
static char *byte_char(uint8_t b) {
    unsigned char u[4];
    size_t n = ds4_utf8_put(ds4_tok_byte_cp(b), u);
    return strndup((const char *)u, n);
}


void ds4_synth_vocab_free(ds4_synth_vocab *v) {
    for (uint32_t i = 0; i < v->n; i++) free(v->tok[i]);
    for (uint32_t i = 0; i < v->n_merge; i++) free(v->merge[i]);
    free(v->tok);
    free(v->tok_len);
    free(v->type);
    free(v->merge);
    free(v->merge_len);
    memset(v, 0, sizeof(v[0]));
}

static char *memdup0(const char *p, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

/* A Hugging Face tokenizer.json's vocabulary, plus any of ds4's seven
 * special tokens it lacks (the DeepSeek V3 file has no <think>, </think> or
 * ｜DSML｜), appended as control tokens so the model has all of them. */
int ds4_synth_vocab_hf(ds4_synth_vocab *v, const char *path, ds4err *err) {
    ds4_vocab hv;
    memset(v, 0, sizeof(*v));
    if (ds4_hf_vocab_from_json(&hv, path, err)) return -1;
    uint32_t cap = hv.n_tokens + 7;
    v->tok = calloc(cap, sizeof(char *));
    v->tok_len = calloc(cap, sizeof(size_t));
    v->type = calloc(cap, sizeof(int32_t));
    v->merge = calloc(hv.n_merges + 1, sizeof(char *));
    v->merge_len = calloc(hv.n_merges + 1, sizeof(size_t));
    if (!v->tok || !v->tok_len || !v->type || !v->merge || !v->merge_len) goto oom;
    for (uint32_t i = 0; i < hv.n_tokens; i++) {
        if (!(v->tok[i] = memdup0(hv.tokens[i].ptr, hv.tokens[i].len))) goto oom;
        v->tok_len[i] = hv.tokens[i].len;
        v->type[i] = hv.types ? hv.types[i] : 1;
        v->n++;
    }
    for (uint32_t i = 0; i < hv.n_merges; i++) {
        if (!(v->merge[i] = memdup0(hv.merges[i].ptr, hv.merges[i].len))) goto oom;
        v->merge_len[i] = hv.merges[i].len;
        v->n_merge++;
    }
    for (uint32_t k = 0; k < DS4_SPECIAL_COUNT; k++) {
        const char *sp = ds4_tok_special_str((enum ds4_special)k);
        size_t len = strlen(sp);
        uint32_t i = 0;
        while (i < hv.n_tokens && !(v->tok_len[i] == len && !memcmp(v->tok[i], sp, len))) i++;
        if (i < hv.n_tokens) continue;
        if (!(v->tok[v->n] = memdup0(sp, len))) goto oom;
        v->tok_len[v->n] = len;
        v->type[v->n++] = 3;
    }
    ds4_hf_vocab_free(&hv);
    return 0;
oom:
    ds4_hf_vocab_free(&hv);
    ds4_synth_vocab_free(v);
    return ds4_err_set(err, DS4_E_NOMEM, "out of memory reading %s", path);
}

/* Training words: maximal runs of letters, digits or other non-space bytes,
 * each with the single space before it (GPT-2 style). */
typedef struct word {
    char *sym[64];
    uint32_t n;
} word;

static uint32_t split_words(word *w, uint32_t cap) {
    uint32_t nw = 0;
    const char *p = corpus;
    while (*p && nw < cap) {
        const char *start = p;
        if (*p == ' ') p++;
        int cls = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ? 1
                  : (*p >= '0' && *p <= '9')                           ? 2
                                                                       : 3;
        if (*p == ' ' || !*p) {
            p = start + 1;
            continue;
        }
        while (*p && *p != ' ') {
            int c2 = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ? 1
                     : (*p >= '0' && *p <= '9')                           ? 2
                                                                          : 3;
            if (c2 != cls) break;
            p++;
        }
        word *wd = &w[nw++];
        wd->n = 0;
        for (const char *q = start; q < p && wd->n < 64; q++) {
            wd->sym[wd->n] = byte_char((uint8_t)*q);
            wd->n++;
        }
    }
    return nw;
}

static char *concat(const char *a, const char *sep, const char *b) {
    size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
    char *s = malloc(la + ls + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, sep, ls);
    memcpy(s + la + ls, b, lb + 1);
    return s;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "left right" of the most frequent adjacent pair occurring at least twice
 * (ties: the smallest such string), or NULL.  Pairs are counted by sorting. */
static char *most_frequent_pair(word *words, uint32_t nw) {
    size_t n = 0;
    for (uint32_t i = 0; i < nw; i++) n += words[i].n ? words[i].n - 1 : 0;
    char **keys = calloc(n ? n : 1, sizeof(char *));
    if (!keys) return NULL;
    size_t k = 0;
    for (uint32_t i = 0; i < nw; i++)
        for (uint32_t j = 0; j + 1 < words[i].n; j++)
            if ((keys[k] = concat(words[i].sym[j], " ", words[i].sym[j + 1]))) k++;
    qsort(keys, k, sizeof(char *), cmp_str);
    char *best = NULL;
    size_t best_n = 1;
    for (size_t i = 0; i < k;) {
        size_t j = i;
        while (j < k && !strcmp(keys[j], keys[i])) j++;
        if (j - i > best_n) {
            best_n = j - i;
            best = keys[i];
        }
        i = j;
    }
    char *out = best ? strdup(best) : NULL;
    for (size_t i = 0; i < k; i++) free(keys[i]);
    free(keys);
    return out;
}

/* Replace every adjacent (l, r) by their concatenation, left to right. */
static int apply_merge(word *words, uint32_t nw, const char *l, const char *r) {
    for (uint32_t i = 0; i < nw; i++)
        for (uint32_t j = 0; j + 1 < words[i].n; j++)
            if (!strcmp(words[i].sym[j], l) && !strcmp(words[i].sym[j + 1], r)) {
                char *m = concat(l, "", r);
                if (!m) return -1;
                free(words[i].sym[j]);
                free(words[i].sym[j + 1]);
                words[i].sym[j] = m;
                memmove(&words[i].sym[j + 1], &words[i].sym[j + 2],
                        sizeof(char *) * (words[i].n - j - 2));
                words[i].n--;
            }
    return 0;
}

/* Byte tokens, the 7 specials, then BPE merges learned greedily from the
 * corpus (most frequent adjacent pair, ties to the smallest pair string),
 * then filler tokens up to n_vocab. */
int ds4_synth_vocab_tiny(ds4_synth_vocab *v, uint32_t n_vocab, ds4err *err) {
    memset(v, 0, sizeof(*v));
    v->tok = calloc(n_vocab, sizeof(char *));
    v->type = calloc(n_vocab, sizeof(int32_t));
    v->merge = calloc(n_vocab, sizeof(char *));
    word *words = calloc(1024, sizeof(word));
    if (!v->tok || !v->type || !v->merge || !words) goto oom;
    for (uint32_t b = 0; b < 256; b++) {
        if (!(v->tok[v->n] = byte_char((uint8_t)b))) goto oom;
        v->type[v->n++] = 1;
    }
    for (uint32_t i = 0; i < DS4_SPECIAL_COUNT; i++) {
        if (!(v->tok[v->n] = strdup(ds4_tok_special_str((enum ds4_special)i)))) goto oom;
        v->type[v->n++] = 3;
    }
    uint32_t nw = split_words(words, 1024);
    while (v->n < n_vocab) {
        char *best_key = most_frequent_pair(words, nw);
        if (!best_key) break;
        char *sp = strchr(best_key, ' ');
        *sp = '\0';
        char *merged = concat(best_key, "", sp + 1);
        if (!merged || apply_merge(words, nw, best_key, sp + 1)) {
            free(merged);
            free(best_key);
            goto oom;
        }
        *sp = ' ';
        v->merge[v->n_merge++] = best_key;
        v->tok[v->n] = merged;
        v->type[v->n++] = 1;
    }
    while (v->n < n_vocab) {
        char buf[32];
        snprintf(buf, sizeof(buf), "tok%u", v->n);
        if (!(v->tok[v->n] = strdup(buf))) goto oom;
        v->type[v->n++] = 1;
    }
    for (uint32_t i = 0; i < 1024; i++)
        for (uint32_t j = 0; j < words[i].n; j++) free(words[i].sym[j]);
    free(words);
    return 0;
oom:
    if (words)
        for (uint32_t i = 0; i < 1024; i++)
            for (uint32_t j = 0; j < words[i].n; j++) free(words[i].sym[j]);
    free(words);
    ds4_synth_vocab_free(v);
    return ds4_err_set(err, DS4_E_NOMEM, "out of memory building the synthetic vocabulary");
}
