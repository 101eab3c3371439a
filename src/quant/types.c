/* The table of tensor types ds4ref supports.  Ids and block geometry are
 * ggml's, but for the two block-scaled types of the official checkpoint;
 * a GGUF tensor of any other type is rejected by the reader. */
#include "quant/formats.h"

#include <stdio.h>

static const ds4_type_info type_table[] = {
    {DS4_TYPE_F32, "f32", 1, 4, 1, 0, 0},
    {DS4_TYPE_F16, "f16", 1, 2, 1, 0, 0},
    {DS4_TYPE_Q8_0, "q8_0", 32, 34, 1, 0, 0},
    {DS4_TYPE_Q2_K, "q2_K", 256, 84, 1, 0, 0},
    {DS4_TYPE_Q4_K, "q4_K", 256, 144, 1, 0, 0},
    {DS4_TYPE_IQ2_XXS, "iq2_xxs", 256, 66, 1, 0, 0},
    {DS4_TYPE_I32, "i32", 1, 4, 0, 0, 0},
    {DS4_TYPE_BF16, "bf16", 1, 2, 1, 0, 0},
    {DS4_TYPE_FP8_B128, "fp8_e4m3_b128", 1, 1, 1, 128, 128},
    {DS4_TYPE_FP4_B32, "fp4_e2m1_b32", 2, 1, 1, 1, 32},
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
