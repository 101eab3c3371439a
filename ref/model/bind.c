/* The walk over the layout table for every format (bind.h). */
#include "ref/model/bind.h"

#include <stdio.h>
#include <stdlib.h>

static int bind_specs(const ds4_bind_format *f, const ds4_config *c, const ds4_tensor_spec *specs,
                      uint32_t n, const char *prefix, void *base, ds4err *err) {
    for (uint32_t i = 0; i < n; i++)
        if (f->bind(f->ctx, c, 0, &specs[i], prefix, base, err)) return -1;
    return 0;
}

/* The specs of layout.c that apply to a layer of this ratio and routing.
 * A score-routed layer without its router bias selects on the plain
 * scores (a bias of zeros), unless the bias is required (the MTP block). */
static int bind_layer(const ds4_bind_format *f, const ds4_config *c, ds4_layer *L, uint32_t ratio,
                      bool hash, const char *prefix, bool bias_required, ds4err *err) {
    L->ratio = ratio;
    L->hash = hash;
    for (uint32_t i = 0; i < ds4_layout_n_layer; i++) {
        const ds4_tensor_spec *s = &ds4_layout_layer[i];
        if (ds4_layout_applies(s, ratio, hash) && f->bind(f->ctx, c, ratio, s, prefix, L, err))
            return -1;
    }
    if (hash || L->exp_bias.v) return 0;
    if (bias_required) {
        char name[256];
        for (uint32_t i = 0; i < ds4_layout_n_layer; i++)
            if (ds4_layout_layer[i].offset == offsetof(ds4_layer, exp_bias))
                f->name(f->ctx, &ds4_layout_layer[i], prefix, name, sizeof(name));
        return ds4_err_set(err, DS4_E_MODEL, "%s: required tensor is missing: %s", f->path, name);
    }
    L->exp_bias.v = calloc(c->n_expert, sizeof(float));
    if (!L->exp_bias.v) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    L->exp_bias.n = c->n_expert;
    return 0;
}

int ds4_bind_dspark(const ds4_bind_format *f, const ds4_config *c, ds4_dspark *d,
                    const char *stem, bool bare_heads, ds4err *err) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "%s0.", stem);
    if (bind_specs(f, c, ds4_layout_dspark_in, ds4_layout_n_dspark_in, bare_heads ? "" : prefix,
                   d, err))
        return -1;
    for (uint32_t s = 0; s < c->dspark_stages; s++) {
        snprintf(prefix, sizeof(prefix), "%s%u.", stem, s);
        d->stage[s].clamp_exp = c->clamp_exp[c->n_layer];
        d->stage[s].clamp_shexp = c->clamp_shexp[c->n_layer];
        if (bind_layer(f, c, &d->stage[s], 0, false, prefix, true, err)) return -1;
    }
    return bind_specs(f, c, ds4_layout_dspark_out, ds4_layout_n_dspark_out,
                      bare_heads ? "" : prefix, d, err);
}

int ds4_bind_model(const ds4_bind_format *f, ds4_model *m, ds4err *err) {
    const ds4_config *c = &m->cfg;
    if (bind_specs(f, c, ds4_layout_global, ds4_layout_n_global, "", m, err)) return -1;
    m->layers = calloc(c->n_layer, sizeof(ds4_layer));
    if (!m->layers) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    for (uint32_t l = 0; l < c->n_layer; l++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "%s%u.", f->layer_stem, l);
        ds4_layer *L = &m->layers[l];
        L->clamp_exp = c->clamp_exp[l];
        L->clamp_shexp = c->clamp_shexp[l];
        if (bind_layer(f, c, L, c->ratio[l], l < c->n_hash_layer, prefix, false, err)) return -1;
    }
    if (!c->dspark_stages) return 0;
    if (!(m->dspark = calloc(1, sizeof(*m->dspark))))
        return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    return ds4_bind_dspark(f, c, m->dspark, "mtp.", false, err);
}

int ds4_bind_mtp(const ds4_bind_format *f, const ds4_config *c, ds4_mtp *mtp, ds4err *err) {
    if (bind_specs(f, c, ds4_layout_mtp, ds4_layout_n_mtp, "mtp.0.", mtp, err)) return -1;
    /* Entry n_layer of the clamps is the MTP block's. */
    mtp->block.clamp_exp = c->clamp_exp[c->n_layer];
    mtp->block.clamp_shexp = c->clamp_shexp[c->n_layer];
    return bind_layer(f, c, &mtp->block, 0, false, "mtp.0.", true, err);
}

/* The vectors and tables specs copied into the struct at base. */
static void free_copies(const ds4_tensor_spec *specs, uint32_t n, void *base) {
    for (uint32_t i = 0; i < n; i++) {
        void *field = (char *)base + specs[i].offset;
        if (specs[i].tclass == DS4_TC_VEC) {
            free(((ds4_vec *)field)->v);
            ((ds4_vec *)field)->v = NULL;
        } else if (specs[i].tclass == DS4_TC_I32) {
            free(*(int32_t **)field);
            *(int32_t **)field = NULL;
        }
    }
}

/* A layer's copies, and the arrays of a checkpoint's experts (ds4_mat.parts). */
static void free_layer(ds4_layer *L) {
    free_copies(ds4_layout_layer, ds4_layout_n_layer, L);
    free((void *)L->gate_exps.parts);
    free((void *)L->up_exps.parts);
    free((void *)L->down_exps.parts);
    L->gate_exps.parts = L->up_exps.parts = L->down_exps.parts = NULL;
}

void ds4_bind_free_dspark(ds4_dspark *d) {
    free_copies(ds4_layout_dspark_in, ds4_layout_n_dspark_in, d);
    free_copies(ds4_layout_dspark_out, ds4_layout_n_dspark_out, d);
    for (uint32_t s = 0; s < DS4_MAX_DSPARK_STAGE; s++) free_layer(&d->stage[s]);
}

void ds4_bind_free_model(ds4_model *m) {
    /* A drafter of its own file (ds4_model_load_dspark) is model.c's to free. */
    if (m->dspark && !m->dspark->file.map) {
        ds4_bind_free_dspark(m->dspark);
        free(m->dspark);
        m->dspark = NULL;
    }
    for (uint32_t l = 0; m->layers && l < m->cfg.n_layer; l++) free_layer(&m->layers[l]);
    free(m->layers);
    m->layers = NULL;
    free_copies(ds4_layout_global, ds4_layout_n_global, m);
}

void ds4_bind_free_mtp(ds4_mtp *mtp) {
    free_copies(ds4_layout_mtp, ds4_layout_n_mtp, mtp);
    free_layer(&mtp->block);
}
