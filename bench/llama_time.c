/* llama_time: times llama.cpp's CPU backend on a GGUF, for the side-by-side
 * speed comparison of docs/PERFORMANCE.md (bench/compare.sh runs it next to
 * ds4ref-bench on the same model and machine).
 *
 *   llama_time LIBDIR MODEL THREADS decode|prefill N [REPS [REPACK]]
 *
 * LIBDIR holds the prebuilt libraries of the npm package
 * @node-llama-cpp/linux-x64 (bins/linux-x64: libllama.v0.5.0.so,
 * libggml.v0.5.0.so, libggml-base.so and the per-CPU backends).  They are
 * loaded with dlopen, so this program builds without them.
 *
 *   decode  N tokens, one llama_decode each (a fresh context per rep);
 *           prints the median ms per token over the reps' steps;
 *   prefill one llama_decode of N tokens (n_batch = n_ubatch = N);
 *           prints the median tokens/s over the reps.
 *
 * REPACK (default 1) is llama.cpp's use_extra_bufts, its repacked weight
 * layouts (CPU_REPACK, and AMX tiles where the CPU has AMX).  On a Sapphire
 * Rapids CPU with AMX, this package cannot build a graph for batches of more
 * than one token with them ("GGML_ASSERT(*cur_backend_id != -1)") on the
 * deepseek4 models, so bench/compare.sh times prefill with REPACK 0.
 *
 * Token ids are i * 7919 % n_vocab; which ids they are moves the routed
 * experts a little, not the work.  Model load and context creation are not
 * timed.  Output, one line:
 *
 *   llama.cpp MODE threads=T n=N reps=R ms_per_token=X tokens_per_s=Y load_s=Z
 *
 * The struct layouts below are those of that package's libllama (0.5.0):
 * llama_model_params is 0x50 bytes, with the bool use_extra_bufts at 0x4a,
 * and llama_context_params 0xa0 bytes,
 * with n_ctx, n_batch, n_ubatch and n_seq_max as the first four 32-bit
 * fields, flash_attn_type at 0x34 and the KV cache types at 0x68 and 0x6c;
 * both are used as returned by the library's *_default_params(), with only
 * those fields set.  llama_batch is its public 56-byte layout. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct model_params {
    _Alignas(8) unsigned char bytes[0x50];
} model_params;

typedef struct context_params {
    _Alignas(8) unsigned char bytes[0xa0];
} context_params;

typedef struct batch {
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} batch;

/* The entry points used, looked up by name. */
static struct {
    void (*backend_load_all_from_path)(const char *dir);
    void (*backend_init)(void);
    void (*log_set)(void (*cb)(int, const char *, void *), void *ud);
    model_params (*model_default_params)(void);
    context_params (*context_default_params)(void);
    void *(*model_load_from_file)(const char *path, model_params p);
    void *(*init_from_model)(void *model, context_params p);
    void (*set_n_threads)(void *ctx, int32_t n, int32_t n_batch);
    batch (*batch_init)(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
    void (*batch_free)(batch b);
    int32_t (*decode)(void *ctx, batch b);
    void (*synchronize)(void *ctx);
    float *(*get_logits_ith)(void *ctx, int32_t i);
    const void *(*model_get_vocab)(const void *model);
    int32_t (*vocab_n_tokens)(const void *vocab);
    void (*free_ctx)(void *ctx);
    void (*model_free)(void *model);
} L;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "llama_time: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static void *open_lib(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) die("cannot load", dlerror());
    return h;
}

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) die("missing symbol", name);
    return p;
}

static void quiet(int level, const char *text, void *ud) {
    (void)level, (void)text, (void)ud;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void set_u32(context_params *p, size_t off, uint32_t v) {
    memcpy(p->bytes + off, &v, sizeof(v));
}

/* A context for n positions and batches of up to n_batch tokens. */
static void *new_context(void *model, int n_ctx, int n_batch, int threads) {
    context_params cp = L.context_default_params();
    set_u32(&cp, 0x00, (uint32_t)n_ctx);     /* n_ctx */
    set_u32(&cp, 0x04, (uint32_t)n_batch);   /* n_batch */
    set_u32(&cp, 0x08, (uint32_t)n_batch);   /* n_ubatch */
    set_u32(&cp, 0x0c, 1);                   /* n_seq_max */
    /* llama.cpp's deepseek4 graph runs with flash attention off and an f32
     * KV cache (the settings its own tests use for this model). */
    set_u32(&cp, 0x34, 0);                   /* flash_attn_type: off */
    set_u32(&cp, 0x68, 0);                   /* type_k: GGML_TYPE_F32 */
    set_u32(&cp, 0x6c, 0);                   /* type_v: GGML_TYPE_F32 */
    void *ctx = L.init_from_model(model, cp);
    if (!ctx) die("llama_init_from_model failed", NULL);
    L.set_n_threads(ctx, threads, threads);
    return ctx;
}

/* Fill b with tokens [first, first + n) at those positions, logits for the
 * last one only (what decoding needs). */
static void fill(batch *b, int first, int n, int n_vocab, int all_logits) {
    b->n_tokens = n;
    for (int i = 0; i < n; i++) {
        b->token[i] = (int32_t)((int64_t)(first + i) * 7919 % n_vocab);
        b->pos[i] = first + i;
        b->n_seq_id[i] = 1;
        b->seq_id[i][0] = 0;
        b->logits[i] = (int8_t)(all_logits || i == n - 1);
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: llama_time LIBDIR MODEL THREADS decode|prefill N [REPS [REPACK]]\n");
        return 2;
    }
    const char *dir = argv[1], *model_path = argv[2], *mode = argv[4];
    int threads = atoi(argv[3]), n = atoi(argv[5]), reps = argc > 6 ? atoi(argv[6]) : 3;
    int repack = argc > 7 ? atoi(argv[7]) : 1;
    int decode = !strcmp(mode, "decode");
    if (threads < 1 || n < 1 || reps < 1 || (!decode && strcmp(mode, "prefill")))
        die("bad arguments", NULL);

    open_lib(dir, "libggml-base.so");
    void *ggml = open_lib(dir, "libggml.v0.5.0.so");
    void *llama = open_lib(dir, "libllama.v0.5.0.so");
    L.backend_load_all_from_path = sym(ggml, "ggml_backend_load_all_from_path");
    L.backend_init = sym(llama, "llama_backend_init");
    L.log_set = sym(llama, "llama_log_set");
    L.model_default_params = sym(llama, "llama_model_default_params");
    L.context_default_params = sym(llama, "llama_context_default_params");
    L.model_load_from_file = sym(llama, "llama_model_load_from_file");
    L.init_from_model = sym(llama, "llama_init_from_model");
    L.set_n_threads = sym(llama, "llama_set_n_threads");
    L.batch_init = sym(llama, "llama_batch_init");
    L.batch_free = sym(llama, "llama_batch_free");
    L.decode = sym(llama, "llama_decode");
    L.synchronize = sym(llama, "llama_synchronize");
    L.get_logits_ith = sym(llama, "llama_get_logits_ith");
    L.model_get_vocab = sym(llama, "llama_model_get_vocab");
    L.vocab_n_tokens = sym(llama, "llama_vocab_n_tokens");
    L.free_ctx = sym(llama, "llama_free");
    L.model_free = sym(llama, "llama_model_free");

    L.log_set(quiet, NULL);
    L.backend_load_all_from_path(dir);
    L.backend_init();
    double t0 = now();
    model_params mp = L.model_default_params();
    mp.bytes[0x4a] = (unsigned char)(repack != 0);   /* use_extra_bufts */
    void *model = L.model_load_from_file(model_path, mp);
    if (!model) die("cannot load the model", model_path);
    double load_s = now() - t0;
    int n_vocab = L.vocab_n_tokens(L.model_get_vocab(model));

    double *samples = malloc(sizeof(double) * (size_t)reps * (size_t)n);
    int n_samples = 0;
    volatile float sink = 0;
    for (int r = 0; r < reps; r++) {
        void *ctx = new_context(model, (n + 16 + 255) / 256 * 256, decode ? 1 : n, threads);
        batch b = L.batch_init(decode ? 1 : n, 0, 1);
        if (decode) {
            for (int i = 0; i < n; i++) {
                fill(&b, i, 1, n_vocab, 1);
                double a = now();
                if (L.decode(ctx, b)) die("llama_decode failed", NULL);
                L.synchronize(ctx);
                sink += L.get_logits_ith(ctx, 0)[0];
                samples[n_samples++] = now() - a;
            }
        } else {
            fill(&b, 0, n, n_vocab, 0);
            double a = now();
            if (L.decode(ctx, b)) die("llama_decode failed", NULL);
            L.synchronize(ctx);
            sink += L.get_logits_ith(ctx, n - 1)[0];
            samples[n_samples++] = now() - a;
        }
        L.batch_free(b);
        L.free_ctx(ctx);
    }
    double med = median(samples, n_samples);
    double ms_per_token = decode ? med * 1e3 : med * 1e3 / n;
    printf("llama.cpp %s threads=%d n=%d reps=%d repack=%d ms_per_token=%.3f tokens_per_s=%.2f "
           "load_s=%.2f\n", mode, threads, n, reps, repack != 0, ms_per_token, 1e3 / ms_per_token,
           load_s);
    free(samples);
    L.model_free(model);
    return 0;
}
