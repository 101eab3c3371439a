/* The scripted drafter (script_drafter.h). */
#include "script_drafter.h"

#include <stdlib.h>
#include <string.h>

typedef struct script_row {
    int32_t *stream;
    uint32_t n;
    uint8_t *err_depth;
    uint32_t n_err;
    uint64_t calls;        /* proposals made so far */
} script_row;

typedef struct script_drafter {
    ds4_drafter base;
    uint32_t n_vocab;
    script_row *rows;
} script_drafter;

/* The script does not depend on what was committed: a wrong guess is simply
 * rejected by the verifier. */
static int script_commit(ds4_drafter *d, uint32_t row, uint32_t pos, const int32_t *ids,
                         const float *hc, uint32_t n, ds4err *err) {
    return 0;
}

static int script_propose(ds4_drafter *d, ds4_draft_req *reqs, uint32_t n_reqs,
                          const ds4_draft_mode *mode, ds4err *err) {
    script_drafter *sd = (script_drafter *)d;
    for (uint32_t i = 0; i < n_reqs; i++) {
        ds4_draft_req *q = &reqs[i];
        if (q->row >= d->n_rows)
            return ds4_err_set(err, DS4_E_ARG, "draft request for row %u of a %u-row drafter", q->row,
                              d->n_rows);
        script_row *r = &sd->rows[q->row];
        uint32_t wrong = r->n_err ? r->err_depth[r->calls % r->n_err] : 0;
        r->calls++;
        q->n_out = 0;
        q->q_onehot = true;
        for (uint32_t k = 1; k <= q->n && (uint64_t)q->pos + k < r->n; k++) {
            int32_t t = r->stream[q->pos + k];
            if (k == wrong) t = (int32_t)(((uint32_t)t + 1) % sd->n_vocab);
            q->drafts[q->n_out++] = t;
            if (t == mode->eos) break;
        }
    }
    return 0;
}

static void script_destroy(ds4_drafter *d) {
    script_drafter *sd = (script_drafter *)d;
    for (uint32_t i = 0; sd->rows && i < d->n_rows; i++) {
        free(sd->rows[i].stream);
        free(sd->rows[i].err_depth);
    }
    free(sd->rows);
    free(sd);
}

int script_drafter_new(ds4_drafter **out, const drafter_script *rows, uint32_t n_rows,
                           uint32_t n_vocab, ds4err *err) {
    *out = NULL;
    script_drafter *sd = calloc(1, sizeof(*sd));
    if (!sd) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    sd->base = (ds4_drafter){n_rows, "script", DS4_DRAFT_IN_NONE, script_commit, script_propose, script_destroy};
    sd->n_vocab = n_vocab;
    sd->rows = calloc(n_rows ? n_rows : 1, sizeof(script_row));
    if (!sd->rows) goto oom;
    for (uint32_t i = 0; i < n_rows; i++) {
        script_row *r = &sd->rows[i];
        r->n = rows[i].n;
        r->n_err = rows[i].err_depth ? rows[i].n_err : 0;
        r->stream = malloc(sizeof(int32_t) * (r->n ? r->n : 1));
        r->err_depth = malloc(r->n_err ? r->n_err : 1);
        if (!r->stream || !r->err_depth) goto oom;
        memcpy(r->stream, rows[i].stream, sizeof(int32_t) * r->n);
        if (r->n_err) memcpy(r->err_depth, rows[i].err_depth, r->n_err);
    }
    *out = &sd->base;
    return 0;
oom:
    script_destroy(&sd->base);
    return ds4_err_set(err, DS4_E_NOMEM, "out of memory for a %u-row scripted drafter", n_rows);
}
