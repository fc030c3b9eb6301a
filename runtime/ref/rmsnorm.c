#include "runtime/ref/rmsnorm.h"
#include "runtime/common/numerics.h"

#include <math.h>

void ref_rmsnorm_bf16(const uint16_t *x, const uint16_t *w, uint16_t *y, int rows, int width, float eps)
{
    for (int r = 0; r < rows; r++) {
        const uint16_t *xr = x + (int64_t)r * width;
        uint16_t *yr = y + (int64_t)r * width;
        float ss = 0.0f;
        for (int i = 0; i < width; i++) {
            float v = bf16_to_f32(xr[i]);
            ss += v * v;
        }
        float inv = 1.0f / sqrtf(ss / (float)width + eps);
        for (int i = 0; i < width; i++)
            yr[i] = f32_to_bf16((bf16_to_f32(xr[i]) * inv) * bf16_to_f32(w[i]));
    }
}
