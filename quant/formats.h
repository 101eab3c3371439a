/* Tensor block formats: IEEE half and bfloat conversions and the exact
 * dequantization of the GGUF block types to f32 (types.h holds the table
 * of types, whose rows point here).
 *
 * "Exact" means bit-identical to the format definitions: the same f32
 * operations, in the same order, as ggml's dequantize_row_* (ggml-quants.c,
 * which ds4 uses too).  Every quantized weight therefore has exactly one
 * f32 value, and everything above this layer works on those values. */
#ifndef DS4_FORMATS_H
#define DS4_FORMATS_H

#include <stdint.h>

/* IEEE binary16 / bfloat16 <-> binary32.  to_f32 is exact (subnormals, Inf,
 * NaN preserved).  from_f32 rounds to nearest even; NaN stays NaN. */
float ds4_formats_f16_to_f32(uint16_t h);
uint16_t ds4_formats_f32_to_f16(float f);
float ds4_formats_bf16_to_f32(uint16_t h);
uint16_t ds4_formats_f32_to_bf16(float f);

/* The exact dequantizers of the GGUF types, n elements (whole blocks: types.h
 * gives their sizes) at src into dst; types.c's rows point at them, and
 * ds4_types_dequant_row checks the arguments first. */
void ds4_formats_dequant_f32(const uint8_t *src, float *dst, uint64_t n);
void ds4_formats_dequant_f16(const uint8_t *src, float *dst, uint64_t n);
void ds4_formats_dequant_bf16(const uint8_t *src, float *dst, uint64_t n);
void ds4_formats_dequant_i32(const uint8_t *src, float *dst, uint64_t n);
void ds4_formats_dequant_q8_0(const uint8_t *src, float *dst, uint64_t n);
void ds4_formats_dequant_q2_K(const uint8_t *src, float *dst, uint64_t n);
void ds4_formats_dequant_q4_K(const uint8_t *src, float *dst, uint64_t n);
void ds4_formats_dequant_iq2_xxs(const uint8_t *src, float *dst, uint64_t n);

/* IQ2_XXS tables (ggml's iq2xxs_grid and ksigns_iq2xs), exposed for tests and
 * the synthetic-model generator. */
extern const uint64_t ds4_formats_iq2xxs_grid[256];
extern const uint8_t ds4_formats_ksigns_iq2xs[128];

#endif
