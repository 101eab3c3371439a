/* Writing golden streams (golden_write.h): the canonical spelling of every
 * line, whole files, and the streaming writer the golden runner uses. */
#include "ref/format/golden_write.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/hex.h"
#include "ref/text/json.h"

/* ------------------------------------------------------------ lines */

static void put_u64(ds4_buf *b, uint64_t v) {
    char s[24];
    snprintf(s, sizeof(s), "%" PRIu64, v);
    ds4_buf_puts(b, s);
}

static void put_f32(ds4_buf *b, float v) {
    char s[40];
    snprintf(s, sizeof(s), "%.9g", (double)v);
    ds4_buf_puts(b, s);
}

static void put_f64(ds4_buf *b, double v) {
    char s[40];
    snprintf(s, sizeof(s), "%.17g", v);
    ds4_buf_puts(b, s);
}

static void put_hex(ds4_buf *b, const uint8_t *p, size_t n) {
    char chunk[129];
    ds4_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i += 64) {
        size_t k = n - i < 64 ? n - i : 64;
        ds4_hex(p + i, k, chunk);
        ds4_buf_put(b, chunk, 2 * k);
    }
    ds4_buf_put(b, "\"", 1);
}

static void put_model(ds4_buf *b, const ds4_modelid *m, const ds4_modelid *mtp, bool nested) {
    ds4_buf_puts(b, "{\"file\":");
    ds4_json_put_str(b, m->file, strlen(m->file));
    ds4_buf_puts(b, ",\"size\":");
    put_u64(b, m->size);
    ds4_buf_puts(b, ",\"metadata_sha256\":");
    put_hex(b, m->metadata_sha256, 32);
    ds4_buf_puts(b, ",\"tensor_data_sha256\":");
    put_hex(b, m->tensor_data_sha256, 32);
    ds4_buf_puts(b, ",\"tensors\":[");
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        ds4_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        ds4_json_put_str(b, m->tensors[i].name, strlen(m->tensors[i].name));
        ds4_buf_puts(b, ",\"sha256\":");
        put_hex(b, m->tensors[i].sha256, 32);
        ds4_buf_puts(b, "}");
    }
    ds4_buf_puts(b, "]");
    if (!nested) {
        ds4_buf_puts(b, ",\"mtp\":");
        if (mtp) put_model(b, mtp, NULL, true);
        else ds4_buf_puts(b, "null");
    }
    ds4_buf_puts(b, "}");
}

void ds4_golden_write_header_line(ds4_buf *b, const ds4_golden *g) {
    const ds4_golden_header *h = &g->h;
    const ds4_golden_settings *s = &h->settings;
    ds4_buf_puts(b, "{\"format\":\"" DS4_GOLDEN_FORMAT "\",\"ds4ref_version\":");
    ds4_json_put_str(b, h->version, strlen(h->version));
    ds4_buf_puts(b, ",\"model\":");
    put_model(b, &h->model, h->has_mtp ? &h->mtp : NULL, false);
    ds4_buf_puts(b, ",\"settings\":{\"qat\":");
    ds4_buf_puts(b, s->qat ? "true" : "false");
    if (s->numerics[0]) {
        ds4_buf_puts(b, ",\"numerics\":");
        ds4_json_put_str(b, s->numerics, strlen(s->numerics));
    }
    ds4_buf_puts(b, ",\"ctx\":");
    put_u64(b, s->ctx);
    ds4_buf_puts(b, ",\"chunk\":");
    put_u64(b, s->chunk);
    ds4_buf_puts(b, ",\"top_k\":");
    put_u64(b, s->top_k);
    ds4_buf_puts(b, ",\"max_steps\":");
    put_u64(b, s->max_steps);
    ds4_buf_puts(b, ",\"mtp_draft\":");
    put_u64(b, s->mtp_draft);
    if (s->drafter[0]) {
        ds4_buf_puts(b, ",\"drafter\":");
        ds4_json_put_str(b, s->drafter, strlen(s->drafter));
    }
    ds4_buf_puts(b, ",\"stop_at_eos\":");
    ds4_buf_puts(b, s->stop_at_eos ? "true" : "false");
    ds4_buf_puts(b, "},\"prompt\":{\"tokens\":[");
    for (uint32_t i = 0; i < h->n_prompt; i++) {
        if (i) ds4_buf_put(b, ",", 1);
        put_u64(b, (uint64_t)h->prompt[i]);
    }
    ds4_buf_puts(b, "]");
    if (h->has_prompt_text) {
        ds4_buf_puts(b, ",\"text_hex\":");
        put_hex(b, h->prompt_text, h->n_prompt_text);
    }
    ds4_buf_puts(b, "}}\n");
}

static void put_tok_fields(ds4_buf *b, const ds4_golden_tok *t, const char *id_key) {
    ds4_buf_puts(b, id_key);
    put_u64(b, (uint64_t)t->id);
    ds4_buf_puts(b, ",\"bytes\":");
    put_hex(b, t->bytes, t->n_bytes);
    ds4_buf_puts(b, ",\"logit\":");
    put_f32(b, t->logit);
    ds4_buf_puts(b, ",\"logprob\":");
    put_f64(b, t->logprob);
}

void ds4_golden_write_step_line(ds4_buf *b, uint32_t i, const ds4_golden_step *s) {
    ds4_buf_puts(b, "{\"step\":");
    put_u64(b, i);
    put_tok_fields(b, &s->tok, ",\"token\":");
    ds4_buf_puts(b, ",\"logits_sha256\":");
    put_hex(b, s->logits_sha256, 32);
    ds4_buf_puts(b, ",\"top\":[");
    for (uint32_t k = 0; k < s->n_top; k++) {
        ds4_buf_puts(b, k ? ",{" : "{");
        put_tok_fields(b, &s->top[k], "\"id\":");
        ds4_buf_puts(b, "}");
    }
    ds4_buf_puts(b, "]}\n");
}

void ds4_golden_write_end_line(ds4_buf *b, uint32_t n_steps, ds4_stop stop) {
    ds4_buf_puts(b, "{\"end\":true,\"steps\":");
    put_u64(b, n_steps);
    ds4_buf_puts(b, ds4_stop_complete(stop) ? ",\"complete\":true,\"stop\":\""
                                            : ",\"complete\":false,\"stop\":\"");
    ds4_buf_puts(b, ds4_golden_stop_name(stop));
    ds4_buf_puts(b, "\"}\n");
}

int ds4_golden_write_text(const ds4_golden *g, ds4_buf *out, ds4err *err) {
    if (g->kind != DS4_TRACE_GOLDEN || !g->has_header)
        return ds4_err_set(err, DS4_E_ARG, "only a ds4ref golden can be written as one");
    if (!g->has_end) return ds4_err_set(err, DS4_E_ARG, "golden has no end record yet");
    char why[200];
    ds4_golden_check_end(g, g->stop, why, sizeof(why));
    if (why[0]) return ds4_err_set(err, DS4_E_ARG, "golden end: %s", why);
    ds4_golden_write_header_line(out, g);
    for (uint32_t i = 0; i < g->n_steps; i++) ds4_golden_write_step_line(out, i, &g->steps[i]);
    ds4_golden_write_end_line(out, g->n_steps, g->stop);
    return out->failed ? ds4_golden_nomem(err) : 0;
}

/* ------------------------------------------------------------ streaming */

struct ds4_golden_writer {
    ds4_golden g;
    bool to_file;
    ds4_afile f;
    bool finished;
};

int ds4_golden_writer_open(ds4_golden_writer **out, const char *path,
                           const ds4_golden_header *h, ds4err *err) {
    *out = NULL;
    ds4_golden_writer *w = calloc(1, sizeof(*w));
    if (!w) return ds4_golden_nomem(err);
    w->f.fd = -1;
    ds4_golden_init(&w->g, DS4_TRACE_GOLDEN);
    if (ds4_golden_set_header(&w->g, h, err)) {
        free(w);
        return -1;
    }
    if (path) {
        ds4_buf b = {0};
        ds4_golden_write_header_line(&b, &w->g);
        int rc = b.failed ? ds4_golden_nomem(err) : ds4_file_atomic_open(&w->f, path, err);
        if (rc == 0) {
            w->to_file = true;
            rc = ds4_file_atomic_write(&w->f, b.p, b.len, err);
            if (rc == 0) rc = ds4_file_atomic_flush(&w->f, err);
        }
        ds4_buf_free(&b);
        if (rc) {
            ds4_golden_writer_free(w);
            return -1;
        }
    }
    *out = w;
    return 0;
}

int ds4_golden_writer_step(ds4_golden_writer *w, const ds4_golden_step *st, ds4err *err) {
    if (w->finished) return ds4_err_set(err, DS4_E_ARG, "golden writer already finished");
    if (ds4_golden_push_step(&w->g, st, err)) return -1;
    if (!w->to_file) return 0;
    ds4_buf b = {0};
    ds4_golden_write_step_line(&b, w->g.n_steps - 1, &w->g.steps[w->g.n_steps - 1]);
    int rc = b.failed ? ds4_golden_nomem(err) : ds4_file_atomic_write(&w->f, b.p, b.len, err);
    if (rc == 0) rc = ds4_file_atomic_flush(&w->f, err);
    ds4_buf_free(&b);
    return rc;
}

int ds4_golden_writer_finish(ds4_golden_writer *w, ds4_stop stop, ds4err *err) {
    if (w->finished) return ds4_err_set(err, DS4_E_ARG, "golden writer already finished");
    char why[200];
    ds4_golden_check_end(&w->g, stop, why, sizeof(why));
    if (why[0]) return ds4_err_set(err, DS4_E_ARG, "golden end: %s", why);
    ds4_golden_set_end(&w->g, stop);
    w->finished = true;
    if (!w->to_file) return 0;
    ds4_buf b = {0};
    ds4_golden_write_end_line(&b, w->g.n_steps, stop);
    int rc = b.failed ? ds4_golden_nomem(err) : ds4_file_atomic_write(&w->f, b.p, b.len, err);
    ds4_buf_free(&b);
    if (rc) {
        ds4_file_atomic_abort(&w->f);
        return -1;
    }
    return ds4_file_atomic_commit(&w->f, err);
}

const ds4_golden *ds4_golden_writer_golden(const ds4_golden_writer *w) {
    return &w->g;
}

void ds4_golden_writer_free(ds4_golden_writer *w) {
    if (!w) return;
    ds4_file_atomic_abort(&w->f);
    ds4_golden_free(&w->g);
    free(w);
}
