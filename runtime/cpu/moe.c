/* MoE of one block (model.md §3.7): sqrtsoftplus scores, biased top-k selection, unbiased weights,
 * clamped SwiGLU experts accumulated in ascending expert id, then the shared expert. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One expert on the rows it was chosen for: y = W2 bf16(w · silu(min(g, L)) · clamp(u, ±L)) per row, with
 * g, u the bf16 W1, W3 outputs; w = NULL for the shared expert (no weight). Rows are independent, so
 * running them together (each weight decoded once) gives every row the bits it would get alone. */
static int expert_rows(const model_config *c, const cpu_linear *w1, const cpu_linear *w3, const cpu_linear *w2,
                       const uint16_t *x, const float *w, int n, float *y)
{
    int I = (int)w1->q.n;
    float lim = c->swiglu_limit;
    uint16_t *g = dsk_malloc(sizeof(uint16_t) * 3 * (size_t)n * I), *u = g + (size_t)n * I, *h = u + (size_t)n * I;
    int rc = -1;
    if (!g || linear_bf16(w1, x, n, g) || linear_bf16(w3, x, n, u))
        goto done;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < I; i++) {
            int64_t t = (int64_t)r * I + i;
            float gv = bf16_to_f32(g[t]), uv = bf16_to_f32(u[t]);
            gv = gv < lim ? gv : lim;
            uv = uv < -lim ? -lim : uv > lim ? lim : uv;
            float hv = gv / (1.0f + expf(-gv)) * uv;
            if (w)
                hv = w[r] * hv;
            h[t] = f32_to_bf16(hv);
        }
    rc = linear_f32(w2, h, n, y);
done:
    free(g);
    return rc;
}

int moe_rows(const cpu_model *m, const block_weights *b, const uint16_t *x, int n, const uint8_t *image,
             uint16_t *out)
{
    const model_config *c = &m->cfg;
    int d = c->dim, E = b->n_experts, K = b->n_active;
    float *logits = dsk_malloc(sizeof(float) * (size_t)n * E);
    int32_t *ids = dsk_malloc(sizeof(int32_t) * (size_t)n * K), *sel = dsk_malloc(sizeof(int32_t) * (size_t)n);
    float *wts = dsk_malloc(sizeof(float) * (size_t)n * K), *wsel = dsk_malloc(sizeof(float) * (size_t)n);
    float *ys = dsk_malloc(sizeof(float) * (size_t)n * K * d), *y = dsk_malloc(sizeof(float) * (size_t)n * d);
    uint16_t *xs = dsk_malloc(sizeof(uint16_t) * (size_t)n * d);
    int rc = -1;
    if (!logits || !ids || !sel || !wts || !wsel || !ys || !y || !xs)
        goto done;
    if (E > 4096 || K > 64) {
        dsk_err("MoE: %d experts / %d active exceed the CPU model's limits (4096 / 64)", E, K);
        goto done;
    }
    ref_rowmm_bf16(x, b->gate, logits, n, d, E);
    if (m->layer_hook && b >= m->blocks && b < m->blocks + c->n_layers)
        m->layer_hook(m->layer_ctx, (int)(b - m->blocks), CPU_HOOK_ROUTE, NULL, logits, n);
    for (int i = 0; i < n; i++) {
        const float *bias = image && image[i] && b->gate_bias_vl ? b->gate_bias_vl : b->gate_bias;
        moe_route(c->route_scale, b->n_experts, b->n_active, bias, logits + (int64_t)i * E,
                  ids + (int64_t)i * K, wts + (int64_t)i * K);
        for (int j = 0; m->expert_hits && j < K; j++)
            m->expert_hits[(b - m->blocks) * 4096 + ids[(int64_t)i * K + j]]++;
    }
    /* each of this rank's experts once, on the rows that chose it; outputs land in their (row, slot) */
    cpu_split sp = cpu_rank_split(m, b);
    for (int e = sp.e0; e < sp.e1; e++) {
        int cnt = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < K; j++)
                if (ids[(int64_t)i * K + j] == e) {
                    sel[cnt] = i * K + j;
                    wsel[cnt] = wts[(int64_t)i * K + j];
                    memcpy(xs + (int64_t)cnt * d, x + (int64_t)i * d, sizeof(uint16_t) * d);
                    cnt++;
                }
        if (!cnt)
            continue;
        if (expert_rows(c, &b->w1[e], &b->w3[e], &b->w2[e], xs, wsel, cnt, y))
            goto done;
        for (int r = 0; r < cnt; r++)
            memcpy(ys + (int64_t)sel[r] * d, y + (int64_t)r * d, sizeof(float) * d);
    }
    /* fp32 sum of the bf16 expert outputs in ascending expert id (slots are in id order): this rank's
     * experts, then the ranks' partials in rank order; the shared expert (every rank runs it) last */
    for (int i = 0; i < n; i++)
        for (int t = 0; t < d; t++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) {
                int32_t e = ids[(int64_t)i * K + j];
                if (e >= sp.e0 && e < sp.e1)
                    acc += bf16_round(ys[((int64_t)i * K + j) * d + t]);
            }
            y[(int64_t)i * d + t] = acc;
        }
    if (xchg_sum(m->xchg, y, (size_t)n * d) ||
        expert_rows(c, &b->sh_w1, &b->sh_w3, &b->sh_w2, x, NULL, n, ys))
        goto done;
    for (int64_t i = 0; i < (int64_t)n * d; i++)
        out[i] = f32_to_bf16(y[i] + bf16_round(ys[i]));
    rc = 0;
done:
    free(logits);
    free(ids);
    free(sel);
    free(wts);
    free(wsel);
    free(ys);
    free(y);
    free(xs);
    return rc;
}
