/* Binding a model's tensors: the walk over the layout table (layout.c),
 * written once for every format.
 *
 * Which specs a file must have (the globals, each layer's by its compress
 * ratio and routing, the MTP head and its block), the clamps each layer
 * takes from the configuration, the zero router bias of a score-routed
 * layer without one, the MTP block's required bias, and freeing what was
 * copied are the same for a GGUF (model.c) and the official checkpoint
 * (hfbind.c).  What differs, finding one tensor and checking and copying it,
 * is the format's `bind`; what a tensor is called there, its `name`. */
#ifndef DS4_BIND_H
#define DS4_BIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/model/model.h"

typedef struct ds4_bind_format {
    const char *path;          /* the file or folder, in messages */
    const char *layer_stem;    /* layer N's tensors are under STEM "N." ("blk.", "layers.") */
    const void *ctx;           /* the format's own: its file */
    /* Bind spec s under `prefix`, for a layer of compress ratio `ratio`, into
     * the struct at `base`; an optional spec the file lacks is left unset. */
    int (*bind)(const void *ctx, const ds4_config *c, uint32_t ratio, const ds4_tensor_spec *s,
                const char *prefix, void *base, ds4err *err);
    /* The file's name of spec s under `prefix`, into out. */
    void (*name)(const void *ctx, const ds4_tensor_spec *s, const char *prefix, char *out,
                 size_t cap);
} ds4_bind_format;

/* The global tensors, every layer of m (m->cfg read) and, with DSpark, its
 * drafter (m->dspark), m->layers allocated.  On failure, what was bound
 * stays for ds4_bind_free_model. */
int ds4_bind_model(const ds4_bind_format *f, ds4_model *m, ds4err *err);

/* The MTP head (tensors mtp.0.*) and its block, a window-only score-routed
 * layer whose router bias is required, for configuration c.  On failure,
 * what was bound stays for ds4_bind_free_mtp. */
int ds4_bind_mtp(const ds4_bind_format *f, const ds4_config *c, ds4_mtp *mtp, ds4err *err);

/* A DSpark drafter d for configuration c: stage s's tensors under STEM
 * "s." (a model's own "mtp.", llama.cpp's drafter file "blk."), stage 0's
 * adapter and the last stage's heads under its stage's prefix, or with
 * bare_heads under none (llama.cpp's names: the specs' alt).  On failure,
 * what was bound stays for ds4_bind_free_dspark. */
int ds4_bind_dspark(const ds4_bind_format *f, const ds4_config *c, ds4_dspark *d,
                    const char *stem, bool bare_heads, ds4err *err);

/* What ds4_bind_dspark copied or allocated (not the struct or its file). */
void ds4_bind_free_dspark(ds4_dspark *d);

/* What ds4_bind_model copied or allocated, m->layers included. */
void ds4_bind_free_model(ds4_model *m);

/* What ds4_bind_mtp copied or allocated (not the struct or its file). */
void ds4_bind_free_mtp(ds4_mtp *mtp);

#endif
