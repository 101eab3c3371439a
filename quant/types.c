/* The table of tensor types ds4ref supports (types.h).  Ids and block
 * geometry are ggml's, but for the two block-scaled types of the official
 * checkpoint; a GGUF tensor of any other type is rejected by the reader.
 *
 * act_ggml is ggml-cpu's vec_dot_type of the type (the input rounding its
 * dot products run on: q8_0 for Q8_0, q8_K for the K and IQ types, the
 * weight's own float type for F16 and BF16); act_ds4 is what ds4.c's CPU
 * path does (a Q8_0 activation of its own for Q8_0, ggml's q8_K for the
 * others it quantizes, and nothing for the float weights).  The official
 * checkpoint's FP8 and FP4 linears are set by the numerics (model/), not by
 * their type. */
#include "quant/types.h"

#include "quant/actround.h"
#include "quant/blockfp.h"
#include "quant/formats.h"

static const ds4_type_info type_table[] = {
    {.id = DS4_TYPE_F32, .name = "f32", .blck = 1, .bytes = 4, .is_float = true,
     .dequant = ds4_formats_dequant_f32},
    {.id = DS4_TYPE_F16, .name = "f16", .blck = 1, .bytes = 2, .is_float = true,
     .dequant = ds4_formats_dequant_f16, .act_ggml = DS4_ACT_F16},
    {.id = DS4_TYPE_Q8_0, .name = "q8_0", .blck = 32, .bytes = 34, .is_float = true,
     .dequant = ds4_formats_dequant_q8_0, .act_ggml = DS4_ACT_Q8_0_GGML,
     .act_ds4 = DS4_ACT_Q8_0_DS4, .fused = true},
    {.id = DS4_TYPE_Q2_K, .name = "q2_K", .blck = 256, .bytes = 84, .is_float = true,
     .dequant = ds4_formats_dequant_q2_K, .act_ggml = DS4_ACT_Q8_K, .act_ds4 = DS4_ACT_Q8_K,
     .fused = true},
    {.id = DS4_TYPE_Q4_K, .name = "q4_K", .blck = 256, .bytes = 144, .is_float = true,
     .dequant = ds4_formats_dequant_q4_K, .act_ggml = DS4_ACT_Q8_K, .act_ds4 = DS4_ACT_Q8_K,
     .fused = true},
    {.id = DS4_TYPE_IQ2_XXS, .name = "iq2_xxs", .blck = 256, .bytes = 66, .is_float = true,
     .dequant = ds4_formats_dequant_iq2_xxs, .act_ggml = DS4_ACT_Q8_K,
     .act_ds4 = DS4_ACT_Q8_K, .fused = true},
    {.id = DS4_TYPE_I32, .name = "i32", .blck = 1, .bytes = 4, .dequant = ds4_formats_dequant_i32},
    {.id = DS4_TYPE_BF16, .name = "bf16", .blck = 1, .bytes = 2, .is_float = true,
     .dequant = ds4_formats_dequant_bf16, .act_ggml = DS4_ACT_BF16},
    {.id = DS4_TYPE_FP8_B128, .name = "fp8_e4m3_b128", .blck = 1, .bytes = 1, .is_float = true,
     .scale_rows = 128, .scale_cols = 128, .span = ds4_blockfp_fp8_span},
    {.id = DS4_TYPE_FP4_B32, .name = "fp4_e2m1_b32", .blck = 2, .bytes = 1, .is_float = true,
     .scale_rows = 1, .scale_cols = 32, .span = ds4_blockfp_fp4_span},
};

const ds4_type_info *ds4_types_info(uint32_t type) {
    for (size_t i = 0; i < sizeof(type_table) / sizeof(type_table[0]); i++)
        if (type_table[i].id == type) return &type_table[i];
    return NULL;
}

const char *ds4_types_name(uint32_t type) {
    const ds4_type_info *t = ds4_types_info(type);
    if (t) return t->name;
    /* Names of known-but-unsupported ggml ids help a user read the error. */
    static const char *const ggml_names[] = {
        [2] = "q4_0", [3] = "q4_1", [6] = "q5_0", [7] = "q5_1", [9] = "q8_1",
        [11] = "q3_K", [13] = "q5_K", [14] = "q6_K", [15] = "q8_K",
        [17] = "iq2_xs", [18] = "iq3_xxs", [19] = "iq1_s", [20] = "iq4_nl",
        [21] = "iq3_s", [22] = "iq2_s", [23] = "iq4_xs", [24] = "i8", [25] = "i16",
        [27] = "i64", [28] = "f64", [29] = "iq1_m",
    };
    if (type < sizeof(ggml_names) / sizeof(ggml_names[0]) && ggml_names[type])
        return ggml_names[type];
    return "unknown";
}

uint64_t ds4_types_row_bytes(uint32_t type, uint64_t n) {
    const ds4_type_info *t = ds4_types_info(type);
    if (!t || n % t->blck) return 0;
    if (n / t->blck > UINT64_MAX / t->bytes) return 0;   /* overflow */
    return n / t->blck * t->bytes;
}

int ds4_types_dequant_row(uint32_t type, const void *src, float *dst, uint64_t n) {
    const ds4_type_info *t = ds4_types_info(type);
    /* ds4_types_row_bytes rejects unknown types, partial blocks and sizes that
     * overflow; an empty row is valid and does nothing. */
    if (!t || !t->dequant || (n != 0 && ds4_types_row_bytes(type, n) == 0)) return -1;
    t->dequant(src, dst, n);
    return 0;
}
