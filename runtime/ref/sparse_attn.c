#include "runtime/ref/sparse_attn.h"
#include "runtime/common/numerics.h"

#include <math.h>

int ref_attn_list(const ref_attn_keys *src, int64_t win_lo, int64_t win_hi, const int32_t *sel, int nsel,
                  const uint16_t **keys)
{
    int n = 0;
    for (int64_t p = win_lo; p <= win_hi; p++)
        keys[n++] = p >= src->call_pos0 ? src->call + (p - src->call_pos0) * src->hd
                                        : src->ring + (p % src->ring_slots) * src->hd;
    for (int j = 0; j < nsel; j++)
        keys[n++] = src->rows2 + (int64_t)(sel ? sel[j] : j) * src->hd;
    return n;
}

void sparse_attention_row(const uint16_t *q, int heads, int hd, const uint16_t *const *keys, int n_keys,
                          const float *sink, uint16_t *out)
{
    const float scale = (float)(1.0 / sqrt((double)hd));
    float num[1024], s[64], p[64];
    for (int h = 0; h < heads; h++) {
        const uint16_t *qh = q + (int64_t)h * hd;
        float run_max = -1e30f, den = 0.0f;
        for (int d = 0; d < hd; d++)
            num[d] = 0.0f;
        /* online softmax over blocks of 64 entries of the compacted list, in list order */
        for (int b0 = 0; b0 < n_keys; b0 += 64) {
            int nb = n_keys - b0 < 64 ? n_keys - b0 : 64;
            float bmax = run_max;
            for (int i = 0; i < nb; i++) {
                const uint16_t *k = keys[b0 + i];
                float acc = 0.0f;
                for (int d = 0; d < hd; d++)
                    acc += bf16_to_f32(qh[d]) * bf16_to_f32(k[d]);
                s[i] = acc * scale;
                bmax = s[i] > bmax ? s[i] : bmax;
            }
            float alpha = expf(run_max - bmax), bsum = 0.0f;
            for (int i = 0; i < nb; i++) {
                p[i] = expf(s[i] - bmax);
                bsum += p[i];
                p[i] = bf16_round(p[i]); /* the numerator multiplies K by bf16 probabilities */
            }
            den = den * alpha + bsum;
            for (int d = 0; d < hd; d++) {
                float acc = num[d] * alpha;
                for (int i = 0; i < nb; i++)
                    acc += p[i] * bf16_to_f32(keys[b0 + i][d]);
                num[d] = acc;
            }
            run_max = bmax;
        }
        if (n_keys == 0) {
            for (int d = 0; d < hd; d++)
                out[(int64_t)h * hd + d] = 0;
            continue;
        }
        den += expf(sink[h] - run_max);
        for (int d = 0; d < hd; d++)
            out[(int64_t)h * hd + d] = f32_to_bf16(num[d] / den);
    }
}
