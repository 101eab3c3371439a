/* How long ds4ref's programs let idle OpenMP threads spin.
 *
 * Between two parallel regions a worker thread spins, waiting for the next
 * one, before it sleeps: libgomp spins 300,000 times (each with a PAUSE,
 * over a hundred cycles on recent x86), libomp for 200 ms.  On an idle
 * machine that saves a wake-up; on a machine other programs use (a CI box,
 * a shared server) the spinning threads take the cores the working ones
 * need: two threads measured several times slower than one.  A spin of ten
 * thousand keeps the idle speed and loses nothing to a busy machine
 * (docs/PERFORMANCE.md has the figures).
 *
 * libomp reads KMP_BLOCKTIME when its first parallel region starts, so
 * setting it in main() is enough.  libgomp reads GOMP_SPINCOUNT in its
 * initializer, before main(), and before the C library has set up the
 * environment a program could change earlier: so a program built with
 * libgomp sets the variable and executes itself again, once.  A user's own
 * OMP_WAIT_POLICY, GOMP_SPINCOUNT or KMP_BLOCKTIME is left alone, and so is
 * the program when it cannot be executed again.  Included by each program's
 * main file; call it first thing in main(). */
#ifndef DS4REF_WAIT_POLICY_H
#define DS4REF_WAIT_POLICY_H

#include <stdlib.h>
#include <unistd.h>

static void ds4ref_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("KMP_BLOCKTIME")) return;
    setenv("KMP_BLOCKTIME", "1", 1);
#if !defined(__clang__)
    setenv("GOMP_SPINCOUNT", "10000", 1);
    execv("/proc/self/exe", argv);
#endif
}

#endif
