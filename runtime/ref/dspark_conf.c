#include "runtime/ref/dspark_conf.h"
#include "runtime/common/numerics.h"

float ref_dspark_conf(const uint16_t *w, const uint16_t *u, int d, const uint16_t *e, int R)
{
    float acc = 0.0f;
    for (int j = 0; j < d; j++)
        acc += bf16_to_f32(w[j]) * bf16_to_f32(u[j]);
    for (int r = 0; r < R; r++)
        acc += bf16_to_f32(w[d + r]) * bf16_to_f32(e[r]);
    return acc;
}

void ref_markov_bias(const uint16_t *e, const uint16_t *head_t, int R, int V, float *bias)
{
    /* r outer, v inner: the loop vectorises across v, each bias[v] still summed over r in order */
    for (int v = 0; v < V; v++)
        bias[v] = 0.0f;
    for (int r = 0; r < R; r++) {
        float er = bf16_to_f32(e[r]);
        const uint16_t *hr = head_t + (int64_t)r * V;
        for (int v = 0; v < V; v++)
            bias[v] += er * bf16_to_f32(hr[v]);
    }
}
