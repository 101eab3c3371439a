/* Backend processes and their logs (backend.h). */
#include "conform/backend.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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

/* In the child: its own process group (so a timeout kills what it started
 * too), the log as stdout and stderr, then the shell. */
static void child(const char *cmd, int log_fd) {
    setpgid(0, 0);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
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
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(log_fd);
        return ds4_err_set(err, DS4_E_IO, "cannot start the backend: %s", strerror(errno));
    }
    if (pid == 0) child(cmd, log_fd);
    close(log_fd);
    setpgid(pid, pid);   /* also here: whichever runs first */
    /* Polled, so that a timeout or a stop request is seen within 20 ms. */
    int st = 0;
    long nap = 1;
    bool stopped = false;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return ds4_err_set(err, DS4_E_IO, "waitpid: %s", strerror(errno));
        bool late = timeout > 0 && now_sec() - start > timeout;
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
