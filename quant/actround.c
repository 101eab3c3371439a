#include "quant/actround.h"

#include <math.h>
#include <string.h>

#include "quant/formats.h"
#include "quant/qat.h"

uint32_t ds4_actround_block(uint8_t act) {
    switch (act) {
    case DS4_ACT_Q8_0_GGML:
    case DS4_ACT_Q8_0_DS4: return 32;
    case DS4_ACT_Q8_K: return 256;
    case DS4_ACT_FP8_B128: return 128;
    default: return 1;
    }
}

/* Halves to even, as lrintf and ggml's nearest_int do in the default
 * rounding mode: adding 1.5 * 2^23 leaves the integer part in the low bits
 * (|v| <= 2^22). */
static float round_half_even(float v) {
    float big = v + 12582912.0f;
    return big - 12582912.0f;
}

static float max_abs(const float *x, uint32_t n) {
    float amax = 0.0f;
    for (uint32_t j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
    return amax;
}

/* One division for the multiplier where the reference takes the
 * reciprocal of the rounded d: the two differ in the last bit for some
 * amax, and with the rounding of halves that moves a q by one. */
static void q8_0_ggml(const float *x, float *y) {
    const float amax = max_abs(x, 32);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d16 = ds4_formats_f16_to_f32(ds4_formats_f32_to_f16(amax / 127.0f));
    for (uint32_t j = 0; j < 32; j++) y[j] = d16 * round_half_even(x[j] * id);
}

static void q8_0_ds4(const float *x, float *y) {
    const float d = max_abs(x, 32) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (uint32_t j = 0; j < 32; j++) {
        float q = round_half_even(x[j] * id);
        q = q > 127.0f ? 127.0f : q < -128.0f ? -128.0f : q;
        y[j] = d * q;
    }
}

static void q8_k(const float *x, float *y) {
    float max = 0.0f, amax = 0.0f;
    for (uint32_t j = 0; j < 256; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax == 0.0f) {
        memset(y, 0, sizeof(float) * 256);
        return;
    }
    const float iscale = -127.0f / max;
    const float d = 1.0f / iscale;
    for (uint32_t j = 0; j < 256; j++) {
        float q = round_half_even(iscale * x[j]);
        y[j] = d * (q > 127.0f ? 127.0f : q);
    }
}

void ds4_actround_row(uint8_t act, const float *x, float *y, uint64_t n) {
    const uint32_t blk = ds4_actround_block(act);
    /* x and y may be the same row: each block reads its inputs first. */
    float in[256];
    for (uint64_t i = 0; i + blk <= n; i += blk) {
        memcpy(in, x + i, sizeof(float) * blk);
        switch (act) {
        case DS4_ACT_F16: y[i] = ds4_formats_f16_to_f32(ds4_formats_f32_to_f16(in[0])); break;
        case DS4_ACT_BF16: y[i] = ds4_formats_bf16_to_f32(ds4_formats_f32_to_bf16(in[0])); break;
        case DS4_ACT_Q8_0_GGML: q8_0_ggml(in, y + i); break;
        case DS4_ACT_Q8_0_DS4: q8_0_ds4(in, y + i); break;
        case DS4_ACT_Q8_K: q8_k(in, y + i); break;
        case DS4_ACT_FP8_B128:
            ds4_qat_fp8_linear_input(in, 128);
            memcpy(y + i, in, sizeof(float) * 128);
            break;
        default: y[i] = in[0]; break;
        }
    }
}
