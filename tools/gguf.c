/* ds4ref-gguf: look inside a GGUF file.
 *
 *   ds4ref-gguf info FILE             header, metadata, tensor table
 *   ds4ref-gguf dequant FILE TENSOR   the tensor as little-endian f32 on stdout
 *
 * A thin front end: parsing, validation and dequantization live in quant/.
 * Errors are one line on stderr; the exit status is the ds4err code (2 for
 * usage errors, DS4_EXIT_SIGBUS when the file shrinks while it is read). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats.h"
#include "gguf.h"
#include "reslimit.h"

static const char usage[] =
    "usage: ds4ref-gguf info FILE\n"
    "       ds4ref-gguf dequant FILE TENSOR > out.f32\n"
    "\n"
    "info     prints the header (version, alignment, data offset, counts), every\n"
    "         metadata key with its type and value (arrays: element type, length,\n"
    "         first and last elements) and the tensor table (name, type, shape in\n"
    "         ggml order with ne0 contiguous, file offset, bytes).\n"
    "dequant  writes every element of TENSOR, in GGUF element order, as\n"
    "         little-endian float32 to stdout (not to a terminal).\n";

enum { STR_SHOWN = 160, ARR_HEAD = 8, ARR_TAIL = 2, ARR_SHOWN_NESTED = 4 };

/* ========================================================================
 * Printing values.
 * ======================================================================== */

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid.
 * Overlong forms, surrogates and code points past U+10FFFF are invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (len == 0 || s[0] > 0xf4 || len > n) return 0;
    uint32_t cp = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    /* C1 controls (U+0080..U+009F) act on some terminals: escape them too. */
    if (cp < 0xa0) return 0;
    return len;
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
        } else if (c >= 0x80 && (len = utf8_len(u + i, (size_t)(n - i))) != 0) {
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

/* The shortest decimal that reads back as the same float / double, written
 * the way Python's repr does: positional for exponents -4..15, ".0" on
 * integral values. */
static void print_float(double v, int is_f32) {
    char buf[64];
    int digits = 1;
    for (; v == v && digits < 17; digits++) {
        snprintf(buf, sizeof(buf), "%.*e", digits - 1, v);
        if (is_f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
    }
    snprintf(buf, sizeof(buf), "%.*e", digits - 1, v);
    const char *e = strchr(buf, 'e');
    int exp = e ? atoi(e + 1) : 0;
    if (e && exp >= -4 && exp < 16)
        snprintf(buf, sizeof(buf), "%.*f", digits - 1 - exp > 0 ? digits - 1 - exp : 0, v);
    if (!strpbrk(buf, ".eni")) strcat(buf, ".0");   /* not for inf and nan */
    fputs(buf, stdout);
}

static int print_scalar(const gguf_file *g, uint32_t type, uint64_t off, uint64_t *next,
                        ds4err *err) {
    gguf_scalar s;
    if (gguf_read_scalar(g, type, off, &s, next, err)) return -1;
    switch (type) {
    case GGUF_STR: print_escaped(stdout, s.v.s.ptr, s.v.s.len, 1); break;
    case GGUF_BOOL: fputs(s.v.b ? "true" : "false", stdout); break;
    case GGUF_F32: print_float(s.v.f, 1); break;
    case GGUF_F64: print_float(s.v.f, 0); break;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64:
        printf("%" PRId64, s.v.i);
        break;
    default: printf("%" PRIu64, s.v.u); break;
    }
    return 0;
}

static int print_value(const gguf_file *g, uint32_t type, uint64_t off, uint64_t *next,
                       int depth, ds4err *err);

/* arr[type; n] [e0, e1, ..., "...", e(n-2), e(n-1)]: the first elements, and
 * the last ones of a long array.  Nested arrays show fewer. */
static int print_array(const gguf_file *g, uint64_t off, uint64_t *next, int depth,
                       ds4err *err) {
    uint32_t et;
    uint64_t n, pos;
    if (gguf_read_arr(g, off, &et, &n, &pos, err)) return -1;
    uint64_t head = depth ? ARR_SHOWN_NESTED : ARR_HEAD, tail = depth ? 0 : ARR_TAIL;
    if (n <= head + tail) {
        head = n;
        tail = 0;
    }
    printf("arr[%s; %" PRIu64 "] [", gguf_vtype_name(et), n);
    for (uint64_t i = 0; i < n; i++) {
        if (i < head || i >= n - tail) {
            if (i) fputs(", ", stdout);
            if (print_value(g, et, pos, &pos, depth + 1, err)) return -1;
            continue;
        }
        if (i == head) fputs(", \"...\"", stdout);
        if (gguf_skip_value(g, et, pos, &pos, err)) return -1;
    }
    putchar(']');
    *next = pos;
    return 0;
}

static int print_value(const gguf_file *g, uint32_t type, uint64_t off, uint64_t *next,
                       int depth, ds4err *err) {
    if (type == GGUF_ARR) return print_array(g, off, next, depth, err);
    return print_scalar(g, type, off, next, err);
}

/* ========================================================================
 * Commands.
 * ======================================================================== */

static void print_shape(const gguf_tensor *t) {
    char buf[96];
    int o = snprintf(buf, sizeof(buf), "[");
    for (uint32_t d = 0; d < t->n_dims; d++)
        o += snprintf(buf + o, sizeof(buf) - (size_t)o, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
    snprintf(buf + o, sizeof(buf) - (size_t)o, "]");
    printf(" %-24s", buf);
}

static int cmd_info(const char *path, ds4err *err) {
    gguf_file g;
    if (gguf_open(&g, path, err)) return -1;
    ds4_sigbus_watch(g.map, g.size, path);
    printf("== %s: GGUF v%" PRIu32 ", %" PRIu64 " metadata keys, %" PRIu64 " tensors, %" PRIu64
           " bytes\n", path, g.version, g.n_kv, g.n_tensors, g.size);
    printf("  alignment %" PRIu64 ", tensor data at byte %" PRIu64 "\n", g.alignment, g.data_off);
    int rc = 0;
    for (uint64_t i = 0; i < g.n_kv && rc == 0; i++) {
        const gguf_kv *kv = &g.kv[i];
        uint64_t next;
        fputs("  ", stdout);
        print_escaped(stdout, kv->key, strlen(kv->key), 0);
        fputs(" = ", stdout);
        if (kv->type != GGUF_ARR) printf("%s ", gguf_vtype_name(kv->type));
        rc = print_value(&g, kv->type, kv->value_off, &next, 0, err);
        putchar('\n');
    }
    if (rc == 0) {
        printf("  %-44s %-8s %-24s %12s %12s\n", "tensor", "type", "ne (ggml order)",
               "file offset", "bytes");
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            const gguf_tensor *t = &g.tensors[i];
            fputs("  ", stdout);
            int cols = print_escaped(stdout, t->name, strlen(t->name), 0);
            printf("%*s %-8s", cols < 44 ? 44 - cols : 0, "", ds4_type_name(t->type));
            print_shape(t);
            printf(" %12" PRIu64 " %12" PRIu64 "\n", g.data_off + t->rel_off, t->nbytes);
        }
    }
    ds4_sigbus_unwatch(g.map);
    gguf_close(&g);
    if (rc == 0 && (fflush(stdout) || ferror(stdout)))
        rc = ds4err_set(err, DS4_E_IO, "stdout: write failed: %s", strerror(errno));
    return rc;
}

/* Rows are dequantized in chunks (a whole number of blocks) so that memory
 * stays bounded whatever ne0 is. */
static int dequant_to(FILE *out, const gguf_tensor *t, ds4err *err) {
    const ds4_type_info *ti = ds4_type_info_get(t->type);
    uint64_t chunk = (65536 / ti->blck) * ti->blck;
    float *f = malloc((size_t)chunk * sizeof(float));
    unsigned char *le = malloc((size_t)chunk * 4);
    int rc = 0;
    if (!f || !le) rc = ds4err_set(err, DS4_E_NOMEM, "out of memory");
    const uint64_t rows = t->n_elem / t->ne[0], row_bytes = t->nbytes / rows;
    for (uint64_t r = 0; r < rows && rc == 0; r++) {
        for (uint64_t e = 0; e < t->ne[0] && rc == 0; e += chunk) {
            uint64_t n = t->ne[0] - e < chunk ? t->ne[0] - e : chunk;
            const uint8_t *src = t->data + r * row_bytes + e / ti->blck * ti->bytes;
            if (ds4_dequant_row(t->type, src, f, n)) {
                rc = ds4err_set(err, DS4_E_INTERNAL, "tensor '%s': cannot dequantize %s rows",
                                t->name, ti->name);
                break;
            }
            for (uint64_t i = 0; i < n; i++) {
                uint32_t u;
                memcpy(&u, &f[i], 4);
                for (int b = 0; b < 4; b++) le[4 * i + (uint64_t)b] = (unsigned char)(u >> 8 * b);
            }
            if (fwrite(le, 4, (size_t)n, out) != n)
                rc = ds4err_set(err, DS4_E_IO, "stdout: write failed: %s", strerror(errno));
        }
    }
    free(f);
    free(le);
    if (rc == 0 && fflush(out))
        rc = ds4err_set(err, DS4_E_IO, "stdout: write failed: %s", strerror(errno));
    return rc;
}

static int cmd_dequant(const char *path, const char *name, ds4err *err) {
    if (isatty(STDOUT_FILENO))
        return ds4err_set(err, DS4_E_ARG, "refusing to write binary float32 data to a terminal; "
                          "redirect stdout to a file or a pipe");
    gguf_file g;
    if (gguf_open(&g, path, err)) return -1;
    ds4_sigbus_watch(g.map, g.size, path);
    const gguf_tensor *t = gguf_find_tensor(&g, name);
    int rc = t ? dequant_to(stdout, t, err)
               : ds4err_set(err, DS4_E_ARG, "%s: no tensor named '%s'", path, name);
    ds4_sigbus_unwatch(g.map);
    gguf_close(&g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    ds4err err = {0};
    /* A file truncated while it is read ends with one line, not "Bus error". */
    if (ds4_sigbus_install("ds4ref-gguf", &err)) {
        fprintf(stderr, "ds4ref-gguf: %s\n", err.msg);
        return err.code;
    }
    int rc;
    if (argc == 3 && !strcmp(argv[1], "info")) {
        rc = cmd_info(argv[2], &err);
    } else if (argc == 4 && !strcmp(argv[1], "dequant")) {
        rc = cmd_dequant(argv[2], argv[3], &err);
    } else {
        fputs("ds4ref-gguf: expected 'info FILE' or 'dequant FILE TENSOR' (see --help)\n", stderr);
        return DS4_E_ARG;
    }
    if (rc == 0) return 0;
    fprintf(stderr, "ds4ref-gguf: %s\n", err.msg);
    return err.code ? err.code : DS4_E_INTERNAL;
}
