/* Writing golden streams (the format is golden.h's, byte for byte in
 * docs/FORMATS.md).
 *
 * The golden runner streams a golden while it generates:
 *
 *     ds4_golden_writer *w;
 *     ds4_golden_writer_open(&w, path, &header, err);    // the header line
 *     ds4_golden_writer_step(w, &step, err);             // one line a step
 *     ds4_golden_writer_finish(w, DS4_STOP_LENGTH, err);  // or _EOS, _INTERRUPTED...
 *     ds4_golden_writer_free(w);
 *
 * Each step goes into a temporary file as it comes, and the file is renamed
 * over the target only in finish (base/file.h), so an interrupted run
 * leaves either the previous file or a complete golden whose end line says
 * "complete":false, "stop":"interrupted" -- never a truncated one. */
#ifndef DS4_GOLDEN_WRITE_H
#define DS4_GOLDEN_WRITE_H

#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "ref/format/golden.h"

/* The three kinds of line, exactly as they are written (with the '\n');
 * the reader compares every line it reads with these. */
void ds4_golden_write_header_line(ds4_buf *b, const ds4_golden *g);
void ds4_golden_write_step_line(ds4_buf *b, uint32_t i, const ds4_golden_step *s);
void ds4_golden_write_end_line(ds4_buf *b, uint32_t n_steps, ds4_stop stop);

/* The whole file (header, steps, end line) into *out.  Needs a ds4ref
 * golden with its end set. */
int ds4_golden_write_text(const ds4_golden *g, ds4_buf *out, ds4err *err);

typedef struct ds4_golden_writer ds4_golden_writer;

/* Start a golden at path (the header line goes out at once).  path may be
 * NULL: the steps are then only collected in memory, for a caller that
 * wants a dump or a .vec case but no golden file. */
int ds4_golden_writer_open(ds4_golden_writer **w, const char *path,
                           const ds4_golden_header *h, ds4err *err);

/* Record one step (checked as ds4_golden_push_step does) and stream its
 * line into the temporary file. */
int ds4_golden_writer_step(ds4_golden_writer *w, const ds4_golden_step *st, ds4err *err);

/* Write the end line and commit the file.  complete is implied by stop
 * (length/eos/ctx: complete; interrupted/error: incomplete).  Call it from
 * ordinary context after a SIGINT handler set its flag.  Also fine after a
 * failed step: the steps recorded so far are kept. */
int ds4_golden_writer_finish(ds4_golden_writer *w, ds4_stop stop, ds4err *err);

/* Everything recorded so far (for ds4_dump_write / ds4_lpvec_append). */
const ds4_golden *ds4_golden_writer_golden(const ds4_golden_writer *w);

/* Release; an unfinished file is abandoned (its temporary file removed). */
void ds4_golden_writer_free(ds4_golden_writer *w);

#endif
