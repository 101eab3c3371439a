/* Resource limits: memory checked before big allocations, and a SIGBUS
 * handler for the command-line programs.
 *
 * Memory.  On Linux a huge calloc() usually succeeds (overcommit) and the
 * process is killed later, when the pages are touched, with no message at
 * all.  So the sizes that grow with user input (the attention state of a
 * --ctx, the scratch of a --chunk) are compared, before anything is
 * allocated, with what the machine can give this process: the smallest of
 * physical memory, the cgroup memory limit, and RLIMIT_AS / RLIMIT_DATA less
 * what the process already uses.  The check is necessary, not sufficient:
 * passing it does not reserve anything.
 *
 * SIGBUS.  The model is mmapped.  If the file is truncated or rewritten while
 * it is mapped, reading a page past its new end raises SIGBUS, from whichever
 * thread touched it, in the middle of any computation.  The library cannot
 * recover from that; a program can at least say what happened instead of
 * dying with "Bus error".  ds4_reslimit_sigbus_install() sets a handler that writes
 * one line with write(2) (naming the file when it was registered with
 * ds4_reslimit_sigbus_watch) and _exit()s with DS4_EXIT_SIGBUS.  Outputs being
 * written are not committed: their targets keep their previous content
 * (base/file.h, its atomic writer), so no truncated golden can result. */
#ifndef DS4_RESLIMIT_H
#define DS4_RESLIMIT_H

#include <stdint.h>

#include "base/err.h"

/* Exit status of a program stopped by SIGBUS (distinct from every DS4_E_*). */
enum { DS4_EXIT_SIGBUS = DS4_E_INTERNAL + 1 };

/* What this process can still be given, and which limit decides it. */
typedef struct ds4_memlimit {
    uint64_t bytes;        /* UINT64_MAX when no limit could be determined */
    const char *source;    /* "physical memory", "the cgroup memory limit",
                              "RLIMIT_AS", "RLIMIT_DATA", or "none" */
} ds4_memlimit;

void ds4_reslimit_memory(ds4_memlimit *out);

/* Fails with DS4_E_NOMEM, naming `what` and both amounts, when `bytes` is more
 * than ds4_reslimit_memory() gives, e.g. "the attention state for a context of
 * 1048576 tokens needs 72.00 GiB, more than the 15.50 GiB of physical
 * memory". */
int ds4_reslimit_check(uint64_t bytes, const char *what, ds4err *err);

/* Install the SIGBUS handler; `prog` (kept, not copied) starts its line. */
int ds4_reslimit_sigbus_install(const char *prog, ds4err *err);

/* Name the file mapped at [base, base + size) in the handler's message
 * (path is kept, not copied); ds4_reslimit_sigbus_unwatch before unmapping.  Up to 8
 * mappings; more are accepted and reported without a name. */
void ds4_reslimit_sigbus_watch(const void *base, uint64_t size, const char *path);
void ds4_reslimit_sigbus_unwatch(const void *base);

#endif
