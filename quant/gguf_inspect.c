/* Looking inside a GGUF file (gguf_inspect.h): the listing and the f32
 * stream of `ds4ref-gguf`.  Parsing and validation are gguf.c's, the
 * dequantization formats.c's; this file only writes what they give. */
#include "quant/gguf_inspect.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/reslimit.h"
#include "base/repr.h"
#include "base/utf8.h"
#include "quant/types.h"
#include "quant/gguf.h"

enum { STR_SHOWN = 160, ARR_HEAD = 8, ARR_TAIL = 2, ARR_SHOWN_NESTED = 4 };

/* The name a write failure gives the stream. */
static const char *out_name(FILE *out) { return out == stdout ? "stdout" : "output"; }

static int write_failed(FILE *out, ds4err *err) {
    return ds4_err_set(err, DS4_E_IO, "%s: write failed: %s", out_name(out), strerror(errno));
}

/* ========================================================================
 * Printing values.
 * ======================================================================== */

/* Length of the well-formed UTF-8 sequence at s (utf8.h), 0 if there is
 * none or it is a C1 control (U+0080..U+009F), which acts on some terminals
 * and is escaped too. */
static size_t printable_utf8_len(const unsigned char *s, size_t n) {
    uint32_t cp;
    size_t len = ds4_utf8_next(s, n, &cp);
    return len > 1 && cp >= 0xa0 ? len : 0;
}

/* Bytes as a string that is safe on a terminal: printable ASCII and valid
 * UTF-8 as they are, everything else escaped; long strings cut.  Returns the
 * number of columns printed (one per code point). */
static int print_escaped(FILE *f, const char *s, uint64_t n, int quoted) {
    const unsigned char *u = (const unsigned char *)s;
    uint64_t shown = n > STR_SHOWN ? STR_SHOWN : n;
    int cols = 0;
    if (quoted) cols += fprintf(f, "\"");
    for (uint64_t i = 0; i < shown;) {
        unsigned char c = u[i];
        size_t len;
        if (c == '"' || c == '\\') {
            cols += fprintf(f, "\\%c", c);
            i++;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            cols += fprintf(f, "\\%c", c == '\n' ? 'n' : c == '\t' ? 't' : 'r');
            i++;
        } else if (c >= 0x20 && c < 0x7f) {
            cols += fprintf(f, "%c", c);
            i++;
        } else if (c >= 0x80 && (len = printable_utf8_len(u + i, (size_t)(n - i))) != 0) {
            fwrite(u + i, 1, len, f);
            cols++;
            i += len;
        } else {
            cols += fprintf(f, "\\x%02x", c);
            i++;
        }
    }
    if (quoted) cols += fprintf(f, "\"");
    if (shown < n) cols += fprintf(f, "... (%" PRIu64 " bytes)", n);
    return cols;
}

/* A float as Python's repr (base/repr.h); inf, -inf and nan as C prints
 * them. */
static void print_float(FILE *f, double v, bool is_f32) {
    char buf[DS4_REPR_MAX];
    if (!isfinite(v)) {
        fprintf(f, "%g", v);
        return;
    }
    ds4_repr_float(v, is_f32, buf);
    fputs(buf, f);
}

static int print_scalar(FILE *f, const ds4_gguf_file *g, uint32_t type, uint64_t off,
                        uint64_t *next, ds4err *err) {
    ds4_gguf_scalar s;
    if (ds4_gguf_read_scalar(g, type, off, &s, next, err)) return -1;
    switch (type) {
    case GGUF_STR: print_escaped(f, s.v.s.ptr, s.v.s.len, 1); break;
    case GGUF_BOOL: fputs(s.v.b ? "true" : "false", f); break;
    case GGUF_F32: print_float(f, s.v.f, true); break;
    case GGUF_F64: print_float(f, s.v.f, false); break;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64:
        fprintf(f, "%" PRId64, s.v.i);
        break;
    default: fprintf(f, "%" PRIu64, s.v.u); break;
    }
    return 0;
}

static int print_value(FILE *f, const ds4_gguf_file *g, uint32_t type, uint64_t off, uint64_t *next,
                       int depth, ds4err *err);

/* arr[type; n] [e0, e1, ..., "...", e(n-2), e(n-1)]: the first elements, and
 * the last ones of a long array.  Nested arrays show fewer. */
static int print_array(FILE *f, const ds4_gguf_file *g, uint64_t off, uint64_t *next, int depth,
                       ds4err *err) {
    uint32_t et;
    uint64_t n, pos;
    if (ds4_gguf_read_arr(g, off, &et, &n, &pos, err)) return -1;
    uint64_t head = depth ? ARR_SHOWN_NESTED : ARR_HEAD, tail = depth ? 0 : ARR_TAIL;
    if (n <= head + tail) {
        head = n;
        tail = 0;
    }
    fprintf(f, "arr[%s; %" PRIu64 "] [", ds4_gguf_vtype_name(et), n);
    for (uint64_t i = 0; i < n; i++) {
        if (i < head || i >= n - tail) {
            if (i) fputs(", ", f);
            if (print_value(f, g, et, pos, &pos, depth + 1, err)) return -1;
            continue;
        }
        if (i == head) fputs(", \"...\"", f);
        if (ds4_gguf_skip_value(g, et, pos, &pos, err)) return -1;
    }
    fputc(']', f);
    *next = pos;
    return 0;
}

static int print_value(FILE *f, const ds4_gguf_file *g, uint32_t type, uint64_t off, uint64_t *next,
                       int depth, ds4err *err) {
    if (type == GGUF_ARR) return print_array(f, g, off, next, depth, err);
    return print_scalar(f, g, type, off, next, err);
}

static void print_shape(FILE *f, const ds4_gguf_tensor *t) {
    char buf[96];
    int o = snprintf(buf, sizeof(buf), "[");
    for (uint32_t d = 0; d < t->n_dims; d++)
        o += snprintf(buf + o, sizeof(buf) - (size_t)o, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
    snprintf(buf + o, sizeof(buf) - (size_t)o, "]");
    fprintf(f, " %-24s", buf);
}

/* ========================================================================
 * The listing.
 * ======================================================================== */

static int describe(FILE *f, const ds4_gguf_file *g, const char *path, ds4err *err) {
    fprintf(f, "== %s: GGUF v%" PRIu32 ", %" PRIu64 " metadata keys, %" PRIu64 " tensors, %" PRIu64
            " bytes\n", path, g->version, g->n_kv, g->n_tensors, g->size);
    fprintf(f, "  alignment %" PRIu64 ", tensor data at byte %" PRIu64 "\n", g->alignment,
            g->data_off);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const ds4_gguf_kv *kv = &g->kv[i];
        uint64_t next;
        fputs("  ", f);
        print_escaped(f, kv->key, strlen(kv->key), 0);
        fputs(" = ", f);
        if (kv->type != GGUF_ARR) fprintf(f, "%s ", ds4_gguf_vtype_name(kv->type));
        int rc = print_value(f, g, kv->type, kv->value_off, &next, 0, err);
        fputc('\n', f);
        if (rc) return rc;
    }
    fprintf(f, "  %-44s %-8s %-24s %12s %12s\n", "tensor", "type", "ne (ggml order)",
            "file offset", "bytes");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const ds4_gguf_tensor *t = &g->tensors[i];
        fputs("  ", f);
        int cols = print_escaped(f, t->name, strlen(t->name), 0);
        fprintf(f, "%*s %-8s", cols < 44 ? 44 - cols : 0, "", ds4_types_name(t->type));
        print_shape(f, t);
        fprintf(f, " %12" PRIu64 " %12" PRIu64 "\n", g->data_off + t->rel_off, t->nbytes);
    }
    if (fflush(f) || ferror(f)) return write_failed(f, err);
    return 0;
}

int ds4_gguf_inspect_describe(const char *path, FILE *out, ds4err *err) {
    ds4_gguf_file g;
    if (ds4_gguf_open(&g, path, err)) return -1;
    ds4_reslimit_sigbus_watch(g.map, g.size, path);
    int rc = describe(out, &g, path, err);
    ds4_reslimit_sigbus_unwatch(g.map);
    ds4_gguf_close(&g);
    return rc;
}

/* ========================================================================
 * The f32 stream.
 * ======================================================================== */

/* Rows are dequantized in chunks (a whole number of blocks) so that memory
 * stays bounded whatever ne0 is. */
static int dequant_to(FILE *out, const ds4_gguf_tensor *t, ds4err *err) {
    const ds4_type_info *ti = ds4_types_info(t->type);
    uint64_t chunk = (65536 / ti->blck) * ti->blck;
    float *f = malloc((size_t)chunk * sizeof(float));
    unsigned char *le = malloc((size_t)chunk * 4);
    int rc = 0;
    if (!f || !le) rc = ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    const uint64_t rows = t->n_elem / t->ne[0], row_bytes = t->nbytes / rows;
    for (uint64_t r = 0; r < rows && rc == 0; r++) {
        for (uint64_t e = 0; e < t->ne[0] && rc == 0; e += chunk) {
            uint64_t n = t->ne[0] - e < chunk ? t->ne[0] - e : chunk;
            const uint8_t *src = t->data + r * row_bytes + e / ti->blck * ti->bytes;
            if (ds4_types_dequant_row(t->type, src, f, n)) {
                rc = ds4_err_set(err, DS4_E_INTERNAL, "tensor '%s': cannot dequantize %s rows",
                                t->name, ti->name);
                break;
            }
            for (uint64_t i = 0; i < n; i++) {
                uint32_t u;
                memcpy(&u, &f[i], 4);
                for (int b = 0; b < 4; b++) le[4 * i + (uint64_t)b] = (unsigned char)(u >> 8 * b);
            }
            if (fwrite(le, 4, (size_t)n, out) != n) rc = write_failed(out, err);
        }
    }
    free(f);
    free(le);
    if (rc == 0 && fflush(out)) rc = write_failed(out, err);
    return rc;
}

int ds4_gguf_inspect_dequant(const char *path, const char *tensor, FILE *out, ds4err *err) {
    ds4_gguf_file g;
    if (ds4_gguf_open(&g, path, err)) return -1;
    ds4_reslimit_sigbus_watch(g.map, g.size, path);
    const ds4_gguf_tensor *t = ds4_gguf_find_tensor(&g, tensor);
    int rc = t ? dequant_to(out, t, err)
               : ds4_err_set(err, DS4_E_ARG, "%s: no tensor named '%s'", path, tensor);
    ds4_reslimit_sigbus_unwatch(g.map);
    ds4_gguf_close(&g);
    return rc;
}
