#include "runtime/ref/cand_blocks.h"
#include "runtime/ref/topk.h"

#include <math.h>
#include <string.h>

int64_t ref_cand_block_scores(const float *score, int64_t reach, int block, float *bs)
{
    int64_t nb = (reach + block - 1) / block;
    for (int64_t k = 0; k < nb; k++) {
        float mx = -INFINITY;
        for (int64_t j = k * block; j < (k + 1) * block && j < reach; j++)
            mx = score[j] > mx ? score[j] : mx;
        bs[k] = mx;
    }
    if (reach > 0) /* c = 0 pins nothing (model.md §8.10) */
        bs[(reach - 1) / block] = INFINITY;
    return nb;
}

int ref_cand_blocks(const float *score, int64_t reach, int block, int cap, int32_t *kept, float *bs, float *val)
{
    int nb = (int)ref_cand_block_scores(score, reach, block, bs);
    int k = nb < cap ? nb : cap;
    ref_topk(bs, NULL, nb, k, kept, val);
    int n = 0;
    for (int i = 0; i < k; i++)
        if (val[i] > -INFINITY)
            kept[n++] = kept[i];
    return n;
}

void ref_cand_bitmap(const int32_t *kept, int n, uint32_t *bitmap, int64_t words)
{
    memset(bitmap, 0, sizeof(uint32_t) * (size_t)words);
    for (int i = 0; i < n; i++)
        bitmap[kept[i] >> 5] |= 1u << (kept[i] & 31);
}
