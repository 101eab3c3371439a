#include "ref/format/trace.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/hex.h"
#include "ref/format/dump.h"
#include "ref/format/golden_read.h"
#include "ref/format/lpvec.h"
#include "ref/text/json.h"

const char *ds4_trace_kind_name(ds4_trace_kind k) {
    return k == DS4_TRACE_GOLDEN ? "ds4ref golden" : k == DS4_TRACE_DUMP ? "ds4 dump"
                                                                         : "official.vec case";
}

static int load_vec(const char *buf, size_t len, const char *path, const char *case_id,
                    ds4_golden *g, ds4err *err) {
    ds4_lpv_file f;
    if (ds4_lpvec_parse(buf, len, path, &f, err)) return -1;
    const ds4_lpv_case *c = NULL;
    int rc = 0;
    char ids[200] = "";
    for (uint32_t i = 0; i < f.n_cases; i++) {
        size_t n = strlen(ids);
        if (n < sizeof(ids) - 1)
            snprintf(ids + n, sizeof(ids) - n, "%s%s", i ? ", " : "", f.cases[i].id);
    }
    if (f.n_cases == 0) {
        rc = ds4_err_set(err, DS4_E_FORMAT, "%s: not a golden, a ds4 dump or an official.vec "
                        "file with cases", path);
    } else if (case_id) {
        c = ds4_lpvec_find(&f, case_id);
        if (!c) rc = ds4_err_set(err, DS4_E_ARG, "%s: no case \"%s\" (cases: %s)", path, case_id,
                                ids);
    } else if (f.n_cases == 1) {
        c = &f.cases[0];
    } else {
        rc = ds4_err_set(err, DS4_E_ARG, "%s: %u cases (%s): choose one with --case ID", path,
                        f.n_cases, ids);
    }
    if (rc == 0) rc = ds4_lpvec_to_golden(c, g, err);
    ds4_lpvec_free(&f);
    return rc;
}

/* Does the first line of buf parse as a JSON object with a "format" key? */
static bool first_line_has_format(const char *buf, size_t len) {
    const char *nl = memchr(buf, '\n', len);
    size_t n = nl ? (size_t)(nl - buf) : len;
    ds4_json_doc *doc;
    ds4err e;
    if (ds4_json_parse(buf, n, "", &doc, &e)) return false;
    bool yes = ds4_json_get(ds4_json_root(doc), "format") != NULL;
    ds4_json_free(doc);
    return yes;
}

/* Does the JSON in buf look like a ds4 dump: an object with its "source" or
 * "steps" key?  (Whether it is a valid one is the dump reader's to say.) */
static bool json_is_dump(const char *buf, size_t len) {
    ds4_json_doc *doc;
    ds4err e;
    if (ds4_json_parse(buf, len, "", &doc, &e)) return true;   /* the reader says where */
    const ds4_json *root = ds4_json_root(doc);
    bool yes = root->type == DS4_JSON_OBJECT &&
               (ds4_json_get(root, "source") || ds4_json_get(root, "steps"));
    ds4_json_free(doc);
    return yes;
}

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Does buf look like an official.vec file: is its first line that is
 * neither blank nor a comment a case record?  (A file of comments alone is
 * one without cases.) */
static bool text_is_vec(const char *buf, size_t len) {
    for (size_t i = 0; i < len;) {
        while (i < len && is_blank(buf[i])) i++;
        if (i == len) break;
        if (buf[i] != '#')
            return len - i > 5 && !memcmp(buf + i, "case", 4) && (buf[i + 4] == ' ' || buf[i + 4] == '\t');
        const char *nl = memchr(buf + i, '\n', len - i);
        i = nl ? (size_t)(nl - buf) + 1 : len;
    }
    return true;
}

static int not_any_kind(const char *path, const char *buf, size_t len, ds4err *err) {
    char start[64];
    ds4_hex_show((const uint8_t *)buf, len < 16 ? (uint32_t)len : 16, start, 24);
    return ds4_err_set(err, DS4_E_FORMAT, "%s: not a golden, ds4 dump or official.vec (it begins "
                      "\"%s\")", path, start);
}

int ds4_trace_load(const char *path, const char *case_id, ds4_golden *g, ds4err *err) {
    char *buf;
    size_t len;
    ds4_golden_init(g, DS4_TRACE_GOLDEN);
    if (ds4_file_read(path, DS4_GOLDEN_MAX_FILE, &buf, &len, err)) return -1;
    size_t i = 0;
    while (i < len && is_blank(buf[i])) i++;
    int rc;
    if (i < len && buf[i] == '{' && first_line_has_format(buf, len))
        rc = ds4_golden_read_text(buf, len, path, g, err);
    else if (i < len && buf[i] == '{' && json_is_dump(buf, len))
        rc = ds4_dump_parse(buf, len, path, g, err);
    else if (text_is_vec(buf, len))
        rc = load_vec(buf, len, path, case_id, g, err);
    else
        rc = not_any_kind(path, buf, len, err);
    free(buf);
    return rc;
}
