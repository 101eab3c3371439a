/* A tokenizer.json for the tests, plain or xz-compressed (../shared keeps
 * DeepSeek's as .xz).  The library reads plain JSON only, since it starts
 * no process; the tests and fuzzers run `xz -dc` themselves. */
#ifndef DS4_TESTS_XZVOCAB_H
#define DS4_TESTS_XZVOCAB_H

#include "base/err.h"
#include "ref/text/tokenizer.h"

/* ds4_hf_vocab_from_json, with a path ending in ".xz" decompressed first;
 * an error names the path (and says when xz could not run). */
int xz_hf_vocab(ds4_vocab *v, const char *path, ds4err *err);

#endif
