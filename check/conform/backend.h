/* Running a backend's command for one cell, and reading back what it left:
 * its output files (through the trace readers) and the acceptance counts it
 * printed. */
#ifndef DS4_CONFORM_BACKEND_H
#define DS4_CONFORM_BACKEND_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

typedef struct ds4_cf_exit {
    int status;            /* exit status; 128 + N when killed by signal N */
    bool timed_out;
    double seconds;
} ds4_cf_exit;

/* Run cmd with /bin/sh -c in its own process group, stdin from /dev/null,
 * stdout and stderr into log_path; kill the group once it has used timeout
 * seconds of CPU (0: no limit; wall time where /proc cannot tell, and 10 x
 * timeout of wall time for a backend that hangs without using CPU), or as
 * soon as *stop is set (stop may be NULL): then DS4_E_INTERRUPTED.
 * Otherwise an error only when the command could not be started.  Safe to
 * call from several threads at once. */
int ds4chk_backend_spawn(const char *cmd, const char *log_path, double timeout,
                 volatile sig_atomic_t *stop, ds4_cf_exit *x, ds4err *err);

/* A server's command (--server-cmd), started in the background as
 * ds4chk_backend_spawn starts a cell's: its own process group, its output
 * appended to log_path. */
int ds4chk_backend_start(const char *cmd, const char *log_path, pid_t *pid, ds4err *err);

/* Is the process still running (not yet exited and reaped)? */
bool ds4chk_backend_alive(pid_t pid);

/* SIGTERM to its group, SIGKILL after grace seconds; reaped. */
void ds4chk_backend_stop(pid_t pid, double grace);

/* Speculative decoding as the backend reported it. */
typedef struct ds4_cf_accept {
    bool known;            /* some line was recognised */
    bool has_deepest;
    uint64_t proposed, accepted, deepest;
} ds4_cf_accept;

/* The counts in a backend's log: ds4ref's line "mtp accept: ... proposed=M
 * accepted=K ... deepest=D" (the last one counts), or ds4's
 * DS4_MTP_SPEC_LOG lines ("mtp spec seq accept drafted=N accepted=K",
 * "mtp spec seq partial drafted=N verified=V accepted=K"), summed, the
 * deepest being the most one cycle accepted. */
void ds4chk_backend_read_accept(const char *log, size_t len, ds4_cf_accept *a);

/* The last non-empty line of a log, at most cap-1 bytes, control bytes
 * shown as '?': what a report quotes when a backend failed. */
void ds4chk_backend_last_line(const char *log, size_t len, char *out, size_t cap);

#endif
