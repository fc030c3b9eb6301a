/* Engram (model.md §3.3): n-gram hashed rows of an FP8 table, projected to one key per stream and a
 * shared value, gated per stream and added to the streams. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/layers.h"

#include <math.h>
#include <stdlib.h>

/* A row record (e4m3 values, then their e8m0 scales) dequantised to bf16: value times its block's scale. */
static void record_row(const model_config *c, const uint8_t *rec, uint16_t *out)
{
    int w = c->engram_head_dim;
    const uint8_t *sc = rec + w;
    for (int i = 0; i < w; i++)
        out[i] = f32_to_bf16(e4m3_to_f32(rec[i]) * e8m0_to_f32(sc[i / 32]));
}

int engram_rows(const cpu_model *m, int l, int n, const uint8_t *records, uint16_t *X)
{
    const model_config *c = &m->cfg;
    const block_weights *b = &m->blocks[l];
    int cols = model_engram_cols(c), w = c->engram_head_dim, rb = engram_record_bytes(w);
    int d = c->dim, hc = c->hc_mult, kvw = (hc + 1) * d;
    uint16_t *e = dsk_malloc(sizeof(uint16_t) * (size_t)n * cols * w);
    uint16_t *kv = dsk_malloc(sizeof(uint16_t) * (size_t)n * kvw);
    int rc = -1;
    if (!e || !kv)
        goto done;
    for (int64_t i = 0; i < (int64_t)n * cols; i++)
        record_row(c, records + i * rb, e + i * w);
    if (linear_bf16(&b->eg_wkv, e, n, kv))
        goto done;
    const float inv_sqrt_d = (float)(1.0 / sqrt((double)d));
    for (int i = 0; i < n; i++) {
        const uint16_t *value = kv + (int64_t)i * kvw + (int64_t)hc * d;
        for (int ch = 0; ch < hc; ch++) {
            uint16_t *x = X + ((int64_t)i * hc + ch) * d;
            const uint16_t *key = kv + (int64_t)i * kvw + (int64_t)ch * d;
            const float *wc = b->eg_w + (int64_t)ch * d;
            float dot = 0.0f, sx = 0.0f, sk = 0.0f;
            for (int j = 0; j < d; j++) {
                float xv = bf16_to_f32(x[j]), kv_ = bf16_to_f32(key[j]);
                dot += xv * wc[j] * kv_;
                sx += xv * xv;
                sk += kv_ * kv_;
            }
            float rx = 1.0f / sqrtf(sx / (float)d + c->norm_eps), rk = 1.0f / sqrtf(sk / (float)d + c->norm_eps);
            float dc = dot * (rx * rk) * inv_sqrt_d;
            float mag = sqrtf(fabsf(dc) > 1e-6f ? fabsf(dc) : 1e-6f);
            float g = 1.0f / (1.0f + expf(-copysignf(mag, dc))); /* sign bit: +0 gives +sqrt(1e-6) */
            for (int j = 0; j < d; j++)
                x[j] = f32_to_bf16(bf16_to_f32(x[j]) + g * bf16_to_f32(value[j]));
        }
    }
    rc = 0;
done:
    free(e);
    free(kv);
    return rc;
}
