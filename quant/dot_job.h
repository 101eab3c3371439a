/* The jobs of a matrix product, written once over four primitives.  A
 * kernel variant names its functions for them before including this file
 * (the portable ones of dot_lanes.h where it has nothing better):
 *
 *   KERN_LANES_ADD(l, a, b, n)           l[i % 16] += a[i] * b[i]
 *   KERN_ROWS_FMA(acc, nr, w, x, m)      acc[j][i % 16] += w[j*CHUNK + i] * x[i]
 *   KERN_DEQUANT(t, row, srow, off, w, m) elements [off, off+m) of a row as f32
 *                                        (srow: a block-scaled row's scales)
 *   KERN_FUSED(t, rows, nr, x, ldx, nt, n, acc)  whole rows against nt <=
 *                                        FUSED_T tokens, the dequantization
 *                                        fused with the multiply-adds; 0
 *                                        when it declines
 *   KERN_MMA(acc, nr, nt, wd, xd, m)     rows x tokens of a chunk, both already
 *                                        widened to double (mma_portable)
 *
 * and may name two optional ones:
 *
 *   KERN_DEQUANT_WIDE(t, row, srow, off, wd, m)  elements [off, off+m) of a row
 *                                        straight into doubles, skipping the f32
 *                                        stage; 0 when it declines (the type, a
 *                                        special scale), having written nothing
 *                                        that matters
 *   KERN_FUSED_MULTI                     1 when a job of up to FUSED_T
 *                                        tokens of a type with fused kernels
 *                                        (types.h) takes them rather than the
 *                                        blocked multiply (0 where not
 *                                        named)
 *
 * so every variant gets its own copy of the loops below with its
 * primitives inlined (C has no other way to say "this code, with those
 * functions", short of copying it).  It then defines its ds4_dot_kern from
 * kern_dot_f32, kern_row_dot and kern_job.  Internal to the dot_*.c files.
 *
 * How a job is organized:
 *
 *   - one token (decode): the job walks RB rows at a time, once, as RB
 *     sequential streams, in chunks of CHUNK elements; each chunk of the RB
 *     rows is dequantized into f32 (formats.h values) and meets the token's
 *     activations in one pass that keeps the rows' lanes in registers.  A
 *     variant may skip the f32 buffer (KERN_FUSED): each block then goes
 *     from memory straight into the accumulators, with the same values in
 *     the same order.  Where the variant says so (KERN_FUSED_MULTI), up to
 *     FUSED_T tokens go that way too, each block made once for all of them;
 *   - several tokens (prefill, verification, batched rows): the job walks
 *     its rows chunk by chunk.  Each chunk of the tile's activations is
 *     widened to double once for all the job's rows, each chunk of RB rows
 *     is dequantized and widened to double once for all the tile's tokens,
 *     and KERN_MMA multiplies the two blocks with the lanes of a block of
 *     rows x tokens in registers: the weights are read once per tile and
 *     nothing is converted in the inner loop.  The lanes of all the job's
 *     rows and tokens wait in memory between chunks.
 *
 * Either way every lane adds its products in increasing element order.
 *
 * Chunks start at multiples of CHUNK (a multiple of 16), so element i of a
 * row always lands in lane i % 16, as in ds4_dot_f32 over the whole
 * dequantized row.  Lanes are kept in memory between chunks and in
 * registers inside one, which moves no addition. */

/* Asks for the bytes PREFETCH_CHUNKS chunks ahead of `pos` in a row: the
 * rows of a set are read as interleaved streams, which hardware prefetchers
 * follow poorly.  A hint only: it changes no value. */
#define PREFETCH_CHUNKS 4
static inline void prefetch_ahead(const uint8_t *row, uint64_t pos, uint64_t chunk_bytes,
                                  uint64_t row_bytes) {
#if defined(__GNUC__)
    const uint64_t a = pos + PREFETCH_CHUNKS * chunk_bytes;
    const uint64_t b = a + chunk_bytes < row_bytes ? a + chunk_bytes : row_bytes;
    for (uint64_t p = a; p < b; p += 64) __builtin_prefetch(row + p);
#else
    (void)row, (void)pos, (void)chunk_bytes, (void)row_bytes;
#endif
}

/* The scales of row r of W, a block-scaled type's (NULL for the others,
 * whose scales are in their blocks). */
static inline const uint8_t *scale_row(const ds4_mat *W, const ds4_type_info *t, uint64_t r) {
    return t->scale_rows ? W->scale + r / t->scale_rows * W->scale_stride : NULL;
}

static double kern_dot_f32(const float *a, const float *b, uint64_t n) {
    double l[LANES] = {0};
    KERN_LANES_ADD(l, a, b, n);
    return lanes_sum(l);
}

/* Lanes of rows [r0, r0+nr) (nr <= RB) x tokens [t0, t0+nt) (nt <= TILE_T)
 * over the whole row: acc[k][j] are the lanes of token t0+k and row r0+j.
 * The rows are walked once, chunk by chunk, as nr sequential streams; each
 * chunk is dequantized once for all nt tokens. */
static void rowset_lanes(const ds4_mat *W, const ds4_type_info *t, uint64_t r0, int nr,
                         const float *x, uint64_t ldx, int t0, int nt, double (*acc)[RB][LANES]) {
    const uint64_t n = W->cols;
    /* The types with fused kernels (types.h) try them; the others, and a
     * block a fused kernel declines, go through KERN_DEQUANT. */
    if (nt <= FUSED_T && t->fused) {
        const uint8_t *rows[RB];
        for (int j = 0; j < nr; j++) rows[j] = W->data + (r0 + (uint64_t)j) * W->row_bytes;
        if (KERN_FUSED(t, rows, nr, x + (uint64_t)t0 * ldx, ldx, nt, n, acc)) return;
    }
    float w[RB * CHUNK];
    memset(acc, 0, sizeof(acc[0]) * (size_t)nt);
    const uint64_t chunk_bytes = CHUNK / t->blck * t->bytes;
    for (uint64_t off = 0; off < n; off += CHUNK) {
        const uint64_t m = n - off < CHUNK ? n - off : CHUNK;
        for (int j = 0; j < nr; j++) {
            const uint8_t *row = W->data + (r0 + (uint64_t)j) * W->row_bytes;
            prefetch_ahead(row, off / t->blck * t->bytes, chunk_bytes, W->row_bytes);
            KERN_DEQUANT(t, row, scale_row(W, t, r0 + (uint64_t)j), off, w + (uint64_t)j * CHUNK, m);
        }
        for (int k = 0; k < nt; k++)
            KERN_ROWS_FMA(acc[k], nr, w, x + (uint64_t)(t0 + k) * ldx + off, m);
    }
}

/* Elements [0, m) of x as doubles (exact). */
static inline void widen(double *restrict xd, const float *restrict x, uint64_t m) {
    for (uint64_t i = 0; i < m; i++) xd[i] = (double)x[i];
}

/* Elements [off, off+m) of a row as doubles, into wd: the variant's
 * KERN_DEQUANT_WIDE where it has one for the type, else KERN_DEQUANT into
 * the f32 scratch w and widened from there. */
static inline void dequant_wide(const ds4_type_info *t, const uint8_t *row, const uint8_t *srow,
                                uint64_t off, float *w, double *wd, uint64_t m) {
#ifdef KERN_DEQUANT_WIDE
    if (KERN_DEQUANT_WIDE(t, row, srow, off, wd, m)) return;
#endif
    KERN_DEQUANT(t, row, srow, off, w, m);
    widen(wd, w, m);
}

/* Rows [r0, r0+nr) (nr <= JOB_ROWS) x tokens [t0, t0+nt) (1 < nt <= TILE_T),
 * rounded into y. */
static void blocked_job(const ds4_mat *W, const ds4_type_info *t, uint64_t r0, int nr,
                        const float *x, uint64_t ldx, int t0, int nt, float *y, uint64_t ldy) {
    double acc[JOB_ROWS][TILE_T][LANES] __attribute__((aligned(64)));
    double xd[TILE_T * BCHUNK] __attribute__((aligned(64)));
    double wd[RB * BCHUNK] __attribute__((aligned(64)));
    float w[BCHUNK];
    const uint64_t n = W->cols, chunk_bytes = BCHUNK / t->blck * t->bytes;
    memset(acc, 0, sizeof(acc[0]) * (size_t)nr);
    for (uint64_t off = 0; off < n; off += BCHUNK) {
        const uint64_t m = n - off < BCHUNK ? n - off : BCHUNK;
        for (int k = 0; k < nt; k++)
            widen(xd + (uint64_t)k * BCHUNK, x + (uint64_t)(t0 + k) * ldx + off, m);
        for (int j0 = 0; j0 < nr; j0 += RB) {
            const int nb = nr - j0 < RB ? nr - j0 : RB;
            for (int j = 0; j < nb; j++) {
                const uint8_t *row = W->data + (r0 + (uint64_t)(j0 + j)) * W->row_bytes;
                prefetch_ahead(row, off / t->blck * t->bytes, chunk_bytes, W->row_bytes);
                dequant_wide(t, row, scale_row(W, t, r0 + (uint64_t)(j0 + j)), off, w,
                             wd + (uint64_t)j * BCHUNK, m);
            }
            KERN_MMA(acc + j0, nb, nt, wd, xd, m);
        }
    }
    for (int k = 0; k < nt; k++)
        for (int j = 0; j < nr; j++)
            y[(uint64_t)(t0 + k) * ldy + r0 + (uint64_t)j] = (float)lanes_sum(acc[j][k]);
}

static double kern_row_dot(const ds4_mat *W, const ds4_type_info *t, const float *x) {
    double acc[1][RB][LANES];
    rowset_lanes(W, t, 0, 1, x, W->cols, 0, 1, acc);
    return lanes_sum(acc[0][0]);
}

#ifndef KERN_FUSED_MULTI
#define KERN_FUSED_MULTI 0
#endif

static void kern_job(const ds4_mat *W, const ds4_type_info *t, uint64_t r0, int nr,
                     const float *x, uint64_t ldx, int t0, int nt, float *y, uint64_t ldy) {
    if (nt > 1 && (nt > FUSED_T || !t->fused || !KERN_FUSED_MULTI)) {
        blocked_job(W, t, r0, nr, x, ldx, t0, nt, y, ldy);
        return;
    }
    double acc[FUSED_T][RB][LANES];
    for (int j0 = 0; j0 < nr; j0 += RB) {
        const int nb = nr - j0 < RB ? nr - j0 : RB;
        rowset_lanes(W, t, r0 + (uint64_t)j0, nb, x, ldx, t0, nt, acc);
        for (int k = 0; k < nt; k++)
            for (int j = 0; j < nb; j++)
                y[(uint64_t)(t0 + k) * ldy + r0 + (uint64_t)(j0 + j)] = (float)lanes_sum(acc[k][j]);
    }
}
