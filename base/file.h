/* Whole-file reads and atomic file writes.
 *
 * Every file ds4ref produces (goldens, ds4 logprob dumps, official.vec
 * files) is written through an atomic writer: the bytes go to a temporary
 * file next to the target, and only a complete, fsync'ed file is renamed over
 * it.  A reader therefore sees either the old file or the whole new one,
 * never a truncated golden, whatever happens to the writing process.  A
 * process killed hard (SIGKILL, power loss) leaves at most a stray
 * "<target>.tmp.XXXXXX" behind; the target itself is untouched.  A target
 * that is a symbolic link has the file it points to replaced.  A target that
 * exists and is not a regular file (/dev/null, /dev/stdout, a FIFO) is
 * written in place, as a stream: it cannot be renamed over.
 *
 * Interrupts.  The writer does its own buffering on a raw descriptor and
 * retries every system call that fails with EINTR, so a SIGINT handler
 * installed without SA_RESTART cannot lose or tear a write.  The intended
 * pattern is: the handler only sets a flag; the generation loop sees it,
 * stops, and calls the commit function from ordinary (non-handler) context.
 * None of these functions may be called from inside a signal handler. */
#ifndef DS4_FILEIO_H
#define DS4_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Read the whole of `path` (a regular file, a pipe, /dev/stdin...) into a
 * malloc'd buffer with a NUL byte appended (not counted in *len).  Fails with
 * DS4_E_IO when the file cannot be opened or read, and with DS4_E_NOMEM when
 * it holds more than `limit` bytes or memory runs out. */
int ds4_file_read(const char *path, size_t limit, char **buf, size_t *len, ds4err *err);

/* Remove a folder and everything in it (symbolic links themselves, not
 * what they point to); what cannot be removed is left. */
void ds4_file_remove_tree(const char *path);

/* The SHA-256 of a whole file as 64 lowercase hex digits, what sha256sum
 * prints: read in pieces, so a model of any size takes its own time and
 * no more memory.  DS4_E_IO naming the file when it cannot be read;
 * DS4_E_INTERRUPTED when *cancel (NULL: never) became non-zero between two
 * pieces. */
int ds4_file_sha256(const char *path, char hex[65], const volatile int *cancel, ds4err *err);

/* A whole regular file mapped read-only (mmap, MAP_PRIVATE): the model
 * files, whose tensors are used in place.  An empty file cannot be mapped;
 * it comes back as a one-byte static buffer with size 0, so its readers give
 * it their usual "truncated" message. */
typedef struct ds4_fmap {
    const uint8_t *data;
    size_t size;
    bool mapped;         /* data is an mmap to undo (not the empty buffer) */
} ds4_fmap;

/* Map `path`; fails with DS4_E_IO (cannot open or map, not a regular file)
 * or DS4_E_NOMEM (larger than the address space), naming the file. */
int ds4_file_map(const char *path, ds4_fmap *m, ds4err *err);

/* Undo ds4_file_map; on a zeroed or empty-file mapping it does nothing. */
void ds4_file_unmap(ds4_fmap *m);

/* An atomic writer.  Fields are private.  A zeroed struct is "closed":
 * ds4_file_atomic_abort() on it does nothing. */
typedef struct ds4_afile {
    char *path;          /* the target */
    char *tmp;           /* the temporary file next to it */
    int fd;
    unsigned char *buf;
    size_t fill;
    /* First failure, sticky: every later call fails with the same message. */
    int failed;          /* a DS4_E_* code, or 0 */
    char why[200];
} ds4_afile;

/* Create the temporary file "<path>.tmp.XXXXXX" (mode 0644), or open a
 * target that is not a regular file for writing in place. */
int ds4_file_atomic_open(ds4_afile *f, const char *path, ds4err *err);

/* Append bytes.  Data is buffered; ds4_file_atomic_flush() hands it to the kernel. */
int ds4_file_atomic_write(ds4_afile *f, const void *data, size_t n, ds4err *err);

/* Write the buffered bytes to the temporary file (no fsync).  Streaming
 * writers call it after each record so the temporary file shows progress. */
int ds4_file_atomic_flush(ds4_afile *f, ds4err *err);

/* Flush, fsync, close, rename over the target, fsync the directory.  Always
 * releases the writer; on failure the temporary file is removed and the
 * target keeps its previous content. */
int ds4_file_atomic_commit(ds4_afile *f, ds4err *err);

/* Remove the temporary file and release the writer (no-op when closed). */
void ds4_file_atomic_abort(ds4_afile *f);

/* Create the folder path and the folders above it that are missing (mode
 * 0755); an existing folder is fine. */
int ds4_file_make_dirs(const char *path, ds4err *err);

/* One-shot: write data[0..n) to path atomically. */
int ds4_file_write_atomic(const char *path, const void *data, size_t n, ds4err *err);

#endif
