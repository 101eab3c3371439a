/* ds4ref-server's /metrics (server_metrics.h). */
#include "server_metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's buckets (its v1 metrics loggers): the same bounds, so that
 * the two servers' histograms can be compared bucket by bucket. */
static const double e2e_le[SRV_M_E2E_BUCKETS] = {0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20,
                                                 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680};
static const double ttft_le[SRV_M_TTFT_BUCKETS] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                                   0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
                                                   20, 40, 80, 160, 640, 2560};

static const char *const endpoint_names[SRV_M_ENDPOINTS] = {
    "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/v1/models",
    "/health", "/version", "/metrics", "/tokenizer_info", "other"};

static const unsigned codes[SRV_M_CODES] = {200, 400, 404, 405, 413, 429, 500, 503, 408, 422};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    m->e2e.le = e2e_le;
    m->e2e.n_le = SRV_M_E2E_BUCKETS;
    m->ttft.le = ttft_le;
    m->ttft.n_le = SRV_M_TTFT_BUCKETS;
}

void srv_metrics_free(srv_metrics *m) {
    pthread_mutex_destroy(&m->lock);
}

int srv_metrics_endpoint(const char *url) {
    for (int i = 0; i < SRV_M_OTHER; i++)
        if (!strcmp(url, endpoint_names[i])) return i;
    return strncmp(url, "/v1/models/", 11) ? SRV_M_OTHER : SRV_M_MODELS;
}

void srv_metrics_request(srv_metrics *m, int endpoint, unsigned status) {
    int k = 0;
    while (k < SRV_M_CODES && codes[k] != status) k++;
    if (k == SRV_M_CODES) k = 6;   /* 500 */
    pthread_mutex_lock(&m->lock);
    m->requests[endpoint][k]++;
    pthread_mutex_unlock(&m->lock);
}

static void observe(srv_histogram *h, double x) {
    size_t b = 0;
    while (b < h->n_le && x > h->le[b]) b++;
    h->count[b]++;
    h->sum += x;
    h->n++;
}

void srv_metrics_generation(srv_metrics *m, uint64_t prompt, uint64_t generated, double e2e,
                            double ttft) {
    pthread_mutex_lock(&m->lock);
    m->prompt_tokens += prompt;
    m->generation_tokens += generated;
    observe(&m->e2e, e2e);
    if (ttft >= 0) observe(&m->ttft, ttft);
    pthread_mutex_unlock(&m->lock);
}

void srv_metrics_label(const char *value, char *out, size_t out_size) {
    size_t o = 0;
    for (const char *p = value; *p && o + 3 < out_size; p++) {
        if (*p == '\\' || *p == '"' || *p == '\n') {
            out[o++] = '\\';
            out[o++] = *p == '\n' ? 'n' : *p;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

/* A growing text. */
typedef struct text {
    char *p;
    size_t len, cap;
    int oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = t->oom ? 0 : vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (t->oom || n < 0) {
            t->oom = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        char *q = realloc(t->p, 2 * t->cap + (size_t)n + 1);
        if (!q) {
            t->oom = 1;
            return;
        }
        t->p = q;
        t->cap = 2 * t->cap + (size_t)n + 1;
    }
}

static void header(text *t, const char *name, const char *type, const char *help) {
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Bounds as Prometheus writes them (0.3, not 0.29999999999999999): %g is
 * exact for every bound above. */
static void histogram(text *t, const char *name, const char *help, const srv_histogram *h) {
    header(t, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t b = 0; b <= h->n_le; b++) {
        cum += h->count[b];
        if (b < h->n_le) put(t, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[b],
                             (unsigned long long)cum);
        else put(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    put(t, "%s_sum %.17g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

char *srv_metrics_text(srv_metrics *m, uint32_t running, uint32_t waiting, int connections,
                       const char *info_labels) {
    text t = {malloc(4096), 0, 4096, 0};
    if (!t.p) return NULL;
    header(&t, "ds4ref_info", "gauge", "The server: ds4ref's version, the model, the kernels.");
    put(&t, "ds4ref_info{%s} 1\n", info_labels);
    header(&t, "ds4ref_num_requests_running", "gauge",
           "Requests decoding now (rows of the shared forward passes).");
    put(&t, "ds4ref_num_requests_running %u\n", running);
    header(&t, "ds4ref_num_requests_waiting", "gauge", "Requests queued for a row.");
    put(&t, "ds4ref_num_requests_waiting %u\n", waiting);
    header(&t, "ds4ref_connections_open", "gauge", "HTTP connections open, idle ones included.");
    put(&t, "ds4ref_connections_open %d\n", connections);
    pthread_mutex_lock(&m->lock);
    header(&t, "ds4ref_requests_total", "counter", "Requests answered, by endpoint and status.");
    for (int e = 0; e < SRV_M_ENDPOINTS; e++)
        for (int k = 0; k < SRV_M_CODES; k++)
            if (m->requests[e][k])
                put(&t, "ds4ref_requests_total{endpoint=\"%s\",code=\"%u\"} %llu\n",
                    endpoint_names[e], codes[k], (unsigned long long)m->requests[e][k]);
    header(&t, "ds4ref_prompt_tokens_total", "counter",
           "Prompt tokens of the generation requests that completed.");
    put(&t, "ds4ref_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    header(&t, "ds4ref_generation_tokens_total", "counter",
           "Tokens generated for the generation requests that completed.");
    put(&t, "ds4ref_generation_tokens_total %llu\n", (unsigned long long)m->generation_tokens);
    histogram(&t, "ds4ref_e2e_request_latency_seconds",
              "Seconds from a generation request's arrival to its last token.", &m->e2e);
    histogram(&t, "ds4ref_time_to_first_token_seconds",
              "Seconds from a generation request's arrival to its first token.", &m->ttft);
    pthread_mutex_unlock(&m->lock);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
