/* Independent decoding of the GGUF block formats, for the tests: each
 * element from a per-element index formula of ggml's block layout (what
 * ggml-quants.c's dequantize_row_* computes, element by element, written
 * out above each function in refquant.c) and ggml's f32 operations in
 * ggml's order, written apart from
 * quant/formats.c (which walks the blocks with loops).  test_formats checks
 * quant/formats.c against these bit for bit; test_api and test_ops use them
 * where they need a weight's values without trusting ds4_types_dequant_row.  Only
 * the IQ2_XXS grid is the library's table (test_formats checks it against
 * ggml's numbers by hash). */
#ifndef DS4_TEST_REFQUANT_H
#define DS4_TEST_REFQUANT_H

#include <stdint.h>

/* ggml type ids, spelled out independently of quant/types.h. */
enum { RQ_F32 = 0, RQ_F16 = 1, RQ_Q8_0 = 8, RQ_Q2_K = 10, RQ_Q4_K = 12, RQ_IQ2_XXS = 16,
       RQ_I32 = 26, RQ_BF16 = 30 };

/* Value of a half / a bfloat16 from its fields (NaN is the callers'). */
double rq_f16(uint16_t h);
double rq_bf16(uint16_t h);

/* Parity of the 7 low bits of k (IQ2_XXS sign bit 7). */
int rq_parity7(int k);

/* Q2_K: byte (within qs) and shift of element e's 2-bit value. */
void rq_q2k_pos(int e, int *byte, int *shift);

/* Q4_K: which sub-block's scale (is_min 0) or min (is_min 1) bit k of
 * scales byte i belongs to, and its weight there. */
void rq_q4k_bit_owner(int i, int k, int *is_min, int *j, int *weight);

/* Element e (0..255) of one block. */
float rq_q2k_elem(const uint8_t *blk, int e);
float rq_q4k_elem(const uint8_t *blk, int e);
float rq_iq2_elem(const uint8_t *blk, int e);

/* Elements and bytes per block of a type above; 0 for any other type. */
uint32_t rq_block_elems(uint32_t type);
uint32_t rq_block_bytes(uint32_t type);

/* Element e of a row of `type` that starts at row (any of the types above;
 * I32 converted to float). */
float rq_elem(uint32_t type, const uint8_t *row, uint64_t e);

#endif
