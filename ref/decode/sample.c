#include "ref/decode/sample.h"

#include <math.h>

#include "base/detmath.h"
#include "base/rank.h"

int32_t ds4_sample_argmax(const float *logits, uint32_t n) {
    int32_t best = -1;
    for (uint32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (v != v) continue;
        if (best < 0 || v > logits[best]) best = (int32_t)i;
    }
    return best;
}

double ds4_sample_logsumexp(const float *logits, uint32_t n) {
    double mx = -INFINITY;
    for (uint32_t i = 0; i < n; i++)
        if (logits[i] > mx) mx = logits[i];
    if (mx == -INFINITY || mx == INFINITY) return mx;
    double s = 0;
    for (uint32_t i = 0; i < n; i++)
        if (logits[i] == logits[i]) s += ds4_det_exp((double)logits[i] - mx);
    return mx + ds4_det_log(s);
}

uint32_t ds4_sample_top_k(const float *logits, uint32_t n, uint32_t k, int32_t *ids, double *logprobs) {
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (v != v) continue;
        if (m == k && (k == 0 || !ds4_ranks_before(v, i, logits[ids[k - 1]], (uint32_t)ids[k - 1])))
            continue;
        uint32_t j = m < k ? m++ : k - 1;
        while (j > 0 && ds4_ranks_before(v, i, logits[ids[j - 1]], (uint32_t)ids[j - 1])) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = (int32_t)i;
    }
    double lse = ds4_sample_logsumexp(logits, n);
    for (uint32_t j = 0; j < m; j++) logprobs[j] = (double)logits[ids[j]] - lse;
    return m;
}
