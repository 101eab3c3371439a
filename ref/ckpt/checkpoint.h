/* A checkpoint in the published layout: config.json, the shard index and
 * the safetensors shards, opened as one tensor directory.
 *
 * DeepSeek V4's release is a folder:
 *   config.json                          the hyper-parameters
 *   model.safetensors.index.json         {"metadata": {"total_size": N},
 *                                         "weight_map": {tensor: shard, ...}}
 *   model-00001-of-000046.safetensors    the shards (safetensors.h)
 *   ...
 * ds4_checkpoint_open() takes that folder, or one .safetensors file with a
 * config.json beside it (no index: the file is the only shard).  It maps
 * every shard the index names, once, and checks that the index and the
 * shards agree both ways: every tensor the index names is in the shard it
 * names, every tensor a shard holds is named by the index, for that shard,
 * and "total_size", when given, is the sum of their bytes.  Shard names are
 * plain file names in the folder (no '/', no "." or ".."): an index cannot
 * point outside it.  config.json is parsed (strict JSON) and kept for the
 * model layer to read; this file knows nothing of DeepSeek. */
#ifndef DS4_CHECKPOINT_H
#define DS4_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/ckpt/safetensors.h"
#include "ref/text/json.h"

/* What the index says: tensor -> shard file name, sorted by tensor. */
typedef struct ds4_ckpt_index {
    size_t n;
    char **tensors, **shards;
    bool has_total;
    uint64_t total_size;
} ds4_ckpt_index;

typedef struct ds4_ckpt_entry {
    const ds4_st_tensor *t;
    size_t shard;                /* index into shards[] */
} ds4_ckpt_entry;

typedef struct ds4_ckpt {
    char *dir;                   /* the folder the files are in */
    ds4_json_doc *config;        /* config.json */
    char *config_text;           /* its bytes, config_len of them */
    size_t config_len;
    size_t n_shards;
    char **shard_names;          /* sorted */
    ds4_st_file *shards;
    size_t n_tensors;
    ds4_ckpt_entry *tensors;     /* every tensor of every shard, sorted by name */
} ds4_ckpt;

/* Parse an index (model.safetensors.index.json) from memory; `name` labels
 * the messages.  Used by ds4_checkpoint_open and by the fuzzer. */
int ds4_checkpoint_index_parse(ds4_ckpt_index *ix, const char *buf, size_t len, const char *name,
                         ds4err *err);
void ds4_checkpoint_index_free(ds4_ckpt_index *ix);

/* Open a checkpoint folder, or one shard with config.json beside it.  On
 * failure *c is left closed. */
int ds4_checkpoint_open(ds4_ckpt *c, const char *path, ds4err *err);
void ds4_checkpoint_close(ds4_ckpt *c);

/* The tensor of that name in any shard, or NULL. */
const ds4_st_tensor *ds4_checkpoint_find(const ds4_ckpt *c, const char *name);

/* config.json's root object. */
const ds4_json *ds4_checkpoint_config(const ds4_ckpt *c);

#endif
