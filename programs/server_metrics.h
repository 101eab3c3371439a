/* ds4ref-server's /metrics: what it has served, in Prometheus' text format
 * (version 0.0.4), named after vLLM's metrics with ds4ref's prefix so that
 * a dashboard for one reads the other with a rename: requests by endpoint
 * and status, rows running and waiting, prompt and generated tokens, and
 * histograms of a request's latency and time to its first token with
 * vLLM's buckets.  Every figure is counted under one lock. */
#ifndef DS4REF_SERVER_METRICS_H
#define DS4REF_SERVER_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The endpoints counted by name; anything else is "other". */
enum { SRV_M_COMPLETIONS, SRV_M_CHAT, SRV_M_TOKENIZE, SRV_M_DETOKENIZE, SRV_M_MODELS,
       SRV_M_HEALTH, SRV_M_VERSION, SRV_M_METRICS, SRV_M_TOKENIZER_INFO, SRV_M_OTHER,
       SRV_M_ENDPOINTS };

/* The statuses the server answers with (others are counted as 500). */
enum { SRV_M_CODES = 10 };

enum { SRV_M_E2E_BUCKETS = 21, SRV_M_TTFT_BUCKETS = 22 };

typedef struct srv_histogram {
    const double *le;             /* upper bounds, ascending; +Inf after them */
    size_t n_le;
    uint64_t count[32];           /* per bucket (not cumulative), the last +Inf's */
    double sum;
    uint64_t n;
} srv_histogram;

typedef struct srv_metrics {
    pthread_mutex_t lock;
    uint64_t requests[SRV_M_ENDPOINTS][SRV_M_CODES];
    uint64_t prompt_tokens, generation_tokens;
    srv_histogram e2e, ttft;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_free(srv_metrics *m);

/* The endpoint a URL counts as. */
int srv_metrics_endpoint(const char *url);

/* A request answered with HTTP status `status`. */
void srv_metrics_request(srv_metrics *m, int endpoint, unsigned status);

/* A generation request that completed: its prompt and generated tokens,
 * seconds from its arrival to its end and to its first token (scoring:
 * the prompt's logprobs), a negative ttft when there was none. */
void srv_metrics_generation(srv_metrics *m, uint64_t prompt, uint64_t generated, double e2e,
                            double ttft);

/* The text of /metrics, with the gauges given: rows decoding, requests
 * queued, connections open.  info_labels: the labels of ds4ref_info (already
 * escaped).  Free with free(); NULL when out of memory. */
char *srv_metrics_text(srv_metrics *m, uint32_t running, uint32_t waiting, int connections,
                       const char *info_labels);

/* value as a Prometheus label value: backslash, double quote and newline
 * escaped, into out (cut at out_size). */
void srv_metrics_label(const char *value, char *out, size_t out_size);

#endif
