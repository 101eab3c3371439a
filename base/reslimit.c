/* Memory limits and the SIGBUS handler; see reslimit.h. */
#include "base/reslimit.h"

#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ------------------------------------------------------------------ memory */

/* One decimal number from a small file (cgroup files hold "max" or bytes). */
static int read_u64_file(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (!ok) return -1;
    *out = v;
    return 0;
}

/* The memory limit of this process's cgroup, v2 or v1; -1 when there is
 * none.  A container sees its own cgroup as the root of /sys/fs/cgroup, a
 * host process sees the path named in /proc/self/cgroup: try both. */
static int cgroup_limit(uint64_t *out) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[512], path[768];
    int found = -1;
    while (f && found && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *rel = strchr(line, ':');
        char *grp = rel ? strchr(rel + 1, ':') : NULL;
        if (!grp) continue;
        *grp++ = '\0';
        if (!strcmp(rel + 1, "")) {               /* v2: "0::/path" */
            snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", grp);
        } else if (strstr(rel + 1, "memory")) {   /* v1: "4:memory:/path" */
            snprintf(path, sizeof(path), "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", grp);
        } else {
            continue;
        }
        found = read_u64_file(path, out);
    }
    if (f) fclose(f);
    if (found) found = read_u64_file("/sys/fs/cgroup/memory.max", out);
    if (found) found = read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", out);
    /* v1 writes "no limit" as a huge page-rounded number. */
    if (!found && *out >= (UINT64_C(1) << 62)) found = -1;
    return found;
}

/* Bytes of address space and of data segment already in use (/proc/self/statm
 * counts pages: size resident shared text lib data dt). */
static void usage_now(uint64_t *as, uint64_t *data) {
    *as = *data = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f) return;
    unsigned long long size, res, shared, text, lib, dat;
    if (fscanf(f, "%llu %llu %llu %llu %llu %llu", &size, &res, &shared, &text, &lib, &dat) == 6) {
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        *as = size * page;
        *data = dat * page;
    }
    fclose(f);
}

static void consider(ds4_memlimit *m, uint64_t bytes, const char *source) {
    if (bytes < m->bytes) {
        m->bytes = bytes;
        m->source = source;
    }
}

/* An rlimit less what is already in use (0 left when usage is over it). */
static void consider_rlimit(ds4_memlimit *m, int resource, uint64_t used, const char *source) {
    struct rlimit rl;
    if (getrlimit(resource, &rl) || rl.rlim_cur == RLIM_INFINITY) return;
    uint64_t lim = (uint64_t)rl.rlim_cur;
    consider(m, lim > used ? lim - used : 0, source);
}

void ds4_reslimit_memory(ds4_memlimit *out) {
    out->bytes = UINT64_MAX;
    out->source = "none";
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) consider(out, (uint64_t)pages * (uint64_t)page, "physical memory");
    uint64_t cg;
    if (!cgroup_limit(&cg)) consider(out, cg, "the cgroup memory limit");
    uint64_t as, data;
    usage_now(&as, &data);
    consider_rlimit(out, RLIMIT_AS, as, "RLIMIT_AS");
    consider_rlimit(out, RLIMIT_DATA, data, "RLIMIT_DATA");
}

/* "1.50 GiB", "12.00 MiB", "300 bytes". */
static void human(uint64_t b, char *buf, size_t cap) {
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (b < 1024) {
        snprintf(buf, cap, "%llu bytes", (unsigned long long)b);
        return;
    }
    double v = (double)b / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, "%.2f %s", v, unit[u]);
}

int ds4_reslimit_check(uint64_t bytes, const char *what, ds4err *err) {
    ds4_memlimit m;
    ds4_reslimit_memory(&m);
    if (bytes <= m.bytes) return 0;
    char need[32], have[32];
    human(bytes, need, sizeof(need));
    human(m.bytes, have, sizeof(have));
    bool rlimit = !strncmp(m.source, "RLIMIT", 6);
    return ds4_err_set(err, DS4_E_NOMEM, "%s needs %s, more than the %s %s%s", what, need, have,
                      rlimit ? "left under " : "of ", m.source);
}

/* ------------------------------------------------------------------ SIGBUS */

enum { N_WATCH = 8 };

/* Filled by ordinary code, read by the handler: a slot's fields are written
 * before its base is published, and the handler reads base first. */
static struct {
    _Atomic(const void *) base;
    uint64_t size;
    const char *path;
} watch[N_WATCH];

static const char *sigbus_prog = "ds4ref";
static atomic_flag sigbus_entered = ATOMIC_FLAG_INIT;

void ds4_reslimit_sigbus_watch(const void *base, uint64_t size, const char *path) {
    for (int i = 0; i < N_WATCH; i++) {
        if (atomic_load(&watch[i].base)) continue;
        watch[i].size = size;
        watch[i].path = path;
        atomic_store(&watch[i].base, base);
        return;
    }
}

void ds4_reslimit_sigbus_unwatch(const void *base) {
    for (int i = 0; i < N_WATCH; i++)
        if (atomic_load(&watch[i].base) == base) atomic_store(&watch[i].base, NULL);
}

/* Async-signal-safe appends into a fixed line buffer. */
typedef struct line {
    char b[640];
    size_t n;
} line;

static void put_str(line *l, const char *s) {
    while (*s && l->n < sizeof(l->b) - 1) l->b[l->n++] = *s++;
}

static void put_u64(line *l, uint64_t v) {
    char d[24];
    int k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (k && l->n < sizeof(l->b) - 1) l->b[l->n++] = d[--k];
}

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)ctx;
    /* Several threads may fault at once: one reports, the others wait for
     * the _exit that ends them all. */
    if (atomic_flag_test_and_set(&sigbus_entered))
        for (;;) pause();
    line l = {.n = 0};
    put_str(&l, sigbus_prog);
    put_str(&l, ": ");
    const char *addr = si ? (const char *)si->si_addr : NULL;
    int named = 0;
    for (int i = 0; i < N_WATCH && !named; i++) {
        const char *base = atomic_load(&watch[i].base);
        if (!base || !addr || addr < base || (uint64_t)(addr - base) >= watch[i].size) continue;
        put_str(&l, watch[i].path);
        put_str(&l, ": the file was truncated or changed while mapped (SIGBUS reading byte ");
        put_u64(&l, (uint64_t)(addr - base));
        put_str(&l, "); do not modify a model while it is in use");
        named = 1;
    }
    if (!named)
        put_str(&l, "SIGBUS: a memory-mapped file (the model) was truncated or changed while in "
                    "use; do not modify a model while it is in use");
    put_str(&l, "\n");
    for (size_t off = 0; off < l.n;) {
        ssize_t w = write(STDERR_FILENO, l.b + off, l.n - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    _exit(DS4_EXIT_SIGBUS);
}

int ds4_reslimit_sigbus_install(const char *prog, ds4err *err) {
    sigbus_prog = prog;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL))
        return ds4_err_set(err, DS4_E_INTERNAL, "cannot install the SIGBUS handler");
    return 0;
}
