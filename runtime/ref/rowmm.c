#include "runtime/ref/rowmm.h"
#include "runtime/common/numerics.h"

void ref_rowmm_bf16(const uint16_t *x, const uint16_t *w, float *y, int rows, int K, int N)
{
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < N; n++) {
            const uint16_t *xr = x + (int64_t)r * K, *wn = w + (int64_t)n * K;
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += bf16_to_f32(xr[k]) * bf16_to_f32(wn[k]);
            y[(int64_t)r * N + n] = acc;
        }
}
