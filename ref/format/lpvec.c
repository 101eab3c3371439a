#include "ref/format/lpvec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "base/hex.h"
#include "base/sha256.h"
#include "ref/format/reader.h"

/* ================================================================ reading */

/* ds4 trims and splits with isspace() in the C locale. */
static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

enum { MAX_FIELDS = 6 };

/* A trimmed line cut into white-space separated fields (pointers into a
 * NUL-terminated copy). */
typedef struct fields {
    char text[DS4_LPV_MAX_LINE + 1];
    char *f[MAX_FIELDS];
    size_t len[MAX_FIELDS];
    int n;                   /* fields found; MAX_FIELDS means "that many or more" */
} fields;

static void split(fields *fs, const char *line, size_t n) {
    memcpy(fs->text, line, n);
    fs->text[n] = '\0';
    fs->n = 0;
    char *p = fs->text;
    while (*p && fs->n < MAX_FIELDS) {
        while (*p && is_space(*p)) p++;
        if (!*p) break;
        fs->f[fs->n] = p;
        while (*p && !is_space(*p)) p++;
        fs->len[fs->n] = (size_t)(p - fs->f[fs->n]);
        fs->n++;
        if (*p) *p++ = '\0';
    }
}

/* Plain decimal digits, value in [lo, hi]. */
static int get_num(const ds4_rd *r, const char *s, const char *what, uint32_t lo, uint32_t hi,
                   uint32_t *out) {
    if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 10)
        return ds4_reader_fail(r, "%s \"%.20s\" is not a decimal number", what, s);
    unsigned long long v = strtoull(s, NULL, 10);
    if (v < lo || v > hi) return ds4_reader_fail(r, "%s %llu is out of range %u..%u", what, v, lo, hi);
    *out = (uint32_t)v;
    return 0;
}

static int get_hex(const ds4_rd *r, const char *s, size_t n, const char *what, ds4_lpv_tok *t) {
    if (n > 2 * DS4_LPV_MAX_TOKEN_BYTES)
        return ds4_reader_fail(r, "%s: %zu hex digits, more than %d", what, n, 2 * DS4_LPV_MAX_TOKEN_BYTES);
    if (n % 2 || ds4_hex_decode(s, n, t->bytes))
        return ds4_reader_fail(r, "%s \"%.40s\" is not an even number of hex digits", what, s);
    t->n_bytes = (uint32_t)(n / 2);
    return 0;
}

/* A decimal float (what %f reads, without inf/nan/hex forms), finite in f32. */
static int get_logprob(const ds4_rd *r, const char *s, float *out) {
    char *end;
    if (strspn(s, "0123456789+-.eE") != strlen(s))
        return ds4_reader_fail(r, "logprob \"%.40s\" is not a decimal number", s);
    float v = strtof(s, &end);
    if (end == s || *end || !isfinite(v))
        return ds4_reader_fail(r, "logprob \"%.40s\" is not a finite float", s);
    *out = v;
    return 0;
}

static int parse_case_line(const ds4_rd *r, const fields *fs, ds4_lpv_case *c) {
    if (fs->n != 5) return ds4_reader_fail(r, "expected \"case <id> <ctx> <nsteps> <prompt-path>\"");
    if (fs->len[1] > DS4_LPV_MAX_ID)
        return ds4_reader_fail(r, "case id has %zu chars, more than %d", fs->len[1], DS4_LPV_MAX_ID);
    if (fs->len[4] > DS4_LPV_MAX_PATH)
        return ds4_reader_fail(r, "prompt path has %zu chars, more than %d", fs->len[4], DS4_LPV_MAX_PATH);
    memcpy(c->id, fs->f[1], fs->len[1] + 1);
    memcpy(c->prompt, fs->f[4], fs->len[4] + 1);
    if (get_num(r, fs->f[2], "ctx", 1, INT32_MAX, &c->ctx) ||
        get_num(r, fs->f[3], "nsteps", 1, DS4_LPV_MAX_STEPS, &c->n_steps))
        return -1;
    c->line = r->line;
    return 0;
}

/* Parser state inside a case. */
typedef struct cur {
    ds4_lpv_case *c;         /* NULL between cases */
    uint32_t steps;          /* step records seen */
    uint32_t tops;           /* top records seen for the last step */
} cur;

static int parse_in_case(const ds4_rd *r, const char *p, const fields *fs, cur *k) {
    ds4_lpv_case *c = k->c;
    if (!strcmp(p, "end")) {
        if (k->steps && k->tops < c->steps[k->steps - 1].n_top)
            return ds4_reader_fail(r, "step %u has %u top lines, %u announced", k->steps - 1, k->tops,
                       c->steps[k->steps - 1].n_top);
        if (k->steps != c->n_steps)
            return ds4_reader_fail(r, "case %s ends after %u steps, %u announced", c->id, k->steps,
                       c->n_steps);
        k->c = NULL;
        return 1;
    }
    if (!strncmp(p, "step ", 5)) {
        if (fs->n != 4) return ds4_reader_fail(r, "expected \"step <index> <selected-hex> <top-count>\"");
        if (k->steps && k->tops < c->steps[k->steps - 1].n_top)
            return ds4_reader_fail(r, "step %u has %u top lines, %u announced", k->steps - 1, k->tops,
                       c->steps[k->steps - 1].n_top);
        uint32_t idx = 0;
        if (get_num(r, fs->f[1], "step index", 0, c->n_steps - 1, &idx)) return -1;
        if (idx != k->steps) return ds4_reader_fail(r, "step %u where step %u was expected", idx, k->steps);
        ds4_lpv_step *s = &c->steps[idx];
        if (get_hex(r, fs->f[2], fs->len[2], "selected token", &s->selected) ||
            get_num(r, fs->f[3], "top-count", 0, DS4_LPV_MAX_TOP, &s->n_top))
            return -1;
        k->steps++;
        k->tops = 0;
        return 0;
    }
    if (!strncmp(p, "top ", 4)) {
        if (fs->n != 3) return ds4_reader_fail(r, "expected \"top <token-hex> <logprob>\"");
        if (!k->steps) return ds4_reader_fail(r, "top line before any step line");
        ds4_lpv_step *s = &c->steps[k->steps - 1];
        if (k->tops == s->n_top)
            return ds4_reader_fail(r, "more top lines than the %u step %u announced", s->n_top,
                       k->steps - 1);
        ds4_lpv_tok *t = &s->top[k->tops];
        if (get_hex(r, fs->f[1], fs->len[1], "top token", t) ||
            get_logprob(r, fs->f[2], &t->logprob))
            return -1;
        k->tops++;
        return 0;
    }
    return ds4_reader_fail(r, "unexpected line in case %s (expected step, top or end)", c->id);
}

static int add_case(const ds4_rd *r, ds4_lpv_file *f, cur *k) {
    if (f->n_cases == UINT32_MAX) return ds4_reader_fail(r, "too many cases");
    ds4_lpv_case *p = realloc(f->cases, ((size_t)f->n_cases + 1) * sizeof(*p));
    if (!p) return ds4_reader_nomem(r);
    f->cases = p;
    k->c = &p[f->n_cases++];
    memset(k->c, 0, sizeof(*k->c));
    k->steps = k->tops = 0;
    return 0;
}

int ds4_lpvec_parse(const char *buf, size_t len, const char *name, ds4_lpv_file *f,
                  ds4err *err) {
    memset(f, 0, sizeof(*f));
    ds4_rd r = {name ? name : "vectors", 0, err};
    cur k = {0};
    fields *fs = malloc(sizeof(*fs));
    if (!fs) return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", r.name);
    size_t pos = 0;
    int rc = 0;
    const char *lp;
    size_t n;
    bool newline;
    while (rc == 0 && ds4_reader_next_line(&r, buf, len, &pos, &lp, &n, &newline)) {
        size_t start = (size_t)(lp - buf);
        if (n > DS4_LPV_MAX_LINE) {
            rc = ds4_reader_fail(&r, "line of %zu bytes, more than %d", n, DS4_LPV_MAX_LINE);
            break;
        }
        if (memchr(buf + start, '\0', n)) {
            rc = ds4_reader_fail(&r, "NUL byte in line");
            break;
        }
        split(fs, buf + start, n);
        if (fs->n == 0 || fs->f[0][0] == '#') continue;
        /* The trimmed line, for the keyword tests ds4 does with strncmp. */
        char line[DS4_LPV_MAX_LINE + 1];
        size_t a = 0, b = n;
        while (a < b && is_space(buf[start + a])) a++;
        while (b > a && is_space(buf[start + b - 1])) b--;
        memcpy(line, buf + start + a, b - a);
        line[b - a] = '\0';
        if (!k.c) {
            if (strcmp(fs->f[0], "case")) {
                rc = ds4_reader_fail(&r, "unexpected line before a case (expected \"case ...\")");
                break;
            }
            rc = add_case(&r, f, &k);
            if (rc == 0) rc = parse_case_line(&r, fs, k.c);
            if (rc == 0) k.c->begin = start;
            if (rc == 0 && ds4_lpvec_find(f, k.c->id) != k.c)
                rc = ds4_reader_fail(&r, "case id %s already used at line %u", k.c->id,
                         ds4_lpvec_find(f, k.c->id)->line);
            continue;
        }
        ds4_lpv_case *c = k.c;
        int s = parse_in_case(&r, line, fs, &k);
        if (s < 0) rc = -1;
        else if (s > 0) c->end = pos;
    }
    if (rc == 0 && k.c) {
        r.line++;
        rc = ds4_reader_fail(&r, "case %s (line %u) has no end line", k.c->id, k.c->line);
    }
    free(fs);
    if (rc) ds4_lpvec_free(f);
    return rc;
}

/* The whole file, then the parser: the two trace readers of whole files
 * (golden_read.c, lpvec.c) end with these few lines, for their own parser
 * and result type; ds4 dumps are read through trace.c. */
int ds4_lpvec_read(const char *path, ds4_lpv_file *f, ds4err *err) {
    char *buf;
    size_t len;
    memset(f, 0, sizeof(*f));
    if (ds4_file_read(path, DS4_LPV_MAX_FILE, &buf, &len, err)) return -1;
    int rc = ds4_lpvec_parse(buf, len, path, f, err);
    free(buf);
    return rc;
}

void ds4_lpvec_free(ds4_lpv_file *f) {
    free(f->cases);
    memset(f, 0, sizeof(*f));
}

const ds4_lpv_case *ds4_lpvec_find(const ds4_lpv_file *f, const char *id) {
    for (uint32_t i = 0; i < f->n_cases; i++)
        if (!strcmp(f->cases[i].id, id)) return &f->cases[i];
    return NULL;
}

/* ================================================================ as a golden */

static int vec_tok(ds4_golden_tok *t, const ds4_lpv_tok *v, bool with_lp) {
    memset(t, 0, sizeof(*t));
    t->id = -1;
    t->bytes = malloc(v->n_bytes ? v->n_bytes : 1);
    if (!t->bytes) return -1;
    memcpy(t->bytes, v->bytes, v->n_bytes);
    t->n_bytes = v->n_bytes;
    if (with_lp) t->logprob = v->logprob;
    return 0;
}

int ds4_lpvec_to_golden(const ds4_lpv_case *c, ds4_golden *g, ds4err *err) {
    ds4_golden_init(g, DS4_TRACE_VEC);
    g->lp_f32 = true;
    snprintf(g->vec_id, sizeof(g->vec_id), "%s", c->id);
    g->h.settings.ctx = c->ctx;
    g->h.settings.max_steps = c->n_steps;
    int rc = 0;
    for (uint32_t i = 0; rc == 0 && i < c->n_steps; i++) {
        const ds4_lpv_step *s = &c->steps[i];
        ds4_golden_tok top[DS4_LPV_MAX_TOP];
        ds4_golden_step st = {.n_top = 0, .top = top};
        if (s->n_top > g->h.settings.top_k) g->h.settings.top_k = s->n_top;
        bool ok = vec_tok(&st.tok, &s->selected, false) == 0;
        for (uint32_t k = 0; ok && k < s->n_top; k++) {
            ok = vec_tok(&top[k], &s->top[k], true) == 0;
            if (ok) st.n_top = k + 1;
        }
        rc = ok ? ds4_golden_push_step(g, &st, err)
                : ds4_err_set(err, DS4_E_NOMEM, "out of memory converting case %s", c->id);
        free(st.tok.bytes);
        for (uint32_t k = 0; k < st.n_top; k++) free(top[k].bytes);
    }
    if (rc) ds4_golden_free(g);
    return rc;
}

/* ================================================================ writing */

static bool printable_word(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n > max) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f) return false;
    }
    return true;
}

static void put_hex(ds4_buf *b, const uint8_t *p, uint32_t n) {
    char h[2 * DS4_LPV_MAX_TOKEN_BYTES + 1];
    ds4_hex(p, n, h);
    ds4_buf_put(b, h, 2 * (size_t)n);
}

static int check_tok(const ds4_golden_tok *t, uint32_t step, const char *what, ds4err *err) {
    if (t->n_bytes == 0 || t->n_bytes > DS4_LPV_MAX_TOKEN_BYTES)
        return ds4_err_set(err, DS4_E_UNSUPPORTED,
                          "step %u: %s has %u bytes; official.vec holds 1..%d", step, what,
                          t->n_bytes, DS4_LPV_MAX_TOKEN_BYTES);
    return 0;
}

/* The case's id and prompt path as the format allows them. */
static int check_opts(const ds4_lpv_append_opts *o, ds4err *err) {
    if (!o->id || !printable_word(o->id, DS4_LPV_MAX_ID) || o->id[0] == '#')
        return ds4_err_set(err, DS4_E_ARG, "vector case id must be 1..%d printable characters "
                          "without spaces, not starting with '#'", DS4_LPV_MAX_ID);
    if (!o->prompt_path || !printable_word(o->prompt_path, DS4_LPV_MAX_PATH))
        return ds4_err_set(err, DS4_E_ARG, "vector prompt path must be 1..%d characters without "
                          "spaces", DS4_LPV_MAX_PATH);
    return 0;
}

int ds4_lpvec_format_case(const ds4_golden *g, const ds4_lpv_append_opts *o, ds4_buf *out,
                        ds4err *err) {
    if (check_opts(o, err)) return -1;
    if (g->h.settings.ctx < 1 || g->h.settings.ctx > INT32_MAX)
        return ds4_err_set(err, DS4_E_ARG, "vector case needs a ctx in 1..%d, golden has %u",
                          INT32_MAX, g->h.settings.ctx);
    uint32_t n = g->n_steps < DS4_LPV_MAX_STEPS ? g->n_steps : DS4_LPV_MAX_STEPS;
    if (n == 0) return ds4_err_set(err, DS4_E_ARG, "golden has no steps to make a vector case");
    char s[64];
    ds4_buf_puts(out, "case ");
    ds4_buf_puts(out, o->id);
    snprintf(s, sizeof(s), " %u %u ", g->h.settings.ctx, n);
    ds4_buf_puts(out, s);
    ds4_buf_puts(out, o->prompt_path);
    ds4_buf_puts(out, "\n");
    for (uint32_t i = 0; i < n; i++) {
        const ds4_golden_step *st = &g->steps[i];
        uint32_t nt = st->n_top < o->max_top ? st->n_top : o->max_top;
        if (nt > DS4_LPV_MAX_TOP) nt = DS4_LPV_MAX_TOP;
        if (check_tok(&st->tok, i, "the greedy token", err)) return -1;
        snprintf(s, sizeof(s), "step %u ", i);
        ds4_buf_puts(out, s);
        put_hex(out, st->tok.bytes, st->tok.n_bytes);
        snprintf(s, sizeof(s), " %u\n", nt);
        ds4_buf_puts(out, s);
        for (uint32_t k = 0; k < nt; k++) {
            if (check_tok(&st->top[k], i, "a top token", err)) return -1;
            ds4_buf_puts(out, "top ");
            put_hex(out, st->top[k].bytes, st->top[k].n_bytes);
            snprintf(s, sizeof(s), " %.9g\n", (double)(float)st->top[k].logprob);
            ds4_buf_puts(out, s);
        }
    }
    ds4_buf_puts(out, "end\n");
    return out->failed ? ds4_err_set(err, DS4_E_NOMEM, "out of memory formatting a case") : 0;
}

static const char new_file_header[] =
    DS4_LPV_HEADER "\n"
    "# case <id> <ctx> <steps> <prompt-file>\n"
    "# step <index> <selected-hex> <top-count>\n"
    "# top <token-hex> <official-logprob>\n"
    "\n";

/* The file at path as it stands (*old NULL when there is none yet), parsed,
 * and the case of o's id in it (NULL: none), refused unless o->replace. */
static int read_existing(const char *path, const ds4_lpv_append_opts *o, char **old,
                         size_t *old_len, ds4_lpv_file *f, const ds4_lpv_case **same,
                         ds4err *err) {
    *old = NULL;
    *old_len = 0;
    *same = NULL;
    memset(f, 0, sizeof(*f));
    if (access(path, F_OK) == 0) {
        if (ds4_file_read(path, DS4_LPV_MAX_FILE, old, old_len, err) ||
            ds4_lpvec_parse(*old, *old_len, path, f, err))
            return -1;
    } else if (errno != ENOENT) {
        return ds4_err_set(err, DS4_E_IO, "%s: %s", path, strerror(errno));
    }
    *same = ds4_lpvec_find(f, o->id);
    if (*same && !o->replace)
        return ds4_err_set(err, DS4_E_ARG, "%s: case %s already exists (line %u)", path, o->id,
                          (*same)->line);
    return 0;
}

int ds4_lpvec_append_check(const char *path, const ds4_lpv_append_opts *o, ds4err *err) {
    char *old = NULL;
    size_t old_len;
    ds4_lpv_file f = {0};
    const ds4_lpv_case *same;
    int rc = check_opts(o, err);
    if (rc == 0) rc = read_existing(path, o, &old, &old_len, &f, &same, err);
    ds4_lpvec_free(&f);
    free(old);
    return rc;
}

/* The whole new file: what path holds now with the case added or swapped. */
static int appended(const char *path, const ds4_golden *g, const ds4_lpv_append_opts *o,
                    ds4_buf *out, ds4err *err) {
    ds4_buf item = {0};
    char *old = NULL;
    size_t old_len;
    ds4_lpv_file f = {0};
    const ds4_lpv_case *same;
    int rc = ds4_lpvec_format_case(g, o, &item, err);
    if (rc == 0) rc = read_existing(path, o, &old, &old_len, &f, &same, err);
    if (rc) goto done;
    if (same) {
        /* Swap the old case's lines for the new ones, keeping everything
         * around them (comments, blank lines, other cases) as it was. */
        ds4_buf_put(out, old, same->begin);
        ds4_buf_put(out, item.p, item.len);
        ds4_buf_put(out, old + same->end, old_len - same->end);
    } else if (!old) {
        ds4_buf_puts(out, new_file_header);
        ds4_buf_put(out, item.p, item.len);
    } else {
        ds4_buf_put(out, old, old_len);
        if (old_len && old[old_len - 1] != '\n') ds4_buf_puts(out, "\n");
        if (out->len && !(out->len >= 2 && out->p[out->len - 2] == '\n')) ds4_buf_puts(out, "\n");
        ds4_buf_put(out, item.p, item.len);
    }
    if (out->failed) {
        rc = ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    /* What goes to disk must read back: never write a file ds4 would choke on. */
    ds4_lpvec_free(&f);
    rc = ds4_lpvec_parse(out->p, out->len, path, &f, err);
done:
    ds4_lpvec_free(&f);
    ds4_buf_free(&item);
    free(old);
    return rc;
}

int ds4_lpvec_append_to(ds4_afile *dst, const char *path, const ds4_golden *g,
                      const ds4_lpv_append_opts *o, ds4err *err) {
    ds4_buf out = {0};
    int rc = appended(path, g, o, &out, err);
    if (rc == 0) rc = ds4_file_atomic_write(dst, out.p, out.len, err);
    if (rc == 0) rc = ds4_file_atomic_commit(dst, err);
    else ds4_file_atomic_abort(dst);
    ds4_buf_free(&out);
    return rc;
}

int ds4_lpvec_append(const char *path, const ds4_golden *g, const ds4_lpv_append_opts *o,
                   ds4err *err) {
    ds4_afile dst;
    if (ds4_file_atomic_open(&dst, path, err)) return -1;
    return ds4_lpvec_append_to(&dst, path, g, o, err);
}
