/* ds4check.h — the checking library of ds4ref: comparing token streams
 * (ds4ref-diff) and running another backend over the speculative-decoding
 * matrix (ds4ref-conform).
 *
 * libds4ref (ds4ref.h) is the model and the formats it reads and writes; it
 * never starts a process.  This library sits above it and is the one that
 * does: ds4check_conform_run runs a backend's command for every cell.  Link
 * with libds4check (`pkg-config --cflags --libs ds4check`).  Its calls take
 * paths, never a model handle, and report errors through ds4ref_error with
 * the DS4REF_E_* codes of ds4ref.h. */
#ifndef DS4CHECK_H
#define DS4CHECK_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "ds4ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- diffing */

/* Comparing two token streams with log-probabilities, as ds4ref-diff does
 * (the figures are defined in docs/FORMATS.md, section 4).  Either file may
 * be a ds4ref golden, a ds4 --dump-logprobs JSON or an official.vec file;
 * the kind is told from the content (a file of none of these kinds is
 * DS4REF_E_FORMAT, "not a golden, ds4 dump or official.vec").  The first
 * file is the reference. */
typedef struct ds4check_diff_options {
    const char *case_id;       /* the case of an official.vec file (NULL: it must hold one) */
    int all_steps;             /* also compare the steps after the first divergence */
    int json;                  /* the report as one JSON object (else text) */
    int quiet;                 /* text report without the per-step lines */
    /* Thresholds; a negative value (or NAN) leaves one unchecked.  A
     * threshold whose figure cannot be measured counts as violated.  With
     * none at all (and no exact), min_top1 = 1 is checked: a divergence
     * fails. */
    double max_dlogprob;       /* largest |dlogprob| over the common tokens */
    double min_top1;           /* share of the compared steps whose tokens agree */
    double min_top5_overlap;   /* mean top-5 overlap fraction */
    double min_top20_overlap;  /* mean top-20 overlap fraction */
    double max_kl;             /* largest per-step KL(reference || other) */
    int exact;                 /* require bit-identity in everything both record */
    /* Goldens of different models are noted, not held against exactness
     * (a model and its unquantized twin: the numbers alone compared). */
    int ignore_model;
} ds4check_diff_options;

/* No threshold given (so min_top1 = 1 applies), text report with the
 * per-step lines. */
void ds4check_diff_options_init(ds4check_diff_options *o);

typedef struct ds4check_diff_result {
    uint32_t violations;       /* thresholds violated (differing prompts count): 0 = pass */
    int exact;                 /* bit-identical in everything both sides record */
    int prompt_differs;
    int64_t first_divergence;  /* first step whose tokens differ; -1: none */
    uint32_t n_steps_a;        /* steps of the reference (golden) */
    uint32_t n_steps_b;        /* steps of the other file */
    uint32_t n_compared;       /* steps compared */
    double top1;               /* share of the compared steps whose tokens agree (NAN: none) */
    double max_dlogprob;       /* NAN when no token is common to both sides */
    double max_kl;             /* NAN when no step has a KL */
} ds4check_diff_result;

/* Compare `other` with `golden` under o (NULL: the defaults of
 * ds4check_diff_options_init) and write the report of `ds4ref-diff` to
 * report (NULL: none): the text report ends with "result: PASS" or
 * "result: FAIL" and one "  violated: ..." line per violation.  Returns 0
 * whenever the comparison was made, whatever the verdict; *result (may be
 * NULL) gets the verdict and the main figures.  Errors: DS4REF_E_IO
 * (cannot read a file, or write the report), DS4REF_E_FORMAT (malformed
 * file), DS4REF_E_ARG (no or an unknown official.vec case), DS4REF_E_NOMEM. */
int ds4check_diff_files(const char *golden, const char *other, const ds4check_diff_options *o,
                      FILE *report, ds4check_diff_result *result, ds4ref_error *err);

/* ------------------------------------------------------------ conformance */

/* ds4ref-conform (docs/CONFORM.md): run another backend's command over the
 * speculative-decoding matrix -- MTP draft depths, prefill chunks, batch
 * sizes, prompts -- and check every cell against the reference. */
typedef struct ds4check_conform_options {
    const char *model_path;    /* the model, given to the backend and opened here */
    const char *mtp_path;      /* its MTP head, or NULL (speculative cells are then n/a) */
    const char *backend;       /* a preset ("ds4ref", "ds4") or a command template */
    const char *ds4ref_path;   /* what {ds4ref} names (NULL: "ds4ref") */
    const char *matrix;        /* NULL: the default; or "draft=0,2,4 chunk=64,whole batch=1" */
    const char *prompts_dir;   /* NULL: the built-in corpus; or a folder of NAME.txt */
    uint32_t n_tokens;         /* steps per row (default 32) */
    uint32_t top_k;            /* alternatives the backend records (default 20) */
    uint32_t ctx;              /* 0: the model's, at most 32768 */
    int qat;                   /* the reference's FP8/FP4 simulation (default 1; not
                                * read when numerics is "auto") */
    const char *numerics;      /* the reference's numerics profile (ds4ref.h; NULL:
                                * official), or "auto" (the default): chosen from the
                                * backend's base cells with qat, and the thresholds
                                * left negative follow from its noise floor
                                * (docs/CONFORM.md §3.6) */
    double temperature;        /* 0: greedy (default) */
    uint64_t seed;             /* default 1 */
    int exact;                 /* bit-identity instead of the tolerance checks */
    /* Negative (the default): from the calibrated noise floor, or 0.5, 0.05 and
     * 0.5 without a calibration. */
    double max_gap;            /* nats */
    double tie_eps;            /* nats */
    double max_dlogprob;       /* NAN: unchecked */
    double min_top5_overlap;   /* default NAN: unchecked */
    double min_top20_overlap;  /* default NAN: unchecked */
    const char *cache_dir;     /* NULL: no cache */
    const char *work_dir;      /* NULL: a temporary folder, removed afterwards */
    double timeout;            /* CPU seconds a cell's command may use (0: no limit); one
                                * that hangs without using CPU is stopped after 10 x
                                * timeout of wall time */
    uint32_t jobs;             /* cells whose commands run at once (default 1) */
    /* Set asynchronously (by a SIGINT handler): the running cell's command is
     * killed, no other starts, and the cells that finished are checked and
     * reported (the result's interrupted set). */
    volatile sig_atomic_t *stop;
    /* Called before each step of the run ("reference for chat", "draft=3
     * chunk=7 batch=2 code", finally "done"). */
    void (*progress)(void *ud, uint32_t done, uint32_t total, const char *what);
    void *progress_ud;
    /* Every cell as JSON, written atomically when the run ends (opened
     * before it starts); NULL: none. */
    const char *json_path;
    /* An engine behind HTTP instead of a command (docs/CONFORM.md, "Against
     * a server"), OpenAI completions with token ids: server_url, one already
     * running ("http://HOST:PORT"); or server_cmd, a command template with
     * {port} (and the other placeholders) started for each cell, ready when
     * /health or /v1/models answers, its process group stopped after.  A
     * batch cell is its rows' requests held in flight together.  NULL both:
     * the backend command. */
    const char *server_url;
    const char *server_cmd;
    /* The engine's API: "ids" (OpenAI completions, tokens as "token_id:N",
     * vLLM's return_tokens_as_token_ids; the default, and ds4ref-server's),
     * "text" (plain OpenAI: texts matched to ids by their bytes, the
     * ambiguous ones listed in the cell's log), "lossy-text" (the same from
     * an engine that drops bytes that are not UTF-8 from a token's text,
     * as llama-cpp-python does), "llama" (llama.cpp
     * server's /completion with n_probs), "sglang" (SGLang's /generate
     * with return_logprob) or "ds4" (ds4's server: chat completions, its text
     * only, tokenized again and judged by teacher forcing alone).  NULL: the server preset's, else "ids". */
    const char *server_dialect;
    /* How a prompt is sent to an OpenAI-style engine: "ids" (token ids, the
     * default) or "text" (for an engine that reads text only: the rendered
     * prompt less its leading BOS string, the engine adding BOS as its
     * tokenizer says).  Either way the answer's usage.prompt_tokens must be
     * the reference's count.  NULL: the server preset's, else "ids". */
    const char *server_prompt;
    /* On a cluster (docs/CONFORM.md, "On a cluster"): shards > 0 runs the
     * commands of slice `shard` (0-based) of `shards` only, cells in their
     * index order, and writes what they left into json_path as a shard file
     * (no verdict; the report says which cells ran); n_merge > 0 runs no
     * command and checks the cells the shard files merge[] hold, every slice
     * once, all of this run (the same options, backend, model and prompts):
     * the report and JSON are the unsharded run's. */
    uint32_t shard, shards;
    const char *const *merge;
    uint32_t n_merge;
} ds4check_conform_options;

void ds4check_conform_options_init(ds4check_conform_options *o);

typedef struct ds4check_conform_result {
    uint32_t cells, pass, fail, error, tie, not_exercised, na;
    uint32_t ran;              /* cells whose backend ran and wrote its outputs */
    /* No numerics profile explains the backend (docs/CONFORM.md §3.6): it
     * computes something else, and the run failed whatever its cells say
     * (0 when the user gave the limits a noise floor would have set). */
    int unexplained;
    /* Every cell of one value of a dimension ties or fails while the cells
     * of its base value mostly pass: the ties hide a systematic difference,
     * and the run failed (docs/CONFORM.md §3.3). */
    int tie_pattern;
    /* The stop request came (a SIGINT): the cells that finished were
     * checked and reported, the others are n/a; the call still returns 0. */
    int interrupted;
} ds4check_conform_result;

/* Run the matrix; the text report (table, failures, smallest failing cell
 * of each prompt, summary) goes to report (NULL: none).  Returns 0
 * whenever the matrix ran, whatever the verdicts (read them in *res); an
 * error is about the setup: the model, a bad template or matrix, a prompt
 * that does not fit the context, a folder or file that cannot be written. */
int ds4check_conform_run(const ds4check_conform_options *o, FILE *report,
                       ds4check_conform_result *res, ds4ref_error *err);

/* The backend presets, i = 0, 1, ...: their name, command template and a
 * line about them; 0 past the last. */
int ds4check_conform_preset(uint32_t i, const char **name, const char **tmpl, const char **about);

/* The placeholders of a backend template, i = 0, 1, ...: their name
 * (without braces) and a line about them; 0 past the last. */
int ds4check_conform_placeholder(uint32_t i, const char **name, const char **about);

/* The dialects of an engine behind HTTP (server_dialect), i = 0, 1, ...:
 * their name and a line about them; 0 past the last. */
int ds4check_conform_dialect(uint32_t i, const char **name, const char **about);

/* The server presets (--server-cmd NAME), likewise. */
int ds4check_conform_server_preset(uint32_t i, const char **name, const char **tmpl,
                                   const char **about);

#ifdef __cplusplus
}
#endif

#endif
