/* The hyper-parameters as one table: a row per plain scalar of ds4_config,
 * with its GGUF key (after "deepseek4."), its config.json key, whether each
 * format may leave it out and the value it then has, and the range the
 * forward pass allows when that is a plain range.
 *
 * The GGUF reader (model.c), config.json's reader and writer (hfconfig.c)
 * and the synthetic generator (synth.c) walk this table, so a
 * hyper-parameter is stated once.  What has other semantics stays code where
 * it is read: the per-layer arrays (compress ratios, SwiGLU clamps), whether
 * YaRN is on, value_length == key_length, the routing keys that must have
 * DeepSeek V4's value (gating function, groups, scoring), and the relations
 * between fields (ds4_model_config_validate). */
#ifndef DS4_HPARAMS_H
#define DS4_HPARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ref/model/model.h"

enum ds4_hp_kind {
    DS4_HP_U32,      /* a count, a uint32_t of ds4_config */
    DS4_HP_F32,      /* a float of ds4_config */
    DS4_HP_ONE       /* a count DeepSeek V4 fixes at 1: checked, written, not stored */
};

/* Where a row is read from: the plain rows from the top level, the YaRN
 * rows (GGUF's rope.scaling.*, config.json's "rope_scaling" object) only
 * when the file turns YaRN on, the DSpark rows only when the file has a
 * DSpark drafter (its first row's key is there); otherwise they keep their
 * defaults. */
enum ds4_hp_group { DS4_HP_PLAIN, DS4_HP_YARN, DS4_HP_DSPARK };

typedef struct ds4_hparam {
    uint32_t offset;         /* of the field in ds4_config (DS4_HP_ONE: unused) */
    uint8_t kind;            /* enum ds4_hp_kind */
    uint8_t group;           /* enum ds4_hp_group */
    const char *gguf;        /* the GGUF key after "deepseek4." */
    const char *json;        /* the config.json key (in "rope_scaling" for YaRN rows) */
    bool gguf_optional;      /* a GGUF may leave it out: then it is `dflt` */
    bool json_optional;      /* a config.json may leave it out: then it is `dflt` */
    double dflt;             /* the value before it is read */
    uint32_t min, max;       /* the plain range validation checks; max 0: none here */
    const char *one_why;     /* DS4_HP_ONE: why, in the GGUF reader's refusal */
} ds4_hparam;

extern const ds4_hparam ds4_hparams[];
extern const uint32_t ds4_hparams_n;

/* The row of the field at `offset` of ds4_config; NULL when none. */
const ds4_hparam *ds4_hparams_find(uint32_t offset);

/* Row h's value in c, as a double (exact for every u32 and f32; 1 for
 * DS4_HP_ONE). */
double ds4_hparams_get(const ds4_hparam *h, const ds4_config *c);

/* Row h's field in c, a uint32_t or a float as its kind says (NULL for
 * DS4_HP_ONE), for a reader to fill. */
void *ds4_hparams_field(const ds4_hparam *h, ds4_config *c);

/* "deepseek4." and row h's GGUF key, in buf. */
const char *ds4_hparams_gguf_key(const ds4_hparam *h, char *buf, size_t cap);

/* Every row's default into c (before a reader reads what the file has). */
void ds4_hparams_defaults(ds4_config *c);

/* Whether row h's value in c is within [min, max] (true when max is 0). */
bool ds4_hparams_in_range(const ds4_hparam *h, const ds4_config *c);

#endif
