/* The portable kernels: the canonical order in plain C (dot_lanes.h), which
 * any compiler may vectorize with any vector width without moving an
 * addition.  They run everywhere; the vector variants give the same bits. */
#include "quant/dot_kern.h"
#include "quant/dot_lanes.h"

static inline void lanes_add(double *restrict l, const float *restrict a, const float *restrict b,
                             uint64_t n) {
    lanes_add_portable(l, a, b, n);
}

static inline void rows_fma(double (*restrict acc)[L], int nr, const float *restrict w,
                            const float *restrict x, uint64_t m) {
    rows_fma_portable(acc, nr, w, x, m);
}

static inline void dequant_chunk(const ds4_type_info *t, const uint8_t *row, uint64_t off,
                                 float *w, uint64_t m) {
    dequant_portable(t, row, off, w, m);
}

/* No fused path: one token goes through the f32 chunks too. */
static inline int fused_rows(const ds4_type_info *t, const uint8_t *const *rows, int nr,
                             const float *x, uint64_t n, double (*acc)[L]) {
    (void)t, (void)rows, (void)nr, (void)x, (void)n, (void)acc;
    return 0;
}

#include "quant/dot_job.h"

const ds4_dot_kern ds4_dot_portable = {"portable", kern_dot_f32, kern_row_dot, kern_job};
