/* DeepSeek V4 tokenizer: byte-level BPE with the official semantics.
 *
 * Encoding follows the Hugging Face tokenizer of DeepSeek's tokenizer.json:
 *
 *   1. (DS4_TOK_ADDED) added tokens are cut out of the text first: at each
 *      position the longest added-token string that starts there wins, the
 *      leftmost position first.  "Added tokens" are the vocabulary entries of
 *      type CONTROL (3) or USER_DEFINED (4) plus ds4's seven specials.
 *   2. every remaining span goes through the pre-tokenizer (pretok.h);
 *   3. every piece is mapped byte by byte to the GPT-2 byte alphabet and
 *      merged by BPE, lowest merge rank first, leftmost on ties.
 *
 * Decoding maps each token back to bytes: a token whose string lies entirely
 * in the byte alphabet gives those bytes, any other token (the specials) its
 * string verbatim.  Bytes -> ids -> bytes is the identity for every byte
 * string, including invalid UTF-8 and NUL bytes.
 *
 * docs/TOKENIZER.md has the details and every known difference from ds4.c. */
#ifndef DS4_TOKENIZER_H
#define DS4_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "quant/gguf.h"
#include "ref/text/pretok.h"

/* A byte string that is not NUL-terminated (GGUF strings point into the
 * mapping). */
typedef ds4_gguf_str ds4_strref;

/* tokenizer.ggml.token_type values (llama.cpp's convention). */
enum ds4_toktype {
    DS4_TOKTYPE_NORMAL = 1,
    DS4_TOKTYPE_UNKNOWN = 2,
    DS4_TOKTYPE_CONTROL = 3,
    DS4_TOKTYPE_USER_DEFINED = 4,
    DS4_TOKTYPE_UNUSED = 5,
    DS4_TOKTYPE_BYTE = 6
};

/* The seven tokens ds4 needs, found by their strings. */
enum ds4_special {
    DS4_SPECIAL_BOS,          /* <｜begin▁of▁sentence｜> */
    DS4_SPECIAL_EOS,          /* <｜end▁of▁sentence｜> */
    DS4_SPECIAL_USER,         /* <｜User｜> */
    DS4_SPECIAL_ASSISTANT,    /* <｜Assistant｜> */
    DS4_SPECIAL_THINK,        /* <think> */
    DS4_SPECIAL_THINK_END,    /* </think> */
    DS4_SPECIAL_DSML,         /* ｜DSML｜ */
    DS4_SPECIAL_COUNT
};

/* The UTF-8 string of a special token. */
const char *ds4_tok_special_str(enum ds4_special which);

/* GPT-2's bytes_to_unicode, the byte-level alphabet: the code point that
 * stands for byte b in token strings.  Printable Latin-1 bytes stand for
 * themselves; the other 68 bytes (0..32, 127..160, 173) map in order to
 * U+0100..U+0143. */
uint32_t ds4_tok_byte_cp(uint8_t b);

typedef struct ds4_merge_slot ds4_merge_slot;
typedef struct ds4_trie_node ds4_trie_node;

/* Fields are private to tokenizer.c. */
typedef struct ds4_tokenizer {
    uint32_t n_vocab;
    const ds4_strref *tokens;   /* borrowed (array and strings) */
    int32_t *types;             /* copy, or NULL when the model has none */
    int32_t *tok_hash;          /* string -> id, open addressing */
    size_t tok_mask;
    ds4_merge_slot *merges;     /* (left, right) -> (rank, result) */
    size_t merge_mask;
    /* Merge results that are not vocabulary tokens get ids n_vocab + k; their
     * byte-alphabet strings are kept for the fallback to byte tokens. */
    uint32_t n_virtual;
    size_t *virt_off;
    char *virt_str;
    int32_t byte_tok[256];      /* id of the token for each raw byte */
    int32_t special[DS4_SPECIAL_COUNT];   /* -1 where missing */
    ds4_trie_node *trie;        /* added-token strings, matched in text */
    uint32_t n_trie;
    bool first_byte[256];       /* bytes an added token can start with */
    ds4_pretok pretok;
} ds4_tokenizer;

/* Build a tokenizer from plain arrays (tokenizer.ggml.tokens, .token_type,
 * .merges).  The `tokens` array and the strings it points to are borrowed,
 * not copied, and must outlive the tokenizer; `types` (may be NULL) is
 * copied and `merges` is only read here.
 * Each merge is "left right" with exactly one space.  Every one of the 256
 * byte-alphabet strings must be a token.  Missing specials are not an error
 * here (ds4_tok_require_specials checks them). */
int ds4_tok_init(ds4_tokenizer *t, const ds4_strref *tokens, uint32_t n_tokens,
                 const int32_t *types, const ds4_strref *merges, uint32_t n_merges,
                 ds4err *err);
void ds4_tok_free(ds4_tokenizer *t);

/* Fails naming the first of the seven specials the vocabulary lacks. */
int ds4_tok_require_specials(const ds4_tokenizer *t, ds4err *err);

/* Id of a special token, or -1 when the vocabulary lacks it. */
int32_t ds4_tok_special(const ds4_tokenizer *t, enum ds4_special which);

/* Whether an id is an added token (recognised in text by DS4_TOK_ADDED). */
bool ds4_tok_is_added(const ds4_tokenizer *t, int32_t id);

/* Id of the token whose string is exactly s[0..len), or -1.  When several
 * ids share a string, the highest one. */
int32_t ds4_tok_lookup(const ds4_tokenizer *t, const char *s, size_t len);

/* A growable list of token ids. */
typedef struct ds4_tokens {
    int32_t *ids;
    size_t n, cap;
} ds4_tokens;

int ds4_tokens_push(ds4_tokens *v, int32_t id, ds4err *err);
void ds4_tokens_free(ds4_tokens *v);

/* Encoding flags. */
#define DS4_TOK_ADDED 1u   /* recognise added-token strings in the text */

/* Append the ids of text[0..len) to *out.  Nothing else is added (no BOS).
 * With DS4_TOK_ADDED this is Hugging Face's
 * tokenizer.encode(text, add_special_tokens=False), the way the official
 * pipeline tokenizes a rendered chat; without it, special-token strings are
 * ordinary text. */
int ds4_tok_encode(const ds4_tokenizer *t, const char *text, size_t len, unsigned flags,
                   ds4_tokens *out, ds4err *err);

/* Append the bytes of ids[0..n) to *out.  An id outside [0, n_vocab) is a
 * DS4_E_RANGE error (nothing of that id is appended). */
int ds4_tok_decode(const ds4_tokenizer *t, const int32_t *ids, size_t n, ds4_buf *out,
                   ds4err *err);

/* The vocabulary string of a token as stored (byte-alphabet form, e.g.
 * "Ġworld"), for display.  DS4_E_RANGE for a bad id. */
int ds4_tok_text(const ds4_tokenizer *t, int32_t id, ds4_strref *out, ds4err *err);

/* A vocabulary read from a Hugging Face tokenizer.json, in the GGUF layout:
 * tokens by id, token types, merges as "left right".  Owns its strings. */
typedef struct ds4_vocab {
    uint32_t n_tokens;
    ds4_strref *tokens;
    int32_t *types;
    uint32_t n_merges;
    ds4_strref *merges;
    char *store;
} ds4_vocab;

/* Read model.vocab, model.merges and added_tokens of a tokenizer.json (plain
 * JSON: the file's bytes, or `text` of `len` bytes labelled `name`).  The vocabulary size is the
 * highest id + 1; ids without a string become "[PAD<id>]" of type UNUSED, as
 * llama.cpp's converter writes them.  Types: model.vocab entries NORMAL, added
 * tokens CONTROL when "special" is true, else USER_DEFINED. */
int ds4_hf_vocab_from_json(ds4_vocab *v, const char *path, ds4err *err);
int ds4_hf_vocab_from_text(ds4_vocab *v, const char *text, size_t len, const char *name,
                           ds4err *err);
void ds4_hf_vocab_free(ds4_vocab *v);

#endif
