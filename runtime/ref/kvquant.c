#include "runtime/ref/kvquant.h"
#include "runtime/common/numerics.h"

#include <math.h>

float kvq_pow2_ceil(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t e = (u >> 23) & 0xffu;
    if (u & 0x7fffffu)
        e++;
    return f32_from_bits(e << 23);
}

static float block_amax(const uint16_t *v, int n, float floor)
{
    float amax = floor;
    for (int i = 0; i < n; i++) {
        float a = fabsf(bf16_to_f32(v[i]));
        if (a > amax)
            amax = a;
    }
    return amax;
}

static float clampf(float x, float lim)
{
    return x > lim ? lim : x < -lim ? -lim : x;
}

void kvq_fp8_e4m3(uint16_t *v, int n)
{
    const float inv = 1.0f / 448.0f;
    for (int b = 0; b < n; b += 32) {
        float s = kvq_pow2_ceil(block_amax(v + b, 32, 1e-4f) * inv);
        for (int i = b; i < b + 32; i++) {
            float q = e4m3_to_f32(f32_to_e4m3(clampf(bf16_to_f32(v[i]) / s, 448.0f)));
            v[i] = f32_to_bf16(q * s);
        }
    }
}

void kvq_fp4_e4m3(uint16_t *v, int n)
{
    for (int b = 0; b < n; b += 16) {
        float s = e4m3_to_f32(f32_to_e4m3(block_amax(v + b, 16, 6.0f * 0x1p-9f) / 6.0f));
        for (int i = b; i < b + 16; i++) {
            float q = e2m1_to_f32(f32_to_e2m1(clampf(bf16_to_f32(v[i]) / s, 6.0f)));
            v[i] = f32_to_bf16(q * s);
        }
    }
}

void kvq_fp4_e8m0(uint16_t *v, int n)
{
    const float inv = 1.0f / 6.0f;
    for (int b = 0; b < n; b += 32) {
        float s = kvq_pow2_ceil(block_amax(v + b, 32, 6.0f * 0x1p-126f) * inv);
        for (int i = b; i < b + 32; i++) {
            float q = e2m1_to_f32(f32_to_e2m1(clampf(bf16_to_f32(v[i]) / s, 6.0f)));
            v[i] = f32_to_bf16(q * s);
        }
    }
}
