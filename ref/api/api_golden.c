/* Reading goldens through the public API (ds4ref_golden_read,
 * include/ds4ref.h): the strict reader of golden_read.c, its result converted to
 * the public structs.  Nothing is parsed or checked here. */
#include "ds4ref.h"

#include <stdlib.h>
#include <string.h>

#include "ref/api/apierr.h"
#include "ref/format/golden_read.h"

/* What ds4ref_golden_read hands out.  The public struct comes first, so the
 * pointer the caller gets back is the box itself.  Strings, token bytes and
 * the prompt stay in the internal golden the box owns (the public pointers
 * refer to them); steps and alternatives, whose layout differs, are copied
 * into arrays of the public types. */
typedef struct golden_box {
    ds4ref_golden pub;
    ds4_golden g;
    ds4ref_golden_step *steps;
    ds4ref_logprob *top;       /* every step's alternatives, one after another */
} golden_box;

static void model_out(const ds4_modelid *in, ds4ref_golden_model *out) {
    out->file = in->file;
    out->size = in->size;
    memcpy(out->metadata_sha256, in->metadata_sha256, 32);
    memcpy(out->tensor_data_sha256, in->tensor_data_sha256, 32);
}

/* The public view of b->g; fails only for memory. */
static int convert(golden_box *b) {
    const ds4_golden *g = &b->g;
    size_t n_top = 0;
    for (uint32_t i = 0; i < g->n_steps; i++) n_top += g->steps[i].n_top;
    /* calloc(0) may return NULL: ask for at least one element. */
    b->steps = calloc(g->n_steps ? g->n_steps : 1, sizeof(*b->steps));
    b->top = calloc(n_top ? n_top : 1, sizeof(*b->top));
    if (!b->steps || !b->top) return -1;
    ds4ref_golden *p = &b->pub;
    p->version = g->h.version;
    model_out(&g->h.model, &p->model);
    p->has_mtp = g->h.has_mtp;
    if (g->h.has_mtp) model_out(&g->h.mtp, &p->mtp);
    p->qat = g->h.settings.qat;
    p->ctx = g->h.settings.ctx;
    p->chunk = g->h.settings.chunk;
    p->top_k = g->h.settings.top_k;
    p->max_steps = g->h.settings.max_steps;
    p->mtp_draft = g->h.settings.mtp_draft;
    p->stop_at_eos = g->h.settings.stop_at_eos;
    p->numerics = g->h.settings.numerics[0] ? g->h.settings.numerics : "official";
    p->n_prompt = g->h.n_prompt;
    p->prompt = g->h.prompt;
    p->prompt_text = g->h.has_prompt_text ? g->h.prompt_text : NULL;
    p->n_prompt_text = g->h.has_prompt_text ? g->h.n_prompt_text : 0;
    ds4ref_logprob *top = b->top;
    for (uint32_t i = 0; i < g->n_steps; i++) {
        const ds4_golden_step *in = &g->steps[i];
        ds4ref_golden_step *out = &b->steps[i];
        out->id = in->tok.id;
        out->logit = in->tok.logit;
        out->logprob = in->tok.logprob;
        out->bytes = in->tok.bytes;
        out->n_bytes = in->tok.n_bytes;
        memcpy(out->logits_sha256, in->logits_sha256, 32);
        out->n_top = in->n_top;
        out->top = top;
        for (uint32_t k = 0; k < in->n_top; k++)
            *top++ = (ds4ref_logprob){in->top[k].id, in->top[k].logit, in->top[k].logprob};
    }
    p->n_steps = g->n_steps;
    p->steps = b->steps;
    p->complete = ds4_stop_complete(g->stop);
    p->stop = ds4_golden_stop_name(g->stop);
    return 0;
}

int ds4ref_golden_read(const char *path, ds4ref_golden **out, ds4ref_error *err) {
    *out = NULL;
    if (!path) return api_fail_msg(err, DS4REF_E_ARG, "ds4ref_golden_read: no path");
    golden_box *b = calloc(1, sizeof(*b));
    if (!b) return api_fail_msg(err, DS4REF_E_NOMEM, "out of memory");
    ds4err e = {0};
    if (ds4_golden_read(path, &b->g, &e)) {
        free(b);
        return api_fail(err, &e);
    }
    if (convert(b)) {
        ds4ref_golden_free(&b->pub);
        ds4_err_set(&e, DS4_E_NOMEM, "%s: out of memory", path);
        return api_fail(err, &e);
    }
    *out = &b->pub;
    api_ok(err);
    return 0;
}

void ds4ref_golden_free(ds4ref_golden *g) {
    if (!g) return;
    golden_box *b = (golden_box *)g;
    ds4_golden_free(&b->g);
    free(b->steps);
    free(b->top);
    free(b);
}
