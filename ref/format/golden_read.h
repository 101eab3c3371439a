/* Reading golden streams: the strict reader.  Every line, key, type,
 * number spelling, digest, count and cross-check (recorded tensor list vs
 * its combined digest, step numbering, top list order, end line) is
 * validated, and every line must be spelled exactly as the writer spells it
 * (golden_write.h), so a golden read and written again is byte-identical.
 * Errors are DS4_E_FORMAT and read "NAME:LINE: what is wrong". */
#ifndef DS4_GOLDEN_READ_H
#define DS4_GOLDEN_READ_H

#include <stddef.h>

#include "base/err.h"
#include "ref/format/golden.h"

/* buf[0..len) into *g; `name` labels messages. */
int ds4_golden_read_text(const char *buf, size_t len, const char *name, ds4_golden *g,
                     ds4err *err);
int ds4_golden_read(const char *path, ds4_golden *g, ds4err *err);

#endif
