/* DSpark drafter (model.md §3.9): the main-KV rings fed from committed positions, and one draft step:
 * a block [t0, N, N, N, N] through every stage (window attention over the ring plus the whole block),
 * the backbone head with the Markov bigram bias, and the confidence logits. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/block.h"
#include "runtime/ref/dspark_conf.h"

#include <stdlib.h>
#include <string.h>

int cpu_draft_feed(const cpu_model *m, cpu_seq *s, const uint16_t *taps, int n)
{
    const model_config *c = &m->cfg;
    int d = c->dim, hd = c->head_dim;
    if (c->n_mtp_layers == 0)
        return dsk_err("this model has no DSpark stages (num_nextn_predict_layers = 0)");
    if (s->draft_len + n > s->len)
        return dsk_err("DSpark: positions up to %lld fed, but only %lld are committed",
                       (long long)(s->draft_len + n), (long long)s->len);
    uint16_t *mm = dsk_malloc(sizeof(uint16_t) * (size_t)n * d);
    uint16_t *kv = dsk_malloc(sizeof(uint16_t) * (size_t)n * hd);
    int64_t *pos = dsk_malloc(sizeof(int64_t) * (size_t)n);
    float *rope = NULL;
    int rc = -1;
    if (!mm || !kv || !pos || linear_bf16(&m->main_proj, taps, n, mm))
        goto done;
    ref_rmsnorm_bf16(mm, m->main_norm, mm, n, d, c->norm_eps);
    for (int i = 0; i < n; i++)
        pos[i] = s->draft_len + i;
    rope_params rp = model_rope(c, 0);
    if (rope_rows(&rp, pos, n, &rope))
        goto done;
    for (int k = 0; k < c->n_mtp_layers; k++) {
        /* each stage projects the shared m with its own wkv / kv_norm */
        if (attn_window_keys(c, &m->blocks[c->n_layers + k], mm, n, rope, kv))
            goto done;
        for (int i = n > s->ring ? n - s->ring : 0; i < n; i++)
            memcpy(s->dwin[k] + (pos[i] % s->ring) * hd, kv + (int64_t)i * hd, sizeof(uint16_t) * hd);
    }
    memcpy(s->m_last, mm + (int64_t)(n - 1) * d, sizeof(uint16_t) * d);
    s->draft_len += n;
    rc = 0;
done:
    free(mm);
    free(kv);
    free(pos);
    free(rope);
    return rc;
}

typedef struct {
    cpu_seq *s;
    int64_t p; /* the last committed position: the block sits at p+1 .. p+B */
} draft_ctx;

/* DSpark attention of stage l: each block row attends to the ring's positions max(0, p-W+1)..p, oldest
 * first, then to all block rows (non-causal), in one canonical list. */
static int draft_attention(const cpu_model *m, int l, const uint16_t *xn, int n, uint16_t *out, void *ctx)
{
    const draft_ctx *dc = ctx;
    const model_config *c = &m->cfg;
    const block_weights *b = &m->blocks[l];
    cpu_split sp = cpu_rank_split(m, b);
    int hd = c->head_dim, H = sp.h1 - sp.h0, W = c->window_size, k = l - c->n_layers; /* this rank's heads */
    int64_t p = dc->p, first = p - W + 1 < 0 ? 0 : p - W + 1;
    int64_t *pos = dsk_malloc(sizeof(int64_t) * (size_t)n);
    uint16_t *q_lat = dsk_malloc(sizeof(uint16_t) * (size_t)n * c->q_lora_rank);
    uint16_t *q = dsk_malloc(sizeof(uint16_t) * (size_t)n * H * hd);
    uint16_t *kv = dsk_malloc(sizeof(uint16_t) * (size_t)n * hd);
    uint16_t *o = dsk_malloc(sizeof(uint16_t) * (size_t)n * H * hd);
    const uint16_t **keys = dsk_malloc(sizeof(*keys) * (size_t)(W + n));
    float *rope = NULL;
    int rc = -1;
    if (!pos || !q_lat || !q || !kv || !o || !keys)
        goto done;
    for (int i = 0; i < n; i++)
        pos[i] = p + 1 + i;
    rope_params rp = model_rope(c, 0);
    /* block keys go through the window-KV path (FP8 QDQ included) but are not cached */
    if (rope_rows(&rp, pos, n, &rope) || attn_query(m, b, xn, n, rope, q_lat, q) ||
        attn_window_keys(c, b, xn, n, rope, kv))
        goto done;
    /* the window is all in the ring (the block's own keys are not cached); the block rows follow */
    ref_attn_keys src = {.call = NULL, .call_pos0 = p + 1, .ring = dc->s->dwin[k], .ring_slots = dc->s->ring,
                         .rows2 = kv, .hd = hd};
    int nk = ref_attn_list(&src, first, p, NULL, n, keys);
    for (int i = 0; i < n; i++)
        sparse_attention_row(q + (int64_t)i * H * hd, H, hd, keys, nk, b->attn_sink + sp.h0, o + (int64_t)i * H * hd);
    rc = attn_output(m, b, o, n, rope, out);
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

int cpu_draft(const cpu_model *m, cpu_seq *s, int32_t t0, draft_sampler sample, void *ctx, int32_t *drafts,
                float *conf)
{
    const model_config *c = &m->cfg;
    int B = c->dspark_block_size, hc = c->hc_mult, d = c->dim, V = c->vocab_size, R = c->dspark_markov_rank;
    if (c->n_mtp_layers == 0)
        return dsk_err("this model has no DSpark stages (num_nextn_predict_layers = 0)");
    if (s->draft_len < 1 || s->draft_len != s->len)
        return dsk_err("DSpark: the rings hold %lld positions but %lld are committed; feed them first",
                       (long long)s->draft_len, (long long)s->len);
    draft_ctx dc = {s, s->draft_len - 1};
    int32_t *ids = dsk_malloc(sizeof(int32_t) * (size_t)B);
    uint16_t *X = dsk_malloc(sizeof(uint16_t) * (size_t)B * hc * d);
    float *pi = dsk_malloc(sizeof(float) * (size_t)B * hc);
    float *logits = dsk_malloc(sizeof(float) * (size_t)B * V);
    uint16_t *u = dsk_malloc(sizeof(uint16_t) * (size_t)B * d);
    float *bias = dsk_malloc(sizeof(float) * (size_t)V);
    int rc = -1;
    if (!ids || !X || !pi || !logits || !u || !bias)
        goto done;
    ids[0] = t0;
    for (int i = 1; i < B; i++)
        ids[i] = c->dspark_noise_token_id;
    if (embed_rows(m, ids, B, X, pi))
        goto done;
    for (int k = 0; k < c->n_mtp_layers; k++)
        if (block_forward(m, c->n_layers + k, X, pi, B, draft_attention, &dc))
            goto done;
    if (head_rows(m, X, pi, B, m->mtp_norm, logits, u))
        goto done;
    int32_t prev = t0;
    for (int i = 0; i < B; i++) {
        const uint16_t *e = m->markov_embed + (int64_t)prev * R;
        float *lg = logits + (int64_t)i * V;
        /* Markov bigram bias: bf16 E_m[d_i] times the (widened) markov head, summed over the rank in
         * order, added to the fp32 logits */
        ref_markov_bias(e, m->markov_head_t, R, V, bias);
        for (int v = 0; v < V; v++)
            lg[v] += bias[v];
        if (conf)
            conf[i] = ref_dspark_conf(m->confidence, u + (int64_t)i * d, d, e, R);
        prev = drafts[i] = sample(lg, V, dc.p + 2 + i, ctx);
    }
    rc = 0;
done:
    free(ids);
    free(X);
    free(pi);
    free(logits);
    free(u);
    free(bias);
    return rc;
}
