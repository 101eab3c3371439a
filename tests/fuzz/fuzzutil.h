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

#endif
