/* Backend processes and their logs (backend.h). */
#include "check/conform/backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts cmd under /bin/sh in a process group of its own (so that a
 * timeout kills what it started too), with /dev/null as stdin and the log
 * as stdout and stderr; an errno value if it cannot.  posix_spawn, not
 * fork: this program has threads (OpenMP's pool, --jobs), and a forked
 * child runs every library's atfork handlers, which may wait for a lock
 * another thread held at the fork: LLVM's OpenMP runtime hung a child
 * there, forever, in the sanitizer build.  glibc's posix_spawn runs no
 * atfork handler. */
static int spawn_shell(const char *cmd, int log_fd, pid_t *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc) return rc;
    rc = posix_spawnattr_init(&at);
    if (rc) {
        posix_spawn_file_actions_destroy(&fa);
        return rc;
    }
    char *const argv[] = {"sh", "-c", (char *)cmd, NULL};
    rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
    if (!rc) rc = posix_spawnattr_setpgroup(&at, 0);
    if (!rc) rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    if (!rc) rc = posix_spawn(pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

/* CPU seconds used by process group pgid: every live member's own time and
 * that of the children it has reaped (the shell's cutime holds the commands
 * it ran), from /proc; -1 where /proc cannot be read. */
static double group_cpu_seconds(pid_t pgid) {
    DIR *d = opendir("/proc");
    if (!d) return -1;
    double ticks = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[300], buf[1024];
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = '\0';
        /* The command name may hold spaces and parentheses: the fields
         * start after the last ')'.  Then state, ppid, pgrp, ..., the 14th
         * to 17th fields of the line being utime, stime, cutime, cstime. */
        const char *p = strrchr(buf, ')');
        long long f[15];
        if (!p || sscanf(p + 1, " %*c %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld",
                         &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9],
                         &f[10], &f[11], &f[12], &f[13]) != 14)
            continue;
        if (f[1] == pgid) ticks += (double)(f[10] + f[11] + f[12] + f[13]);
    }
    closedir(d);
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? ticks / (double)hz : -1;
}

/* Is a backend past its time: timeout seconds of CPU (so that a machine
 * busy with other work does not stop a slow cell), or, where /proc cannot
 * say, of wall time; and one that uses no CPU, hung, after WALL_FACTOR x
 * timeout of wall time. */
enum { WALL_FACTOR = 10 };
static bool past_time(pid_t pgid, double timeout, double wall) {
    if (timeout <= 0) return false;
    if (wall > WALL_FACTOR * timeout) return true;
    double cpu = group_cpu_seconds(pgid);
    return cpu < 0 ? wall > timeout : cpu > timeout;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int ds4chk_backend_spawn(const char *cmd, const char *log_path, double timeout,
                 volatile sig_atomic_t *stop, ds4_cf_exit *x, ds4err *err) {
    memset(x, 0, sizeof(*x));
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return ds4_err_set(err, DS4_E_IO, "%s: %s", log_path, strerror(errno));
    double start = now_sec();
    pid_t pid;
    int rc = spawn_shell(cmd, log_fd, &pid);
    close(log_fd);
    if (rc) return ds4_err_set(err, DS4_E_IO, "cannot start the backend: %s", strerror(rc));
    /* Polled, so that a stop request is seen within 20 ms and a timeout
     * within a tenth of a second (reading /proc costs more). */
    int st = 0;
    long nap = 1;
    bool stopped = false;
    double next_time_check = start;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return ds4_err_set(err, DS4_E_IO, "waitpid: %s", strerror(errno));
        double now = now_sec();
        bool late = false;
        if (timeout > 0 && now >= next_time_check) {
            late = past_time(pid, timeout, now - start);
            next_time_check = now + 0.1;
        }
        if ((late || (stop && *stop)) && !x->timed_out && !stopped) {
            x->timed_out = late;
            stopped = !late;
            kill(-pid, SIGKILL);
        }
        sleep_ms(nap);
        if (nap < 20) nap *= 2;
    }
    if (stopped) return ds4_err_set(err, DS4_E_INTERRUPTED, "interrupted");
    x->seconds = now_sec() - start;
    x->status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
    return 0;
}

/* The unsigned number after "key=" in line[0..len), if there is one. */
static bool field(const char *line, size_t len, const char *key, uint64_t *v) {
    size_t klen = strlen(key);
    for (size_t i = 0; i + klen < len; i++) {
        if (memcmp(line + i, key, klen) || (i && line[i - 1] != ' ')) continue;
        size_t j = i + klen;
        if (j >= len || line[j] < '0' || line[j] > '9') return false;
        uint64_t x = 0;
        for (; j < len && line[j] >= '0' && line[j] <= '9' && x < UINT64_MAX / 10; j++)
            x = x * 10 + (uint64_t)(line[j] - '0');
        *v = x;
        return true;
    }
    return false;
}

static bool contains(const char *line, size_t len, const char *what) {
    size_t n = strlen(what);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(line + i, what, n)) return true;
    return false;
}

/* ds4's per-cycle lines add up. */
static void ds4_cycle(const char *line, size_t len, ds4_cf_accept *a) {
    uint64_t drafted, accepted;
    if (!field(line, len, "drafted=", &drafted) || !field(line, len, "accepted=", &accepted))
        return;
    a->known = a->has_deepest = true;
    a->proposed += drafted;
    a->accepted += accepted;
    if (accepted > a->deepest) a->deepest = accepted;
}

void ds4chk_backend_read_accept(const char *log, size_t len, ds4_cf_accept *a) {
    memset(a, 0, sizeof(*a));
    ds4_cf_accept total = {0};
    bool have_total = false;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(log + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - log) : len;
        const char *line = log + at;
        size_t n = end - at;
        if (contains(line, n, "mtp accept:")) {
            ds4_cf_accept t = {.known = true};
            if (field(line, n, "proposed=", &t.proposed) && field(line, n, "accepted=", &t.accepted)) {
                t.has_deepest = field(line, n, "deepest=", &t.deepest);
                total = t;
                have_total = true;
            }
        } else if (contains(line, n, "DSpark stats")) {
            /* ds4's DS4_DSPARK_STATS summary (the last one counts): no depth. */
            ds4_cf_accept t = {.known = true};
            if (field(line, n, "proposed=", &t.proposed) &&
                field(line, n, "accepted_draft=", &t.accepted)) {
                total = t;
                have_total = true;
            }
        } else if (contains(line, n, "mtp spec seq accept") || contains(line, n, "mtp spec seq partial")) {
            ds4_cycle(line, n, a);
        }
        at = end + 1;
    }
    if (have_total) *a = total;
}

void ds4chk_backend_last_line(const char *log, size_t len, char *out, size_t cap) {
    while (len && (log[len - 1] == '\n' || log[len - 1] == '\r')) len--;
    size_t start = len;
    while (start && log[start - 1] != '\n') start--;
    size_t n = len - start < cap - 1 ? len - start : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)log[start + i];
        out[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    out[n] = '\0';
}

int ds4chk_backend_start(const char *cmd, const char *log_path, pid_t *pid, ds4err *err) {
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return ds4_err_set(err, DS4_E_IO, "%s: %s", log_path, strerror(errno));
    int rc = spawn_shell(cmd, log_fd, pid);
    close(log_fd);
    if (rc) return ds4_err_set(err, DS4_E_IO, "cannot start a process: %s", strerror(rc));
    return 0;
}

bool ds4chk_backend_alive(pid_t pid) {
    int status;
    return waitpid(pid, &status, WNOHANG) == 0;
}

void ds4chk_backend_stop(pid_t pid, double grace) {
    kill(-pid, SIGTERM);
    const double t0 = now_sec();
    int status;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (now_sec() - t0 > grace) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
    }
    /* What the shell started may outlive it: the whole group goes. */
    kill(-pid, SIGKILL);
}
