#include "runtime/ref/index_score.h"
#include "runtime/common/numerics.h"

#include <math.h>

void ref_index_score(const uint16_t *q, const float *w, int nh, int ihd, const uint16_t *keys, int64_t reach,
                     float *score)
{
    for (int64_t j = 0; j < reach; j++) {
        const uint16_t *kj = keys + j * ihd;
        float sum = 0.0f;
        for (int h = 0; h < nh; h++) {
            float dot = 0.0f;
            for (int d = 0; d < ihd; d++)
                dot += bf16_to_f32(q[h * ihd + d]) * bf16_to_f32(kj[d]);
            dot = bf16_round(dot);
            sum += bf16_round((dot > 0.0f ? dot : 0.0f) * w[h]);
        }
        score[j] = bf16_round(sum);
    }
}

void ref_index_score_mask(float *score, int64_t reach, int block, const uint32_t *bitmap)
{
    for (int64_t j = 0; j < reach; j++) {
        int64_t b = j / block;
        if (!(bitmap[b >> 5] >> (b & 31) & 1u))
            score[j] = -INFINITY;
    }
}
