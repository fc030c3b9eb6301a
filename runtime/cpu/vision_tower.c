/* The vision tower and aligner (vision.md §3) in plain loops. Activations live in fp32 buffers; with
 * VISION_BF16 each value is rounded to bf16 exactly where REF's bf16 modules round (§3.7): every linear's
 * output (fp32 accumulation, the bias added in fp32, one rounding), the norms, RoPE, the attention output,
 * both residual adds, silu and its product, GELU. Scores and softmax are fp32 in both precisions; with
 * VISION_BF16 the probabilities are rounded to bf16 before P·V as torch's CPU attention does (§3.4: only
 * "fp32 softmax, bf16 output" is normative, the rest is how close to REF this gets). */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/vision_tower.h"
#include "runtime/model/vision_span.h"
#include "runtime/ref/vision_attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline float rnd(vision_precision p, float x)
{
    return p == VISION_BF16 ? bf16_round(x) : x;
}

/* y[i][o] = Σ_k x[i][k]·W[o][k] + b[o] for n rows (b may be NULL), accumulated in fp32 in k order. */
static void linear(vision_precision p, const float *x, int n, int K, const uint16_t *W, const uint16_t *b, int N,
                   float *y)
{
    float *wr = malloc(sizeof(float) * (size_t)K);
    for (int o = 0; o < N; o++) {
        const uint16_t *row = W + (size_t)o * K;
        if (wr)
            for (int k = 0; k < K; k++)
                wr[k] = bf16_to_f32(row[k]);
        float bias = b ? bf16_to_f32(b[o]) : 0.0f;
        for (int i = 0; i < n; i++) {
            const float *xi = x + (size_t)i * K;
            float acc = 0.0f;
            if (wr)
                for (int k = 0; k < K; k++)
                    acc += xi[k] * wr[k];
            else
                for (int k = 0; k < K; k++)
                    acc += xi[k] * bf16_to_f32(row[k]);
            y[(size_t)i * N + o] = rnd(p, acc + bias);
        }
    }
    free(wr);
}

/* The vision RMSNorm (§3.2): eps 1e-6 (REF never passes the config's), fp32 weight multiplied last. */
static void rmsnorm(vision_precision p, const float *x, int n, int D, const float *w, float *y)
{
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * D;
        float ss = 0.0f;
        for (int k = 0; k < D; k++)
            ss += xi[k] * xi[k];
        float r = 1.0f / sqrtf(ss / (float)D + 1e-6f);
        for (int k = 0; k < D; k++)
            y[(size_t)i * D + k] = rnd(p, w[k] * (xi[k] * r));
    }
}

/* cos/sin [N][R] of §3.3: R = head_dim / 2 angles per patch, the first R/2 by its row, the rest by its column,
 * with f_i = 1 / θ^(2i/R) (fp32 exponent, power and reciprocal, as REF forms them). */
static int rope_table(const model_config *c, int nh, int nw, float **cs, float **sn)
{
    int R = c->vision_dim / c->vision_n_heads / 2, half = R / 2;
    size_t N = (size_t)nh * nw;
    float f[512];
    if (half > 512)
        return dsk_err("vision RoPE: %d frequencies per axis exceed 512", half);
    *cs = dsk_malloc(sizeof(float) * N * R);
    *sn = dsk_malloc(sizeof(float) * N * R);
    if (!*cs || !*sn)
        return -1;
    for (int i = 0; i < half; i++)
        f[i] = 1.0f / powf((float)c->vision_rope_theta, (float)(2 * i) / (float)R);
    for (int row = 0; row < nh; row++)
        for (int col = 0; col < nw; col++) {
            size_t at = ((size_t)row * nw + col) * R;
            for (int j = 0; j < R; j++) {
                float a = j < half ? (float)row * f[j] : (float)col * f[j - half];
                (*cs)[at + j] = cosf(a);
                (*sn)[at + j] = sinf(a);
            }
        }
    return 0;
}

/* Rotate-half RoPE over whole heads (dim k pairs with k + R) of n rows of `heads` vectors, in place. */
static void rope(vision_precision p, float *x, size_t stride, int N, int heads, int hd, const float *cs,
                 const float *sn)
{
    int R = hd / 2;
    for (int i = 0; i < N; i++)
        for (int h = 0; h < heads; h++) {
            float *v = x + (size_t)i * stride + (size_t)h * hd;
            const float *c = cs + (size_t)i * R, *s = sn + (size_t)i * R;
            for (int k = 0; k < R; k++) {
                float u = v[k], w = v[k + R];
                float a = u * c[k], b = w * s[k], e = w * c[k], g = u * s[k];
                v[k] = rnd(p, a - b);
                v[k + R] = rnd(p, e + g);
            }
        }
}

static void residual(vision_precision p, float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rnd(p, x[i] + y[i]);
}

int vision_tower_run(const model_config *c, const vision_weights *w, vision_precision prec, const uint16_t *patches,
                     int n_vit_h, int n_vit_w, float *features, vision_taps *taps)
{
    int D = c->vision_dim, H = c->vision_n_heads, hd = D / H, I = c->vision_inter_dim, P = c->vision_patch_size;
    int r = c->vision_downsample_ratio, K0 = 3 * P * P, dim = c->dim;
    int lh = vision_cells(n_vit_h, r), lw = vision_cells(n_vit_w, r), cellw = r * r * D;
    if (c->vision_n_layers <= 0)
        return dsk_err("the model has no vision tower (vision_config.num_hidden_layers is 0)");
    if (n_vit_h < 1 || n_vit_w < 1)
        return dsk_err("vision tower: an empty %d x %d patch grid", n_vit_h, n_vit_w);
    size_t N = (size_t)n_vit_h * n_vit_w, L = (size_t)lh * lw;
    float *x = dsk_malloc(sizeof(float) * N * (K0 > D ? K0 : D)), *xn = dsk_malloc(sizeof(float) * N * D);
    float *qkv = dsk_malloc(sizeof(float) * N * 3 * D), *o = dsk_malloc(sizeof(float) * N * D);
    float *hid = dsk_malloc(sizeof(float) * N * 2 * I), *act = dsk_malloc(sizeof(float) * N * I);
    float *cells = dsk_malloc(sizeof(float) * L * cellw), *a1 = dsk_malloc(sizeof(float) * L * dim);
    float *cs = NULL, *sn = NULL;
    int rc = -1;
    if (!x || !xn || !qkv || !o || !hid || !act || !cells || !a1 || rope_table(c, n_vit_h, n_vit_w, &cs, &sn))
        goto done;
    /* patch embedding: the bf16 patches widened exactly */
    for (size_t i = 0; i < N * K0; i++)
        x[i] = bf16_to_f32(patches[i]);
    linear(prec, x, (int)N, K0, w->patch_w, w->patch_b, D, xn);
    memcpy(x, xn, sizeof(float) * N * D);
    if (taps && taps->embed)
        memcpy(taps->embed, x, sizeof(float) * N * D);
    for (int l = 0; l < c->vision_n_layers; l++) {
        const vision_block_weights *b = &w->blocks[l];
        rmsnorm(prec, x, (int)N, D, b->norm1, xn);
        linear(prec, xn, (int)N, D, b->wqkv, b->bqkv, 3 * D, qkv);
        rope(prec, qkv, 3 * (size_t)D, (int)N, H, hd, cs, sn);     /* q */
        rope(prec, qkv + D, 3 * (size_t)D, (int)N, H, hd, cs, sn); /* k */
        if (ref_vision_attn(qkv, (int)N, H, hd, 0, (int)N, prec == VISION_BF16, o))
            goto done;
        linear(prec, o, (int)N, D, b->wo, b->bo, D, xn);
        residual(prec, x, xn, N * D);
        rmsnorm(prec, x, (int)N, D, b->norm2, xn);
        linear(prec, xn, (int)N, D, b->w1, NULL, 2 * I, hid);
        for (size_t i = 0; i < N; i++)
            for (int k = 0; k < I; k++) {
                float g = hid[i * 2 * I + k], u = hid[i * 2 * I + I + k];
                act[i * I + k] = rnd(prec, rnd(prec, g / (1.0f + expf(-g))) * u);
            }
        linear(prec, act, (int)N, I, b->w2, NULL, D, xn);
        residual(prec, x, xn, N * D);
    }
    rmsnorm(prec, x, (int)N, D, w->norm, xn);
    if (taps && taps->vit)
        memcpy(taps->vit, xn, sizeof(float) * N * D);
    /* space-to-depth (§3.6): cell (bi, bj), element ch·r² + ki·r + kj = grid[r·bi + ki][r·bj + kj][ch], zeros
     * past the grid's bottom and right edges */
    for (int bi = 0; bi < lh; bi++)
        for (int bj = 0; bj < lw; bj++) {
            float *cell = cells + ((size_t)bi * lw + bj) * cellw;
            for (int ki = 0; ki < r; ki++)
                for (int kj = 0; kj < r; kj++) {
                    int gy = r * bi + ki, gx = r * bj + kj, inside = gy < n_vit_h && gx < n_vit_w;
                    const float *g = xn + ((size_t)gy * n_vit_w + gx) * D;
                    for (int ch = 0; ch < D; ch++)
                        cell[(size_t)ch * r * r + ki * r + kj] = inside ? g[ch] : 0.0f;
                }
        }
    linear(prec, cells, (int)L, cellw, w->al_w1, w->al_b1, dim, a1);
    for (size_t i = 0; i < L * dim; i++) /* exact erf GELU */
        a1[i] = rnd(prec, 0.5f * a1[i] * (1.0f + erff(a1[i] * 0.70710678118654752440f)));
    linear(prec, a1, (int)L, dim, w->al_w2, w->al_b2, dim, features);
    rc = 0;
done:
    if (rc)
        dsk_err_ctx("vision tower on a %d x %d patch grid", n_vit_h, n_vit_w);
    free(x);
    free(xn);
    free(qkv);
    free(o);
    free(hid);
    free(act);
    free(cells);
    free(a1);
    free(cs);
    free(sn);
    return rc;
}

void vision_span_rows(const model_config *c, const vision_weights *w, const float *features, int n_vit_h,
                      int n_vit_w, uint16_t *rows)
{
    int r = c->vision_downsample_ratio, d = c->dim, lh = vision_cells(n_vit_h, r), lw = vision_cells(n_vit_w, r);
    int64_t n = vision_span_positions(r, n_vit_h, n_vit_w);
    for (int64_t i = 0; i < n; i++) {
        int64_t cell;
        int t = vision_span_slot(lh, lw, i, &cell);
        uint16_t *out = rows + i * d;
        if (t == VISION_IMAGE)
            for (int k = 0; k < d; k++)
                out[k] = f32_to_bf16(features[cell * d + k]);
        else
            memcpy(out, t == VISION_START ? w->start : t == VISION_END ? w->end : w->newline, sizeof(uint16_t) * d);
    }
}
