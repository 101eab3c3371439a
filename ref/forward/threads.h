/* How many OpenMP threads a forward pass gets when nobody chose.
 *
 * Every core is the right count on a machine that is all ours, and the
 * wrong one on a virtual machine whose host takes some of its cores back
 * under load: on the lent 64-core machines a pass at 64 threads ran at half
 * the speed of one at 32 or 40, because each of a pass's fork/joins waits
 * for the thread the host has just descheduled (docs/PERFORMANCE.md has the
 * figures, with the steal time that grows with the count).  That loss shows
 * only under load, so no probe at start-up can see it: the engine measures
 * its own passes instead.
 *
 * On a machine of more than DS4_THREADS_TUNED_ABOVE threads the counts are
 * a half, five eighths, three quarters, seven eighths and all of them.  The
 * engine starts at three quarters and climbs: it runs a pass with each
 * neighbour of the fastest count so far until neither is faster, then keeps
 * that count, and every DS4_THREADS_REPROBE passes runs one neighbour again
 * (below and above in turn), since the host's load moves.  A count far from
 * the fastest (all of them, on a machine whose host takes cores back) is
 * never run unless the climb leads there.  Passes of one token (decode),
 * of 2 to 15 (verification, small batches) and longer ones (prefill) keep
 * separate figures: a pass's cost a token falls with its tokens, decode is
 * bound by reading weights and prefill by arithmetic, and they want
 * different counts.
 *
 * The thread count never changes a bit of the output (forward.h), so this
 * changes speed only.  A count set by the user (ds4_threads_fix, the
 * OMP_NUM_THREADS variable, or omp_set_num_threads on the thread that runs
 * the pass) turns it off, and so does a machine of DS4_THREADS_TUNED_ABOVE
 * threads or fewer, where every core is the choice. */
#ifndef DS4_THREADS_H
#define DS4_THREADS_H

#include <stdbool.h>
#include <stdint.h>

enum {
    DS4_THREADS_CANDIDATES = 5,
    DS4_THREADS_TUNED_ABOVE = 16,
    DS4_THREADS_REPROBE = 32,
    DS4_THREADS_PREFILL_TOKENS = 16,
    DS4_THREADS_CLASSES = 3,
    /* ds4_threads_begin's answers when no candidate runs. */
    DS4_THREADS_UNTOUCHED = -1,   /* OpenMP's count, as the caller has it */
    DS4_THREADS_FIXED = -2,       /* the user's count, set for the pass */
};

/* One kind of pass: seconds per token of each candidate (0: not measured
 * yet) and how many passes were measured. */
typedef struct ds4_threads_class {
    double sec[DS4_THREADS_CANDIDATES];
    uint32_t passes;
    int reprobe;   /* reprobes so far: odd ones go above the fastest count */
} ds4_threads_class;

typedef struct ds4_threads {
    bool warm;                           /* a measured pass has run: the weights were read once */
    int machine;                         /* OpenMP's count for a thread nobody set it for */
    int n_cand;                          /* 1: nothing to choose */
    int cand[DS4_THREADS_CANDIDATES];    /* thread counts, ascending */
    ds4_threads_class cls[DS4_THREADS_CLASSES];   /* by ds4_threads_class_of */
} ds4_threads;

/* The candidates for a machine of max_threads threads (one, max_threads,
 * when it has DS4_THREADS_TUNED_ABOVE or fewer).  max_threads is also the
 * count OpenMP gives a thread nobody set it for (ds4_threads_default()): a
 * thread with another count chose it, and the engine leaves it alone. */
void ds4_threads_init(ds4_threads *t, int max_threads);

/* Which class a pass of T tokens is: 0 one token, 1 up to
 * DS4_THREADS_PREFILL_TOKENS - 1, 2 more. */
int ds4_threads_class_of(uint32_t T);

/* The candidate (an index into t->cand) the next pass of class cls runs
 * with; record what it took with ds4_threads_record. */
int ds4_threads_next(const ds4_threads *t, int cls);

/* A pass of class cls with candidate k took sec_per_token a token. */
void ds4_threads_record(ds4_threads *t, int cls, int k, double sec_per_token);

/* The count that has been fastest for class cls so far, 0 when none was
 * measured (or nothing is tuned). */
int ds4_threads_best(const ds4_threads *t, int cls);

/* A pass about to run: sets the calling thread's OpenMP count for it and
 * returns the candidate it runs with, DS4_THREADS_FIXED when the user's
 * count is set instead, or DS4_THREADS_UNTOUCHED (nothing to choose, or
 * OMP_NUM_THREADS chose); *saved keeps what to give back to
 * ds4_threads_end. */
int ds4_threads_begin(const ds4_threads *t, uint32_t T, int *saved);

/* The pass begun with k (ds4_threads_begin's answer) is over and took
 * `seconds`: give the calling thread its count back, and record it when
 * `measure`.  The first pass measured is never recorded: it reads the
 * weights from wherever they were (the disk, for a model just mapped),
 * which says nothing of its count. */
void ds4_threads_end(ds4_threads *t, uint32_t T, int k, int saved, bool measure, double seconds);

/* The user's choice for the calling thread (OpenMP keeps its count per
 * thread too): n > 0 threads for every pass it runs (tuning off); 0 undoes
 * that, giving the thread back the OpenMP count it had before (then the
 * engine chooses if that is the default and OMP_NUM_THREADS is unset), and
 * leaves a thread that fixed nothing as it is.  Returns the count OpenMP
 * now has. */
int ds4_threads_fix(int n);

/* OpenMP's count for a thread nobody set it for, when OMP_NUM_THREADS is
 * unset: the CPUs this process may use. */
int ds4_threads_default(void);

/* Does the engine choose for the calling thread: more than one candidate,
 * no count fixed by ds4_threads_fix there, no OMP_NUM_THREADS, not inside
 * a parallel region, and the thread's OpenMP count is still t->machine? */
bool ds4_threads_tuning(const ds4_threads *t);

#endif
