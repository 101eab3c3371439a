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
 * programs/llama_api.h says how llama.cpp is loaded and which struct
 * layouts it has (ds4ref-llama loads it the same way).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../programs/llama_api.h"

static llama_api L;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "llama_time: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
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

/* A context for n positions and batches of up to n_batch tokens. */
static void *new_context(void *model, int n_ctx, int n_batch, int threads) {
    void *ctx = L.init_from_model(model, llama_api_context(&L, (uint32_t)n_ctx, (uint32_t)n_batch, 1));
    if (!ctx) die("llama_init_from_model failed", NULL);
    L.set_n_threads(ctx, threads, threads);
    return ctx;
}

/* Fill b with tokens [first, first + n) at those positions, logits for the
 * last one only (what decoding needs). */
static void fill(llama_api_batch *b, int first, int n, int n_vocab, int all_logits) {
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

    char why[512];
    if (llama_api_load(&L, dir, quiet, why, sizeof(why))) die(why, NULL);
    double t0 = now();
    void *model = L.model_load_from_file(model_path, llama_api_model(&L, repack));
    if (!model) die("cannot load the model", model_path);
    double load_s = now() - t0;
    int n_vocab = L.vocab_n_tokens(L.model_get_vocab(model));

    double *samples = malloc(sizeof(double) * (size_t)reps * (size_t)n);
    int n_samples = 0;
    volatile float sink = 0;
    for (int r = 0; r < reps; r++) {
        void *ctx = new_context(model, (n + 16 + 255) / 256 * 256, decode ? 1 : n, threads);
        llama_api_batch b = L.batch_init(decode ? 1 : n, 0, 1);
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
