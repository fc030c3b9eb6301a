/* Attention of a backbone layer (model.md §3.5): queries, window keys in the ring, compressed rows from
 * the kv source, the indexer's top-k (own or reused), sparse attention with sink, grouped output. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/model/compressor.h"
#include "runtime/model/kvquant.h"
#include "runtime/model/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

rope_params model_rope(const model_config *c, int ratio)
{
    rope_params p = {c->rope_head_dim, c->rope_theta, 0, c->beta_fast, c->beta_slow, 0};
    if (ratio > 0) {
        p.base = c->compress_rope_theta;
        p.factor = c->rope_factor;
        p.original_seq_len = c->original_seq_len;
    }
    return p;
}

int rope_rows(const rope_params *p, const int64_t *pos, int n, float **table)
{
    int half = p->rope_dim / 2;
    float *t = dsk_malloc(sizeof(float) * 2 * (size_t)half * (size_t)(n ? n : 1));
    if (!t)
        return -1;
    for (int i = 0; i < n; i++)
        ref_rope_table(p, pos[i], 1, t + (size_t)i * 2 * half);
    *table = t;
    return 0;
}

/* RoPE on n rows of `heads` vectors, row i rotated by table row i. */
void rope_apply_rows(uint16_t *x, int n, int heads, int width, int rope_dim, const float *table, int inverse)
{
    for (int i = 0; i < n; i++) {
        int32_t row = i;
        ref_rope_apply_bf16(x + (int64_t)i * heads * width, 1, heads, width, rope_dim, &row, table, inverse);
    }
}

int attn_query(const model_config *c, const block_weights *b, const uint16_t *xn, int n, const float *rope,
               uint16_t *q_lat, uint16_t *q)
{
    if (linear_bf16(&b->wq_a, xn, n, q_lat))
        return -1;
    ref_rmsnorm_bf16(q_lat, b->q_norm, q_lat, n, c->q_lora_rank, c->norm_eps);
    if (linear_bf16(&b->wq_b, q_lat, n, q))
        return -1;
    rope_apply_rows(q, n, c->n_heads, c->head_dim, c->rope_head_dim, rope, 0);
    return 0;
}

int attn_window_keys(const model_config *c, const block_weights *b, const uint16_t *xn, int n, const float *rope,
                     uint16_t *kv)
{
    if (linear_bf16(&b->wkv, xn, n, kv))
        return -1;
    ref_rmsnorm_bf16(kv, b->kv_norm, kv, n, c->head_dim, c->norm_eps);
    rope_apply_rows(kv, n, 1, c->head_dim, c->rope_head_dim, rope, 0);
    for (int i = 0; i < n; i++)
        kvq_fp8_e4m3(kv + (int64_t)i * c->head_dim, c->head_dim);
    return 0;
}

int attn_output(const model_config *c, const block_weights *b, uint16_t *o, int n, const float *rope, uint16_t *out)
{
    int hd = c->head_dim, H = c->n_heads, G = c->o_groups, ol = c->o_lora_rank;
    int gin = H * hd / G;
    rope_apply_rows(o, n, H, hd, c->rope_head_dim, rope, 1);
    uint16_t *xg = dsk_malloc(sizeof(uint16_t) * (size_t)n * (size_t)gin);
    float *zg = dsk_malloc(sizeof(float) * (size_t)n * (size_t)ol);
    uint16_t *z = dsk_malloc(sizeof(uint16_t) * (size_t)n * (size_t)G * (size_t)ol);
    int rc = -1;
    if (!xg || !zg || !z)
        goto done;
    /* grouped wo_a: group g's columns of the one EXL3 linear, on its own heads (docs/model.md) */
    for (int g = 0; g < G; g++) {
        for (int i = 0; i < n; i++)
            memcpy(xg + (int64_t)i * gin, o + (int64_t)i * H * hd + (int64_t)g * gin, sizeof(uint16_t) * gin);
        if (linear_apply_cols(&b->wo_a, xg, n, g * ol, (g + 1) * ol, zg))
            goto done;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < ol; k++)
                z[(int64_t)i * G * ol + (int64_t)g * ol + k] = f32_to_bf16(zg[(int64_t)i * ol + k]);
    }
    rc = linear_bf16(&b->wo_b, z, n, out);
done:
    free(xg);
    free(zg);
    free(z);
    return rc;
}

void sparse_attention_row(const uint16_t *q, int heads, int hd, const uint16_t *const *keys, int n_keys,
                          const float *sink, uint16_t *out)
{
    const float scale = (float)(1.0 / sqrt((double)hd));
    float num[1024], s[64], p[64];
    for (int h = 0; h < heads; h++) {
        const uint16_t *qh = q + (int64_t)h * hd;
        float run_max = -1e30f, den = 0.0f;
        for (int d = 0; d < hd; d++)
            num[d] = 0.0f;
        /* online softmax over blocks of 64 entries of the compacted list, in list order */
        for (int b0 = 0; b0 < n_keys; b0 += 64) {
            int nb = n_keys - b0 < 64 ? n_keys - b0 : 64;
            float bmax = run_max;
            for (int i = 0; i < nb; i++) {
                const uint16_t *k = keys[b0 + i];
                float acc = 0.0f;
                for (int d = 0; d < hd; d++)
                    acc += bf16_to_f32(qh[d]) * bf16_to_f32(k[d]);
                s[i] = acc * scale;
                bmax = s[i] > bmax ? s[i] : bmax;
            }
            float alpha = expf(run_max - bmax), bsum = 0.0f;
            for (int i = 0; i < nb; i++) {
                p[i] = expf(s[i] - bmax);
                bsum += p[i];
                p[i] = bf16_round(p[i]); /* the numerator multiplies K by bf16 probabilities */
            }
            den = den * alpha + bsum;
            for (int d = 0; d < hd; d++) {
                float acc = num[d] * alpha;
                for (int i = 0; i < nb; i++)
                    acc += p[i] * bf16_to_f32(keys[b0 + i][d]);
                num[d] = acc;
            }
            run_max = bmax;
        }
        if (n_keys == 0) {
            for (int d = 0; d < hd; d++)
                out[(int64_t)h * hd + d] = 0;
            continue;
        }
        den += expf(sink[h] - run_max);
        for (int d = 0; d < hd; d++)
            out[(int64_t)h * hd + d] = f32_to_bf16(num[d] / den);
    }
}

/* The window key of position p: this call's row, or the ring slot of a committed position. */
static const uint16_t *window_key(const model_state *s, int l, const uint16_t *kv, int64_t pos0, int64_t p, int hd)
{
    if (p >= pos0)
        return kv + (p - pos0) * hd;
    return s->win[l] + (p % s->ring) * hd;
}

int attention_layer(const model *m, model_state *s, fwd_call *f, int l, const uint16_t *xn, uint16_t *out)
{
    const model_config *c = &m->cfg;
    const block_weights *b = &m->blocks[l];
    const layer_role *r = &c->roles[l];
    int n = f->n, hd = c->head_dim, H = c->n_heads, W = c->window_size;
    int64_t pos0 = f->pos0;
    rope_params rp = model_rope(c, r->ratio);
    int64_t *pos = dsk_malloc(sizeof(int64_t) * (size_t)n);
    uint16_t *q_lat = dsk_malloc(sizeof(uint16_t) * (size_t)n * c->q_lora_rank);
    uint16_t *q = dsk_malloc(sizeof(uint16_t) * (size_t)n * H * hd);
    uint16_t *kv = dsk_malloc(sizeof(uint16_t) * (size_t)n * hd);
    uint16_t *o = dsk_malloc(sizeof(uint16_t) * (size_t)n * H * hd);
    const uint16_t **keys = dsk_malloc(sizeof(*keys) * (size_t)(W + c->index_topk));
    float *rope = NULL;
    int rc = -1;
    if (!pos || !q_lat || !q || !kv || !o || !keys)
        goto done;
    for (int i = 0; i < n; i++)
        pos[i] = pos0 + i;
    if (rope_rows(&rp, pos, n, &rope) || attn_query(c, b, xn, n, rope, q_lat, q) ||
        attn_window_keys(c, b, xn, n, rope, kv))
        goto done;
    if (r->is_kv_source && compressor_rows(m, s, l, xn, n, pos0))
        goto done;
    if (r->is_index_source && indexer_rows(m, s, f, l, xn, q_lat))
        goto done;
    const uint16_t *ckv = r->ratio > 0 ? s->ckv[r->kv_source] : NULL;
    for (int i = 0; i < n; i++) {
        int64_t p = pos0 + i, first = p - W + 1 < 0 ? 0 : p - W + 1;
        int nk = 0;
        for (int64_t t = first; t <= p; t++)
            keys[nk++] = window_key(s, l, kv, pos0, t, hd);
        if (r->ratio > 0) {
            const int32_t *sel = f->topk[r->topk_source] + (int64_t)i * c->index_topk;
            for (int k = 0; k < f->topk_n[r->topk_source][i]; k++)
                keys[nk++] = ckv + (int64_t)sel[k] * hd;
        }
        sparse_attention_row(q + (int64_t)i * H * hd, H, hd, keys, nk, b->attn_sink, o + (int64_t)i * H * hd);
    }
    if (attn_output(c, b, o, n, rope, out))
        goto done;
    /* the call's window keys enter the ring last: earlier rows of this call read them from kv */
    for (int i = n > s->ring ? n - s->ring : 0; i < n; i++)
        memcpy(s->win[l] + ((pos0 + i) % s->ring) * hd, kv + (int64_t)i * hd, sizeof(uint16_t) * hd);
    rc = 0;
done:
    free(pos);
    free(q_lat);
    free(q);
    free(kv);
    free(o);
    free(keys);
    free(rope);
    return rc;
}
