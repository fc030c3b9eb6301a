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
#include "runtime/ref/vision_glue.h"
#include "runtime/ref/vision_mm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    float *act = dsk_malloc(sizeof(float) * N * I);
    float *cells = dsk_malloc(sizeof(float) * L * cellw), *a1 = dsk_malloc(sizeof(float) * L * dim);
    float *cs = NULL, *sn = NULL;
    int rc = -1, bf = prec == VISION_BF16;
    if (!x || !xn || !qkv || !o || !act || !cells || !a1 || ref_vision_rope_table(hd, (float)c->vision_rope_theta, n_vit_h, n_vit_w, &cs, &sn))
        goto done;
    /* patch embedding: the bf16 patches widened exactly */
    for (size_t i = 0; i < N * K0; i++)
        x[i] = bf16_to_f32(patches[i]);
    if (ref_vision_mm(bf, x, (int)N, K0, w->patch_w, w->patch_b, D, VISION_MM_BIAS, xn))
        goto done;
    memcpy(x, xn, sizeof(float) * N * D);
    if (taps && taps->embed)
        memcpy(taps->embed, x, sizeof(float) * N * D);
    for (int l = 0; l < c->vision_n_layers; l++) {
        const vision_block_weights *b = &w->blocks[l];
        ref_vision_rmsnorm(bf, x, (int)N, D, b->norm1, xn);
        if (ref_vision_mm(bf, xn, (int)N, D, b->wqkv, b->bqkv, 3 * D, VISION_MM_BIAS, qkv))
            goto done;
        ref_vision_rope(bf, qkv, 3 * (size_t)D, (int)N, H, hd, cs, sn);     /* q */
        ref_vision_rope(bf, qkv + D, 3 * (size_t)D, (int)N, H, hd, cs, sn); /* k */
        if (ref_vision_attn(qkv, (int)N, H, hd, 0, (int)N, bf, o))
            goto done;
        if (ref_vision_mm(bf, o, (int)N, D, b->wo, b->bo, D, VISION_MM_RESIDUAL, x))
            goto done;
        ref_vision_rmsnorm(bf, x, (int)N, D, b->norm2, xn);
        if (ref_vision_mm(bf, xn, (int)N, D, b->w1, NULL, 2 * I, VISION_MM_SWIGLU, act) ||
            ref_vision_mm(bf, act, (int)N, I, b->w2, NULL, D, VISION_MM_RESIDUAL, x))
            goto done;
    }
    ref_vision_rmsnorm(bf, x, (int)N, D, w->norm, xn);
    if (taps && taps->vit)
        memcpy(taps->vit, xn, sizeof(float) * N * D);
    ref_vision_s2d(xn, n_vit_h, n_vit_w, D, r, cells);
    if (ref_vision_mm(bf, cells, (int)L, cellw, w->al_w1, w->al_b1, dim, VISION_MM_GELU, a1) ||
        ref_vision_mm(bf, a1, (int)L, dim, w->al_w2, w->al_b2, dim, VISION_MM_BIAS, features))
        goto done;
    rc = 0;
done:
    if (rc)
        dsk_err_ctx("vision tower on a %d x %d patch grid", n_vit_h, n_vit_w);
    free(x);
    free(xn);
    free(qkv);
    free(o);
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
