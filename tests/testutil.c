#include "testutil.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/model/synth.h"

int tu_read_file(const char *path, uint8_t **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    uint8_t *p = malloc(cap);
    while (p) {
        n += fread(p + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *q = realloc(p, cap * 2);
        if (!q) {
            free(p);
            p = NULL;
        } else {
            p = q;
            cap *= 2;
        }
    }
    int bad = !p || ferror(f);
    fclose(f);
    if (bad) {
        free(p);
        return -1;
    }
    *buf = p;
    *len = n;
    return 0;
}

char *tu_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void tu_skipping(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("skipping: ", stdout);
    vprintf(fmt, ap);
    fputs("\n", stdout);
    va_end(ap);
}

char *tu_shared(const char *rel) {
    char *p = tu_path("../shared", rel);
    if (p && access(p, F_OK) == 0) return p;
    tu_skipping("%s not found (the shared fixtures live in ../shared, relative to the "
                "repository root the tests run from)", p ? p : rel);
    free(p);
    return NULL;
}

char *tu_official(const char *rel) {
    char *p = tu_path(DS4REF_OFFICIAL_DIR, rel);
    if (p && access(p, F_OK) == 0) return p;
    fprintf(stderr, "%s not found: the build decompresses vectors/official there (make test, or "
            "make %s)\n", p ? p : rel, DS4REF_OFFICIAL_DIR "/.checked");
    free(p);
    return NULL;
}

char *tu_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char *p = tu_path(base && *base ? base : "/tmp", "ds4ref-test-XXXXXX");
    if (p && !mkdtemp(p)) {
        free(p);
        p = NULL;
    }
    return p;
}

int tu_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

void tu_rmdir(char *dir) {
    if (!dir) return;
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = tu_path(dir, e->d_name);
            if (p) unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

tu_model *tu_model_new(const char *config, uint64_t seed, bool mtp, ds4err *err) {
    tu_model *t = calloc(1, sizeof(*t));
    if (!t) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        return NULL;
    }
    t->dir = tu_tmpdir();
    t->path = t->dir ? tu_path(t->dir, "model.gguf") : NULL;
    t->mtp_path = t->dir && mtp ? tu_path(t->dir, "model-mtp.gguf") : NULL;
    ds4_synth_opts o = {.config = config, .seed = seed};
    if (!t->path || (mtp && !t->mtp_path)) {
        ds4_err_set(err, DS4_E_IO, "cannot make a scratch directory");
    } else if (!ds4_synth_write(&o, t->path, t->mtp_path, err) &&
               !ds4_model_open(&t->m, t->path, err)) {
        if (!mtp || !ds4_model_load_mtp(&t->m, t->mtp_path, err)) return t;
        ds4_model_close(&t->m);
    }
    memset(&t->m, 0, sizeof(t->m));
    tu_model_free(t);
    return NULL;
}

void tu_model_free(tu_model *t) {
    if (!t) return;
    ds4_model_close(&t->m);
    if (t->path) remove(t->path);
    if (t->mtp_path) remove(t->mtp_path);
    free(t->path);
    free(t->mtp_path);
    if (t->dir) tu_rmdir(t->dir);
    free(t);
}

uint64_t tu_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double tu_uniform(uint64_t *state, double a, double b) {
    return a + (b - a) * ((double)(tu_splitmix64(state) >> 11) * 0x1p-53);
}

int32_t *tu_random_tokens(uint32_t n, uint32_t vocab, uint64_t seed) {
    int32_t *t = malloc(sizeof(int32_t) * (n ? n : 1));
    for (uint32_t i = 0; t && i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % vocab);
    }
    return t;
}

/* config.json of the release's layout for configuration g (hfconfig.h's
 * keys), into text. */
void tu_hf_config(const ds4_config *g, char *text, size_t cap) {
    int n = snprintf(text, cap,
        "{\"num_hidden_layers\": %u, \"hidden_size\": %u, \"vocab_size\": %u,"
        " \"num_attention_heads\": %u, \"num_key_value_heads\": 1, \"head_dim\": %u,"
        " \"qk_rope_head_dim\": %u, \"q_lora_rank\": %u, \"o_lora_rank\": %u, \"o_groups\": %u,"
        " \"n_routed_experts\": %u, \"num_experts_per_tok\": %u, \"moe_intermediate_size\": %u,"
        " \"n_shared_experts\": 1, \"num_hash_layers\": %u, \"sliding_window\": %u,"
        " \"index_n_heads\": %u, \"index_head_dim\": %u, \"index_topk\": %u, \"hc_mult\": %u,"
        " \"hc_sinkhorn_iters\": %u, \"max_position_embeddings\": %u, \"rms_norm_eps\": %.9g,"
        " \"hc_eps\": %.9g, \"routed_scaling_factor\": %.9g, \"rope_theta\": %.9g,"
        " \"compress_rope_theta\": %.9g, \"swiglu_limit\": %.9g, \"num_nextn_predict_layers\": 1,",
        g->n_layer, g->n_embd, g->n_vocab, g->n_head, g->head_dim, g->n_rot, g->q_lora, g->o_lora,
        g->o_groups, g->n_expert, g->n_expert_used, g->n_ff, g->n_hash_layer, g->swa, g->idx_head,
        g->idx_dim, g->idx_topk, g->n_hc, g->sinkhorn_iter, g->context_length, g->rms_eps,
        g->hc_eps, g->expert_scale, g->rope_base, g->compress_rope_base, g->clamp_exp[0]);
    if (g->yarn)
        n += snprintf(text + n, cap - (size_t)n,
                      " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": %.9g,"
                      " \"original_max_position_embeddings\": %u, \"beta_fast\": %.9g,"
                      " \"beta_slow\": %.9g},", g->yarn_factor, g->yarn_orig_ctx,
                      g->yarn_beta_fast, g->yarn_beta_slow);
    n += snprintf(text + n, cap - (size_t)n, " \"compress_ratios\": [");
    for (uint32_t l = 0; l < g->n_layer; l++)
        n += snprintf(text + n, cap - (size_t)n, "%u, ", g->ratio[l]);
    snprintf(text + n, cap - (size_t)n, "0]}");
}
