#include "runtime/ref/tap_mean.h"
#include "runtime/common/numerics.h"

void ref_tap_mean(const uint16_t *x, int rows, int hc, int d, uint16_t *taps, int n_targets, int target)
{
    for (int r = 0; r < rows; r++) {
        const uint16_t *xr = x + (int64_t)r * hc * d;
        uint16_t *t = taps + ((int64_t)r * n_targets + target) * d;
        for (int k = 0; k < d; k++) {
            float acc = 0.0f;
            for (int c = 0; c < hc; c++)
                acc += bf16_to_f32(xr[(int64_t)c * d + k]);
            t[k] = f32_to_bf16(acc / (float)hc);
        }
    }
}
