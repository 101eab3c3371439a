/* bandwidth: the memory read bandwidth of this machine with N threads, for
 * the decode roofline of docs/PERFORMANCE.md (decode reads every weight it
 * needs once per token, so bytes per token / bandwidth bounds its speed).
 *
 *   bandwidth [MIB]      (default 2048 MiB, well past any cache)
 *
 * Every thread sums its own part of a buffer (a loop the compiler
 * vectorizes, built with -O3 -march=native); prints the best of 5 passes
 * in GB/s.  Threads: OMP_NUM_THREADS. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 2048;
    size_t n = mib << 17;   /* uint64_t words */
    uint64_t *p = malloc(n * sizeof(uint64_t));
    if (!p) {
        fprintf(stderr, "bandwidth: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    /* First touch by the threads that will read it (NUMA placement). */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = i;
    double best = 0;
    uint64_t total = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = now();
#pragma omp parallel for schedule(static) reduction(+ : total)
        for (size_t i = 0; i < n; i++) total += p[i];
        double gbs = (double)(n * sizeof(uint64_t)) / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    printf("bandwidth threads=%d mib=%zu read_gbps=%.1f (%llu)\n", omp_get_max_threads(), mib, best,
           (unsigned long long)(total & 1));
    free(p);
    return 0;
}
