/* MoE of one block (model.md §3.7): sqrtsoftplus scores, biased top-k selection, unbiased weights,
 * clamped SwiGLU experts accumulated in ascending expert id, then the shared expert. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/model/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* sqrt(softplus(x)) with PyTorch's softplus (linear above 20). */
float moe_sqrtsoftplus(float x)
{
    return sqrtf(x > 20.0f ? x : log1pf(expf(x)));
}

/* Routing of one row: the selected experts in ascending id and their weights route_scale·s/Σs, the sum
 * taken in selection rank order (biased score descending, ties to the lower id) as REF's sorted top-k
 * gives it. Returns how many were selected. */
int moe_route(const model_config *c, const block_weights *b, const float *logits, int32_t *ids, float *weights)
{
    int E = b->n_experts, k = b->n_active;
    float score[4096], val[64];
    int32_t rank[64];
    for (int e = 0; e < E; e++)
        score[e] = moe_sqrtsoftplus(logits[e]);
    ref_topk(score, b->gate_bias, E, k, ids, val);
    /* rank order for the denominator */
    for (int i = 0; i < k; i++)
        rank[i] = i;
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0; j--) {
            int x = rank[j - 1], y = rank[j];
            float kx = score[ids[x]] + b->gate_bias[ids[x]], ky = score[ids[y]] + b->gate_bias[ids[y]];
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
        weights[i] = val[i] / den * c->route_scale;
    return k;
}

/* One expert on one row: out = bf16(W2 bf16(w · silu(min(g, L)) · clamp(u, ±L))), g, u the bf16 W1, W3
 * outputs; weight < 0 means the shared expert (no weight). */
static int expert_row(const model_config *c, const model_linear *w1, const model_linear *w3, const model_linear *w2,
                      const uint16_t *x, float weight, uint16_t *h_buf, uint16_t *g, uint16_t *u, float *y)
{
    int I = (int)w1->q.n;
    float lim = c->swiglu_limit;
    if (linear_bf16(w1, x, 1, g) || linear_bf16(w3, x, 1, u))
        return -1;
    for (int i = 0; i < I; i++) {
        float gv = bf16_to_f32(g[i]), uv = bf16_to_f32(u[i]);
        gv = gv < lim ? gv : lim;
        uv = uv < -lim ? -lim : uv > lim ? lim : uv;
        float h = gv / (1.0f + expf(-gv)) * uv;
        if (weight >= 0.0f)
            h = weight * h;
        h_buf[i] = f32_to_bf16(h);
    }
    return linear_f32(w2, h_buf, 1, y);
}

int moe_rows(const model *m, const block_weights *b, const uint16_t *x, int n, uint16_t *out)
{
    const model_config *c = &m->cfg;
    int d = c->dim, I = c->moe_inter_dim, E = b->n_experts;
    float *logits = dsk_malloc(sizeof(float) * (size_t)n * E);
    float *acc = dsk_malloc(sizeof(float) * d), *y = dsk_malloc(sizeof(float) * d);
    uint16_t *h = dsk_malloc(sizeof(uint16_t) * 3 * (size_t)I);
    int rc = -1;
    if (!logits || !acc || !y || !h)
        goto done;
    if (E > 4096 || b->n_active > 64) {
        dsk_err("MoE: %d experts / %d active exceed the CPU model's limits (4096 / 64)", E, b->n_active);
        goto done;
    }
    ref_rowmm_bf16(x, b->gate, logits, n, d, E);
    for (int i = 0; i < n; i++) {
        const uint16_t *xr = x + (int64_t)i * d;
        int32_t ids[64];
        float wts[64];
        int k = moe_route(c, b, logits + (int64_t)i * E, ids, wts);
        memset(acc, 0, sizeof(float) * d);
        for (int e = 0; e < k; e++) { /* ascending expert id */
            if (expert_row(c, &b->w1[ids[e]], &b->w3[ids[e]], &b->w2[ids[e]], xr, wts[e], h, h + I, h + 2 * I, y))
                goto done;
            for (int t = 0; t < d; t++)
                acc[t] += bf16_round(y[t]);
        }
        if (expert_row(c, &b->sh_w1, &b->sh_w3, &b->sh_w2, xr, -1.0f, h, h + I, h + 2 * I, y))
            goto done;
        for (int t = 0; t < d; t++)
            out[(int64_t)i * d + t] = f32_to_bf16(acc[t] + bf16_round(y[t]));
    }
    rc = 0;
done:
    free(logits);
    free(acc);
    free(y);
    free(h);
    return rc;
}
