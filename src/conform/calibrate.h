/* Calibration (docs/CONFORM.md §3.6): which reference numerics a backend
 * follows, and how far its own rounding leaves it from them.
 *
 * A backend that quantizes its activations on purpose (llama.cpp, ds4.c's
 * CPU path) is not ds4ref with noise: its numbers are ds4ref's under a
 * numerics profile, plus the order of its sums.  Judged against the
 * official numerics, the first part looks like a bug.  So, unless told
 * which numerics to compare with, ds4ref-conform teacher-forces each
 * prompt's base cell (the backend's plainest run) under every candidate
 * below and keeps the one the backend is closest to: the largest |dlogprob|
 * over those rows' steps is the candidate's noise floor.  The verdicts then
 * run under that candidate, with thresholds that follow from its floor
 * (ds4chk_calibrate_limits) unless given.
 *
 * Candidates, in the order a tie is broken: the official numerics with the
 * FP8/FP4 simulation (ds4ref's default), the same without it, ggml's
 * activation rounding without it (llama.cpp), ds4.c's CPU path with it. */
#ifndef DS4_CONFORM_CALIBRATE_H
#define DS4_CONFORM_CALIBRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "conform/reference.h"
#include "conform/verdict.h"
#include "format/golden.h"
#include "model/model.h"

#define DS4_CF_CANDIDATES 4

typedef struct ds4_cf_candidate {
    char name[48];         /* "official", "official, qat off", "ggml-act, qat off", ... */
    bool qat;
    uint32_t numerics;     /* model/numerics.h */
    double floor;          /* largest |dlogprob| over the base rows; NAN: not measured */
    double gap;            /* largest gap over them (greedy runs) */
} ds4_cf_candidate;

typedef struct ds4_cf_calib {
    bool done;             /* measured (otherwise the numerics were given, or no base
                            * cell left an output) */
    uint32_t rows;         /* base rows measured */
    uint32_t best;         /* index into cand */
    ds4_cf_candidate cand[DS4_CF_CANDIDATES];
} ds4_cf_calib;

/* One prompt's base row: the prompt and what the backend wrote for it. */
typedef struct ds4_cf_base_row {
    const int32_t *prompt;
    uint32_t n_prompt;
    const ds4_golden *out;
} ds4_cf_base_row;

/* Measure every candidate on the rows, then leave ref's engine (whose
 * model is m) set to the best one.  With no rows, c->done stays false and
 * the engine as it was.  Errors are the reference's (out of memory, a
 * stream that does not fit). */
int ds4chk_calibrate(ds4_cf_ref *ref, ds4_model *m, const ds4_cf_base_row *rows, uint32_t n,
                     bool greedy, ds4_cf_calib *c, ds4err *err);

/* The thresholds a floor gives, for each limit left negative (not given):
 * |dlogprob| and the gap five times the floor, ties twice it, and never
 * below 0.01 nats (|dlogprob|, gap) or 0.05 (ties); without a calibration,
 * the fixed defaults 0.5, 0.5 and 0.05. */
void ds4chk_calibrate_limits(const ds4_cf_calib *c, ds4_cf_limits *l);

#endif
