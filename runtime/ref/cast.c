#include "runtime/ref/cast.h"
#include "runtime/common/numerics.h"

void ref_cast_bf16(const float *x, uint16_t *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = f32_to_bf16(x[i]);
}

void ref_cast_scale(const float *x, float *y, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        y[i] = bf16_round(bf16_round(x[i]) * scale);
}
