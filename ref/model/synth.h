/* Synthetic DeepSeek V4 Flash models: complete DS4-layout GGUF files (base +
 * MTP) with random but numerically sane weights, so every test, golden and
 * benchmark runs without the real 81-153 GB model.
 *
 * The same options and seed always give byte-identical files on every
 * machine: values come from a counter-based integer generator seeded per
 * tensor name, normals are made from uniforms without any libm call, and
 * f32->f16 rounding is ds4ref's own. */
#ifndef DS4_SYNTH_H
#define DS4_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/model/model.h"

typedef struct ds4_synth_opts {
    const char *config;       /* "tiny", "tiny-k64", "tiny-ckpt", "tiny-spec", "fullwidth",
                                 "fulldepth" */
    bool f32;                 /* every float tensor F32 (else ds4's quant mix) */
    uint64_t seed;
    const char *vocab_from;   /* NULL, or a Hugging Face tokenizer.json[.xz] */
} ds4_synth_opts;

/* Write the base model to `path` and the MTP head to `mtp_path` (NULL: no MTP
 * file).  Both are written atomically. */
int ds4_synth_write(const ds4_synth_opts *o, const char *path, const char *mtp_path,
                    ds4err *err);

/* The MTP file name ds4ref-mkmodel uses for a base file name:
 * "x.gguf" -> "x-mtp.gguf".  Returns a malloc'd string. */
char *ds4_synth_mtp_path(const char *path);

#endif
