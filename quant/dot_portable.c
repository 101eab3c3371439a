/* The portable kernels: the canonical order in plain C (dot_lanes.h), which
 * any compiler may vectorize with any vector width without moving an
 * addition.  They run everywhere; the vector variants give the same bits. */
#include "quant/dot_kern.h"
#include "quant/dot_lanes.h"

#define KERN_LANES_ADD lanes_add_portable
#define KERN_ROWS_FMA rows_fma_portable
#define KERN_DEQUANT dequant_portable
#define KERN_FUSED fused_none
#define KERN_MMA mma_portable
#include "quant/dot_job.h"

const ds4_dot_kern ds4_dot_portable = {"portable", kern_dot_f32, kern_row_dot, kern_job};
