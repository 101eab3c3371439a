/* compare_head: how a backend checks one of its own steps against ds4ref.
 *
 * It evaluates a prompt with ds4ref, takes the final hyper-connection state
 * of the last token from a debug tap (the output of the last layer), computes
 * the output head itself from the model's weights (HC collapse, RMSNorm, LM
 * head, in plain double arithmetic with libm), and compares its logits with
 * ds4ref's.  A backend would put its own kernel where head() is.
 *
 *   cc compare_head.c $(pkg-config --cflags --libs ds4ref) -o compare_head
 *   ./compare_head models/tiny.gguf "What is the capital of Italy?" */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ds4ref.h>

typedef struct capture {
    uint32_t layer, pos;
    float *hc;              /* n_hc * n_embd */
    uint32_t n;
} capture;

static void on_tap(void *ud, const ds4ref_tap *t) {
    capture *c = ud;
    if (strcmp(t->name, "hc_ffn") || t->layer != c->layer || t->pos != c->pos) return;
    memcpy(c->hc, t->data, sizeof(float) * t->n);
    c->n = t->n;
}

static float *tensor(const ds4ref_model *m, const char *name) {
    float *v;
    uint64_t ne[4];
    ds4ref_error err;
    if (ds4ref_tensor_f32(m, name, &v, ne, &err)) {
        fprintf(stderr, "compare_head: %s\n", err.message);
        exit(1);
    }
    return v;
}

/* The output head: collapse the streams with sigmoid weights, RMSNorm, LM head. */
static void head(const ds4ref_model *m, const ds4ref_model_info *in, const float *x, double *logits) {
    uint32_t E = in->n_embd, H = in->n_hc, V = in->n_vocab;
    float *fn = tensor(m, "output_hc_fn.weight"), *scale = tensor(m, "output_hc_scale.weight");
    float *base = tensor(m, "output_hc_base.weight"), *norm = tensor(m, "output_norm.weight");
    float *out = tensor(m, "output.weight");
    double ss = 0, w[16], *y = calloc(E, sizeof(double));
    for (uint32_t i = 0; i < H * E; i++) ss += (double)x[i] * x[i];
    double rs = 1 / sqrt(ss / (H * E) + 1e-6);
    for (uint32_t h = 0; h < H; h++) {
        double mix = 0;
        for (uint32_t i = 0; i < H * E; i++) mix += (double)fn[(size_t)h * H * E + i] * x[i];
        w[h] = 1 / (1 + exp(-(mix * rs * scale[0] + base[h]))) + 1e-6;
    }
    ss = 0;
    for (uint32_t d = 0; d < E; d++) {
        for (uint32_t h = 0; h < H; h++) y[d] += w[h] * x[(size_t)h * E + d];
        ss += y[d] * y[d];
    }
    rs = 1 / sqrt(ss / E + 1e-6);
    for (uint32_t v = 0; v < V; v++) {
        double acc = 0;
        for (uint32_t d = 0; d < E; d++) acc += (double)out[(size_t)v * E + d] * (y[d] * rs * norm[d]);
        logits[v] = acc;
    }
    free(fn); free(scale); free(base); free(norm); free(out); free(y);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "models/tiny.gguf";
    const char *prompt = argc > 2 ? argv[2] : "What is the capital of Italy?";
    ds4ref_error err;
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = path;
    ds4ref_model *m;
    ds4ref_session *s;
    if (ds4ref_model_open(&mo, &m, &err) || ds4ref_session_new(m, NULL, &s, &err)) {
        fprintf(stderr, "compare_head: %s\n", err.message);
        return 1;
    }
    ds4ref_model_info in;
    ds4ref_model_get_info(m, &in);
    int32_t *ids;
    size_t n;
    ds4ref_chat_options co = {.system = "", .system_len = 0, .thinking = 0};
    if (ds4ref_chat_prompt(m, prompt, strlen(prompt), &co, &ids, &n, &err)) {
        fprintf(stderr, "compare_head: %s\n", err.message);
        return 1;
    }
    capture cap = {in.n_layer - 1, (uint32_t)n - 1, malloc(sizeof(float) * in.n_hc * in.n_embd), 0};
    ds4ref_set_tap(m, on_tap, &cap);
    float *ref = malloc(sizeof(float) * in.n_vocab);
    if (ds4ref_session_eval(s, ids, n, NULL, &err) ||
        ds4ref_session_logits(s, (uint32_t)n - 1, ref, &err)) {
        fprintf(stderr, "compare_head: %s\n", err.message);
        return 1;
    }
    ds4ref_set_tap(m, NULL, NULL);
    double *mine = malloc(sizeof(double) * in.n_vocab), maxd = 0;
    head(m, &in, cap.hc, mine);
    for (uint32_t v = 0; v < in.n_vocab; v++)
        if (fabs(mine[v] - ref[v]) > maxd) maxd = fabs(mine[v] - ref[v]);
    printf("%zu prompt tokens; last-layer HC state from the tap (%u values)\n", n, cap.n);
    printf("output head recomputed here vs ds4ref: max |dlogit| = %.3g over %u logits\n", maxd,
           in.n_vocab);
    ds4ref_free(ids);
    free(cap.hc); free(ref); free(mine);
    ds4ref_session_free(s);
    ds4ref_model_close(m);
    return maxd <= 1e-3 ? 0 : 1;
}
