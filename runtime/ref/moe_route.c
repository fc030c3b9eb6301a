#include "runtime/ref/moe_route.h"
#include "runtime/ref/topk.h"

#include <math.h>

/* sqrt(softplus(x)) with PyTorch's softplus (linear above 20). */
float moe_sqrtsoftplus(float x)
{
    return sqrtf(x > 20.0f ? x : log1pf(expf(x)));
}

/* Routing of one row: the selected experts in ascending id and their weights route_scale·s/Σs, the sum
 * taken in selection rank order (biased score descending, ties to the lower id) as REF's sorted top-k
 * gives it. Returns how many were selected. */
int moe_route(float route_scale, int E, int k, const float *bias, const float *logits, int32_t *ids, float *weights)
{
    float score[4096];
    for (int e = 0; e < E; e++)
        score[e] = moe_sqrtsoftplus(logits[e]);
    return moe_route_scores(route_scale, E, k, bias, score, ids, weights);
}

int moe_route_scores(float route_scale, int E, int k, const float *bias, const float *score, int32_t *ids,
                     float *weights)
{
    float val[64];
    int32_t rank[64];
    ref_topk(score, bias, E, k, ids, val);
    /* rank order for the denominator */
    for (int i = 0; i < k; i++)
        rank[i] = i;
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0; j--) {
            int x = rank[j - 1], y = rank[j];
            float kx = score[ids[x]] + bias[ids[x]], ky = score[ids[y]] + bias[ids[y]];
            if (ky > kx || (ky == kx && ids[y] < ids[x])) {
                rank[j - 1] = y;
                rank[j] = x;
            }
        }
    float sum = 0.0f;
    for (int i = 0; i < k; i++)
        sum += val[rank[i]];
    float den = sum + 1e-20f;
    for (int i = 0; i < k; i++)
        weights[i] = val[i] / den * route_scale;
    return k;
}
