/* Small helpers shared by the unit tests: whole-file reads, the location of
 * the shared fixtures and of the shipped official oracle, scratch
 * directories, synthetic models, token ids. */
#ifndef DS4_TESTUTIL_H
#define DS4_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ref/model/model.h"

/* Read a whole file into a malloc'd buffer (caller frees).  0 on success. */
int tu_read_file(const char *path, uint8_t **buf, size_t *len);

/* malloc'd "../shared/<rel>" (tests run from the repository root) if that
 * path exists; otherwise prints why to stderr and returns NULL, so the caller
 * can skip(). */
char *tu_shared(const char *rel);

/* malloc'd "<build>/official/<rel>": the official-model oracle that the
 * build decompressed from vectors/official (vectors/official/README.md).
 * It is part of the repository, so a test must fail, not skip, without it:
 * NULL (after saying why on stderr) tells the caller to fail. */
char *tu_official(const char *rel);

/* A fresh directory under $TMPDIR (or /tmp); malloc'd path, NULL on failure. */
char *tu_tmpdir(void);

/* malloc'd "dir/name". */
char *tu_path(const char *dir, const char *name);

/* Number of entries in dir besides "." and "..", -1 if it cannot be read. */
int tu_count_entries(const char *dir);

/* Remove dir and the plain files directly in it, then free the path. */
void tu_rmdir(char *dir);

/* A synthetic model (ref/model/synth.h, ds4 quant types) written to a scratch
 * directory and opened, with its MTP head loaded when asked for. */
typedef struct tu_model {
    char *dir, *path, *mtp_path;   /* mtp_path: NULL without MTP */
    ds4_model m;
} tu_model;

/* NULL on failure, with the reason in *err. */
tu_model *tu_model_new(const char *config, uint64_t seed, bool mtp, ds4err *err);
void tu_model_free(tu_model *t);

/* The config.json of the release's layout (model/hfconfig.h) that reads
 * back as configuration g, into text (8 KiB is enough for a tiny model). */
void tu_hf_config(const ds4_config *g, char *text, size_t cap);

/* Says why the test that calls it next skips: "skipping: <reason>" on
 * standard output, where cmocka writes its own lines, so tests/run_tests.sh
 * pairs the reason with the test's "[  SKIPPED ]" line in its closing
 * summary.  Every skip() says why, through this or a "skipping: " line of
 * its own. */
void tu_skipping(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* splitmix64: the tests' one generator of pseudo-random numbers (each test
 * file keeps its own state and seed, so its inputs do not depend on the
 * others), independent of the library's RNG. */
uint64_t tu_splitmix64(uint64_t *state);

/* Uniform in [a, b), from the top 53 bits of tu_splitmix64(state). */
double tu_uniform(uint64_t *state, double a, double b);

/* n pseudo-random token ids below vocab, a fixed sequence per seed
 * (malloc'd; an LCG, so the tests do not depend on the library's RNG). */
int32_t *tu_random_tokens(uint32_t n, uint32_t vocab, uint64_t seed);

#endif
