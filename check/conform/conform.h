/* ds4ref-conform: run a backend over the speculative-decoding matrix and
 * say which cell breaks, where, and by how much (docs/CONFORM.md).
 *
 * For every cell -- an MTP draft depth, a prefill chunk, a batch size and a
 * prompt -- the backend's command (template.h) runs once, on the cell's
 * prompts (row r of a batch gets the corpus prompt after row r-1's, so the
 * rows differ in length), and writes one output per row.  Each row is
 * checked against the reference (verdict.h); then every row's stream is
 * compared with the backend's own stream of the base cell for that prompt;
 * then a speculative cell that passed is "not exercised" unless the backend
 * reported that some cycle accepted a draft at depth min(draft, 3) or
 * deeper (for depth 3 and up: beyond depth 2, where ds4 #358 lived). */
#ifndef DS4_CONFORM_H
#define DS4_CONFORM_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "check/conform/backend.h"
#include "check/conform/calibrate.h"
#include "check/conform/corpus.h"
#include "check/conform/identity.h"
#include "check/conform/matrix.h"
#include "check/conform/reference.h"
#include "check/conform/verdict.h"
#include "ref/forward/engine.h"
#include "ref/text/tokenizer.h"
#include "ref/format/golden.h"

typedef void (*ds4_cf_progress_fn)(void *ud, uint32_t done, uint32_t total, const char *what);

typedef struct ds4_cf_opts {
    const char *model_path;    /* given to the backend ({model}); the engine's model */
    const char *mtp_path;      /* {mtp}; NULL: speculative cells are n/a, unless... */
    bool own_drafter;          /* ...the model drafts by itself (DSpark): set by the run */
    const char *backend;       /* the command template */
    const char *backend_name;  /* how the report names it */
    const char *ds4ref_path;   /* {ds4ref} */
    /* {model_f32}, {mtp_f32}: set by the run, which writes the models'
     * unquantized twins into its work folder when the template names them. */
    const char *model_f32, *mtp_f32;
    const ds4_modelid *model_f32_id;   /* the twin's identity, which an output may name */
    const char *model_sha256;  /* {model_sha256}: set by the run when the template names it */
    ds4_cf_identity *identity; /* the run's: what each output or server named (identity.h) */
    ds4_cf_matrix matrix;
    const ds4_cf_corpus *corpus;
    uint32_t n_tokens;         /* steps per row */
    uint32_t top_k;            /* alternatives the backend records ({top_k}) */
    uint32_t ctx;              /* 0: the model's, at most 32768 */
    double temp;               /* 0: greedy */
    uint64_t seed;
    ds4_cf_limits limits;      /* .greedy is set from temp; a negative max_gap,
                                * max_dlogprob or tie_eps: from the calibration
                                * (calibrate.h), or its fixed default without one */
    bool calibrate;            /* choose the reference numerics from the base cells
                                * (tolerance mode); false: the engine's as given */
    bool automatic;            /* no numerics given: calibrate, or (exact mode) ds4ref's own */
    const char *cache_dir;     /* NULL: no cache */
    const char *work_dir;      /* NULL: a temporary folder, removed at the end */
    double timeout;            /* CPU seconds per cell (backend.h); 0: none */
    /* An engine behind HTTP instead of a command a cell (client.h): one
     * already running at server_url, or server_cmd (a template with
     * {port}) started for each cell and stopped after it.  NULL both: the
     * backend template. */
    const char *server_url, *server_cmd;
    int server_dialect;        /* enum ds4_cf_dialect (client.h) */
    bool server_text_prompt;   /* prompts sent as text less BOS (client.h) */
    const struct ds4_cf_vocab_index *vocab;   /* made by the run for the text dialects */
    const ds4_tokenizer *tok;  /* the run's, for the ds4 dialect */
    uint32_t jobs;             /* cells whose commands run at once (0, 1: one) */
    volatile sig_atomic_t *stop;   /* NULL, or set asynchronously (SIGINT): the run stops */
    ds4_cf_progress_fn progress;
    void *progress_ud;
    const char *numerics_key;  /* the reference's numerics as given ("auto", a profile, QAT):
                                * part of a shard's run description */
    /* Shards (shard.h): shards > 0 runs the commands of slice `shard` only
     * and writes them to shard_path, checking nothing; n_merge > 0 reads the
     * shard files merge[] instead of running any command. */
    uint32_t shard, shards;
    const char *shard_path;
    const char *const *merge;
    uint32_t n_merge;
} ds4_cf_opts;

/* The backend against itself: how far the rows of its other cells depart
 * from their prompt's base row, in the backend's own logprobs, up to the
 * step where their tokens part (ds4ref-diff's max |dlogprob| between the
 * two outputs).  A backend whose sums keep one order whatever the chunk and
 * the batch has 0; one that changes them with the cell has the noise that
 * order costs, the floor the calibration measures against the reference
 * cannot go below (docs/CONFORM.md §3.6).  Reported, not judged: a bug in
 * some cells raises it too. */
typedef struct ds4_cf_spread {
    uint32_t rows;             /* rows compared (0: none; dlogprob is then NAN) */
    double dlogprob;           /* the largest */
    int32_t cell, row;         /* where it was: index into cells, row of it */
} ds4_cf_spread;

enum { DS4_CF_USER_GAP = 1, DS4_CF_USER_DLOGPROB = 2, DS4_CF_USER_TIE = 4 };

/* How the ties of a run add up (docs/CONFORM.md §3.3): each tie cell is one
 * where the reference puts the two tokens within tie_eps, or one where only
 * the backend's own top two were that close; and a pattern, when every
 * cell of one value of a dimension ties (or fails) while at most a quarter
 * of the cells of that dimension's base value do: noise flips near-ties
 * anywhere, a systematic difference (a bug in every batch of 4, say)
 * always where it lives. */
typedef struct ds4_cf_ties {
    uint32_t cells, by_reference, by_own;
    double median, widest;     /* of the reference's margins at the ties */
    bool pattern;              /* found: the run fails */
    char dim[8];               /* "draft", "chunk", "batch", "cache", "conf" */
    char value[16];            /* "4", "whole", "warm" */
    uint32_t pattern_cells;    /* the value's cells (all tie or fail) */
    uint32_t base_ties, base_cells;   /* those of the dimension's base value */
} ds4_cf_ties;

/* A prompt made ready: its ids, its rendered text, its reference. */
typedef struct ds4_cf_prompt {
    const char *name;          /* the corpus's */
    int32_t *ids;
    uint32_t n;
    ds4_buf rendered;          /* the bytes of ids: what {prompt_file} holds */
    size_t bos_len;            /* its leading BOS string's bytes (0: none) */
    ds4_golden ref;
    bool cached;               /* the reference came from the cache */
    /* Row 0 of its plainest cell that ran, as the backend wrote it (the
     * cross-cell check's base cell, unless that one left no usable row),
     * read once after the cells ran: what the calibration measures, and
     * what every other row of the prompt is compared with for the spread.
     * base_cell < 0: none could be read. */
    int32_t base_cell;
    ds4_golden base_out;
} ds4_cf_prompt;

/* The reference teacher-forced on a stream that followed one prompt. */
typedef struct ds4_cf_forced {
    uint32_t prompt;
    ds4_cf_tf tf;
} ds4_cf_forced;

typedef struct ds4_cf_row {
    uint32_t prompt;           /* index into the prompts */
    ds4_cf_finding f;          /* the worst of its findings (its first of that status) */
    ds4_cf_findings all;       /* every finding, the cross-cell one included */
    int32_t tf;                /* index of its teacher-forced record, -1 none */
    double *margin;            /* [its steps] the backend's own top-two margins, or NULL */
    int32_t cut;               /* a server's answer named its token at this step ambiguously:
                                * judged up to it; -1: every step */
} ds4_cf_row;

typedef struct ds4_cf_cell {
    uint32_t draft, chunk_spec, chunk, batch, prompt;   /* chunk: the number given */
    uint32_t cache;            /* DS4_CF_COLD or DS4_CF_WARM (matrix.h) */
    uint32_t conf;             /* DSpark confidence threshold in hundredths (matrix.h) */
    ds4_cf_status status;
    int32_t row;               /* the row of f, -1 for the cell as a whole */
    ds4_cf_finding f;          /* what decided the status */
    ds4_cf_accept accept;      /* as the backend reported it */
    double seconds;
    ds4_cf_row rows[DS4_CF_MAX_BATCH];
    int exit_status;           /* its command's, when it ran to its end; -1 otherwise */
    char log[256];             /* the backend's log, when the work folder is kept */
    char *dir;                 /* its folder, between its run and its check; NULL: none */
} ds4_cf_cell;

/* The most cells --jobs runs at once. */
enum { DS4_CF_MAX_JOBS = 256 };

typedef struct ds4_cf_result {
    uint32_t n_prompts;
    ds4_cf_prompt *prompts;
    uint32_t n_cells;
    ds4_cf_cell *cells;
    uint32_t count[DS4_CF_NSTATUS];
    uint32_t n_ran;            /* cells whose backend exited 0 and left its outputs */
    uint32_t n_forced;
    ds4_cf_forced *forced;     /* teacher-forced records, shared by equal streams */
    uint32_t ctx;
    bool greedy;
    ds4_cf_calib calib;        /* what the calibration measured and chose */
    /* No numerics profile explains the backend (calibrate.h) and the user
     * did not set the limits themselves: the run fails. */
    bool unexplained;
    uint32_t user_limits;      /* DS4_CF_USER_*: the limits given, not calibrated */
    ds4_cf_spread spread;      /* the backend against itself (greedy runs) */
    ds4_cf_ties ties;
    ds4_cf_identity identity;  /* which model the backend said it ran */
    /* The run stopped early: interrupted (a stop request: the cells that
     * finished are checked and reported, the others n/a), or after the
     * backend's command was not found (exit status 127) in every cell that
     * ran before any did run.  why says which, for the report. */
    bool interrupted, not_found;
    bool checks_stopped;       /* the stop request came while the outputs were checked */
    char stopped[300];
    ds4_cf_limits limits;      /* the limits the verdicts used */
    /* A shard's run (opts.shards): its cells lo..hi-1 ran and were written
     * to the shard file; nothing was checked. */
    bool shard_only;
    uint32_t shard_lo, shard_hi;
    uint32_t shard_ran, shard_errors, shard_na;   /* of its cells */
} ds4_cf_result;

/* "draft=3 chunk=7 batch=2", then " PROMPT" when with_prompt. */
void ds4chk_conform_cell_name(const ds4_cf_result *r, const ds4_cf_cell *c, bool with_prompt, char *out,
                      size_t cap);

/* Run the matrix with the reference model m on engine e (tok: its
 * tokenizer; the calibration sets the numerics of both).  Returns 0 whenever the matrix ran, whatever the verdicts;
 * errors are about the setup (a bad template, a prompt that does not fit,
 * a folder that cannot be written). */
int ds4chk_conform_run(ds4_engine *e, ds4_model *m, const ds4_tokenizer *tok,
                       const ds4_cf_opts *o, ds4_cf_result *res, ds4err *err);
void ds4chk_conform_result_free(ds4_cf_result *r);

/* Both reports of a finished run: the text to report (NULL: none), the JSON
 * into json (an atomic writer opened before the run, committed here; a
 * closed one: none). */
int ds4chk_report_write(const ds4_cf_result *r, const ds4_cf_opts *o, FILE *report,
                         ds4_afile *json, ds4err *err);

#endif
