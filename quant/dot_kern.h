/* One variant of the kernels of quant/dot.h, as dot.c dispatches to it.
 *
 * Every variant computes the same canonical order (dot_lanes.h), so they
 * give the same bits; they differ only in the instructions they use.  Each
 * lives in its own file, compiled with its own target flags (Makefile), and
 * dot.c picks the best one the CPU supports once, at the first use
 * (DS4REF_KERNELS overrides the choice).  Internal to quant/. */
#ifndef DS4_DOT_KERN_H
#define DS4_DOT_KERN_H

#include <stdbool.h>
#include <stdint.h>

#include "quant/dot.h"
#include "quant/types.h"

typedef struct ds4_dot_kern {
    const char *name;
    /* ds4_dot_f32. */
    double (*dot_f32)(const float *a, const float *b, uint64_t n);
    /* The unrounded canonical dot of row 0 of W (a one-row matrix) with x. */
    double (*row_dot)(const ds4_mat *W, const ds4_type_info *t, const float *x);
    /* One job of a matrix product: rows [r0, r0+nr) (nr <= 16) x tokens
     * [t0, t0+nt) (nt <= TILE_T), each value rounded into y. */
    void (*job)(const ds4_mat *W, const ds4_type_info *t, uint64_t r0, int nr, const float *x,
                uint64_t ldx, int t0, int nt, float *y, uint64_t ldy);
} ds4_dot_kern;

extern const ds4_dot_kern ds4_dot_portable;
#if defined(__x86_64__)
extern const ds4_dot_kern ds4_dot_avx2;
extern const ds4_dot_kern ds4_dot_avx512;
#elif defined(__aarch64__)
extern const ds4_dot_kern ds4_dot_neon;
#endif

#endif
