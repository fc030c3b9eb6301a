#include "runtime/ref/xchg.h"

#include <string.h>

void ref_xchg_sum(const float *const *parts, int tp, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        float acc = parts[0][i];
        for (int r = 1; r < tp; r++)
            acc += parts[r][i];
        out[i] = acc;
    }
}

void ref_xchg_gather(const float *const *parts, int tp, int rows, int cols, float *out)
{
    for (int i = 0; i < rows; i++)
        for (int r = 0; r < tp; r++)
            memcpy(out + ((int64_t)i * tp + r) * cols, parts[r] + (int64_t)i * cols, sizeof(float) * (size_t)cols);
}
