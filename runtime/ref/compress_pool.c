#include "runtime/ref/compress_pool.h"
#include "runtime/common/numerics.h"

#include <math.h>

void ref_pool2(const float *a0, const float *s0, const float *a1, const float *s1, int hd, uint16_t *out)
{
    for (int d = 0; d < hd; d++) {
        float mx = s0[d] > s1[d] ? s0[d] : s1[d];
        float e0 = expf(s0[d] - mx), e1 = expf(s1[d] - mx), sum = e0 + e1;
        out[d] = f32_to_bf16(a0[d] * (e0 / sum) + a1[d] * (e1 / sum));
    }
}

void ref_compress_pool(const float *a, const float *s, int64_t stride, const float *st_a, const float *st_s,
                       int64_t st_stride, const int32_t *entries, uint16_t *out, int64_t out_stride, int groups,
                       int hd)
{
    for (int g = 0; g < groups; g++) {
        int32_t first = entries[2 * g], second = entries[2 * g + 1];
        const float *a0 = first >= 0 ? a + first * stride : st_a + (-1 - (int64_t)first) * st_stride;
        const float *s0 = first >= 0 ? s + first * stride : st_s + (-1 - (int64_t)first) * st_stride;
        ref_pool2(a0, s0, a + second * stride, s + second * stride, hd, out + g * out_stride);
    }
}
