#include "runtime/cpu/compressor.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/ref/cand_blocks.h"
#include "runtime/ref/index_score.h"
#include "runtime/ref/kvquant.h"
#include "runtime/ref/compress_pool.h"
#include "runtime/ref/vec_glue.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Make room for compressed rows [0, rows) of kv source l (grown by doubling, within the context). */
static int reserve_rows(const cpu_model *m, cpu_seq *s, int l, int64_t rows)
{
    if (rows <= s->rows_cap[l])
        return 0;
    int64_t cap = s->rows_cap[l] ? s->rows_cap[l] : 64;
    while (cap < rows)
        cap *= 2;
    size_t hd = (size_t)m->cfg.head_dim, ihd = (size_t)m->cfg.index_head_dim;
    uint16_t *ckv = dsk_realloc(s->ckv[l], sizeof(uint16_t) * hd * (size_t)cap);
    if (!ckv)
        return -1;
    s->ckv[l] = ckv;
    uint16_t *ikv = dsk_realloc(s->ikv[l], sizeof(uint16_t) * ihd * (size_t)cap);
    if (!ikv)
        return -1;
    s->ikv[l] = ikv;
    s->rows_cap[l] = cap;
    return 0;
}

int compressor_rows(const cpu_model *m, cpu_seq *s, int l, const uint16_t *xn, int n, int64_t pos0)
{
    const model_config *c = &m->cfg;
    const block_weights *b = &m->blocks[l];
    int r = c->roles[l].ratio, hd = c->head_dim, ihd = c->index_head_dim;
    int64_t first = pos0 / r, end = (pos0 + n) / r; /* rows whose group closes in this call */
    int ne = (int)(end - first);
    uint16_t *lat = dsk_malloc(sizeof(uint16_t) * (size_t)(ne > 0 ? ne : 1) * hd);
    uint16_t *ik = dsk_malloc(sizeof(uint16_t) * (size_t)(ne > 0 ? ne : 1) * ihd);
    int64_t *jpos = dsk_malloc(sizeof(int64_t) * (size_t)(ne > 0 ? ne : 1));
    float *as = r == 2 ? dsk_malloc(sizeof(float) * 2 * (size_t)n * hd) : NULL;
    float *rope = NULL;
    int rc = -1;
    if (!lat || !ik || !jpos || (r == 2 && !as) || reserve_rows(m, s, l, end))
        goto done;
    if (r == 1) {
        if (linear_bf16(&b->c_wkv, xn, n, lat))
            goto done;
    } else {
        /* a_t and s_t stay fp32 (REF's ratio-2 compressor is an fp32 GEMM) */
        float *a = as, *g = as + (size_t)n * hd;
        if (linear_f32(&b->c_wkv, xn, n, a) || linear_f32(&b->c_wgate, xn, n, g))
            goto done;
        for (int64_t j = first; j < end; j++) {
            int64_t p0 = 2 * j, i1 = 2 * j + 1 - pos0;
            const float *a0, *g0;
            if (p0 >= pos0) {
                a0 = a + (p0 - pos0) * hd;
                g0 = g + (p0 - pos0) * hd;
            } else { /* the open group's first token, from an earlier call */
                a0 = s->cmp_as[l] + (p0 % s->ring) * 2 * hd;
                g0 = a0 + hd;
            }
            ref_pool2(a0, g0, a + i1 * hd, g + i1 * hd, hd, lat + (j - first) * hd);
        }
        for (int i = n > s->ring ? n - s->ring : 0; i < n; i++) {
            float *slot = s->cmp_as[l] + ((pos0 + i) % s->ring) * 2 * hd;
            memcpy(slot, a + (int64_t)i * hd, sizeof(float) * hd);
            memcpy(slot + hd, g + (int64_t)i * hd, sizeof(float) * hd);
        }
    }
    rc = 0;
    if (ne <= 0)
        goto done;
    rc = -1;
    ref_rmsnorm_bf16(lat, b->c_norm, lat, ne, hd, c->norm_eps);
    for (int e = 0; e < ne; e++)
        jpos[e] = (first + e) * r; /* latent j stands at the group's first position */
    rope_params rp = model_rope(c, r);
    if (rope_rows(&rp, jpos, ne, &rope))
        goto done;
    /* the index key comes from the pre-RoPE latent */
    if (linear_bf16(&b->ix_wk, lat, ne, ik))
        goto done;
    const ref_vec_glue_op ik_op = {.norm_w = b->ix_k_norm, .eps = c->norm_eps, .rope_dim = c->rope_head_dim,
                                   .cos_sin = rope, .qdq = KVQ_FP4_E8M0};
    const ref_vec_glue_op lat_op = {.rope_dim = c->rope_head_dim, .cos_sin = rope, .qdq = KVQ_FP4_E4M3};
    ref_vec_glue(ik, ihd, ik, ihd, ne, 1, ihd, &ik_op);
    ref_vec_glue(lat, hd, lat, hd, ne, 1, hd, &lat_op);
    memcpy(s->ckv[l] + first * hd, lat, sizeof(uint16_t) * (size_t)ne * hd);
    memcpy(s->ikv[l] + first * ihd, ik, sizeof(uint16_t) * (size_t)ne * ihd);
    rc = 0;
done:
    free(lat);
    free(ik);
    free(jpos);
    free(as);
    free(rope);
    return rc;
}

int indexer_rows(const cpu_model *m, const cpu_seq *s, fwd_call *f, int l, const uint16_t *xn,
                 const uint16_t *q_lat)
{
    const model_config *c = &m->cfg;
    const block_weights *b = &m->blocks[l];
    const layer_role *role = &c->roles[l];
    int n = f->n, r = role->ratio, nh = c->index_n_heads, ihd = c->index_head_dim, K = c->index_topk;
    int64_t rows = (f->pos0 + n) / r;
    const uint16_t *ikv = s->ikv[role->kv_source];
    int B = c->candidate_block_size;
    int64_t nb_max = (rows + B - 1) / B + 1;
    uint16_t *qi = dsk_malloc(sizeof(uint16_t) * (size_t)n * nh * ihd);
    float *w = dsk_malloc(sizeof(float) * (size_t)n * nh);
    float *score = dsk_malloc(sizeof(float) * (size_t)(rows + 1));
    float *val = dsk_malloc(sizeof(float) * (size_t)(rows + nb_max + 1));
    float *bs = dsk_malloc(sizeof(float) * (size_t)nb_max);
    int64_t words = (nb_max + 31) / 32;
    uint32_t *allowed = dsk_malloc(sizeof(uint32_t) * (size_t)words);
    float *rope = NULL;
    int64_t *pos = dsk_malloc(sizeof(int64_t) * (size_t)n);
    int rc = -1;
    f->topk[l] = dsk_malloc(sizeof(int32_t) * (size_t)n * K);
    f->topk_n[l] = dsk_calloc((size_t)n, sizeof(int));
    if (!qi || !w || !score || !val || !bs || !allowed || !pos || !f->topk[l] || !f->topk_n[l])
        goto done;
    if (role->is_candidate_source) {
        f->cand = dsk_malloc(sizeof(int32_t) * (size_t)n * c->candidate_topk_blocks);
        f->cand_n = dsk_calloc((size_t)n, sizeof(int));
        if (!f->cand || !f->cand_n)
            goto done;
    }
    for (int i = 0; i < n; i++)
        pos[i] = f->pos0 + i;
    rope_params rp = model_rope(c, r);
    if (rope_rows(&rp, pos, n, &rope) || linear_bf16(&b->ix_wq_b, q_lat, n, qi))
        goto done;
    const ref_vec_glue_op q_op = {.rope_dim = c->rope_head_dim, .cos_sin = rope, .qdq = KVQ_FP4_E8M0};
    ref_vec_glue(qi, (int64_t)nh * ihd, qi, (int64_t)nh * ihd, n, nh, ihd, &q_op);
    /* head weights: bf16(weights_proj x), times ihd^-1/2 · nh^-1/2 rounded to bf16 (a bf16 tensor op) */
    ref_rowmm_bf16(xn, b->ix_wproj, w, n, c->dim, nh);
    const float wscale = (float)(1.0 / sqrt((double)ihd) / sqrt((double)nh));
    for (int v = 0; v < n * nh; v++)
        w[v] = bf16_round(bf16_round(w[v]) * wscale);
    for (int i = 0; i < n; i++) {
        int64_t reach = (f->pos0 + i + 1) / r;
        const uint16_t *qr = qi + (int64_t)i * nh * ihd;
        ref_index_score(qr, w + (int64_t)i * nh, nh, ihd, ikv, reach, score);
        if (role->uses_candidates) {
            ref_cand_bitmap(f->cand + (int64_t)i * c->candidate_topk_blocks, f->cand_n[i], allowed, words);
            ref_index_score_mask(score, reach, B, allowed);
        }
        if (role->is_candidate_source)
            f->cand_n[i] = ref_cand_blocks(score, reach, B, c->candidate_topk_blocks,
                                           f->cand + (int64_t)i * c->candidate_topk_blocks, bs, val);
        /* top-min(K, reach) of the reachable rows: the same set REF keeps valid (docs/model.md) */
        int k = reach < K ? (int)reach : K;
        ref_topk(score, NULL, (int)reach, k, f->topk[l] + (int64_t)i * K, val);
        f->topk_n[l][i] = k;
        if (m->index_hook)
            m->index_hook(m->layer_ctx, l, i, score, reach, f->topk[l] + (int64_t)i * K, k,
                          role->is_candidate_source ? f->cand + (int64_t)i * c->candidate_topk_blocks : NULL,
                          role->is_candidate_source ? f->cand_n[i] : 0);
    }
    rc = 0;
done:
    free(qi);
    free(w);
    free(score);
    free(val);
    free(bs);
    free(allowed);
    free(rope);
    free(pos);
    return rc;
}
