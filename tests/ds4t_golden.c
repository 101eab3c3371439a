/* ds4_test --golden-vectors: regenerate every committed golden of
 * vectors/manifest.txt in memory and require it bit-identical to the file.
 *
 * The synthetic model of each entry is rebuilt with ds4ref-mkmodel's
 * generator and must hash to the manifest's model_sha256 (so a generator
 * change is reported as such, not as a numerics change); the golden file must
 * hash to golden_sha256 (so a hand-edited golden is caught); generation runs
 * with a different chunk size than `make vectors` used, which must not change
 * a bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/sha256.h"
#include "ref/decode/session.h"
#include "ds4t.h"
#include "ref/model/model.h"
#include "ref/model/synth.h"
#include "ref/text/chat.h"
#include "check/diff/diff.h"
#include "ref/format/golden_read.h"
#include "ref/run/run.h"

typedef struct entry {
    char name[128], config[32], types[8], qat[8], prompt[256], model_sha[65], golden_sha[65];
    unsigned long long seed;
    unsigned steps;
} entry;

static int file_sha256(const char *path, char out[65]) {
    char *buf;
    size_t len;
    ds4err err = {0};
    if (ds4_file_read(path, (size_t)1 << 32, &buf, &len, &err)) return -1;
    ds4_sha256_hex(buf, len, out);
    free(buf);
    return 0;
}

static int prompt_ids(const ds4_model *m, const char *path, ds4_tokens *ids) {
    char *text;
    size_t len;
    ds4err err = {0};
    const ds4_tokenizer *tok;
    if (ds4_file_read(path, 1 << 20, &text, &len, &err) || ds4_model_tokenizer(m, &tok, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        return -1;
    }
    ds4_chat_opts co = {.thinking = false};
    int rc = ds4_chat_prompt_ids(tok, "", 0, text, len, &co, ids, &err);
    DS4T_CHECK(!rc, "%s", err.msg);
    free(text);
    return rc;
}

static void check_entry(const entry *e, const char *dir) {
    char model_path[512], golden_path[512], prompt_path[512], sha[65];
    snprintf(model_path, sizeof(model_path), "%s/%s-%s-%llu.gguf", dir, e->config, e->types, e->seed);
    snprintf(golden_path, sizeof(golden_path), "vectors/%s.jsonl", e->name);
    snprintf(prompt_path, sizeof(prompt_path), "vectors/%s", e->prompt);
    ds4err err = {0};
    ds4_synth_opts so = {.config = e->config, .f32 = !strcmp(e->types, "f32"), .seed = e->seed};
    if (ds4_synth_write(&so, model_path, NULL, &err)) {
        DS4T_CHECK(0, "%s: %s", e->name, err.msg);
        return;
    }
    DS4T_CHECK(!file_sha256(model_path, sha) && !strcmp(sha, e->model_sha),
               "%s: the generator's %s/%s/seed %llu model no longer hashes to the manifest's "
               "model_sha256 (the synthetic model changed, not the numerics)", e->name, e->config,
               e->types, e->seed);
    DS4T_CHECK(!file_sha256(golden_path, sha) && !strcmp(sha, e->golden_sha),
               "%s: %s does not hash to the manifest's golden_sha256", e->name, golden_path);
    ds4_golden want, got;
    ds4_golden_init(&want, DS4_TRACE_GOLDEN);
    if (ds4_golden_read(golden_path, &want, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        remove(model_path);
        return;
    }
    ds4_model m;
    if (ds4_model_open(&m, model_path, &err)) {
        DS4T_CHECK(0, "%s", err.msg);
        ds4_golden_free(&want);
        remove(model_path);
        return;
    }
    ds4_tokens ids = {0};
    ds4_engine eng;
    ds4_session s;
    ds4_fwd_opts fo = {.qat = !strcmp(e->qat, "on")};
    /* 13: a chunk size unlike the generator's 256, on purpose. */
    ds4_session_opts sopt = {.ctx = want.h.settings.ctx, .chunk = 13, .rollback = 0};
    if (!prompt_ids(&m, prompt_path, &ids) && !ds4_engine_init(&eng, &m, &fo, 13, &err)) {
        if (!ds4_session_init(&s, &eng, &sopt, &err)) {
            ds4_run_opts ro = {.n_steps = e->steps, .top_k = want.h.settings.top_k,
                               .stop_at_eos = false, .prompt_text = NULL};
            if (ds4_run_golden(&s, &m.tok, ids.ids, (uint32_t)ids.n, &ro, &got, &err)) {
                DS4T_CHECK(0, "%s: %s", e->name, err.msg);
            } else {
                ds4_diff_report r;
                ds4_diff_opts dopt = {.all_steps = true};
                if (ds4chk_diff_compute(&want, &got, &dopt, &r, &err)) {
                    DS4T_CHECK(0, "%s", err.msg);
                } else {
                    DS4T_CHECK(r.exact, "%s: regenerated golden differs: first inexact step %lld (%s), "
                               "first divergence %lld", e->name, (long long)r.first_inexact,
                               r.first_inexact >= 0 ? r.steps[r.first_inexact].inexact : "-",
                               (long long)r.first_divergence);
                    ds4chk_diff_report_free(&r);
                }
                ds4_golden_free(&got);
            }
            ds4_session_free(&s);
        } else {
            DS4T_CHECK(0, "%s", err.msg);
        }
        ds4_engine_free(&eng);
    }
    ds4_tokens_free(&ids);
    ds4_model_close(&m);
    ds4_golden_free(&want);
    remove(model_path);
}

static int run(void) {
    FILE *f = fopen("vectors/manifest.txt", "r");
    if (!f) return ds4t_skip("vectors/manifest.txt not found (run from the repository root)");
    char dir[] = "/tmp/ds4t-golden-XXXXXX";
    if (!mkdtemp(dir)) {
        fclose(f);
        DS4T_CHECK(0, "cannot create a temporary directory");
        return DS4T_FAIL;
    }
    char line[1024];
    unsigned n = 0;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        entry e;
        if (sscanf(line, "%127s %31s %7s %llu %7s %u %255s %64s %64s", e.name, e.config, e.types,
                   &e.seed, e.qat, &e.steps, e.prompt, e.model_sha, e.golden_sha) != 9) {
            DS4T_CHECK(0, "vectors/manifest.txt: malformed line: %s", line);
            continue;
        }
        check_entry(&e, dir);
        n++;
    }
    fclose(f);
    rmdir(dir);
    printf("  %u goldens regenerated\n", n);
    DS4T_CHECK(n > 0, "vectors/manifest.txt lists no golden");
    return DS4T_PASS;
}

const ds4t_entry ds4t_golden_vectors = {
    "--golden-vectors",
    "regenerate the committed goldens of vectors/ and require them bit-identical",
    run,
};
