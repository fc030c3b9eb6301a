#include "runtime/ref/rope.h"
#include "runtime/common/numerics.h"

#include <math.h>
#include <stdlib.h>

static double yarn_dim(const rope_params *p, double rotations)
{
    return (double)p->rope_dim * log((double)p->original_seq_len / (rotations * 2.0 * M_PI)) /
           (2.0 * log(p->base));
}

void ref_rope_yarn_range(const rope_params *p, int *low, int *high)
{
    double lo = floor(yarn_dim(p, p->beta_fast));
    double hi = ceil(yarn_dim(p, p->beta_slow));
    *low = lo < 0 ? 0 : (int)lo;
    *high = hi > p->rope_dim - 1 ? p->rope_dim - 1 : (int)hi;
}

void ref_rope_freqs(const rope_params *p, float *freqs)
{
    int half = p->rope_dim / 2;
    for (int j = 0; j < half; j++) {
        float e = (float)(2 * j) / (float)p->rope_dim;
        freqs[j] = 1.0f / (float)pow(p->base, (double)e);
    }
    if (p->original_seq_len <= 0 || p->factor <= 0)
        return;
    int low, high;
    ref_rope_yarn_range(p, &low, &high);
    float span = (float)high - (float)low;
    if (span < 0.001f)
        span = 0.001f;
    float factor = (float)p->factor;
    for (int j = 0; j < half; j++) {
        float ramp = ((float)j - (float)low) / span;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float smooth = 1.0f - ramp;
        float a = (freqs[j] / factor) * (1.0f - smooth);
        float b = freqs[j] * smooth;
        freqs[j] = a + b;
    }
}

void ref_rope_table(const rope_params *p, int64_t pos0, int64_t n_pos, float *cos_sin)
{
    int half = p->rope_dim / 2;
    float *freqs = malloc(sizeof(float) * (size_t)half);
    if (!freqs)
        abort();
    ref_rope_freqs(p, freqs);
    for (int64_t i = 0; i < n_pos; i++) {
        float pos = (float)(pos0 + i);
        for (int j = 0; j < half; j++) {
            float angle = pos * freqs[j];
            cos_sin[(i * half + j) * 2 + 0] = (float)cos((double)angle);
            cos_sin[(i * half + j) * 2 + 1] = (float)sin((double)angle);
        }
    }
    free(freqs);
}

void ref_rope_apply_bf16(uint16_t *x, int rows, int heads, int head_dim, int rope_dim, const int32_t *pos,
                         const float *cos_sin, int inverse)
{
    int half = rope_dim / 2;
    for (int r = 0; r < rows; r++) {
        const float *t = cos_sin + (int64_t)pos[r] * half * 2;
        for (int h = 0; h < heads; h++) {
            uint16_t *v = x + ((int64_t)r * heads + h) * head_dim + (head_dim - rope_dim);
            for (int j = 0; j < half; j++) {
                float a = bf16_to_f32(v[2 * j]), b = bf16_to_f32(v[2 * j + 1]);
                float c = t[2 * j], s = inverse ? -t[2 * j + 1] : t[2 * j + 1];
                float re = a * c - b * s;
                float im = a * s + b * c;
                v[2 * j] = f32_to_bf16(re);
                v[2 * j + 1] = f32_to_bf16(im);
            }
        }
    }
}
