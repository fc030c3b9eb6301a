/* Attention of a backbone layer (model.md §3.5): queries, window keys in the ring, compressed rows from
 * the kv source, the indexer's top-k (own or reused), sparse attention with sink, grouped output. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/compressor.h"
#include "runtime/ref/vec_glue.h"
#include "runtime/cpu/layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

cpu_split cpu_rank_split(const cpu_model *m, const block_weights *b)
{
    const model_config *c = &m->cfg;
    int tp = m->xchg->tp, r = m->xchg->rank;
    cpu_split s = {c->n_heads / tp * r, c->n_heads / tp * (r + 1), c->o_groups / tp * r, c->o_groups / tp * (r + 1),
                   c->vocab_size / tp * r, c->vocab_size / tp * (r + 1), 0, 0};
    if (b) {
        s.e0 = b->n_experts / tp * r;
        s.e1 = b->n_experts / tp * (r + 1);
    }
    return s;
}

int attn_query(const cpu_model *m, const block_weights *b, const uint16_t *xn, int n, const float *rope,
               uint16_t *q_lat, uint16_t *q)
{
    const model_config *c = &m->cfg;
    cpu_split sp = cpu_rank_split(m, b);
    int hd = c->head_dim, hl = sp.h1 - sp.h0;
    if (linear_bf16(&b->wq_a, xn, n, q_lat))
        return -1;
    ref_rmsnorm_bf16(q_lat, b->q_norm, q_lat, n, c->q_lora_rank, c->norm_eps);
    /* this rank's heads: their columns of wq_b */
    size_t nq = (size_t)n * (size_t)hl * (size_t)hd;
    float *qf = dsk_malloc(sizeof(float) * (nq ? nq : 1));
    if (!qf || linear_apply_cols(&b->wq_b, q_lat, n, sp.h0 * hd, sp.h1 * hd, qf)) {
        free(qf);
        return -1;
    }
    for (size_t i = 0; i < nq; i++)
        q[i] = f32_to_bf16(qf[i]);
    free(qf);
    rope_apply_rows(q, n, hl, hd, c->rope_head_dim, rope, 0);
    return 0;
}

int attn_window_keys(const model_config *c, const block_weights *b, const uint16_t *xn, int n, const float *rope,
                     uint16_t *kv)
{
    if (linear_bf16(&b->wkv, xn, n, kv))
        return -1;
    const ref_vec_glue_op op = {.norm_w = b->kv_norm, .eps = c->norm_eps, .rope_dim = c->rope_head_dim,
                                .cos_sin = rope, .qdq = KVQ_FP8_E4M3};
    ref_vec_glue(kv, c->head_dim, kv, c->head_dim, n, 1, c->head_dim, &op);
    return 0;
}

int attn_output(const cpu_model *m, const block_weights *b, uint16_t *o, int n, const float *rope, uint16_t *out)
{
    const model_config *c = &m->cfg;
    cpu_split sp = cpu_rank_split(m, b);
    int hd = c->head_dim, hl = sp.h1 - sp.h0, gl = sp.g1 - sp.g0, ol = c->o_lora_rank;
    int gin = c->n_heads * hd / c->o_groups, d = c->dim;
    rope_apply_rows(o, n, hl, hd, c->rope_head_dim, rope, 1);
    uint16_t *xg = dsk_malloc(sizeof(uint16_t) * (size_t)n * (size_t)gin);
    float *zg = dsk_malloc(sizeof(float) * (size_t)n * (size_t)ol);
    uint16_t *z = dsk_malloc(sizeof(uint16_t) * (size_t)n * (size_t)gl * (size_t)ol);
    float *y = dsk_malloc(sizeof(float) * (size_t)n * (size_t)d);
    int rc = -1;
    if (!xg || !zg || !z || !y)
        goto done;
    /* grouped wo_a: group g's columns of the one EXL3 linear, on its own heads (docs/model.md); a rank
     * runs its own groups (its heads) */
    for (int g = sp.g0; g < sp.g1; g++) {
        for (int i = 0; i < n; i++)
            memcpy(xg + (int64_t)i * gin, o + (int64_t)i * hl * hd + (int64_t)(g - sp.g0) * gin, sizeof(uint16_t) * gin);
        if (linear_apply_cols(&b->wo_a, xg, n, g * ol, (g + 1) * ol, zg))
            goto done;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < ol; k++)
                z[(int64_t)i * gl * ol + (int64_t)(g - sp.g0) * ol + k] = f32_to_bf16(zg[(int64_t)i * ol + k]);
    }
    /* wo_b over this rank's inputs (its groups' outputs): fp32 partials, summed in rank order, then bf16 */
    if (linear_apply_range(&b->wo_b, z, n, sp.g0 * ol, sp.g1 * ol, 0, d, y) || xchg_sum(m->xchg, y, (size_t)n * d))
        goto done;
    for (int64_t i = 0; i < (int64_t)n * d; i++)
        out[i] = f32_to_bf16(y[i]);
    rc = 0;
done:
    free(xg);
    free(zg);
    free(z);
    free(y);
    return rc;
}

int attention_layer(const cpu_model *m, cpu_seq *s, fwd_call *f, int l, const uint16_t *xn, uint16_t *out)
{
    const model_config *c = &m->cfg;
    const block_weights *b = &m->blocks[l];
    const layer_role *r = &c->roles[l];
    cpu_split sp = cpu_rank_split(m, b);
    int n = f->n, hd = c->head_dim, H = sp.h1 - sp.h0, W = c->window_size; /* this rank's heads */
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
    if (rope_rows(&rp, pos, n, &rope) || attn_query(m, b, xn, n, rope, q_lat, q) ||
        attn_window_keys(c, b, xn, n, rope, kv))
        goto done;
    if (r->is_kv_source && compressor_rows(m, s, l, xn, n, pos0))
        goto done;
    if (r->is_index_source && indexer_rows(m, s, f, l, xn, q_lat))
        goto done;
    /* the canonical list: window keys from this call at and after pos0, from the ring before it; then the
     * row's selected compressed rows of the kv source */
    ref_attn_keys src = {.call = kv, .call_pos0 = pos0, .ring = s->win[l], .ring_slots = s->ring,
                         .rows2 = r->ratio > 0 ? s->ckv[r->kv_source] : NULL, .hd = hd};
    for (int i = 0; i < n; i++) {
        int64_t p = pos0 + i, first = p - W + 1 < 0 ? 0 : p - W + 1;
        const int32_t *sel = r->ratio > 0 ? f->topk[r->topk_source] + (int64_t)i * c->index_topk : NULL;
        int nk = ref_attn_list(&src, first, p, sel, r->ratio > 0 ? f->topk_n[r->topk_source][i] : 0, keys);
        sparse_attention_row(q + (int64_t)i * H * hd, H, hd, keys, nk, b->attn_sink + sp.h0, o + (int64_t)i * H * hd);
    }
    if (attn_output(m, b, o, n, rope, out))
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
