/* The jobs of a matrix product, written once over four primitives.  A
 * kernel variant names its functions for them before including this file
 * (the portable ones of dot_lanes.h where it has nothing better):
 *
 *   KERN_LANES_ADD(l, a, b, n)           l[i % 16] += a[i] * b[i]
 *   KERN_ROWS_FMA(acc, nr, w, x, m)      acc[j][i % 16] += w[j*CHUNK + i] * x[i]
 *   KERN_DEQUANT(t, row, off, w, m)      elements [off, off+m) of a row as f32
 *   KERN_FUSED(t, rows, nr, x, n, acc)   whole rows against one token, the
 *                                        dequantization fused with the
 *                                        multiply-adds; 0 when it declines
 *
 * so every variant gets its own copy of the loops below with its
 * primitives inlined (C has no other way to say "this code, with those
 * functions", short of copying it).  It then defines its ds4_dot_kern from
 * kern_dot_f32, kern_row_dot and kern_job.  Internal to the dot_*.c files.
 *
 * How a job is organized (the same code for every T):
 *
 *   - a job walks RB rows at a time, once, as RB sequential streams, in
 *     chunks of CHUNK elements.  Each chunk of the RB rows is dequantized
 *     once into f32 (formats.h values) and used by every token of the tile;
 *   - the RB rows then meet a token's activations in one pass that keeps
 *     their lanes in registers: RB independent chains of additions give the
 *     CPU parallel work, while each lane still adds its products in
 *     increasing element order;
 *   - for a single token (decode) a variant may skip the f32 buffer: each
 *     block goes from memory straight into the accumulators (fused_rows),
 *     with the same values in the same order.
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

static double kern_dot_f32(const float *a, const float *b, uint64_t n) {
    double l[L] = {0};
    KERN_LANES_ADD(l, a, b, n);
    return lanes_sum(l);
}

/* Lanes of rows [r0, r0+nr) (nr <= RB) x tokens [t0, t0+nt) (nt <= TILE_T)
 * over the whole row: acc[k][j] are the lanes of token t0+k and row r0+j.
 * The rows are walked once, chunk by chunk, as nr sequential streams; each
 * chunk is dequantized once for all nt tokens. */
static void rowset_lanes(const ds4_mat *W, const ds4_type_info *t, uint64_t r0, int nr,
                         const float *x, uint64_t ldx, int t0, int nt, double (*acc)[RB][L]) {
    const uint64_t n = W->cols;
    if (nt == 1) {
        const uint8_t *rows[RB];
        for (int j = 0; j < nr; j++) rows[j] = W->data + (r0 + (uint64_t)j) * W->row_bytes;
        if (KERN_FUSED(t, rows, nr, x + (uint64_t)t0 * ldx, n, acc[0])) return;
    }
    float w[RB * CHUNK];
    memset(acc, 0, sizeof(acc[0]) * (size_t)nt);
    const uint64_t chunk_bytes = CHUNK / t->blck * t->bytes;
    for (uint64_t off = 0; off < n; off += CHUNK) {
        const uint64_t m = n - off < CHUNK ? n - off : CHUNK;
        for (int j = 0; j < nr; j++) {
            const uint8_t *row = W->data + (r0 + (uint64_t)j) * W->row_bytes;
            prefetch_ahead(row, off / t->blck * t->bytes, chunk_bytes, W->row_bytes);
            KERN_DEQUANT(t, row, off, w + (uint64_t)j * CHUNK, m);
        }
        for (int k = 0; k < nt; k++)
            KERN_ROWS_FMA(acc[k], nr, w, x + (uint64_t)(t0 + k) * ldx + off, m);
    }
}

static double kern_row_dot(const ds4_mat *W, const ds4_type_info *t, const float *x) {
    double acc[1][RB][L];
    rowset_lanes(W, t, 0, 1, x, W->cols, 0, 1, acc);
    return lanes_sum(acc[0][0]);
}

static void kern_job(const ds4_mat *W, const ds4_type_info *t, uint64_t r0, int nr,
                     const float *x, uint64_t ldx, int t0, int nt, float *y, uint64_t ldy) {
    double acc[TILE_T][RB][L];
    for (int j0 = 0; j0 < nr; j0 += RB) {
        const int nb = nr - j0 < RB ? nr - j0 : RB;
        rowset_lanes(W, t, r0 + (uint64_t)j0, nb, x, ldx, t0, nt, acc);
        for (int k = 0; k < nt; k++)
            for (int j = 0; j < nb; j++)
                y[(uint64_t)(t0 + k) * ldy + r0 + (uint64_t)(j0 + j)] = (float)lanes_sum(acc[k][j]);
    }
}
