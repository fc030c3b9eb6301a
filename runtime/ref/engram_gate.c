#include "runtime/ref/engram_gate.h"
#include "runtime/common/numerics.h"

#include <math.h>

float ref_engram_gate_scale(int d)
{
    return (float)(1.0 / sqrt((double)d));
}

void ref_engram_gate(uint16_t *X, const uint16_t *kv, const float *w, int rows, int hc, int d, float eps)
{
    const float inv_sqrt_d = ref_engram_gate_scale(d);
    const int64_t kvw = (int64_t)(hc + 1) * d;
    for (int i = 0; i < rows; i++) {
        const uint16_t *value = kv + i * kvw + (int64_t)hc * d;
        for (int ch = 0; ch < hc; ch++) {
            uint16_t *x = X + ((int64_t)i * hc + ch) * d;
            const uint16_t *key = kv + i * kvw + (int64_t)ch * d;
            const float *wc = w + (int64_t)ch * d;
            float dot = 0.0f, sx = 0.0f, sk = 0.0f;
            for (int j = 0; j < d; j++) {
                float xv = bf16_to_f32(x[j]), kv_ = bf16_to_f32(key[j]);
                dot += xv * wc[j] * kv_;
                sx += xv * xv;
                sk += kv_ * kv_;
            }
            float rx = 1.0f / sqrtf(sx / (float)d + eps), rk = 1.0f / sqrtf(sk / (float)d + eps);
            float dc = dot * (rx * rk) * inv_sqrt_d;
            float mag = sqrtf(fabsf(dc) > 1e-6f ? fabsf(dc) : 1e-6f);
            float g = 1.0f / (1.0f + expf(-copysignf(mag, dc))); /* sign bit: +0 gives +sqrt(1e-6) */
            for (int j = 0; j < d; j++)
                x[j] = f32_to_bf16(bf16_to_f32(x[j]) + g * bf16_to_f32(value[j]));
        }
    }
}
