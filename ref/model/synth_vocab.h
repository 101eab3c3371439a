/* The tokenizer vocabulary a synthetic model carries, in the GGUF layout:
 * tokens by id, their types, and the merges as "left right".
 *
 * Either ds4ref's own tiny vocabulary -- the 256 byte tokens of the
 * byte-level alphabet, ds4's 7 special tokens, then BPE merges learned
 * greedily from a fixed corpus of a few sentences (the most frequent
 * adjacent pair first, ties to the smallest pair string), then filler tokens
 * up to the size asked for -- so that synthetic models tokenize real text
 * with real merges; or the real DeepSeek vocabulary read from a Hugging Face
 * tokenizer.json. */
#ifndef DS4_SYNTH_VOCAB_H
#define DS4_SYNTH_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct ds4_synth_vocab {
    char **tok;        /* [n] */
    size_t *tok_len;   /* [n], NULL: NUL-terminated strings */
    int32_t *type;     /* [n] */
    char **merge;      /* [n_merge] "left right" */
    size_t *merge_len;
    uint32_t n, n_merge;
} ds4_synth_vocab;

/* The tiny vocabulary of n_vocab tokens (n_vocab > 263). */
int ds4_synth_vocab_tiny(ds4_synth_vocab *v, uint32_t n_vocab, ds4err *err);

/* A tokenizer.json's vocabulary, plus any of ds4's seven special tokens it
 * lacks, appended as control tokens. */
int ds4_synth_vocab_hf(ds4_synth_vocab *v, const char *path, ds4err *err);

void ds4_synth_vocab_free(ds4_synth_vocab *v);

#endif
