/* Small helpers shared by the unit tests: whole-file reads, the location of
 * the shared fixtures, scratch directories. */
#ifndef DS4_TESTUTIL_H
#define DS4_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Read a whole file into a malloc'd buffer (caller frees).  0 on success. */
int tu_read_file(const char *path, uint8_t **buf, size_t *len);

/* malloc'd "../shared/<rel>" (tests run from the repository root) if that
 * path exists; otherwise prints why to stderr and returns NULL, so the caller
 * can skip(). */
char *tu_shared(const char *rel);

/* A fresh directory under $TMPDIR (or /tmp); malloc'd path, NULL on failure. */
char *tu_tmpdir(void);

/* malloc'd "dir/name". */
char *tu_path(const char *dir, const char *name);

/* Number of entries in dir besides "." and "..", -1 if it cannot be read. */
int tu_count_entries(const char *dir);

/* Remove dir and the plain files directly in it, then free the path. */
void tu_rmdir(char *dir);

#endif
