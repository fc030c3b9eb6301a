#include "runtime/ref/ref_ops.h"
#include "runtime/common/numerics.h"

#include <math.h>
#include <stdlib.h>

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

/* a ranks before b: larger key first, NaN last, then lower index first */
static int key_before(float ka, int ia, float kb, int ib)
{
    int na = isnan(ka), nb = isnan(kb);
    if (na != nb)
        return nb;
    if (!na && ka != kb)
        return ka > kb;
    return ia < ib;
}

typedef struct {
    float key;
    int idx;
} keyed;

static int cmp_rank(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->idx == y->idx)
        return 0;
    return key_before(x->key, x->idx, y->key, y->idx) ? -1 : 1;
}

static int cmp_idx(const void *a, const void *b)
{
    int x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void ref_topk(const float *score, const float *bias, int N, int k, int32_t *idx, float *val)
{
    keyed *all = malloc(sizeof(keyed) * (size_t)(N ? N : 1));
    if (!all)
        abort();
    for (int i = 0; i < N; i++) {
        all[i].key = bias ? score[i] + bias[i] : score[i];
        all[i].idx = i;
    }
    qsort(all, (size_t)N, sizeof(keyed), cmp_rank);
    for (int i = 0; i < k; i++)
        idx[i] = all[i].idx;
    qsort(idx, (size_t)k, sizeof(int32_t), cmp_idx);
    for (int i = 0; i < k; i++)
        val[i] = score[idx[i]];
    free(all);
}
