#include "ref/model/numerics.h"

#include "ref/model/hfbind.h"

#include <stdio.h>
#include <string.h>

#include "quant/actround.h"
#include "quant/types.h"

/* The members first (N_MEMBERS of them, in canonical order), then the
 * names of sets. */
enum { N_MEMBERS = 4 };
static const struct {
    const char *name;
    uint32_t set;
} names[] = {
    {"ggml-act", DS4_NUMERICS_GGML_ACT},
    {"ds4-act", DS4_NUMERICS_DS4_ACT},
    {"f16-kv", DS4_NUMERICS_F16_KV},
    {"jitter", DS4_NUMERICS_JITTER},
    {"ds4", DS4_NUMERICS_DS4_ACT | DS4_NUMERICS_F16_KV},
    {"official", 0},
};

int ds4_numerics_parse(const char *name, uint32_t *set, ds4err *err) {
    *set = 0;
    for (const char *p = name ? name : ""; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        size_t i = 0;
        while (i < sizeof(names) / sizeof(names[0]) &&
               (strlen(names[i].name) != n || memcmp(names[i].name, p, n)))
            i++;
        if (i == sizeof(names) / sizeof(names[0]))
            return ds4_err_set(err, DS4_E_ARG, "numerics \"%.*s\": expected official, ggml-act, "
                              "ds4-act, f16-kv, jitter or ds4, or a comma list of them", (int)n, p);
        *set |= names[i].set;
        p += n + (end != NULL);
    }
    if ((*set & DS4_NUMERICS_GGML_ACT) && (*set & DS4_NUMERICS_DS4_ACT))
        return ds4_err_set(err, DS4_E_ARG, "numerics \"%s\": ggml-act and ds4-act both round the "
                          "products' inputs: choose one", name);
    return 0;
}

void ds4_numerics_name(uint32_t set, char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < N_MEMBERS; i++)
        if (set & names[i].set && used < cap)
            used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", names[i].name);
    if (!used) snprintf(out, cap, "official");
}

/* The input rounding of a product with a weight of this type: its row of
 * the type table says what each engine does. */
static uint8_t act_for(uint32_t set, uint32_t type) {
    const ds4_type_info *t = ds4_types_info(type);
    if (!t) return DS4_ACT_NONE;
    if (set & DS4_NUMERICS_GGML_ACT) return t->act_ggml;
    if (set & DS4_NUMERICS_DS4_ACT) return t->act_ds4;
    return DS4_ACT_NONE;
}

/* Does spec s of the struct at base hold an FP8 or FP4 linear of the
 * official numerics (wo_a aside)? */
static ds4_mat *official_linear(const ds4_tensor_spec *s, void *base) {
    if (s->tclass != DS4_TC_MAT || !strcmp(s->name, "attn_output_a.weight")) return NULL;
    ds4_mat *m = (ds4_mat *)((char *)base + s->offset);
    if (!m->data || (m->type != DS4_TYPE_FP8_B128 && m->type != DS4_TYPE_FP4_B32)) return NULL;
    return m;
}

static void apply_specs(const ds4_tensor_spec *specs, uint32_t n, void *base, uint32_t set,
                        bool qat) {
    for (uint32_t i = 0; i < n; i++) {
        if (specs[i].tclass != DS4_TC_MAT) continue;
        ds4_mat *m = (ds4_mat *)((char *)base + specs[i].offset);
        if (!m->data) continue;
        const uint8_t jitter = set & DS4_NUMERICS_JITTER ? DS4_OUT_JITTER : DS4_OUT_NONE;
        if (official_linear(&specs[i], base)) {
            m->act = qat ? DS4_ACT_FP8_B128 : DS4_ACT_NONE;
            m->out = (uint8_t)((qat ? DS4_OUT_BF16 : DS4_OUT_NONE) | jitter);
        } else {
            m->act = act_for(set, m->type);
            m->out = jitter;
        }
    }
}

void ds4_numerics_apply(ds4_model *m, uint32_t set, bool qat) {
    apply_specs(ds4_layout_global, ds4_layout_n_global, m, set, qat);
    for (uint32_t l = 0; l < m->cfg.n_layer; l++)
        apply_specs(ds4_layout_layer, ds4_layout_n_layer, &m->layers[l], set, qat);
    if (m->mtp) {
        apply_specs(ds4_layout_mtp, ds4_layout_n_mtp, m->mtp, set, qat);
        apply_specs(ds4_layout_layer, ds4_layout_n_layer, &m->mtp->block, set, qat);
    }
    if (m->dspark) {
        apply_specs(ds4_layout_dspark_in, ds4_layout_n_dspark_in, m->dspark, set, qat);
        apply_specs(ds4_layout_dspark_out, ds4_layout_n_dspark_out, m->dspark, set, qat);
        for (uint32_t s = 0; s < m->cfg.dspark_stages; s++)
            apply_specs(ds4_layout_layer, ds4_layout_n_layer, &m->dspark->stage[s], set, qat);
    }
}

/* Every official linear of specs at base quantizes whole blocks of 128;
 * `where` names the block in the message. */
static int check_linears(const ds4_tensor_spec *specs, uint32_t n, void *base, const char *path,
                         const char *where, ds4err *err) {
    for (uint32_t i = 0; i < n; i++) {
        const ds4_mat *m = official_linear(&specs[i], base);
        if (!m || m->cols % 128 == 0) continue;
        /* The release's name, expert 0 for the experts' tensors. */
        char name[160];
        const char *rn = ds4_hfbind_release_name(specs[i].name);
        snprintf(name, sizeof(name), rn ? rn : specs[i].name, 0u);
        return ds4_err_set(err, DS4_E_UNSUPPORTED,
                           "%s: %s%s has an input of %llu, not whole blocks of 128: the "
                           "official FP8 activations (QAT on) cannot quantize it; run it "
                           "with --qat off", path, where, name, (unsigned long long)m->cols);
    }
    return 0;
}

int ds4_numerics_check_official(ds4_model *m, const char *path, ds4err *err) {
    char where[32];
    if (check_linears(ds4_layout_global, ds4_layout_n_global, m, path, "", err)) return -1;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        snprintf(where, sizeof(where), "layers.%u.", l);
        if (check_linears(ds4_layout_layer, ds4_layout_n_layer, &m->layers[l], path, where, err))
            return -1;
    }
    if (m->dspark) {
        if (check_linears(ds4_layout_dspark_in, ds4_layout_n_dspark_in, m->dspark, path, "mtp.0.",
                          err))
            return -1;
        for (uint32_t s = 0; s < m->cfg.dspark_stages; s++) {
            snprintf(where, sizeof(where), "mtp.%u.", s);
            if (check_linears(ds4_layout_layer, ds4_layout_n_layer, &m->dspark->stage[s], path,
                              where, err))
                return -1;
        }
    }
    if (!m->mtp) return 0;
    if (check_linears(ds4_layout_mtp, ds4_layout_n_mtp, m->mtp, path, "mtp.0.", err)) return -1;
    return check_linears(ds4_layout_layer, ds4_layout_n_layer, &m->mtp->block, path, "mtp.0.", err);
}
