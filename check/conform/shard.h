/* ds4ref-conform's shards (docs/CONFORM.md, "On a cluster").  A run's cells,
 * in their index order, are cut into N slices; `--shard K/N` runs the
 * commands of slice K only and writes a shard file: each cell's state (ran,
 * error, not run), exit status, seconds, accept counts and the files its
 * folder was left with, and the run's key.  `--merge` reads every slice's
 * file back into the cells' folders and the run goes on from there -- the
 * checks, the calibration, the checks across cells, the reports -- exactly
 * as an unsharded run goes on after its commands, so the two give the same
 * verdicts, table and JSON.
 *
 * The key is the SHA-256 of the run's description, a list of lines (the
 * version, the model's identity, the backend, the options, every cell and
 * prompt); a shard file holds the lines too, so that a merge of another
 * run's shard names the first line that differs. */
#ifndef DS4_CF_SHARD_H
#define DS4_CF_SHARD_H

#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "check/conform/conform.h"

/* Cell `index`'s folder under work, "INDEX-dD-cC-bB[-warm][-confN]-PROMPT",
 * into out: the run's launch and a merge name it alike, so that what a
 * report says of a cell's log is the same either way. */
void ds4chk_shard_cell_dir(const ds4_cf_result *res, const ds4_cf_cell *c, uint32_t index,
                           const char *work, ds4_buf *out);

/* Cell c exited 127 before any cell ran: the backend's command was not
 * found, and no other cell starts (res->not_found, res->stopped).  The
 * driver calls it as cells end; a merge replays it over every slice in the
 * cells' order, as one run would have met them. */
void ds4chk_shard_not_found(ds4_cf_result *res, const ds4_cf_cell *c);

/* Cells [*lo, *hi) of n_cells are slice k of n (0 <= k < n): contiguous,
 * sizes differing by one at most. */
void ds4chk_shard_slice(uint32_t n_cells, uint32_t k, uint32_t n, uint32_t *lo, uint32_t *hi);

/* The run's description (lines, each ending "\n") into desc.  model_key: the
 * reference's identity (reference.h).  Cells must be made and their n/a
 * marked. */
int ds4chk_shard_describe(const ds4_cf_result *res, const ds4_cf_opts *o, const char *model_key,
                          ds4_buf *desc, ds4err *err);

/* Slice k of n (cells lo..hi-1, launched) into a shard file at path,
 * written atomically. */
int ds4chk_shard_write(const ds4_cf_result *res, const char *desc, uint32_t k, uint32_t n,
                       const char *path, ds4err *err);

/* The shard files paths[0..n_paths) into res's cells, their folders made
 * under work: every slice once, every file of the run described by desc.
 * Refusals name the file, or the slice missing or given twice. */
int ds4chk_shard_merge(ds4_cf_result *res, const char *desc, const char *const *paths,
                       uint32_t n_paths, const char *work, ds4err *err);

#endif
