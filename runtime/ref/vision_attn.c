#include "runtime/ref/vision_attn.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline float rnd(int bf16, float x)
{
    return bf16 ? bf16_round(x) : x;
}

int ref_vision_attn(const float *qkv, int n, int heads, int hd, int row0, int row1, int bf16, float *out)
{
    int D = heads * hd;
    float scale = 1.0f / sqrtf((float)hd);
    float *s = dsk_malloc(sizeof(float) * (size_t)n), *acc = dsk_malloc(sizeof(float) * (size_t)hd);
    if (!s || !acc) {
        free(s);
        free(acc);
        return dsk_err_ctx("vision attention over %d patches", n);
    }
    for (int h = 0; h < heads; h++)
        for (int i = row0; i < row1; i++) {
            const float *q = qkv + (size_t)i * 3 * D + (size_t)h * hd;
            float mx = -INFINITY, sum = 0.0f;
            for (int j = 0; j < n; j++) {
                const float *k = qkv + (size_t)j * 3 * D + D + (size_t)h * hd;
                float dot = 0.0f;
                for (int t = 0; t < hd; t++)
                    dot += q[t] * k[t];
                s[j] = dot * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            memset(acc, 0, sizeof(float) * (size_t)hd);
            for (int j = 0; j < n; j++) {
                float e = expf(s[j] - mx), pe = rnd(bf16, e);
                const float *v = qkv + (size_t)j * 3 * D + 2 * D + (size_t)h * hd;
                sum += e;
                for (int t = 0; t < hd; t++)
                    acc[t] += pe * v[t];
            }
            for (int t = 0; t < hd; t++)
                out[(size_t)i * D + (size_t)h * hd + t] = rnd(bf16, acc[t] / sum);
        }
    free(s);
    free(acc);
    return 0;
}
