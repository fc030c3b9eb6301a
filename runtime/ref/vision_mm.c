#include "runtime/ref/vision_mm.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"

#include <math.h>
#include <stdlib.h>

static inline float rnd(int bf16, float x)
{
    return bf16 ? bf16_round(x) : x;
}

/* y[i][o] = rnd(Σ_k x[i][k]·W[o][k] + b[o]): fp32 accumulation in k order, the bias added in fp32, one rounding */
static void linear(int bf16, const float *x, int n, int K, const uint16_t *W, const uint16_t *b, int N, float *y)
{
    float *wr = malloc(sizeof(float) * (size_t)K);
    for (int o = 0; o < N; o++) {
        const uint16_t *row = W + (size_t)o * K;
        if (wr)
            for (int k = 0; k < K; k++)
                wr[k] = bf16_to_f32(row[k]);
        float bias = b ? bf16_to_f32(b[o]) : 0.0f;
        for (int i = 0; i < n; i++) {
            const float *xi = x + (size_t)i * K;
            float acc = 0.0f;
            if (wr)
                for (int k = 0; k < K; k++)
                    acc += xi[k] * wr[k];
            else
                for (int k = 0; k < K; k++)
                    acc += xi[k] * bf16_to_f32(row[k]);
            y[(size_t)i * N + o] = rnd(bf16, acc + bias);
        }
    }
    free(wr);
}

int ref_vision_mm(int bf16, const float *x, int M, int K, const uint16_t *W, const uint16_t *b, int N, int mode,
                  float *y)
{
    size_t n = (size_t)M * N;
    if (mode == VISION_MM_BIAS || mode == VISION_MM_GELU) {
        linear(bf16, x, M, K, W, b, N, y);
        if (mode == VISION_MM_GELU) /* exact erf GELU */
            for (size_t i = 0; i < n; i++)
                y[i] = rnd(bf16, 0.5f * y[i] * (1.0f + erff(y[i] * 0.70710678118654752440f)));
        return 0;
    }
    float *t = dsk_malloc(sizeof(float) * n);
    if (!t)
        return dsk_err_ctx("vision linear of %d x %d rows", M, N);
    linear(bf16, x, M, K, W, b, N, t);
    if (mode == VISION_MM_RESIDUAL)
        for (size_t i = 0; i < n; i++)
            y[i] = rnd(bf16, y[i] + t[i]);
    else {
        int I = N / 2;
        for (size_t i = 0; i < (size_t)M; i++)
            for (int k = 0; k < I; k++) {
                float g = t[i * N + k], u = t[i * N + I + k];
                y[i * I + k] = rnd(bf16, rnd(bf16, g / (1.0f + expf(-g))) * u);
            }
    }
    free(t);
    return 0;
}
