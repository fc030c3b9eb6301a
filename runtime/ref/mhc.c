/* Manifold-constrained hyper-connections (model.md §3.4): the coefficients of one sublayer, Sinkhorn,
 * and the pre (streams -> sublayer input) and post (sublayer output -> streams) maps. All fp32. */
#include "runtime/common/numerics.h"
#include "runtime/ref/mhc.h"

#include <math.h>

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void hc_sinkhorn(float *comb, int hc, int iters, float eps)
{
    /* row softmax (the first row pass; its denominator has no eps), then + eps */
    for (int i = 0; i < hc; i++) {
        float *r = comb + i * hc, mx = r[0], sum = 0.0f;
        for (int j = 1; j < hc; j++)
            mx = r[j] > mx ? r[j] : mx;
        for (int j = 0; j < hc; j++) {
            r[j] = expf(r[j] - mx);
            sum += r[j];
        }
        for (int j = 0; j < hc; j++)
            r[j] = r[j] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int i = 0; i < hc; i++) {
                float sum = 0.0f;
                for (int j = 0; j < hc; j++)
                    sum += comb[i * hc + j];
                for (int j = 0; j < hc; j++)
                    comb[i * hc + j] /= sum + eps;
            }
        for (int j = 0; j < hc; j++) {
            float sum = 0.0f;
            for (int i = 0; i < hc; i++)
                sum += comb[i * hc + j];
            for (int i = 0; i < hc; i++)
                comb[i * hc + j] /= sum + eps;
        }
    }
}

void hc_mixes(const model_config *c, const float *fn, const float *base, const float *scale, const uint16_t *x,
              hc_coeffs *out)
{
    int hc = c->hc_mult, n = hc * c->dim, nmix = model_hc_mix_dim(c);
    float ss = 0.0f, mix[(2 + 16) * 16];
    for (int i = 0; i < n; i++) {
        float v = bf16_to_f32(x[i]);
        ss += v * v;
    }
    float r = 1.0f / sqrtf(ss / (float)n + c->norm_eps);
    for (int k = 0; k < nmix; k++) {
        const float *w = fn + (int64_t)k * n;
        float acc = 0.0f;
        for (int i = 0; i < n; i++)
            acc += w[i] * bf16_to_f32(x[i]);
        mix[k] = acc * r;
    }
    for (int i = 0; i < hc; i++) {
        out->pre[i] = sigmoidf(mix[i] * scale[0] + base[i]) + c->hc_eps;
        out->post[i] = 2.0f * sigmoidf(mix[hc + i] * scale[1] + base[hc + i]);
    }
    for (int i = 0; i < hc * hc; i++)
        out->comb[i] = mix[2 * hc + i] * scale[2] + base[2 * hc + i];
    hc_sinkhorn(out->comb, hc, c->hc_sinkhorn_iters, c->hc_eps);
}

void hc_pre(const uint16_t *x, const float *w, int hc, int d, uint16_t *y)
{
    for (int k = 0; k < d; k++) {
        float acc = w[0] * bf16_to_f32(x[k]);
        for (int i = 1; i < hc; i++)
            acc += w[i] * bf16_to_f32(x[(int64_t)i * d + k]);
        y[k] = f32_to_bf16(acc);
    }
}

void hc_post(const uint16_t *y, const uint16_t *x, const hc_coeffs *k, int hc, int d, uint16_t *out)
{
    for (int j = 0; j < hc; j++)
        for (int e = 0; e < d; e++) {
            float acc = k->comb[j] * bf16_to_f32(x[e]);
            for (int i = 1; i < hc; i++)
                acc += k->comb[i * hc + j] * bf16_to_f32(x[(int64_t)i * d + e]);
            out[(int64_t)j * d + e] = f32_to_bf16(k->post[j] * bf16_to_f32(y[e]) + acc);
        }
}

void hc_coeffs_pack(const hc_coeffs *k, int hc, float *row)
{
    for (int i = 0; i < hc; i++) {
        row[i] = k->pre[i];
        row[hc + i] = k->post[i];
    }
    for (int i = 0; i < hc * hc; i++)
        row[2 * hc + i] = k->comb[i];
}

void hc_coeffs_unpack(const float *row, int hc, hc_coeffs *k)
{
    for (int i = 0; i < hc; i++) {
        k->pre[i] = row[i];
        k->post[i] = row[hc + i];
    }
    for (int i = 0; i < hc * hc; i++)
        k->comb[i] = row[2 * hc + i];
}
