/* Resource limits, signals and the command-line programs' exit statuses.
 *
 *   - memory: ds4_reslimit_memory never exceeds physical memory, follows an
 *     RLIMIT set in a child process, and a session whose context cannot fit
 *     is refused with DS4_E_NOMEM and a message saying how much is needed,
 *     before anything is allocated (under a low RLIMIT_DATA an attempted
 *     allocation would fail with a different message);
 *   - SIGBUS: a file truncated under its mapping ends the process with one
 *     line naming the file and DS4_EXIT_SIGBUS;
 *   - the CLI: --ctx too large, the model truncated during generation,
 *     SIGINT during generation (the golden is written, complete or marked
 *     incomplete, never truncated, and the exit status says interrupted);
 *   - every binary: --help exits 0, and each kind of error exits with its
 *     own status and exactly one line on stderr.
 * The CLI tests run the binaries `make` built in the repository root and
 * skip when they are absent. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/reslimit.h"
#include "ref/decode/session.h"
#include "ref/forward/forward.h"
#include "malformed.h"
#include "ref/model/model.h"
#include "ref/model/synth.h"
#include "testutil.h"
#include "ref/text/json.h"
#include "ref/format/golden.h"
#include "ref/format/golden_read.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* RLIMITs cannot be tested where the sanitizer's shadow memory already takes
 * far more address space (and "data") than any limit we could set, nor
 * under valgrind, which manages the address space itself. */
static bool rlimits_testable(void) {
#ifdef UNDER_ASAN
    printf("skipping: RLIMIT tests do not work under AddressSanitizer\n");
    return false;
#else
    if (getenv("DS4REF_VALGRIND")) {
        printf("skipping: RLIMIT tests do not work under valgrind\n");
        return false;
    }
    return true;
#endif
}

static uint64_t physical_bytes(void) {
    return (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* VmSize from /proc/self/status, in bytes (a different file from the one
 * the library reads, statm). */
static uint64_t vm_size(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024;
}

/* ------------------------------------------------------------------ memory */

static void test_limit_within_physical(void **state) {
    (void)state;
    ds4_memlimit m;
    ds4_reslimit_memory(&m);
    uint64_t phys = physical_bytes();
    assert_true(phys > 0);
    assert_true(m.bytes <= phys);
    ds4err err = {0};
    assert_int_equal(ds4_reslimit_check(1 << 20, "a small thing", &err), 0);
    assert_int_equal(ds4_reslimit_check(phys + 1, "a huge thing", &err), -1);
    assert_int_equal(err.code, DS4_E_NOMEM);
    assert_non_null(strstr(err.msg, "a huge thing needs "));
    assert_null(strchr(err.msg, '\n'));
}

/* What a child process found under an rlimit, sent back through a pipe. */
typedef struct rl_result {
    uint64_t limit, set_to;
    char source[32];
    int rc_small, rc_big, code_big;
    char msg[DS4_ERR_MSG];
} rl_result;

static void run_under_rlimit(int resource, uint64_t headroom, rl_result *r) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        rl_result c;
        memset(&c, 0, sizeof(c));
        c.set_to = vm_size() + headroom;
        struct rlimit rl = {(rlim_t)c.set_to, RLIM_INFINITY};
        if (setrlimit(resource, &rl)) _exit(3);
        ds4_memlimit m;
        ds4_reslimit_memory(&m);
        c.limit = m.bytes;
        snprintf(c.source, sizeof(c.source), "%s", m.source);
        ds4err err = {0};
        c.rc_small = ds4_reslimit_check(headroom / 16, "a small thing", &err);
        c.rc_big = ds4_reslimit_check(headroom * 2, "a big thing", &err);
        c.code_big = err.code;
        memcpy(c.msg, err.msg, sizeof(c.msg));
        ssize_t w = write(fds[1], &c, sizeof(c));
        _exit(w == (ssize_t)sizeof(c) ? 0 : 4);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], r, sizeof(*r));
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(got, sizeof(*r));
}

static void test_limit_follows_rlimit_as(void **state) {
    (void)state;
    if (!rlimits_testable()) skip();
    rl_result r;
    uint64_t headroom = 512ull << 20;
    run_under_rlimit(RLIMIT_AS, headroom, &r);
    assert_string_equal(r.source, "RLIMIT_AS");
    /* What is left: the limit less what the child had mapped (which grew a
     * little between the two readings). */
    assert_true(r.limit <= headroom && r.limit > headroom / 2);
    assert_int_equal(r.rc_small, 0);
    assert_int_equal(r.rc_big, -1);
    assert_int_equal(r.code_big, DS4_E_NOMEM);
    assert_non_null(strstr(r.msg, "left under RLIMIT_AS"));
}

static void test_limit_follows_rlimit_data(void **state) {
    (void)state;
    if (!rlimits_testable()) skip();
    rl_result r;
    run_under_rlimit(RLIMIT_DATA, 256ull << 20, &r);
    /* RLIMIT_DATA was set from VmSize, larger than the data segment, so
     * more than the headroom is left, but less than the limit itself. */
    assert_string_equal(r.source, "RLIMIT_DATA");
    assert_true(r.limit < r.set_to && r.limit >= (256ull << 20) / 2);
    assert_int_equal(r.rc_small, 0);
}

/* The synthetic tiny model in a scratch directory, and an engine on it. */
typedef struct fixture {
    char *dir, *path;
    ds4_model m;
    ds4_engine e;
} fixture;

static int model_setup(void **state) {
    fixture *f = calloc(1, sizeof(*f));
    f->dir = tu_tmpdir();
    f->path = tu_path(f->dir, "tiny.gguf");
    ds4_synth_opts o = {.config = "tiny", .seed = 1};
    ds4err err = {0};
    if (ds4_synth_write(&o, f->path, NULL, &err) || ds4_model_open(&f->m, f->path, &err))
        fail_msg("%s", err.msg);
    ds4_fwd_opts fo = {.qat = true};
    if (ds4_engine_init(&f->e, &f->m, &fo, 4, &err)) fail_msg("%s", err.msg);
    *state = f;
    return 0;
}

static int model_teardown(void **state) {
    fixture *f = *state;
    ds4_engine_free(&f->e);
    ds4_model_close(&f->m);
    remove(f->path);
    free(f->path);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

static void test_session_ctx_too_large(void **state) {
    fixture *f = *state;
    /* The tiny model keeps, per position, at least a compressed row of 128
     * f32 per 4 positions in each of two compressors of its ratio-4 layer:
     * 2^32-1 positions need more than 256 GiB, more than this machine has. */
    if (physical_bytes() >= (256ull << 30)) {
        tu_skipping("this machine has 256 GiB or more, enough for the session to fit");
        skip();
    }
    ds4_session s;
    ds4err err = {0};
    ds4_session_opts o = {.ctx = UINT32_MAX, .chunk = 4, .rollback = 32};
    assert_int_equal(ds4_session_init(&s, &f->e, &o, &err), -1);
    assert_int_equal(err.code, DS4_E_NOMEM);
    assert_non_null(strstr(err.msg, "a context of 4294967295 tokens"));
    assert_non_null(strstr(err.msg, " needs "));
    /* A context that fits is fine. */
    o.ctx = 4096;
    assert_int_equal(ds4_session_init(&s, &f->e, &o, &err), 0);
    ds4_session_free(&s);
}

/* However many tokens a pass is asked to carry, the engine settles on
 * passes whose scratch stays within its budget (64 MiB for a model as small
 * as the tiny one; 2^32-1 tokens would need terabytes), and a session whose
 * chunk is longer than the engine's passes gives the logits of one that
 * evaluates token by token. */
static void test_engine_caps_its_passes(void **state) {
    fixture *f = *state;
    ds4_engine e;
    ds4err err = {0};
    ds4_fwd_opts fo = {.qat = true};
    assert_int_equal(ds4_engine_init(&e, &f->m, &fo, UINT32_MAX, &err), 0);
    assert_true(e.cap > 1 && e.cap < UINT32_MAX);
    uint32_t V = f->m.cfg.n_vocab, n = e.cap + 5;
    int32_t *ids = tu_random_tokens(n, V, 3);
    float *a = malloc(sizeof(float) * V);
    ds4_session s;
    ds4_session_opts so = {.ctx = n + 1, .chunk = UINT32_MAX};
    assert_int_equal(ds4_session_init(&s, &e, &so, &err), 0);
    assert_int_equal(s.kv.chunk, e.cap);
    assert_int_equal(ds4_session_eval(&s, ids, n, NULL, NULL, &err), 0);
    memcpy(a, s.logits, sizeof(float) * V);
    ds4_session_free(&s);
    so.chunk = 1;
    assert_int_equal(ds4_session_init(&s, &e, &so, &err), 0);
    assert_int_equal(ds4_session_eval(&s, ids, n, NULL, NULL, &err), 0);
    assert_memory_equal(a, s.logits, sizeof(float) * V);
    ds4_session_free(&s);
    ds4_engine_free(&e);
    free(ids);
    free(a);
}

static void test_session_refused_before_allocating(void **state) {
    fixture *f = *state;
    if (!rlimits_testable()) skip();
    /* 2^24 positions need about 4 GiB; with 1 GiB of RLIMIT_DATA left an
     * allocation would fail with "cannot allocate ...": the check must
     * answer first, naming the limit. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {(rlim_t)(vm_size() + (1ull << 30)), RLIM_INFINITY};
        if (setrlimit(RLIMIT_DATA, &rl)) _exit(3);
        ds4_session s;
        ds4err err = {0};
        ds4_session_opts o = {.ctx = 1u << 24, .chunk = 4, .rollback = 32};
        int rc = ds4_session_init(&s, &f->e, &o, &err);
        if (rc == 0) _exit(4);
        if (err.code != DS4_E_NOMEM) _exit(5);
        if (!strstr(err.msg, "needs") || !strstr(err.msg, "RLIMIT_DATA")) {
            fprintf(stderr, "unexpected message: %s\n", err.msg);
            _exit(6);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ------------------------------------------------------------------ SIGBUS */

/* In a child: map a 64 KiB file, truncate it, touch byte 40000. */
static void sigbus_child(const char *path, bool watch) {
    ds4err err = {0};
    if (ds4_reslimit_sigbus_install("test_limits", &err)) _exit(20);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, 65536)) _exit(21);
    volatile const uint8_t *p = mmap(NULL, 65536, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) _exit(22);
    if (watch) ds4_reslimit_sigbus_watch((const void *)p, 65536, path);
    if (ftruncate(fd, 0)) _exit(23);
    uint8_t x = p[40000];
    _exit(24 + x);   /* not reached */
}

static void run_sigbus(bool watch) {
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "mapped.bin");
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        sigbus_child(path, watch);
    }
    close(fds[1]);
    char buf[1024];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof(buf) - 1 && (r = read(fds[0], buf + n, sizeof(buf) - 1 - n)) > 0) n += (size_t)r;
    buf[n] = '\0';
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), DS4_EXIT_SIGBUS);
    /* One line, starting with the program name. */
    assert_true(n > 0 && buf[n - 1] == '\n' && strchr(buf, '\n') == buf + n - 1);
    assert_true(!strncmp(buf, "test_limits: ", 13));
    if (watch) {
        assert_non_null(strstr(buf, path));
        assert_non_null(strstr(buf, "SIGBUS reading byte 40000"));
    } else {
        assert_non_null(strstr(buf, "SIGBUS: a memory-mapped file"));
    }
    remove(path);
    free(path);
    tu_rmdir(dir);
}

static void test_sigbus_named(void **state) {
    (void)state;
    run_sigbus(true);
}

static void test_sigbus_unnamed(void **state) {
    (void)state;
    run_sigbus(false);
}

/* ------------------------------------------------------------------ CLI */

typedef struct child {
    pid_t pid;
    int fd[2];            /* read ends of stdout and stderr; -1 once closed */
    ds4_buf out, err;
} child;

static void child_start(child *c, const char *const *argv) {
    memset(c, 0, sizeof(*c));
    int po[2], pe[2];
    assert_int_equal(pipe(po), 0);
    assert_int_equal(pipe(pe), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, po[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, pe[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&fa, po[0]);
    posix_spawn_file_actions_addclose(&fa, pe[0]);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    extern char **environ;
    int e = posix_spawn(&c->pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(po[1]);
    close(pe[1]);
    if (e) fail_msg("cannot run %s: %s", argv[0], strerror(e));
    c->fd[0] = po[0];
    c->fd[1] = pe[0];
}

/* Collect output until stdout holds `want` bytes, both pipes close, or
 * timeout_ms passes. */
static void child_read(child *c, size_t want, int timeout_ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while ((c->fd[0] >= 0 || c->fd[1] >= 0) && c->out.len < want) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = timeout_ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0) break;
        struct pollfd p[2] = {{c->fd[0], POLLIN, 0}, {c->fd[1], POLLIN, 0}};
        if (poll(p, 2, (int)left) <= 0) continue;
        for (int i = 0; i < 2; i++) {
            if (c->fd[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP))) continue;
            char buf[4096];
            ssize_t r = read(c->fd[i], buf, sizeof(buf));
            if (r > 0) {
                ds4_buf_put(i ? &c->err : &c->out, buf, (size_t)r);
            } else {
                close(c->fd[i]);
                c->fd[i] = -1;
            }
        }
    }
}

/* Drain, reap and return the wait status. */
static int child_wait(child *c) {
    child_read(c, SIZE_MAX, 300000);
    for (int i = 0; i < 2; i++)
        if (c->fd[i] >= 0) close(c->fd[i]);
    int status;
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
    return status;
}

static void child_free(child *c) {
    ds4_buf_free(&c->out);
    ds4_buf_free(&c->err);
}

/* The binaries and the default model `make` builds; skip when absent. */
static bool have_cli(void) {
    static const char *const need[] = {"./ds4ref", "./ds4_test", "./ds4ref-gguf", "./ds4ref-diff",
                                       "./ds4ref-mkmodel", "./ds4ref-bench", "models/tiny.gguf"};
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
        if (access(need[i], R_OK)) {
            printf("skipping: %s not found (run make first; tests run from the repository root)\n",
                   need[i]);
            return false;
        }
    return true;
}

static size_t count_lines(const ds4_buf *b) {
    size_t n = 0;
    for (size_t i = 0; i < b->len; i++) n += b->p[i] == '\n';
    return n;
}

static void test_cli_ctx_too_large(void **state) {
    (void)state;
    if (!have_cli()) skip();
    if (physical_bytes() >= (256ull << 30)) {
        tu_skipping("this machine has 256 GiB or more, enough for the context to fit");
        skip();
    }
    const char *argv[] = {"./ds4ref", "-m", "models/tiny.gguf", "-p", "hi", "--ctx", "2147483647",
                          "-n", "1", NULL};
    child c;
    child_start(&c, argv);
    int st = child_wait(&c);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), DS4_E_NOMEM);
    /* The note that the context is past the model's, then the error. */
    assert_int_equal(count_lines(&c.err), 2);
    assert_non_null(strstr(c.err.p, "past the model's context_length"));
    assert_non_null(strstr(c.err.p, "a context of 2147483647 tokens"));
    assert_non_null(strstr(c.err.p, " needs "));
    child_free(&c);
}

/* Start a long generation on `model` writing `golden`; wait for its first
 * generated text. */
static void start_generation(child *c, const char *model, const char *golden) {
    const char *argv[] = {"./ds4ref", "-m", model, "-p", "Tell me a long story", "-n", "2000",
                          "--ignore-eos", "--ctx", "4096", "--golden-out", golden, NULL};
    child_start(c, argv);
    child_read(c, 1, 120000);
    assert_true(c->out.len > 0);
}

static void test_cli_sigint(void **state) {
    (void)state;
    if (!have_cli()) skip();
    char *dir = tu_tmpdir();
    char *golden = tu_path(dir, "g.jsonl");
    child c;
    start_generation(&c, "models/tiny.gguf", golden);
    assert_int_equal(kill(c.pid, SIGINT), 0);
    int st = child_wait(&c);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), DS4_E_INTERRUPTED);
    assert_true(count_lines(&c.err) >= 1);
    assert_non_null(strstr(c.err.p, "interrupted"));
    /* The strict reader accepts only a whole, canonical file. */
    ds4_golden g;
    ds4err err = {0};
    if (ds4_golden_read(golden, &g, &err)) fail_msg("%s", err.msg);
    assert_int_equal(g.stop, DS4_STOP_INTERRUPTED);
    assert_false(ds4_stop_complete(g.stop));
    assert_true(g.n_steps >= 1 && g.n_steps < 2000);
    ds4_golden_free(&g);
    assert_int_equal(tu_count_entries(dir), 1);   /* no temporary file left */
    child_free(&c);
    remove(golden);
    free(golden);
    tu_rmdir(dir);
}

static int copy_file(const char *from, const char *to) {
    uint8_t *buf;
    size_t len;
    if (tu_read_file(from, &buf, &len)) return -1;
    FILE *f = fopen(to, "wb");
    int rc = f && fwrite(buf, 1, len, f) == len ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    free(buf);
    return rc;
}

static void test_cli_model_truncated(void **state) {
    (void)state;
    if (!have_cli()) skip();
    char *dir = tu_tmpdir();
    char *model = tu_path(dir, "m.gguf"), *golden = tu_path(dir, "g.jsonl");
    assert_int_equal(copy_file("models/tiny.gguf", model), 0);
    child c;
    start_generation(&c, model, golden);
    assert_int_equal(truncate(model, 0), 0);
    int st = child_wait(&c);
    if (WIFSIGNALED(st))
        fail_msg("ds4ref died of signal %d: the CLI must install the SIGBUS handler "
                 "(ds4_reslimit_sigbus_install, base/reslimit.h)", WTERMSIG(st));
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), DS4_EXIT_SIGBUS);
    assert_int_equal(count_lines(&c.err), 1);
    assert_non_null(strstr(c.err.p, "SIGBUS"));
    /* Never a truncated golden: the target was not written at all. */
    assert_int_equal(access(golden, F_OK), -1);
    child_free(&c);
    /* tu_rmdir also removes the stray temporary file the killed writer left
     * next to the target (base/file.h's atomic writer). */
    remove(model);
    free(model);
    free(golden);
    tu_rmdir(dir);
}

/* ------------------------------------------------------------------ exit statuses */

typedef struct exit_case {
    const char *argv[12];     /* "@DIR" is replaced by the scratch directory */
    int status;
} exit_case;

static void test_cli_exit_statuses(void **state) {
    (void)state;
    if (!have_cli()) skip();
    char *dir = tu_tmpdir();
    /* Fixtures: a malformed GGUF, a valid GGUF that is no DS4 model, a bad
     * token file. */
    char *bad = tu_path(dir, "bad.gguf"), *notds4 = tu_path(dir, "small.gguf");
    char *toks = tu_path(dir, "toks.txt"), *none = tu_path(dir, "none.gguf");
    char *nodir = tu_path(dir, "nodir/x.gguf");
    FILE *f = fopen(bad, "wb");
    fputs("GGUFxxxx", f);
    fclose(f);
    uint8_t *small;
    size_t small_len;
    assert_int_equal(mf_valid_small(3, &small, &small_len), 0);
    f = fopen(notds4, "wb");
    fwrite(small, 1, small_len, f);
    fclose(f);
    free(small);
    f = fopen(toks, "wb");
    fputs("1 2 999999", f);
    fclose(f);
    const char *g1 = "vectors/tiny-ds4-qaton-capital.jsonl", *g2 = "vectors/tiny-ds4-qatoff-capital.jsonl";
    const exit_case cases[] = {
        {{"./ds4ref", "--help"}, 0},
        {{"./ds4ref", "--bogus"}, DS4_E_ARG},
        {{"./ds4ref", "-n", "many"}, DS4_E_ARG},
        {{"./ds4ref", "-m", none, "-p", "hi"}, DS4_E_IO},
        {{"./ds4ref", "-m", bad, "-p", "hi"}, DS4_E_FORMAT},
        {{"./ds4ref", "-m", notds4, "-p", "hi"}, DS4_E_MODEL},
        {{"./ds4ref", "-m", "models/tiny.gguf", "--tokens-file", toks, "-n", "1"}, DS4_E_RANGE},
        {{"./ds4ref-gguf", "--help"}, 0},
        {{"./ds4ref-gguf"}, DS4_E_ARG},
        {{"./ds4ref-gguf", "info", none}, DS4_E_IO},
        {{"./ds4ref-gguf", "info", bad}, DS4_E_FORMAT},
        {{"./ds4ref-gguf", "dequant", notds4, "no.such.tensor"}, DS4_E_ARG},
        {{"./ds4ref-diff", "--help"}, 0},
        {{"./ds4ref-diff", g1}, DS4_E_ARG},
        {{"./ds4ref-diff", g1, none}, DS4_E_IO},
        {{"./ds4ref-diff", g1, bad}, DS4_E_FORMAT},
        {{"./ds4ref-diff", "--exact", g1, g2}, 1},
        {{"./ds4ref-mkmodel", "--help"}, 0},
        {{"./ds4ref-mkmodel"}, DS4_E_ARG},
        {{"./ds4ref-mkmodel", "--config", "huge", "-o", none}, DS4_E_ARG},
        {{"./ds4ref-mkmodel", "--config", "tiny", "-o", nodir}, DS4_E_IO},
        {{"./ds4ref-bench", "--help"}, 0},
        {{"./ds4ref-bench", "-n"}, DS4_E_ARG},
        {{"./ds4ref-bench", "--bogus"}, DS4_E_ARG},
        {{"./ds4ref-bench", "-m", none, "-n", "1"}, DS4_E_IO},
        {{"./ds4_test", "--help"}, 0},
        {{"./ds4_test", "--no-such-test"}, DS4_E_ARG},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const exit_case *k = &cases[i];
        child c;
        child_start(&c, k->argv);
        int st = child_wait(&c);
        int got = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        size_t lines = count_lines(&c.err);
        bool ok = got == k->status && (k->status == 0 ? c.out.len > 0 : lines == 1);
        if (k->status == 1) ok = got == 1;   /* a diff verdict: the report goes to stdout */
        if (!ok) {
            failures++;
            printf("FAIL:");
            for (int a = 0; k->argv[a]; a++) printf(" %s", k->argv[a]);
            printf("\n  exit %d (want %d), %zu stderr lines: %.*s\n", got, k->status, lines,
                   (int)c.err.len, c.err.p ? c.err.p : "");
        }
        child_free(&c);
    }
    remove(bad);
    remove(notds4);
    remove(toks);
    free(bad);
    free(notds4);
    free(toks);
    free(none);
    free(nodir);
    tu_rmdir(dir);
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_within_physical),
        cmocka_unit_test(test_limit_follows_rlimit_as),
        cmocka_unit_test(test_limit_follows_rlimit_data),
        cmocka_unit_test_setup_teardown(test_session_ctx_too_large, model_setup, model_teardown),
        cmocka_unit_test_setup_teardown(test_engine_caps_its_passes, model_setup, model_teardown),
        cmocka_unit_test_setup_teardown(test_session_refused_before_allocating, model_setup,
                                        model_teardown),
        cmocka_unit_test(test_sigbus_named),
        cmocka_unit_test(test_sigbus_unnamed),
        cmocka_unit_test(test_cli_ctx_too_large),
        cmocka_unit_test(test_cli_sigint),
        cmocka_unit_test(test_cli_model_truncated),
        cmocka_unit_test(test_cli_exit_statuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
