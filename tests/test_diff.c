/* The comparison behind ds4ref-diff (check/diff/diff.h) on constructed
 * goldens whose expected figures are worked out by hand below (KL with the C
 * library's exp/log, not ds4ref's). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "testutil.h"
#include "ref/text/json.h"
#include "check/diff/diff.h"
#include "ref/format/trace.h"
#include "ref/format/dump.h"
#include "ref/format/golden.h"
#include "ref/format/golden_write.h"
#include "ref/format/lpvec.h"

enum { MAXK = 8 };

static void tok_bytes(int32_t id, char *out) {
    snprintf(out, 16, "t%d", id);
}

/* A golden with prompt {1,2,3}, top_k 6, max_steps `steps`. */
static void new_golden(ds4_golden *g, uint32_t steps, const int32_t *prompt, uint32_t n_prompt) {
    static int32_t default_prompt[] = {1, 2, 3};
    ds4_golden_header h;
    memset(&h, 0, sizeof(h));
    snprintf(h.version, sizeof(h.version), "test");
    h.model.file = "m.gguf";
    h.model.size = 99;
    ds4_modelid_combine(NULL, 0, h.model.tensor_data_sha256);
    h.settings = (ds4_golden_settings){.qat = true, .ctx = 64, .chunk = 8, .top_k = 6,
                                       .max_steps = steps, .stop_at_eos = true};
    h.prompt = prompt ? (int32_t *)prompt : default_prompt;
    h.n_prompt = prompt ? n_prompt : 3;
    ds4_golden_init(g, DS4_TRACE_GOLDEN);
    ds4err err = {0};
    assert_int_equal(ds4_golden_set_header(g, &h, &err), 0);
}

/* Append a step: ids/lps by descending logprob; logit = lp + 10; the greedy
 * token is ids[0]. */
static void add_step(ds4_golden *g, uint32_t n, const int32_t *ids, const double *lps,
                     uint8_t digest) {
    char b[MAXK][16];
    ds4_golden_tok top[MAXK];
    for (uint32_t i = 0; i < n; i++) {
        tok_bytes(ids[i], b[i]);
        top[i] = (ds4_golden_tok){.id = ids[i], .n_bytes = (uint32_t)strlen(b[i]),
                                  .bytes = (uint8_t *)b[i], .logit = (float)(lps[i] + 10),
                                  .logprob = lps[i]};
    }
    ds4_golden_step st = {.tok = top[0], .n_top = n, .top = top};
    memset(st.logits_sha256, digest, 32);
    ds4err err = {0};
    int rc = ds4_golden_push_step(g, &st, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
}

static const int32_t ids_a[6] = {10, 11, 12, 13, 14, 15};
static const double lps_a[6] = {-0.1, -2.5, -3.0, -4, -5, -6};

/* A: four identical-looking steps (digest differs per step). */
static void golden_a(ds4_golden *g) {
    new_golden(g, 4, NULL, 0);
    for (int i = 0; i < 4; i++) add_step(g, 6, ids_a, lps_a, (uint8_t)i);
    ds4_golden_set_end(g, DS4_STOP_LENGTH);
}

static void compute(const ds4_golden *a, const ds4_golden *b, bool all, ds4_diff_report *r) {
    ds4_diff_opts o = {.all_steps = all};
    ds4err err = {0};
    assert_int_equal(ds4chk_diff_compute(a, b, &o, r, &err), 0);
}

/* No threshold checked. */
static void limits_none(ds4_diff_limits *l) {
    *l = (ds4_diff_limits){NAN, NAN, NAN, NAN, NAN, false};
}

/* The golden g written whole to path. */
static int golden_write(const ds4_golden *g, const char *path, ds4err *err) {
    ds4_buf b = {0};
    int rc = ds4_golden_write_text(g, &b, err);
    if (rc == 0) rc = ds4_file_write_atomic(path, b.p ? b.p : "", b.len, err);
    ds4_buf_free(&b);
    return rc;
}

static uint32_t violations(const ds4_diff_report *r, const ds4_diff_limits *l, const char *need) {
    ds4_buf why = {0};
    uint32_t n = ds4chk_diff_check(r, l, &why);
    if (need) {
        assert_non_null(why.p);
        if (!strstr(why.p, need)) fprintf(stderr, "violations: %s\n", why.p);
        assert_non_null(strstr(why.p, need));
    }
    ds4_buf_free(&why);
    return n;
}

/* ------------------------------------------------------------ identical */

static void test_identical(void **state) {
    (void)state;
    ds4_golden a, b;
    golden_a(&a);
    golden_a(&b);
    ds4_diff_report r;
    compute(&a, &b, false, &r);
    assert_true(r.exact);
    assert_int_equal(r.first_divergence, -1);
    assert_int_equal(r.first_inexact, -1);
    assert_int_equal(r.n_compared, 4);
    assert_int_equal(r.n_agree, 4);
    assert_true(r.top1 == 1.0 && r.top5 == 1.0 && r.top20 == 1.0);
    assert_true(r.max_dlp == 0 && r.mean_dlp == 0);
    assert_int_equal(r.n_pairs, 24);
    assert_int_equal(r.n_kl, 4);
    assert_true(r.max_kl == 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r.steps[i].overlap[DS4_DIFF_TOP5], 5);
        assert_int_equal(r.steps[i].avail[DS4_DIFF_TOP20], 6);
    }
    ds4_diff_limits l;
    limits_none(&l);
    l.exact = true;
    l.max_dlogprob = 0;
    l.min_top1 = 1;
    l.min_top5 = 1;
    l.min_top20 = 1;
    l.max_kl = 0;
    assert_int_equal(violations(&r, &l, NULL), 0);
    ds4chk_diff_report_free(&r);

    /* Settings that do not change numbers do not break exactness. */
    b.h.settings.chunk = 1;
    compute(&a, &b, false, &r);
    assert_true(r.exact);
    assert_non_null(strstr(r.notes.p, "chunk 8 vs 1"));
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&a);
    ds4_golden_free(&b);
}

/* ------------------------------------------------------------ one bit */

static void test_one_bit_fails_exact(void **state) {
    (void)state;
    ds4_golden a, b;
    golden_a(&a);
    golden_a(&b);
    double x = b.steps[1].top[3].logprob;
    double y = nextafter(x, 0);
    b.steps[1].top[3].logprob = y;
    ds4_diff_report r;
    compute(&a, &b, false, &r);
    assert_false(r.exact);
    assert_int_equal(r.first_inexact, 1);
    assert_string_equal(r.steps[1].inexact, "top[3].logprob");
    assert_int_equal(r.first_divergence, -1);
    assert_true(r.top1 == 1.0);
    assert_true(r.max_dlp == fabs(x - y) && r.max_dlp > 0);
    ds4_diff_limits l;
    limits_none(&l);
    l.min_top1 = 1;
    l.max_dlogprob = 1e-12;
    assert_int_equal(violations(&r, &l, NULL), 0);
    l.exact = true;
    assert_int_equal(violations(&r, &l, "--exact: step 1 differs (top[3].logprob)"), 1);
    ds4chk_diff_report_free(&r);

    /* The logits digest alone. */
    b.steps[1].top[3].logprob = x;
    b.steps[2].logits_sha256[31] ^= 1;
    compute(&a, &b, false, &r);
    assert_false(r.exact);
    assert_int_equal(r.first_inexact, 2);
    assert_string_equal(r.steps[2].inexact, "logits_sha256");
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&a);
    ds4_golden_free(&b);
}

/* ------------------------------------------------------------ known figures */

static void test_known_figures(void **state) {
    (void)state;
    ds4_golden a, b;
    new_golden(&a, 2, NULL, 0);
    new_golden(&b, 2, NULL, 0);
    add_step(&a, 6, ids_a, lps_a, 0);
    add_step(&b, 6, ids_a, lps_a, 0);
    /* Step 1: B agrees on the greedy token, swaps 11 and 12 around and has
     * three tokens A does not list. */
    static const int32_t ids_b[6] = {10, 12, 20, 11, 21, 22};
    static const double lps_b[6] = {-0.2, -2.0, -3.0, -4.0, -5.0, -7.0};
    add_step(&a, 6, ids_a, lps_a, 1);
    add_step(&b, 6, ids_b, lps_b, 9);
    ds4_diff_report r;
    compute(&a, &b, false, &r);
    const ds4_diff_step *d = &r.steps[1];
    assert_true(d->token_equal);
    assert_int_equal(d->overlap[DS4_DIFF_TOP1], 1);
    assert_int_equal(d->overlap[DS4_DIFF_TOP5], 3);    /* {10,11,12} of A's 5 in B's 5 */
    assert_int_equal(d->avail[DS4_DIFF_TOP5], 5);
    assert_int_equal(d->overlap[DS4_DIFF_TOP20], 3);
    assert_int_equal(d->avail[DS4_DIFF_TOP20], 6);
    assert_int_equal(d->n_common, 3);
    /* |dlp|: id 10: 0.1, id 11: |-2.5 - -4| = 1.5, id 12: |-3 - -2| = 1. */
    assert_true(fabs(d->max_dlp - 1.5) < 1e-15);
    assert_true(fabs(d->mean_dlp - 2.6 / 3) < 1e-15);
    /* KL over {10, 11, 12}, renormalized. */
    double pa[3] = {exp(-0.1), exp(-2.5), exp(-3.0)}, pb[3] = {exp(-0.2), exp(-4.0), exp(-2.0)};
    double sa = pa[0] + pa[1] + pa[2], sb = pb[0] + pb[1] + pb[2], kl = 0;
    for (int i = 0; i < 3; i++) kl += pa[i] / sa * log((pa[i] / sa) / (pb[i] / sb));
    assert_true(d->has_kl);
    assert_true(fabs(d->kl - kl) < 1e-12 * kl);
    /* Summary over both steps (step 0 identical: six pairs at 0). */
    assert_int_equal(r.n_pairs, 9);
    assert_true(fabs(r.mean_dlp - 2.6 / 9) < 1e-15);
    assert_true(fabs(r.max_dlp - 1.5) < 1e-15);
    assert_true(fabs(r.top5 - (1.0 + 0.6) / 2) < 1e-15);
    assert_true(fabs(r.top20 - (1.0 + 0.5) / 2) < 1e-15);
    assert_true(fabs(r.max_kl - kl) < 1e-12 * kl);
    assert_true(fabs(r.mean_kl - kl / 2) < 1e-12 * kl);
    assert_true(r.top1 == 1.0);
    assert_false(r.exact);

    ds4_diff_limits l;
    limits_none(&l);
    l.max_dlogprob = 1.5;
    l.min_top5 = 0.8;
    l.min_top20 = 0.75;
    l.max_kl = kl * 1.001;
    assert_int_equal(violations(&r, &l, NULL), 0);
    l.max_dlogprob = 1.4;
    l.min_top5 = 0.81;
    l.min_top20 = 0.76;
    l.max_kl = kl * 0.999;
    assert_int_equal(violations(&r, &l, "--max-kl"), 4);
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&a);
    ds4_golden_free(&b);
}

/* ------------------------------------------------------------ divergence */

static void test_divergence(void **state) {
    (void)state;
    ds4_golden a, b;
    golden_a(&a);
    new_golden(&b, 4, NULL, 0);
    static const int32_t ids_x[6] = {11, 10, 12, 13, 14, 15};
    for (int i = 0; i < 4; i++) add_step(&b, 6, i == 2 ? ids_x : ids_a, lps_a, (uint8_t)i);
    ds4_golden_set_end(&b, DS4_STOP_LENGTH);
    ds4_diff_report r;
    compute(&a, &b, false, &r);
    assert_int_equal(r.first_divergence, 2);
    assert_int_equal(r.n_compared, 3);          /* 0, 1, and the divergent step */
    assert_int_equal(r.n_agree, 2);
    assert_true(r.top1 == 2.0 / 3);             /* over the compared steps */
    assert_true(r.steps[2].compared && !r.steps[2].token_equal);
    assert_false(r.steps[3].compared);
    assert_false(r.exact);
    ds4_diff_limits l;
    limits_none(&l);
    /* No threshold at all: the divergence still fails the diff. */
    assert_int_equal(violations(&r, &l, "--min-top1 1 (the default when no threshold is given): "
                                        "got 0.666667"), 1);
    l.min_top1 = 0.6;
    assert_int_equal(violations(&r, &l, NULL), 0);
    l.min_top1 = 0.7;
    assert_int_equal(violations(&r, &l, "--min-top1 0.7: got 0.666667"), 1);
    l.min_top1 = NAN;
    l.max_kl = 1e9;   /* a threshold given: no default */
    assert_int_equal(violations(&r, &l, NULL), 0);
    ds4_buf text = {0}, why = {0};
    ds4err err = {0};
    l.min_top1 = 0.7;
    assert_int_equal(ds4chk_diff_check(&r, &l, &why), 1);
    assert_int_equal(ds4chk_diff_format_text(&r, &a, &b, "A.jsonl", "B.jsonl", false, &why, &text,
                                          &err), 0);
    assert_non_null(strstr(text.p, "divergence at step 2: A chose \"t10\"(10), B chose "
                                   "\"t11\"(11); later steps follow different prefixes"));
    assert_non_null(strstr(text.p, "summary: steps_a=4 steps_b=4 compared=3 token_agree=2 "
                                   "top1=0.666667 first_divergence=2"));
    /* The verdict ends the report, a line per violation. */
    assert_non_null(strstr(text.p, "\nresult: FAIL\n  violated: --min-top1 0.7: got 0.666667\n"));
    ds4_buf_free(&text);
    ds4_buf_free(&why);
    ds4chk_diff_report_free(&r);

    compute(&a, &b, true, &r);
    assert_int_equal(r.n_compared, 4);
    assert_int_equal(r.n_agree, 3);
    assert_true(r.top1 == 0.75);
    ds4chk_diff_report_free(&r);

    /* B one step short, otherwise equal (a 16-step official.vec against a
     * longer golden, say): every compared token reproduced, the rest noted. */
    ds4_golden_free(&b);
    new_golden(&b, 4, NULL, 0);
    for (int i = 0; i < 3; i++) add_step(&b, 6, ids_a, lps_a, (uint8_t)i);
    ds4_golden_set_end(&b, DS4_STOP_INTERRUPTED);
    compute(&a, &b, false, &r);
    assert_int_equal(r.first_divergence, -1);
    assert_true(r.top1 == 1.0);
    limits_none(&l);
    l.min_top1 = 1;
    assert_int_equal(violations(&r, &l, NULL), 0);
    assert_false(r.exact);
    assert_non_null(strstr(r.notes.p, "B is incomplete (stop: interrupted)"));
    assert_non_null(strstr(r.notes.p, "A has 4 steps, B has 3"));
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&a);
    ds4_golden_free(&b);
}

/* ------------------------------------------------------------ prompt, model */

static void test_prompt_and_model(void **state) {
    (void)state;
    ds4_golden a, b;
    golden_a(&a);
    static const int32_t other[] = {1, 2, 4};
    new_golden(&b, 4, other, 3);
    for (int i = 0; i < 4; i++) add_step(&b, 6, ids_a, lps_a, (uint8_t)i);
    ds4_golden_set_end(&b, DS4_STOP_LENGTH);
    ds4_diff_report r;
    compute(&a, &b, false, &r);
    assert_true(r.prompt_differs);
    assert_false(r.exact);
    assert_non_null(strstr(r.notes.p, "prompts differ at token 2 (3 vs 4)"));
    ds4_diff_limits l;
    limits_none(&l);
    assert_int_equal(violations(&r, &l, "prompts differ"), 1);
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&b);

    /* Same everything, one tensor of the model differs. */
    golden_a(&b);
    ds4_modelid_free(&b.h.model);
    ds4_tensor_hash t[2] = {{"blk.0.ffn", {1}}, {"output", {2}}};
    ds4_modelid m = {.file = "m2.gguf", .size = 99, .n_tensors = 2, .tensors = t};
    ds4_modelid_combine(t, 2, m.tensor_data_sha256);
    ds4err err = {0};
    assert_int_equal(ds4_modelid_copy(&b.h.model, &m, &err), 0);
    ds4_modelid_free(&a.h.model);
    t[0].sha256[0] = 7;
    ds4_modelid_combine(t, 2, m.tensor_data_sha256);
    m.file = "m.gguf";
    assert_int_equal(ds4_modelid_copy(&a.h.model, &m, &err), 0);
    compute(&a, &b, false, &r);
    assert_true(r.model_differs);
    assert_false(r.exact);
    assert_int_equal(r.first_inexact, -1);
    assert_non_null(strstr(r.notes.p, "1 tensor changed: blk.0.ffn"));
    l.exact = true;
    assert_int_equal(violations(&r, &l, "outside the steps"), 1);
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&a);
    ds4_golden_free(&b);
}

/* ------------------------------------------------------------ other formats */

static void test_against_dump_and_vec(void **state) {
    (void)state;
    ds4_golden a, d, v;
    golden_a(&a);
    ds4_buf text = {0};
    ds4err err = {0};
    assert_int_equal(ds4_dump_format(&a, &text, &err), 0);
    assert_int_equal(ds4_dump_parse(text.p, text.len, "d.json", &d, &err), 0);
    ds4_buf_free(&text);
    ds4_diff_report r;
    compute(&a, &d, false, &r);
    assert_true(r.exact);   /* at the f32 precision the dump carries */
    assert_non_null(strstr(r.notes.p, "prompt compared by token count only"));
    assert_true(r.max_dlp > 0 && r.max_dlp < 1e-7);   /* double vs its f32 rounding */
    ds4chk_diff_report_free(&r);

    /* One f32 ulp in the dump is a difference. */
    float f32 = (float)d.steps[3].top[5].logprob;
    d.steps[3].top[5].logprob = nextafterf(f32, 0);
    compute(&a, &d, false, &r);
    assert_false(r.exact);
    assert_string_equal(r.steps[3].inexact, "top[5].logprob");
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&d);

    /* An official.vec case with one alternative a step: matched by bytes. */
    ds4_lpv_append_opts o = {"x", "p", 1, false};
    assert_int_equal(ds4_lpvec_format_case(&a, &o, &text, &err), 0);
    ds4_lpv_file f;
    assert_int_equal(ds4_lpvec_parse(text.p, text.len, "v.vec", &f, &err), 0);
    assert_int_equal(ds4_lpvec_to_golden(&f.cases[0], &v, &err), 0);
    ds4_lpvec_free(&f);
    ds4_buf_free(&text);
    compute(&a, &v, false, &r);
    assert_true(r.top1 == 1.0);
    assert_int_equal(r.n_pairs, 4);
    assert_int_equal(r.n_kl, 0);
    assert_false(r.exact);   /* 6 alternatives vs 1 */
    assert_string_equal(r.steps[0].inexact, "top list length 6 vs 1");
    ds4_diff_limits l;
    limits_none(&l);
    l.max_kl = 1;
    assert_int_equal(violations(&r, &l, "--max-kl 1: nothing to measure"), 1);
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&v);
    ds4_golden_free(&a);
}

/* ------------------------------------------------------------ JSON, loading */

static void test_json_report(void **state) {
    (void)state;
    ds4_golden a, b;
    golden_a(&a);
    golden_a(&b);
    b.steps[1].top[2].logprob = -3.25;
    ds4_diff_report r;
    compute(&a, &b, false, &r);
    ds4_diff_limits l;
    limits_none(&l);
    l.max_dlogprob = 0.1;
    ds4_buf why = {0}, out = {0};
    assert_int_equal(ds4chk_diff_check(&r, &l, &why), 1);
    ds4err err = {0};
    assert_int_equal(ds4chk_diff_format_json(&r, &a, &b, "a", "b", &why, &out, &err), 0);
    ds4_json_doc *doc;
    int rc = ds4_json_parse(out.p, out.len, "report", &doc, &err);
    if (rc) fprintf(stderr, "%s\n%s\n", err.msg, out.p);
    assert_int_equal(rc, 0);
    const ds4_json *root = ds4_json_root(doc);
    const ds4_json *s = ds4_json_get(root, "summary");
    assert_true(ds4_json_get(s, "max_dlogprob")->num == 0.25);
    assert_int_equal(ds4_json_get(s, "compared")->num, 4);
    assert_int_equal(ds4_json_get(s, "first_inexact")->num, 1);
    assert_int_equal(ds4_json_get(s, "first_divergence")->type, DS4_JSON_NULL);
    assert_int_equal(ds4_json_get(root, "pass")->type, DS4_JSON_FALSE);
    const ds4_json *v = ds4_json_get(root, "violations");
    assert_int_equal(v->n, 1);
    assert_non_null(strstr(v->elems[0].str, "--max-dlogprob 0.1: got 0.25"));
    const ds4_json *st = &ds4_json_get(root, "steps")->elems[1];
    assert_true(ds4_json_is_str(ds4_json_get(st, "inexact"), "top[2].logprob"));
    assert_true(ds4_json_is_str(ds4_json_get(ds4_json_get(st, "a"), "bytes"), "743130"));
    ds4_json_free(doc);
    ds4_buf_free(&why);
    ds4_buf_free(&out);
    ds4chk_diff_report_free(&r);
    ds4_golden_free(&a);
    ds4_golden_free(&b);
}

static void test_load_detects_kind(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *pg = tu_path(dir, "g.jsonl"), *pd = tu_path(dir, "d.json"), *pv = tu_path(dir, "v.vec");
    ds4_golden a, g;
    golden_a(&a);
    ds4err err = {0};
    assert_int_equal(golden_write(&a, pg, &err), 0);
    ds4_afile fd;
    assert_int_equal(ds4_file_atomic_open(&fd, pd, &err), 0);
    assert_int_equal(ds4_dump_write(&a, &fd, &err), 0);
    ds4_lpv_append_opts o1 = {"one", "p", 3, false}, o2 = {"two", "p", 3, false};
    assert_int_equal(ds4_lpvec_append(pv, &a, &o1, &err), 0);

    assert_int_equal(ds4_trace_load(pg, NULL, &g, &err), 0);
    assert_int_equal(g.kind, DS4_TRACE_GOLDEN);
    ds4_golden_free(&g);
    assert_int_equal(ds4_trace_load(pd, "ignored", &g, &err), 0);
    assert_int_equal(g.kind, DS4_TRACE_DUMP);
    ds4_golden_free(&g);
    assert_int_equal(ds4_trace_load(pv, NULL, &g, &err), 0);   /* the only case */
    assert_int_equal(g.kind, DS4_TRACE_VEC);
    ds4_golden_free(&g);
    assert_int_equal(ds4_lpvec_append(pv, &a, &o2, &err), 0);
    assert_int_not_equal(ds4_trace_load(pv, NULL, &g, &err), 0);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_non_null(strstr(err.msg, "2 cases (one, two)"));
    assert_int_not_equal(ds4_trace_load(pv, "three", &g, &err), 0);
    assert_int_equal(err.code, DS4_E_ARG);
    assert_int_equal(ds4_trace_load(pv, "two", &g, &err), 0);
    assert_string_equal(g.vec_id, "two");
    ds4_golden_free(&g);

    /* A corrupted golden is a format error naming its line. */
    char *buf;
    size_t len;
    assert_int_equal(ds4_file_read(pg, 1 << 20, &buf, &len, &err), 0);
    char *third = strchr(strchr(buf, '\n') + 1, '\n') + 1;
    char *dig = strstr(third, "logits_sha256\":\"") + 16;
    dig[10] = 'X';
    assert_int_equal(ds4_file_write_atomic(pg, buf, len, &err), 0);
    free(buf);
    assert_int_not_equal(ds4_trace_load(pg, NULL, &g, &err), 0);
    assert_int_equal(err.code, DS4_E_FORMAT);
    assert_non_null(strstr(err.msg, "g.jsonl:3: logits_sha256"));

    /* A file of none of the three kinds says so, whatever it starts with. */
    static const char *const others[] = {"GGUF\x03\x00\x00\x00", "hello\n", "[1,2]\n",
                                         "{\"foo\":1}\n", "# a comment\nstep 0 41 0\n"};
    for (size_t k = 0; k < sizeof(others) / sizeof(others[0]); k++) {
        assert_int_equal(ds4_file_write_atomic(pv, others[k], strlen(others[k]), &err), 0);
        assert_int_not_equal(ds4_trace_load(pv, NULL, &g, &err), 0);
        assert_int_equal(err.code, DS4_E_FORMAT);
        if (!strstr(err.msg, "v.vec: not a golden, ds4 dump or official.vec (it begins"))
            fail_msg("%s", err.msg);
    }

    ds4_golden_free(&a);
    free(pg);
    free(pd);
    free(pv);
    tu_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical),
        cmocka_unit_test(test_one_bit_fails_exact),
        cmocka_unit_test(test_known_figures),
        cmocka_unit_test(test_divergence),
        cmocka_unit_test(test_prompt_and_model),
        cmocka_unit_test(test_against_dump_and_vec),
        cmocka_unit_test(test_json_report),
        cmocka_unit_test(test_load_detects_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
