/* Thread counts of forward passes (threads.h says why they are measured). */
#include "ref/forward/threads.h"

#include <stdlib.h>

#include <omp.h>

/* The count the user fixed, 0 when none, and the thread's OpenMP count
 * before it fixed one.  Per thread, as OpenMP's own count is: two models
 * used from two threads may each have theirs. */
static _Thread_local int fixed_threads, own_threads;

static int ceil_frac(int n, int num, int den) { return (n * num + den - 1) / den; }

void ds4_threads_init(ds4_threads *t, int max_threads) {
    *t = (ds4_threads){0};
    if (max_threads < 1) max_threads = 1;
    t->machine = max_threads;
    if (max_threads <= DS4_THREADS_TUNED_ABOVE) {
        t->n_cand = 1;
        t->cand[0] = max_threads;
        return;
    }
    static const int eighths[DS4_THREADS_CANDIDATES] = {4, 5, 6, 7, 8};
    for (int i = 0; i < DS4_THREADS_CANDIDATES; i++) {
        int n = ceil_frac(max_threads, eighths[i], 8);
        if (t->n_cand && t->cand[t->n_cand - 1] == n) continue;
        t->cand[t->n_cand++] = n;
    }
}

int ds4_threads_class_of(uint32_t T) {
    return T <= 1 ? 0 : T < DS4_THREADS_PREFILL_TOKENS ? 1 : 2;
}

static int fastest(const ds4_threads_class *c, int n_cand) {
    int best = -1;
    for (int k = 0; k < n_cand; k++)
        if (c->sec[k] > 0 && (best < 0 || c->sec[k] < c->sec[best])) best = k;
    return best;
}

int ds4_threads_next(const ds4_threads *t, int cls) {
    const ds4_threads_class *c = &t->cls[cls];
    if (t->n_cand <= 1) return 0;
    /* A climb from three quarters of the threads: a count's neighbours are
     * measured until neither is faster.  Counts far from the fastest, such
     * as all of them on a machine whose host takes cores back, are never
     * run unless the climb leads there. */
    int start = t->n_cand / 2;
    if (c->sec[start] == 0) return start;
    int best = fastest(c, t->n_cand);
    if (best > 0 && c->sec[best - 1] == 0) return best - 1;
    if (best + 1 < t->n_cand && c->sec[best + 1] == 0) return best + 1;
    /* Settled: now and then a neighbour again, below and above in turn,
     * since the host's load moves. */
    if (c->passes % DS4_THREADS_REPROBE == 0) {
        int k = c->reprobe % 2 ? best + 1 : best - 1;
        if (k < 0 || k >= t->n_cand) k = c->reprobe % 2 ? best - 1 : best + 1;
        return k;
    }
    return best;
}

void ds4_threads_record(ds4_threads *t, int cls, int k, double sec_per_token) {
    ds4_threads_class *c = &t->cls[cls];
    if (k < 0 || k >= t->n_cand || !(sec_per_token > 0)) return;
    /* The newest pass counts as much as everything before it: the host's
     * load moves, and a count measured under old conditions should not
     * hold on to its place for long. */
    c->sec[k] = c->sec[k] > 0 ? (c->sec[k] + sec_per_token) / 2 : sec_per_token;
    if (c->passes % DS4_THREADS_REPROBE == 0 && c->passes >= (uint32_t)t->n_cand) c->reprobe++;
    c->passes++;
}

int ds4_threads_best(const ds4_threads *t, int cls) {
    if (t->n_cand <= 1) return 0;
    int k = fastest(&t->cls[cls], t->n_cand);
    return k < 0 ? 0 : t->cand[k];
}

int ds4_threads_begin(const ds4_threads *t, uint32_t T, int *saved) {
    *saved = omp_get_max_threads();
    if (fixed_threads) {
        omp_set_num_threads(fixed_threads);
        return DS4_THREADS_FIXED;
    }
    if (!ds4_threads_tuning(t)) return DS4_THREADS_UNTOUCHED;
    int k = ds4_threads_next(t, ds4_threads_class_of(T));
    omp_set_num_threads(t->cand[k]);
    return k;
}

void ds4_threads_end(ds4_threads *t, uint32_t T, int k, int saved, bool measure, double seconds) {
    if (k == DS4_THREADS_UNTOUCHED) return;
    omp_set_num_threads(saved);
    if (k < 0 || !measure || !T) return;
    if (t->warm) ds4_threads_record(t, ds4_threads_class_of(T), k, seconds / T);
    t->warm = true;
}

int ds4_threads_fix(int n) {
    if (n > 0) {
        if (!fixed_threads) own_threads = omp_get_max_threads();
        fixed_threads = n;
        omp_set_num_threads(n);
    } else if (fixed_threads) {
        fixed_threads = 0;
        omp_set_num_threads(own_threads);
    }
    return omp_get_max_threads();
}

int ds4_threads_default(void) {
    /* The CPUs this process may use, which is OpenMP's default when
     * OMP_NUM_THREADS is unset (when it is set nothing is chosen).  Asking a
     * new thread for its count would be exact, but starting one hangs under
     * qemu-user, where the aarch64 builds are tested. */
    return omp_get_num_procs();
}

bool ds4_threads_tuning(const ds4_threads *t) {
    /* Inside a caller's parallel region a pass's own regions get one
     * thread, whatever the count: nothing to choose or measure. */
    return t->n_cand > 1 && !fixed_threads && !getenv("OMP_NUM_THREADS") && !omp_in_parallel() &&
           omp_get_max_threads() == t->machine;
}
