/* ds4_test --mtp-verify-depth: speculative decoding commits exactly the
 * greedy tokens (ds4's test of the same name, PR #358, made exact).
 *
 * A verbatim-copy prompt is decoded speculatively with the MTP head at draft
 * depth 4, then 2..8; the committed tokens are teacher-forced through plain
 * one-token decoding and each must be the argmax at its position (gap 0.0,
 * where ds4's non-exact verifier allows 2.0); and the speculative records
 * (tokens and the SHA-256 of every logits vector) must equal plain greedy
 * decoding's.  On the synthetic model the same equality is also required for
 * the scripted drafter (errors injected at every depth), for verify batches
 * split by a small chunk, and for two rows decoded together.
 *
 * The drafter is the model's: its MTP head, or the DSpark drafter of a
 * DeepSeek-V4-Flash-0731 model given without one; every report line names it.
 *
 * Model: $DS4_TEST_MODEL with $DS4_TEST_MTP if the model file exists, or
 * alone when it has a DSpark drafter (the real model runs only its drafter
 * on 8 steps, $DS4_TEST_MTP_STEPS to change it); otherwise the tiny
 * synthetic model and its MTP head, then tiny-dspark and its DSpark drafter,
 * generated into a temporary directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/decode/dspark_drafter.h"
#include "ref/decode/mtp_drafter.h"
#include "ref/decode/sample.h"
#include "ref/decode/session.h"
#include "ref/decode/speculative.h"
#include "ref/decode/step.h"
#include "ds4t.h"
#include "greedy.h"
#include "ref/model/model.h"
#include "ref/model/modelopen.h"
#include "ref/model/numerics.h"
#include "ref/model/synth.h"
#include "script_drafter.h"
#include "ref/text/chat.h"

static const char copy_prompt[] =
    "Copy the following text exactly:\n\nThe quick brown fox jumps over the lazy dog.";

/* Who drafts: the tests' scripted drafter, or the model's own. */
enum { DR_SCRIPT, DR_MTP, DR_DSPARK };

typedef struct fixture {
    ds4_model m;
    int drafter;           /* the model's: DR_MTP or DR_DSPARK */
    bool synthetic;
    char dir[64], path[96], mtp_path[96];
    ds4_tokens prompt;
    uint32_t n_steps;
} fixture;

/* One row's plain greedy records after its prompt. */
typedef struct greedy {
    const int32_t *prompt;
    uint32_t np;
    ds4_gen_step *steps;
    uint32_t n;
} greedy;

static const char *drafter_name(int kind) {
    return kind == DR_MTP ? "MTP" : kind == DR_DSPARK ? "DSpark" : "scripted";
}

/* The real model with the drafter it has: DS4_TEST_MTP's head, or its own
 * DSpark drafter. */
static int open_real(fixture *f, const char *model) {
    ds4err err = {0};
    const char *mtp = ds4t_env("DS4_TEST_MTP", NULL);
    f->n_steps = (uint32_t)atoi(ds4t_env("DS4_TEST_MTP_STEPS", "8"));
    if (ds4_modelopen(&f->m, model, mtp, NULL, ds4t_numerics(), true, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        return DS4T_FAIL;
    }
    f->drafter = mtp ? DR_MTP : DR_DSPARK;
    if (mtp || f->m.dspark) return DS4T_PASS;
    ds4_model_close(&f->m);
    return ds4t_skip("%s found but DS4_TEST_MTP is not set (the MTP support GGUF, or a "
                     "checkpoint's own path), and the model has no DSpark drafter", model);
}

/* A synthetic model written into a temporary directory: tiny with its MTP
 * head, or tiny-dspark. */
static int open_synthetic(fixture *f, const char *model, bool dspark) {
    ds4err err = {0};
    f->synthetic = true;
    f->drafter = dspark ? DR_DSPARK : DR_MTP;
    f->n_steps = 20;
    snprintf(f->dir, sizeof(f->dir), "/tmp/ds4t-mtp-XXXXXX");
    if (!mkdtemp(f->dir)) {
        DS4T_CHECK(0, "cannot create a temporary directory");
        return DS4T_FAIL;
    }
    snprintf(f->path, sizeof(f->path), "%s/tiny.gguf", f->dir);
    snprintf(f->mtp_path, sizeof(f->mtp_path), "%s/tiny-mtp.gguf", f->dir);
    const char *config = dspark ? "tiny-dspark" : "tiny";
    printf("  %s not found: synthetic %s and its %s drafter in %s\n", model, config,
           drafter_name(f->drafter), f->dir);
    ds4_synth_opts so = {.config = config, .seed = 1};
    const char *mtp = dspark ? NULL : f->mtp_path;
    if (ds4_synth_write(&so, f->path, mtp, &err) ||
        ds4_modelopen(&f->m, f->path, mtp, NULL, ds4t_numerics(), true, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        return DS4T_FAIL;
    }
    return DS4T_PASS;
}

static int open_model(fixture *f, bool dspark) {
    const char *model = ds4t_env("DS4_TEST_MODEL", "ds4flash.gguf");
    const char *named = getenv("DS4_TEST_MODEL"), *mtp_named = getenv("DS4_TEST_MTP");
    if (access(model, F_OK) && ((named && *named) || (mtp_named && *mtp_named))) {
        /* An MTP head named without its model is a setup error too. */
        ds4t_fail(__FILE__, __LINE__, "%s: not found or not readable (DS4_TEST_MODEL, which "
                  "DS4_TEST_MTP needs)", model);
        return DS4T_FAIL;
    }
    if (access(model, F_OK) == 0) return open_real(f, model);
    return open_synthetic(f, model, dspark);
}

static void close_model(fixture *f) {
    ds4_model_close(&f->m);
    ds4_tokens_free(&f->prompt);
    if (f->synthetic) {
        remove(f->path);
        remove(f->mtp_path);
        rmdir(f->dir);
    }
}

static int make_prompt(fixture *f) {
    ds4err err = {0};
    const ds4_tokenizer *tok;
    ds4_chat_opts co = {.thinking = false};
    if (ds4_model_tokenizer(&f->m, &tok, &err) ||
        ds4_chat_prompt_ids(tok, "", 0, copy_prompt, sizeof(copy_prompt) - 1, &co, &f->prompt, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        return -1;
    }
    return 0;
}

static uint32_t ctx_for(const fixture *f, uint32_t np) { return np + f->n_steps + 1; }

/* Plain greedy decoding of one prompt: ds4_generate_greedy. */
static int plain(const fixture *f, ds4_engine *e, greedy *g) {
    ds4err err = {0};
    ds4_session s;
    ds4_session_opts so = {.ctx = ctx_for(f, g->np), .chunk = e->cap};
    g->steps = calloc(f->n_steps, sizeof(ds4_gen_step));
    int rc = -1;
    if (!g->steps || ds4_session_init(&s, e, &so, &err)) goto out;
    if (!ds4_session_eval(&s, g->prompt, g->np, NULL, NULL, &err)) {
        ds4_gen_opts go = {.n_steps = f->n_steps, .top_k = 4, .eos = -1};
        rc = ds4_generate_greedy(&s, &go, g->steps, &g->n, NULL, NULL, &err);
    }
    ds4_session_free(&s);
out:
    DS4T_CHECK(!rc, "plain decoding: %s", err.msg);
    return rc;
}

/* ds4's check: each committed token, teacher-forced through plain one-token
 * decoding, is the argmax at its position.  Returns the worst gap between the
 * best logit and the committed token's. */
static double teacher_force(const fixture *f, ds4_engine *e, const greedy *g,
                            const ds4_gen_step *steps, uint32_t n) {
    ds4err err = {0};
    ds4_session s;
    ds4_session_opts so = {.ctx = ctx_for(f, g->np), .chunk = e->cap};
    double worst = -1;
    if (ds4_session_init(&s, e, &so, &err) || ds4_session_eval(&s, g->prompt, g->np, NULL, NULL, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        return worst;
    }
    uint32_t V = f->m.cfg.n_vocab;
    worst = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t t = steps[i].token, best = ds4_sample_argmax(s.logits, V);
        double gap = (double)s.logits[best] - (double)s.logits[t];
        if (gap > worst) worst = gap;
        DS4T_CHECK(best == t, "step %u: committed token %d is not the argmax %d (gap %g)", i, t, best, gap);
        if (i + 1 < n && ds4_session_eval(&s, &t, 1, NULL, NULL, &err)) {
            DS4T_CHECK(0, "%s", err.msg);
            break;
        }
    }
    ds4_session_free(&s);
    return worst;
}

static void same_records(const greedy *g, const ds4_gen_step *steps, uint32_t n, const char *what) {
    DS4T_CHECK(n == g->n, "%s: %u steps, plain decoding made %u", what, n, g->n);
    for (uint32_t i = 0; i < n && i < g->n; i++) {
        if (steps[i].token == g->steps[i].token && !memcmp(steps[i].digest, g->steps[i].digest, 32))
            continue;
        DS4T_CHECK(0, "%s: step %u differs from plain decoding (token %d vs %d%s)", what, i,
                   steps[i].token, g->steps[i].token,
                   steps[i].token == g->steps[i].token ? ", logits differ" : "");
        return;
    }
}

typedef struct spec_case {
    int drafter;           /* DR_*: scripted, errors at every depth, or the model's */
    uint32_t depth, chunk, rows;
} spec_case;

/* Speculative decoding of rows[0..n) together; checks every row against its
 * plain records and, with worst_gap, teacher-forces row 0.  Adds to stats. */
static void spec_rows(const fixture *f, const spec_case *sc, greedy *rows, ds4_spec_stats *stats,
                      double *worst_gap) {
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts fo = {.qat = true, .numerics = ds4t_numerics()};
    ds4_session s[2];
    ds4_session *sp[2] = {&s[0], &s[1]};
    const int32_t *pp[2];
    uint32_t np[2];
    drafter_script scripts[2];
    ds4_spec_row sr[2];
    memset(sr, 0, sizeof(sr));
    uint8_t errs[DS4_SPEC_MAX_DRAFT + 1];
    int32_t *streams[2] = {NULL, NULL};
    ds4_drafter *d = NULL;
    uint32_t n_init = 0, ctx = 0;
    char what[96];
    snprintf(what, sizeof(what), "%s depth %u chunk %u rows %u", drafter_name(sc->drafter),
             sc->depth, sc->chunk, sc->rows);
    for (uint32_t i = 0; i <= sc->depth; i++) errs[i] = (uint8_t)i;
    if (ds4_engine_init(&e, &f->m, &fo, sc->chunk * sc->rows, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        return;
    }
    for (uint32_t r = 0; r < sc->rows; r++) {
        ds4_session_opts so = {.ctx = ctx_for(f, rows[r].np), .chunk = sc->chunk,
                               .rollback = sc->depth};
        if (ds4_session_init(&s[r], &e, &so, &err)) goto out;
        n_init++;
        pp[r] = rows[r].prompt;
        np[r] = rows[r].np;
        if (so.ctx > ctx) ctx = so.ctx;
        streams[r] = malloc(sizeof(int32_t) * (rows[r].np + rows[r].n));
        if (!streams[r]) {
            ds4_err_set(&err, DS4_E_NOMEM, "out of memory");
            goto out;
        }
        memcpy(streams[r], rows[r].prompt, sizeof(int32_t) * rows[r].np);
        for (uint32_t k = 0; k < rows[r].n; k++) streams[r][rows[r].np + k] = rows[r].steps[k].token;
        scripts[r] = (drafter_script){streams[r], rows[r].np + rows[r].n, errs, sc->depth + 1};
        sr[r] = (ds4_spec_row){.s = &s[r], .steps = calloc(f->n_steps, sizeof(ds4_gen_step))};
    }
    int rc = sc->drafter == DR_MTP ? ds4_mtp_drafter_new(&d, &e, sc->rows, ctx, sc->chunk, sc->depth, &err)
           : sc->drafter == DR_DSPARK
               ? ds4_dspark_drafter_new(&d, &e, sc->rows, ctx, sc->chunk, sc->depth, 0, &err)
               : script_drafter_new(&d, scripts, sc->rows, f->m.cfg.n_vocab, &err);
    if (rc) goto out;
    if (ds4_spec_prefill(d, sp, pp, np, sc->rows, &err)) goto out;
    ds4_spec_cfg cfg = {d, sc->depth, 0};
    ds4_gen_opts go = {.n_steps = f->n_steps, .top_k = 4, .eos = -1};
    if (ds4_spec_generate(&cfg, &go, sr, sc->rows, stats, &err)) goto out;
    for (uint32_t r = 0; r < sc->rows; r++) same_records(&rows[r], sr[r].steps, sr[r].n_done, what);
    if (worst_gap) *worst_gap = teacher_force(f, &e, &rows[0], sr[0].steps, sr[0].n_done);
    err.msg[0] = '\0';
out:
    DS4T_CHECK(!err.msg[0], "%s: %s", what, err.msg);
    for (uint32_t r = 0; r < n_init; r++) {
        ds4_step_list_free(sr[r].steps, sr[r].n_done);
        free(sr[r].steps);
        ds4_session_free(&s[r]);
    }
    for (uint32_t r = 0; r < 2; r++) free(streams[r]);
    ds4_spec_drafter_free(d);
    ds4_engine_free(&e);
}

static void report(const char *what, const ds4_spec_stats *st, double gap) {
    char line[160], pos[400];
    ds4_spec_report(st, line, sizeof(line));
    ds4_spec_report_positions(st, pos, sizeof(pos));
    printf("  %-28s %s worst_gap=%.1f\n", what, line, gap);
    if (pos[0]) printf("  %-28s %s\n", "", pos);
}

/* The plain stream's first logits, as a digest: which numerics ran is
 * seen in it (DS4_TEST_NUMERICS). */
static void report_plain(const greedy *g) {
    char name[64], hex[17];
    ds4_numerics_name(ds4t_numerics(), name, sizeof(name));
    for (int i = 0; i < 8; i++) snprintf(hex + 2 * i, 3, "%02x", g->n ? g->steps[0].digest[i] : 0);
    printf("  plain greedy (%s): %u steps, first logits sha256 %s...\n", name, g->n, hex);
}

/* The checks on one model with its drafter. */
static int run_model(bool dspark) {
    fixture f;
    memset(&f, 0, sizeof(f));
    int rc = open_model(&f, dspark);
    if (rc != DS4T_PASS) return rc;
    if (make_prompt(&f)) {
        close_model(&f);
        return DS4T_FAIL;
    }
    /* A second row: the same text without its last prompt token. */
    greedy rows[2] = {{f.prompt.ids, (uint32_t)f.prompt.n, NULL, 0},
                      {f.prompt.ids, (uint32_t)f.prompt.n - 1, NULL, 0}};
    ds4err err = {0};
    ds4_engine e;
    ds4_fwd_opts fo = {.qat = true, .numerics = ds4t_numerics()};
    if (ds4_engine_init(&e, &f.m, &fo, 64, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        close_model(&f);
        return DS4T_FAIL;
    }
    if (!plain(&f, &e, &rows[0]) && (!f.synthetic || !plain(&f, &e, &rows[1]))) {
        report_plain(&rows[0]);
        /* Depth 4 first: ds4's test, with its acceptance line. */
        const uint32_t depths[] = {4, 2, 3, 5, 6, 7, 8};
        for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
            spec_case sc = {f.drafter, depths[i], 64, 1};
            ds4_spec_stats st = {0};
            double gap = -1;
            spec_rows(&f, &sc, rows, &st, &gap);
            DS4T_CHECK(gap == 0.0, "%s depth %u: worst argmax gap %g, must be 0",
                       drafter_name(f.drafter), depths[i], gap);
            char what[32];
            snprintf(what, sizeof(what), "%s depth %u:", drafter_name(f.drafter), depths[i]);
            report(what, &st, gap);
        }
        /* The synthetic model's random MTP head rarely guesses right: the
         * scripted drafter takes every accept length; small chunks split the
         * verify batches; two rows decode together. */
        const uint32_t matrix[] = {2, 3, 4, 5, 8};
        for (size_t j = 0; f.synthetic && j < sizeof(matrix) / sizeof(matrix[0]); j++) {
            uint32_t d = matrix[j];
            const spec_case cases[] = {{DR_SCRIPT, d, 64, 1}, {DR_SCRIPT, d, 3, 2},
                                       {f.drafter, d, 3, 2}};
            for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                ds4_spec_stats st = {0};
                spec_rows(&f, &cases[i], rows, &st, NULL);
                if (d == 4 && i == 0) report("scripted depth 4:", &st, 0.0);
            }
        }
    }
    for (int r = 0; r < 2; r++) {
        ds4_step_list_free(rows[r].steps, rows[r].n);
        free(rows[r].steps);
    }
    ds4_engine_free(&e);
    close_model(&f);
    return DS4T_PASS;
}

/* The model and its drafter; with no model file, tiny's MTP head and then
 * tiny-dspark's DSpark drafter. */
static int run(void) {
    int rc = run_model(false);
    if (rc == DS4T_PASS && access(ds4t_env("DS4_TEST_MODEL", "ds4flash.gguf"), F_OK)) rc = run_model(true);
    return rc;
}

const ds4t_entry ds4t_mtp_verify_depth = {
    "--mtp-verify-depth",
    "speculative decoding (MTP or DSpark, depth 4 and 2..8) commits exactly the greedy tokens",
    run,
};
