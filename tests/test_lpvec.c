/* official.vec files (ref/format/lpvec.h): the official fixture, ds4's grammar and
 * limits on hand-written bad inputs, and the appender, whose output is also
 * read back with a parser written the way ds4_test.c reads the file (fgets
 * into 2048 bytes, sscanf with ds4's formats) -- an independent reading of
 * the same bytes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "testutil.h"
#include "ref/text/json.h"
#include "ref/format/golden.h"
#include "ref/format/lpvec.h"

/* ------------------------------------------------------------ ds4's way */

typedef struct ds4like_case {
    char id[96], path[512];
    int ctx, nsteps;
    int sel_len[16];
    unsigned char sel[16][128];
    int ntop[16];
    int top_len[16][32];
    unsigned char top[16][32][128];
    float lp[16][32];
} ds4like_case;

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int ds4like_hex(const char *hex, unsigned char *out, int *len) {
    int n = 0;
    while (*hex && !isspace((unsigned char)*hex)) {
        int hi = hexval(hex[0]), lo = hexval(hex[1]);
        if (hi < 0 || lo < 0 || n >= 128) return 0;
        out[n++] = (unsigned char)(hi << 4 | lo);
        hex += 2;
    }
    *len = n;
    return 1;
}

static char *ds4like_trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* Reads every case the way ds4_test.c does; returns the count, -1 on what
 * ds4 would flag as an assertion failure. */
static int ds4like_read(const char *path, ds4like_case *cases, int cap) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    char line[2048];
    int n = 0, step = -1, top = 0;
    ds4like_case *c = NULL;
    while (fgets(line, sizeof(line), fp)) {
        char *p = ds4like_trim(line);
        if (!p[0] || p[0] == '#') continue;
        if (!c) {
            if (n == cap) break;
            c = &cases[n];
            memset(c, 0, sizeof(*c));
            if (sscanf(p, "case %95s %d %d %511s", c->id, &c->ctx, &c->nsteps, c->path) != 4 ||
                c->nsteps < 1 || c->nsteps > 16)
                goto fail;
            step = -1;
            continue;
        }
        if (!strcmp(p, "end")) {
            c = NULL;
            n++;
            continue;
        }
        char hex[258];
        if (!strncmp(p, "step ", 5)) {
            int nt;
            if (sscanf(p, "step %d %257s %d", &step, hex, &nt) != 3 || step < 0 ||
                step >= c->nsteps || nt < 0 || nt > 32)
                goto fail;
            c->ntop[step] = nt;
            if (!ds4like_hex(hex, c->sel[step], &c->sel_len[step])) goto fail;
            top = 0;
            continue;
        }
        if (!strncmp(p, "top ", 4)) {
            float lp;
            if (step < 0 || top >= c->ntop[step] || sscanf(p, "top %257s %f", hex, &lp) != 2)
                goto fail;
            c->lp[step][top] = lp;
            if (!ds4like_hex(hex, c->top[step][top], &c->top_len[step][top])) goto fail;
            top++;
            continue;
        }
        goto fail;
    }
    fclose(fp);
    return c ? -1 : n;
fail:
    fclose(fp);
    return -1;
}

/* Our reading and ds4's agree on every field. */
static void assert_same_as_ds4(const char *path) {
    static ds4like_case want[8];
    int n = ds4like_read(path, want, 8);
    assert_true(n > 0);
    ds4_lpv_file f;
    ds4err err = {0};
    assert_int_equal(ds4_lpvec_read(path, &f, &err), 0);
    assert_int_equal(f.n_cases, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const ds4_lpv_case *c = &f.cases[i];
        assert_string_equal(c->id, want[i].id);
        assert_string_equal(c->prompt, want[i].path);
        assert_int_equal(c->ctx, want[i].ctx);
        assert_int_equal(c->n_steps, want[i].nsteps);
        for (int s = 0; s < want[i].nsteps; s++) {
            assert_int_equal(c->steps[s].selected.n_bytes, want[i].sel_len[s]);
            assert_memory_equal(c->steps[s].selected.bytes, want[i].sel[s], want[i].sel_len[s]);
            assert_int_equal(c->steps[s].n_top, want[i].ntop[s]);
            for (int k = 0; k < want[i].ntop[s]; k++) {
                assert_int_equal(c->steps[s].top[k].n_bytes, want[i].top_len[s][k]);
                assert_memory_equal(c->steps[s].top[k].bytes, want[i].top[s][k],
                                    want[i].top_len[s][k]);
                assert_memory_equal(&c->steps[s].top[k].logprob, &want[i].lp[s][k], 4);
            }
        }
    }
    ds4_lpvec_free(&f);
}

/* ------------------------------------------------------------ the official file */

static void test_official_file(void **state) {
    (void)state;
    char *path = tu_shared("vectors/official/official.vec");
    if (!path) skip();
    ds4_lpv_file f;
    ds4err err = {0};
    int rc = ds4_lpvec_read(path, &f, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(f.n_cases, 5);
    const ds4_lpv_case *c = ds4_lpvec_find(&f, "short_italian_fact");
    assert_non_null(c);
    assert_int_equal(c->ctx, 16384);
    assert_int_equal(c->n_steps, 4);
    assert_string_equal(c->prompt, "tests/test-vectors/prompts/short_italian_fact.txt");
    static const char *const want[] = {"Ada", " Lov", "el", "ace"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(c->steps[i].selected.n_bytes, strlen(want[i]));
        assert_memory_equal(c->steps[i].selected.bytes, want[i], strlen(want[i]));
        assert_int_equal(c->steps[i].n_top, 1);
        assert_true(c->steps[i].top[0].logprob == 0.0f);
    }
    c = ds4_lpvec_find(&f, "short_reasoning_plain");
    assert_int_equal(c->n_steps, 1);
    assert_int_equal(c->ctx, 4096);
    assert_memory_equal(c->steps[0].selected.bytes, "16", 2);

    /* Every case against its raw API answer, read with the JSON parser. */
    for (uint32_t i = 0; i < f.n_cases; i++) {
        c = &f.cases[i];
        char rel[200];
        snprintf(rel, sizeof(rel), "vectors/official/official/%s.official.json", c->id);
        char *jp = tu_shared(rel);
        if (!jp) fail_msg("official.vec is there but not its case %s", c->id);
        char *buf;
        size_t len;
        assert_int_equal(ds4_file_read(jp, 1 << 24, &buf, &len, &err), 0);
        ds4_json_doc *doc;
        assert_int_equal(ds4_json_parse(buf, len, jp, &doc, &err), 0);
        const ds4_json *steps = ds4_json_get(ds4_json_root(doc), "steps");
        assert_non_null(steps);
        assert_int_equal(steps->n, c->n_steps);
        for (uint32_t s = 0; s < c->n_steps; s++) {
            const ds4_json *b = ds4_json_get(ds4_json_get(&steps->elems[s], "token"), "bytes");
            assert_int_equal(b->n, c->steps[s].selected.n_bytes);
            for (size_t k = 0; k < b->n; k++)
                assert_int_equal((int)b->elems[k].num, c->steps[s].selected.bytes[k]);
        }
        ds4_json_free(doc);
        free(buf);
        free(jp);
    }
    ds4_lpvec_free(&f);
    assert_same_as_ds4(path);
    free(path);
}

/* ------------------------------------------------------------ grammar */

static void expect_bad(const char *text, int line, const char *needle) {
    ds4_lpv_file f;
    ds4err err = {0};
    int rc = ds4_lpvec_parse(text, strlen(text), "t.vec", &f, &err);
    char where[32];
    snprintf(where, sizeof(where), "t.vec:%d:", line);
    if (rc == 0 || !strstr(err.msg, where) || !strstr(err.msg, needle))
        fprintf(stderr, "want rejection at %s (%s); rc=%d msg=%s\ninput:\n%s\n", where, needle,
                rc, err.msg, text);
    assert_int_not_equal(rc, 0);
    assert_int_equal(err.code, DS4_E_FORMAT);
    assert_non_null(strstr(err.msg, where));
    assert_non_null(strstr(err.msg, needle));
}

static int parses(const char *text, ds4_lpv_file *f) {
    ds4err err = {0};
    int rc = ds4_lpvec_parse(text, strlen(text), "t.vec", f, &err);
    if (rc) fprintf(stderr, "unexpected: %s\n", err.msg);
    return rc;
}

static char *repeat(char c, size_t n) {
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

static void test_grammar(void **state) {
    (void)state;
    ds4_lpv_file f;
    /* Lax spellings ds4 also reads: CRLF, blanks, indentation, comments in a
     * case, upper-case hex, no final newline. */
    const char *ok = "# c\r\n\r\n  case a 16 2 p.txt  \r\n step 0 4A 1\r\n# inside\n"
                     "top 4a -1.25\r\n\tstep 1 42 0\nend";
    assert_int_equal(parses(ok, &f), 0);
    assert_int_equal(f.n_cases, 1);
    assert_int_equal(f.cases[0].steps[0].selected.bytes[0], 0x4a);
    assert_true(f.cases[0].steps[0].top[0].logprob == -1.25f);
    assert_int_equal(f.cases[0].steps[1].n_top, 0);
    ds4_lpvec_free(&f);

    expect_bad("step 0 41 1\n", 1, "before a case");
    expect_bad("# x\n\ncaseX a 1 1 p\n", 3, "before a case");
    expect_bad("case a 1 0 p\nend\n", 1, "nsteps 0");
    expect_bad("case a 1 17 p\nend\n", 1, "nsteps 17");
    expect_bad("case a 0 1 p\nend\n", 1, "ctx 0");
    expect_bad("case a -5 1 p\nend\n", 1, "ctx");
    expect_bad("case a 1 1\n", 1, "expected \"case");
    expect_bad("case a 1 1 p q\n", 1, "expected \"case");
    expect_bad("case a 1 1 p\nstep 0 41 1 x\n", 2, "expected \"step");
    expect_bad("case a 1 1 p\nstep\t0 41 0\nend\n", 2, "unexpected line");
    expect_bad("case a 1 2 p\nstep 1 41 0\n", 2, "step 1 where step 0");
    expect_bad("case a 1 2 p\nstep 0 41 0\nstep 0 41 0\n", 3, "step 0 where step 1");
    expect_bad("case a 1 1 p\nstep 1 41 0\n", 2, "step index 1");
    expect_bad("case a 1 1 p\ntop 41 0\n", 2, "before any step");
    expect_bad("case a 1 1 p\nstep 0 41 1\ntop 41 0\ntop 41 0\n", 4, "more top lines");
    expect_bad("case a 1 1 p\nstep 0 41 2\ntop 41 0\nend\n", 4, "1 top lines, 2 announced");
    expect_bad("case a 1 2 p\nstep 0 41 0\nend\n", 3, "after 1 steps, 2 announced");
    expect_bad("case a 1 1 p\nstep 0 41 0\n", 3, "no end line");
    expect_bad("case a 1 1 p\nstep 0 41 0\nfoo\n", 3, "unexpected line");
    expect_bad("case a 1 1 p\ncase b 1 1 p\n", 2, "unexpected line");
    expect_bad("case a 1 1 p\nstep 0 416 0\n", 2, "hex");
    expect_bad("case a 1 1 p\nstep 0 zz 0\n", 2, "hex");
    expect_bad("case a 1 1 p\nstep 0 41 33\n", 2, "top-count 33");
    expect_bad("case a 1 1 p\nstep 0 41 1\ntop 41 nan\n", 3, "logprob");
    expect_bad("case a 1 1 p\nstep 0 41 1\ntop 41 0x1p3\n", 3, "logprob");
    expect_bad("case a 1 1 p\nstep 0 41 1\ntop 41 1e99\n", 3, "finite");
    expect_bad("case a 1 1 p\nstep 0 41 1\ntop 41 -1 2\n", 3, "expected \"top");
    expect_bad("case a 1 1 p\nstep 0 41 0\nend\ncase a 2 1 p\nstep 0 41 0\nend\n", 4,
               "already used at line 1");
    ds4err err = {0};
    assert_int_not_equal(ds4_lpvec_parse("case a 1 1 p\n\0", 14, "t.vec", &f, &err), 0);
    assert_non_null(strstr(err.msg, "t.vec:2: NUL"));
}

static void test_limits(void **state) {
    (void)state;
    ds4_lpv_file f;
    char *text = malloc(1 << 16);
    char *s;

    s = repeat('i', 95);
    snprintf(text, 1 << 16, "case %s 1 1 p\nstep 0 41 0\nend\n", s);
    assert_int_equal(parses(text, &f), 0);
    assert_int_equal(strlen(f.cases[0].id), 95);
    ds4_lpvec_free(&f);
    snprintf(text, 1 << 16, "case %si 1 1 p\nstep 0 41 0\nend\n", s);
    expect_bad(text, 1, "96 chars");
    free(s);

    s = repeat('p', 511);
    snprintf(text, 1 << 16, "case a 1 1 %s\nstep 0 41 0\nend\n", s);
    assert_int_equal(parses(text, &f), 0);
    ds4_lpvec_free(&f);
    snprintf(text, 1 << 16, "case a 1 1 %sp\nstep 0 41 0\nend\n", s);
    expect_bad(text, 1, "512 chars");
    free(s);

    s = repeat('a', 256);
    snprintf(text, 1 << 16, "case a 1 1 p\nstep 0 %s 0\nend\n", s);
    assert_int_equal(parses(text, &f), 0);
    assert_int_equal(f.cases[0].steps[0].selected.n_bytes, 128);
    ds4_lpvec_free(&f);
    snprintf(text, 1 << 16, "case a 1 1 p\nstep 0 %saa 0\nend\n", s);
    expect_bad(text, 2, "258 hex digits");
    free(s);

    /* 32 top lines, and 16 steps. */
    size_t n = (size_t)snprintf(text, 1 << 16, "case a 1 16 p\n");
    for (int i = 0; i < 16; i++) {
        n += (size_t)snprintf(text + n, (1 << 16) - n, "step %d 41 %d\n", i, i ? 0 : 32);
        for (int k = 0; i == 0 && k < 32; k++)
            n += (size_t)snprintf(text + n, (1 << 16) - n, "top %02x -%d.5\n", k + 1, k);
    }
    snprintf(text + n, (1 << 16) - n, "end\n");
    assert_int_equal(parses(text, &f), 0);
    assert_int_equal(f.cases[0].steps[0].n_top, 32);
    assert_true(f.cases[0].steps[0].top[31].logprob == -31.5f);
    ds4_lpvec_free(&f);

    /* Lines: 2047 bytes before the newline are fine, 2048 are not. */
    s = repeat('#', 2047);
    snprintf(text, 1 << 16, "%s\ncase a 1 1 p\nstep 0 41 0\nend\n", s);
    assert_int_equal(parses(text, &f), 0);
    ds4_lpvec_free(&f);
    snprintf(text, 1 << 16, "%s#\ncase a 1 1 p\nstep 0 41 0\nend\n", s);
    expect_bad(text, 1, "2048 bytes");
    free(s);
    free(text);
}

/* ------------------------------------------------------------ appending */

static void add_tok(ds4_golden_tok *t, const char *bytes, size_t n, double lp) {
    memset(t, 0, sizeof(*t));
    t->bytes = (uint8_t *)bytes;
    t->n_bytes = (uint32_t)n;
    t->logprob = lp;
}

/* Two steps: step 0 with three alternatives, step 1 with one. */
static void small_trace(ds4_golden *g) {
    ds4_golden_init(g, DS4_TRACE_DUMP);
    g->h.settings.ctx = 4096;
    ds4_golden_tok top0[3], top1[1];
    add_tok(&top0[0], "Ada", 3, -0.25);
    add_tok(&top0[1], "\xff\xfe", 2, -0.1);
    add_tok(&top0[2], "x", 1, -3);
    add_tok(&top1[0], "\"q\\\n", 4, -1.5);
    ds4_golden_step s0 = {.n_top = 3, .top = top0}, s1 = {.n_top = 1, .top = top1};
    add_tok(&s0.tok, "Ada", 3, 0);
    add_tok(&s1.tok, "\"q\\\n", 4, 0);
    ds4err err = {0};
    assert_int_equal(ds4_golden_push_step(g, &s0, &err), 0);
    assert_int_equal(ds4_golden_push_step(g, &s1, &err), 0);
}

static const char case_a[] =
    "case my_case 4096 2 tests/test-vectors/prompts/my.txt\n"
    "step 0 416461 2\n"
    "top 416461 -0.25\n"
    "top fffe -0.100000001\n"
    "step 1 22715c0a 1\n"
    "top 22715c0a -1.5\n"
    "end\n";

static const char file_header[] =
    "# ds4-official-logprob-vectors-v1\n"
    "# case <id> <ctx> <steps> <prompt-file>\n"
    "# step <index> <selected-hex> <top-count>\n"
    "# top <token-hex> <official-logprob>\n"
    "\n";

static char *file_text(const char *path) {
    char *buf;
    size_t len;
    ds4err err = {0};
    if (ds4_file_read(path, 1 << 20, &buf, &len, &err)) return NULL;
    return buf;
}

static void test_append(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "local.vec");
    ds4_golden g;
    small_trace(&g);
    ds4err err = {0};
    ds4_lpv_append_opts o = {"my_case", "tests/test-vectors/prompts/my.txt", 2, false};

    assert_int_equal(ds4_lpvec_append(path, &g, &o, &err), 0);
    char want[4096];
    snprintf(want, sizeof(want), "%s%s", file_header, case_a);
    char *got = file_text(path);
    assert_string_equal(got, want);
    free(got);

    /* A second case goes after a blank line. */
    ds4_lpv_append_opts o2 = {"other", "p2.txt", 0, false};
    assert_int_equal(ds4_lpvec_append(path, &g, &o2, &err), 0);
    snprintf(want, sizeof(want),
             "%s%s\ncase other 4096 2 p2.txt\nstep 0 416461 0\nstep 1 22715c0a 0\nend\n",
             file_header, case_a);
    got = file_text(path);
    assert_string_equal(got, want);
    free(got);
    assert_same_as_ds4(path);

    /* Same id: refused, file untouched; with replace: swapped in place. */
    assert_int_not_equal(ds4_lpvec_append(path, &g, &o, &err), 0);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_non_null(strstr(err.msg, "already exists"));
    got = file_text(path);
    assert_string_equal(got, want);
    free(got);
    o.replace = true;
    o.max_top = 1;
    assert_int_equal(ds4_lpvec_append(path, &g, &o, &err), 0);
    snprintf(want, sizeof(want),
             "%scase my_case 4096 2 tests/test-vectors/prompts/my.txt\nstep 0 416461 1\n"
             "top 416461 -0.25\nstep 1 22715c0a 1\ntop 22715c0a -1.5\nend\n"
             "\ncase other 4096 2 p2.txt\nstep 0 416461 0\nstep 1 22715c0a 0\nend\n",
             file_header);
    got = file_text(path);
    assert_string_equal(got, want);
    free(got);
    assert_same_as_ds4(path);

    /* Bad ids and paths. */
    ds4_lpv_append_opts bad[] = {{"a b", "p", 1, false}, {"", "p", 1, false},
                                 {"#x", "p", 1, false},  {"ok", "with space", 1, false},
                                 {"ok", NULL, 1, false}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_not_equal(ds4_lpvec_append(path, &g, &bad[i], &err), 0);
        assert_int_equal(err.code, DS4_E_ARG);
    }
    ds4_golden_free(&g);

    /* A token official.vec cannot hold. */
    ds4_golden_init(&g, DS4_TRACE_DUMP);
    g.h.settings.ctx = 8;
    ds4_golden_step s = {.n_top = 0};
    add_tok(&s.tok, "", 0, 0);
    assert_int_equal(ds4_golden_push_step(&g, &s, &err), 0);
    ds4_lpv_append_opts o3 = {"empty", "p", 1, false};
    assert_int_not_equal(ds4_lpvec_append(path, &g, &o3, &err), 0);
    assert_int_equal(err.code, DS4_E_UNSUPPORTED);
    ds4_golden_free(&g);

    /* Never append to a file that does not parse. */
    char *junk = tu_path(dir, "junk.vec");
    assert_int_equal(ds4_file_write_atomic(junk, "hello\n", 6, &err), 0);
    small_trace(&g);
    assert_int_not_equal(ds4_lpvec_append(junk, &g, &o, &err), 0);
    assert_int_equal(err.code, DS4_E_FORMAT);
    got = file_text(junk);
    assert_string_equal(got, "hello\n");
    free(got);
    ds4_golden_free(&g);
    free(junk);
    free(path);
    tu_rmdir(dir);
}

/* Only the first 16 steps go into a case; conversion back to a golden keeps
 * bytes and f32 logprobs. */
static void test_to_golden(void **state) {
    (void)state;
    ds4_golden g;
    ds4_golden_init(&g, DS4_TRACE_DUMP);
    g.h.settings.ctx = 100;
    ds4err err = {0};
    for (int i = 0; i < 20; i++) {
        char b[8];
        snprintf(b, sizeof(b), "s%d", i);
        ds4_golden_tok top;
        add_tok(&top, b, strlen(b), -0.1 * i);
        ds4_golden_step s = {.n_top = 1, .top = &top};
        add_tok(&s.tok, b, strlen(b), 0);
        assert_int_equal(ds4_golden_push_step(&g, &s, &err), 0);
    }
    ds4_buf out = {0};
    ds4_lpv_append_opts o = {"c", "p", 20, false};
    assert_int_equal(ds4_lpvec_format_case(&g, &o, &out, &err), 0);
    ds4_golden_free(&g);
    ds4_lpv_file f;
    assert_int_equal(parses(out.p, &f), 0);
    assert_int_equal(f.cases[0].n_steps, 16);
    assert_int_equal(ds4_lpvec_to_golden(&f.cases[0], &g, &err), 0);
    assert_int_equal(g.kind, DS4_TRACE_VEC);
    assert_string_equal(g.vec_id, "c");
    assert_int_equal(g.h.settings.ctx, 100);
    assert_int_equal(g.n_steps, 16);
    assert_true(g.lp_f32 && !g.has_ids && !g.has_logits);
    assert_int_equal(g.steps[15].tok.id, -1);
    assert_memory_equal(g.steps[15].tok.bytes, "s15", 3);
    assert_true(g.steps[15].top[0].logprob == (double)(float)(-0.1 * 15));
    ds4_golden_free(&g);
    ds4_lpvec_free(&f);
    ds4_buf_free(&out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_official_file),
        cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_to_golden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
