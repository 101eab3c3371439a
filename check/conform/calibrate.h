/* Calibration (docs/CONFORM.md §3.6): which reference numerics a backend
 * follows, how far its own rounding leaves it from them, and whether that
 * is noise at all.
 *
 * A backend that quantizes its activations on purpose (llama.cpp, ds4.c's
 * CPU path) is not ds4ref with noise: its numbers are ds4ref's under a
 * numerics profile, plus the order of its sums.  Judged against the
 * official numerics, the first part looks like a bug.  So, unless told
 * which numerics to compare with, ds4ref-conform teacher-forces each
 * prompt's base cell (the backend's plainest run) under every candidate
 * below: over those rows' steps, the largest |dlogprob| is the candidate's
 * noise floor, and the value 90% of the steps stay at or below its typical
 * departure.
 *
 * A floor explains nothing by itself: a backend running another model has
 * one too.  So a candidate explains the backend only when its typical
 * departure is at most DS4_CF_EXPLAIN_FACTOR times what the candidate's own
 * roundings make of summing in another order -- the same 90% figure between
 * the candidate and the candidate with every product's output moved one
 * unit in the last place (the "jitter" numerics), on the same streams --
 * or at most DS4_CF_EXPLAIN_MIN nats, the f32 noise of a backend with no
 * rounding step at all.  The candidates are tried from the lowest floor up
 * and the first that explains the backend is chosen; the verdicts run
 * under it, with thresholds that follow from its floor
 * (ds4chk_calibrate_limits) unless given.  When none does, the backend
 * computes something else (another model, other weights, a systematic
 * bug): the run fails, naming where its base rows first part from the
 * candidate that comes nearest beyond the noise it could explain.  The typical figure,
 * not the largest, decides, because one flipped rounding makes a single
 * large departure in a correct backend and in the jittered reference alike,
 * while a wrong model or a routing bug moves a large share of the steps.
 *
 * Candidates, in the order a tie is broken: the official numerics with the
 * FP8/FP4 simulation (ds4ref's default), the same without it, ggml's
 * activation rounding without it (llama.cpp), ds4.c's CPU path with it. */
#ifndef DS4_CONFORM_CALIBRATE_H
#define DS4_CONFORM_CALIBRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "check/conform/reference.h"
#include "check/conform/verdict.h"
#include "ref/format/golden.h"
#include "ref/model/model.h"

#define DS4_CF_CANDIDATES 4

/* The rule above: typical <= FACTOR * expected, or typical <= MIN. */
#define DS4_CF_EXPLAIN_FACTOR 4.0
#define DS4_CF_EXPLAIN_MIN 1e-3

typedef struct ds4_cf_candidate {
    char name[48];         /* "official", "official, qat off", "ggml-act, qat off", ... */
    bool qat;
    uint32_t numerics;     /* model/numerics.h */
    double floor;          /* largest |dlogprob| over the base rows; NAN: not measured */
    double typical;        /* the |dlogprob| 90% of their steps stay at or below */
    double gap;            /* largest gap over them (greedy runs) */
    double expected;       /* the same 90% figure of the candidate against itself
                            * jittered; NAN: not measured (not needed) */
    bool explained;        /* the rule holds */
} ds4_cf_candidate;

/* Where the base rows first depart from the chosen candidate by more than
 * the noise it could explain (an unexplained backend's report names it). */
typedef struct ds4_cf_part {
    int32_t row;           /* the tag of the base row; -1: none found */
    uint32_t step;
    int32_t token;         /* the backend's token there */
    int32_t argmax;        /* the reference's argmax there (-1: unknown) */
    char token_name[64], argmax_name[64];   /* as ds4chk_verdict_token_name writes them */
    double dlogprob, gap;  /* at that step */
} ds4_cf_part;

typedef struct ds4_cf_calib {
    bool done;             /* measured (otherwise the numerics were given, or no base
                            * cell left an output) */
    bool explained;        /* some candidate explains the backend */
    uint32_t rows;         /* base rows measured */
    uint32_t best;         /* index into cand: the first that explains the backend,
                            * else the one that comes nearest (the smallest ratio of
                            * its typical departure to the noise it could explain) */
    ds4_cf_candidate cand[DS4_CF_CANDIDATES];
    ds4_cf_part part;      /* when !explained */
} ds4_cf_calib;

/* One prompt's base row: the prompt and what the backend wrote for it;
 * tag is the caller's name for it (its prompt's index), which a part
 * carries. */
typedef struct ds4_cf_base_row {
    const int32_t *prompt;
    uint32_t n_prompt;
    const ds4_golden *out;
    uint32_t tag;
} ds4_cf_base_row;

/* Measure the candidates on the rows (the jittered passes only as far as
 * the rule needs them), then leave ref's engine (whose model is m) set to
 * the chosen one.  With no rows, c->done stays false and the engine as it
 * was.  Errors are the reference's (out of memory, a stream that does not
 * fit). */
int ds4chk_calibrate(ds4_cf_ref *ref, ds4_model *m, const ds4_cf_base_row *rows, uint32_t n,
                     bool greedy, ds4_cf_calib *c, ds4err *err);

/* The most departure noise could explain for candidate k: 4 times its
 * expected departure, at least 0.001 (not measured: 0.001). */
double ds4chk_calibrate_explainable(const ds4_cf_candidate *k);

/* v[0..n), which holds no NaN, in ascending order. */
void ds4chk_calibrate_sort(double *v, uint32_t n);

/* The thresholds a floor gives, for each limit left negative (not given):
 * |dlogprob| and the gap five times the floor, ties twice it, and never
 * below 0.01 nats (|dlogprob|, gap) or 0.05 (ties); without a calibration,
 * or with one that explains nothing (whose floor is not noise), the fixed
 * defaults 0.5, 0.5 and 0.05. */
void ds4chk_calibrate_limits(const ds4_cf_calib *c, ds4_cf_limits *l);

#endif
