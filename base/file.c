#include "base/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sha256.h"

#define AFILE_BUF (64 * 1024)

/* ------------------------------------------------------------------ reading */

/* read() that resumes after signals; returns bytes read, 0 at EOF, -1. */
static ssize_t read_some(int fd, void *p, size_t n) {
    ssize_t r;
    do {
        r = read(fd, p, n);
    } while (r < 0 && errno == EINTR);
    return r;
}

static int grow(char **buf, size_t *cap, size_t need) {
    size_t c = *cap ? *cap : 4096;
    while (c < need) {
        if (c > SIZE_MAX / 2) { c = need; break; }
        c *= 2;
    }
    char *p = realloc(*buf, c);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* ds4_file_read from an open descriptor, up to its end; `name` labels
 * messages.  The descriptor stays open. */
static int read_fd(int fd, const char *name, size_t limit, char **out, size_t *out_len,
                   ds4err *err) {
    *out = NULL;
    *out_len = 0;
    /* Pipes have no size; regular files get their buffer in one step. */
    struct stat st;
    size_t cap = 0, len = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        if ((uint64_t)st.st_size > limit)
            return ds4_err_set(err, DS4_E_NOMEM, "%s: %llu bytes, more than the limit of %zu",
                              name, (unsigned long long)st.st_size, limit);
        cap = (size_t)st.st_size + 1;
    }
    char *buf = malloc(cap ? cap : 4096);
    if (!buf) return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
    if (!cap) cap = 4096;
    for (;;) {
        /* A full buffer may hold the whole file: probe for EOF before
         * growing it, so a regular file is read without a realloc. */
        char probe;
        ssize_t r;
        if (len + 1 < cap) {
            r = read_some(fd, buf + len, cap - len - 1);
        } else {
            r = read_some(fd, &probe, 1);
            if (r > 0) {
                if (grow(&buf, &cap, len + 4097)) {
                    free(buf);
                    return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", name);
                }
                buf[len] = probe;
            }
        }
        if (r < 0) {
            int e = errno;
            free(buf);
            return ds4_err_set(err, DS4_E_IO, "%s: read error at byte %zu: %s", name, len,
                              strerror(e));
        }
        if (r == 0) break;
        len += (size_t)r;
        if (len > limit) {
            free(buf);
            return ds4_err_set(err, DS4_E_NOMEM, "%s: more than the limit of %zu bytes", name,
                              limit);
        }
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return 0;
}

int ds4_file_map(const char *path, ds4_fmap *m, ds4err *err) {
    static const uint8_t empty[1];
    memset(m, 0, sizeof(*m));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ds4_err_set(err, DS4_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ds4_err_set(err, DS4_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ds4_err_set(err, DS4_E_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return ds4_err_set(err, DS4_E_NOMEM, "%s: %jd bytes do not fit in the address space",
                          path, (intmax_t)st.st_size);
    }
    m->data = empty;
    m->size = (size_t)st.st_size;
    if (m->size) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            memset(m, 0, sizeof(*m));
            return ds4_err_set(err, DS4_E_IO, "%s: cannot mmap %jd bytes: %s", path,
                              (intmax_t)st.st_size, strerror(e));
        }
        m->data = p;
        m->mapped = true;
    }
    close(fd);
    return 0;
}

void ds4_file_unmap(ds4_fmap *m) {
    if (m->mapped) munmap((void *)m->data, m->size);
    memset(m, 0, sizeof(*m));
}

int ds4_file_read(const char *path, size_t limit, char **out, size_t *out_len, ds4err *err) {
    *out = NULL;
    *out_len = 0;
    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ds4_err_set(err, DS4_E_IO, "%s: cannot open: %s", path, strerror(errno));
    int rc = read_fd(fd, path, limit, out, out_len, err);
    close(fd);
    return rc;
}

void ds4_file_remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *sub = malloc(strlen(path) + strlen(e->d_name) + 2);
            struct stat st;
            if (sub) sprintf(sub, "%s/%s", path, e->d_name);
            if (sub && lstat(sub, &st) == 0) {
                if (S_ISDIR(st.st_mode)) ds4_file_remove_tree(sub);
                else unlink(sub);
            }
            free(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

int ds4_file_sha256(const char *path, char hex[65], const volatile int *cancel, ds4err *err) {
    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ds4_err_set(err, DS4_E_IO, "%s: cannot open: %s", path, strerror(errno));
    enum { PIECE = 1 << 20 };
    unsigned char *buf = malloc(PIECE);
    ds4_sha256 s;
    ds4_sha256_init(&s);
    ssize_t r = buf ? 0 : -1;
    int stopped = 0;
    while (buf && !(stopped = cancel && *cancel) && (r = read_some(fd, buf, PIECE)) > 0)
        ds4_sha256_update(&s, buf, (size_t)r);
    const int saved = errno;
    close(fd);
    free(buf);
    if (!buf) return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", path);
    if (stopped) return ds4_err_set(err, DS4_E_INTERRUPTED, "%s: digest cancelled", path);
    if (r < 0) return ds4_err_set(err, DS4_E_IO, "%s: cannot read: %s", path, strerror(saved));
    uint8_t d[32];
    ds4_sha256_final(&s, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return 0;
}

/* ------------------------------------------------------------------ writing */

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fsync_retry(int fd) {
    int rc;
    do {
        rc = fsync(fd);
    } while (rc && errno == EINTR);
    return rc;
}

/* Remember the first failure and report it. */
static int afail(ds4_afile *f, ds4err *err, int code, const char *what, int e) {
    if (!f->failed) {
        f->failed = code;
        snprintf(f->why, sizeof(f->why), "%s", what);
        if (e) {
            size_t n = strlen(f->why);
            snprintf(f->why + n, sizeof(f->why) - n, ": %s", strerror(e));
        }
    }
    return ds4_err_set(err, f->failed, "%s: %s", f->path ? f->path : "(closed file)", f->why);
}

static void afile_release(ds4_afile *f) {
    free(f->path);
    free(f->tmp);
    free(f->buf);
    memset(f, 0, sizeof(*f));
    f->fd = -1;
}

/* Targets that are not regular files (/dev/null, /dev/stdout, a pipe) cannot
 * be replaced by a rename, and must not be: renaming over /dev/null as root
 * would turn it into a regular file.  They are written in place; a reader of
 * a pipe sees the bytes as they come, so atomicity means nothing there. */
static int afile_open_direct(ds4_afile *f, const char *path, ds4err *err) {
    f->fd = open(path, O_WRONLY | O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        afile_release(f);
        return ds4_err_set(err, DS4_E_IO, "%s: cannot open for writing: %s", path, strerror(e));
    }
    return 0;
}

int ds4_file_atomic_open(ds4_afile *f, const char *path, ds4err *err) {
    static const char suffix[] = ".tmp.XXXXXX";
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    if (!*path) return ds4_err_set(err, DS4_E_ARG, "empty output file name");
    /* A symbolic link to a file: replace the file it points to, not the
     * link (the rename is done on the resolved path). */
    struct stat st;
    bool exists = stat(path, &st) == 0;
    f->path = exists ? realpath(path, NULL) : strdup(path);
    f->buf = malloc(AFILE_BUF);
    if (!f->path || !f->buf) {
        int e = errno;
        afile_release(f);
        return ds4_err_set(err, e == ENOMEM ? DS4_E_NOMEM : DS4_E_IO, "%s: %s", path,
                          e == ENOMEM ? "out of memory" : strerror(e));
    }
    if (exists && !S_ISREG(st.st_mode)) return afile_open_direct(f, path, err);
    size_t n = strlen(f->path);
    f->tmp = n < SIZE_MAX - sizeof(suffix) ? malloc(n + sizeof(suffix)) : NULL;
    if (!f->tmp) {
        afile_release(f);
        return ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", path);
    }
    memcpy(f->tmp, f->path, n);
    memcpy(f->tmp + n, suffix, sizeof(suffix));
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        /* The temporary file's random name would only confuse: the
         * target is what the user named, and its folder what is wrong. */
        ds4_err_set(err, DS4_E_IO, "%s: cannot be created: %s", path, strerror(e));
        afile_release(f);
        return -1;
    }
    /* mkstemp makes the file 0600; goldens are meant to be shared. */
    if (fchmod(f->fd, 0644)) {
        int e = errno;
        ds4_file_atomic_abort(f);
        return ds4_err_set(err, DS4_E_IO, "%s: cannot chmod temporary file: %s", path,
                          strerror(e));
    }
    return 0;
}

int ds4_file_atomic_flush(ds4_afile *f, ds4err *err) {
    if (f->failed || f->fd < 0) return afail(f, err, DS4_E_IO, "writer is not open", 0);
    if (f->fill && write_all(f->fd, f->buf, f->fill))
        return afail(f, err, DS4_E_IO, "cannot write temporary file", errno);
    f->fill = 0;
    return 0;
}

int ds4_file_atomic_write(ds4_afile *f, const void *data, size_t n, ds4err *err) {
    if (f->failed || f->fd < 0) return afail(f, err, DS4_E_IO, "writer is not open", 0);
    const unsigned char *p = data;
    while (n) {
        if (f->fill == AFILE_BUF && ds4_file_atomic_flush(f, err)) return -1;
        size_t take = AFILE_BUF - f->fill < n ? AFILE_BUF - f->fill : n;
        memcpy(f->buf + f->fill, p, take);
        f->fill += take;
        p += take;
        n -= take;
    }
    return 0;
}

void ds4_file_atomic_abort(ds4_afile *f) {
    if (!f->path) return;
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    afile_release(f);
}

/* The directory entry of a rename is durable only once the directory itself
 * is synced. */
static int sync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy) return -1;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0) return -1;
    int rc = fsync_retry(fd);
    close(fd);
    return rc;
}

int ds4_file_atomic_commit(ds4_afile *f, ds4err *err) {
    if (ds4_file_atomic_flush(f, err)) {
        ds4_file_atomic_abort(f);
        return -1;
    }
    if (!f->tmp) {   /* written in place: nothing to sync or rename */
        int rc = 0;
        if (close(f->fd) && errno != EINTR) rc = afail(f, err, DS4_E_IO, "cannot close", errno);
        f->fd = -1;
        afile_release(f);
        return rc;
    }
    if (fsync_retry(f->fd)) {
        afail(f, err, DS4_E_IO, "cannot fsync temporary file", errno);
        ds4_file_atomic_abort(f);
        return -1;
    }
    /* close() is not retried on EINTR: on Linux the descriptor is gone
     * either way, and the data is already on disk after the fsync. */
    int rc = close(f->fd);
    f->fd = -1;
    if (rc && errno != EINTR) {
        afail(f, err, DS4_E_IO, "cannot close temporary file", errno);
        ds4_file_atomic_abort(f);
        return -1;
    }
    if (rename(f->tmp, f->path)) {
        afail(f, err, DS4_E_IO, "cannot rename the temporary file over it", errno);
        ds4_file_atomic_abort(f);
        return -1;
    }
    rc = 0;
    if (sync_dir_of(f->path))
        rc = ds4_err_set(err, DS4_E_IO, "%s: written, but its directory cannot be fsync'ed: %s",
                        f->path, strerror(errno));
    afile_release(f);
    return rc;
}

int ds4_file_write_atomic(const char *path, const void *data, size_t n, ds4err *err) {
    ds4_afile f;
    if (ds4_file_atomic_open(&f, path, err)) return -1;
    if (ds4_file_atomic_write(&f, data, n, err)) {
        ds4_file_atomic_abort(&f);
        return -1;
    }
    return ds4_file_atomic_commit(&f, err);
}

int ds4_file_make_dirs(const char *path, ds4err *err) {
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    if (!p) return ds4_err_set(err, DS4_E_NOMEM, "out of memory");
    memcpy(p, path, n + 1);
    int rc = 0;
    /* Each prefix that ends before a '/', then the whole path. */
    for (size_t i = 1; rc == 0 && i <= n; i++) {
        if (i < n && p[i] != '/') continue;
        char keep = p[i];
        p[i] = '\0';
        struct stat st;
        if (mkdir(p, 0755) && errno != EEXIST)
            rc = ds4_err_set(err, DS4_E_IO, "%s: cannot create the folder: %s", p, strerror(errno));
        else if (stat(p, &st) || !S_ISDIR(st.st_mode))
            rc = ds4_err_set(err, DS4_E_IO, "%s: not a folder", p);
        p[i] = keep;
    }
    free(p);
    return rc;
}
