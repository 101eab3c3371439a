/* Looking inside any GGUF file, as `ds4ref-gguf` shows it: the listing of
 * its header, metadata and tensor table, and one tensor's values as a
 * stream of little-endian float32.  Both write to the FILE the caller
 * passed, and both open, map and close the file themselves; a file that
 * shrinks while it is read is reported (base/reslimit.h). */
#ifndef DS4_GGUF_INSPECT_H
#define DS4_GGUF_INSPECT_H

#include <stdio.h>

#include "base/err.h"

/* The listing: "== PATH: GGUF vN, ..." and the alignment, every metadata key
 * with its type and value (strings escaped for a terminal and cut at 160
 * bytes; arrays: element type, length, the first 8 and last 2 elements;
 * floats as Python's repr, base/repr.h), then the tensor table (name, type,
 * ne in ggml order, file offset, bytes). */
int ds4_gguf_inspect_describe(const char *path, FILE *out, ds4err *err);

/* Every element of the tensor named `tensor`, in GGUF element order, as
 * little-endian float32. */
int ds4_gguf_inspect_dequant(const char *path, const char *tensor, FILE *out, ds4err *err);

#endif
