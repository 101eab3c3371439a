/* Helpers shared by the fuzz targets and their seed generator. */
#ifndef DS4_FUZZUTIL_H
#define DS4_FUZZUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bytes of the synthetic tiny model (ds4_synth_write, seed 1, the ds4
 * quant mix unless f32), written to a temporary file and read back.  Exits
 * the process with a message on failure: a fuzzer without its base model
 * has nothing to do. */
void fz_tiny_model(bool f32, uint8_t **buf, size_t *len);
/* The same for another synthetic configuration (ref/model/synth.c). */
void fz_synth_model(const char *config, bool f32, uint8_t **buf, size_t *len);

/* The release folder of the tiny-ckpt model (ds4ref-mkmodel --config
 * tiny-ckpt --format hf: FP8 and FP4 with their scales, two shards, the
 * index, config.json, tokenizer.json) written into a new temporary folder,
 * whose malloc'd path it returns.  Exits the process with a message on
 * failure. */
char *fz_tiny_checkpoint(void);

/* Remove what fz_tiny_checkpoint made: the folder's files, the folder and
 * the temporary one around it. */
void fz_remove_checkpoint(const char *dir);

/* An invariant of the code under test: abort() (a crash libFuzzer reports,
 * with the input that caused it) with a message when it does not hold. */
void fz_check(bool ok, const char *what);

/* Little-endian reads for interpreting fuzz input as structured edits. */
uint32_t fz_le32(const uint8_t *p);

/* The tiny-dspark model split as llama.cpp ships it (ds4_dflash_write_split):
 * the trunk's bytes and the drafter file's.  Exits on failure. */
void fz_dspark_split(uint8_t **trunk, size_t *trunk_len, uint8_t **draft, size_t *draft_len);

/* A list of edits applied to a copy of base (base_len bytes, the first
 * header_len of them metadata and tensor directory) in work; returns the
 * edited length.
 *   record = u32 w, then operands;  kind = w >> 30, off = w & 0x3fffffff
 *     kind 0: n = next byte % 16; overwrite n bytes at off % header size
 *     kind 1: the same anywhere in the file
 *     kind 2: write the next byte's pick of interesting u64 values
 *             (0, 1, -1, 2^31, 2^32, 2^63, ...) little-endian at off % header
 *     kind 3: truncate the file to off % (size + 1) */
size_t fz_edit(const uint8_t *base, size_t base_len, uint64_t header_len, uint8_t *work,
               const uint8_t *ed, size_t n);

/* fuzz_shard's run: its cells (the last n/a) and its description, which
 * the seeds' shard files are of. */
#define FZ_SHARD_CELLS 3
#define FZ_SHARD_DESC "ds4ref-conform run, fuzz_shard\n"

#endif
