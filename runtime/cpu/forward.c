/* The sequence state and the forward pass over a call's rows (model.md §3.1-§3.4): embedding, the layer
 * loop with Engram, DSpark taps and single-pass mHC blocks, the final norm and head. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/block.h"
#include "runtime/ref/embed.h"
#include "runtime/ref/tap_mean.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cpu_rollback_spare(const model_config *c)
{
    return c->dspark_block_size + 1 > 8 ? c->dspark_block_size + 1 : 8;
}

int cpu_seq_new(const cpu_model *m, int64_t cap, cpu_seq **out)
{
    const model_config *c = &m->cfg;
    if (cap <= 0 || cap > c->max_seq_len)
        cap = c->max_seq_len;
    cpu_seq *s = dsk_calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->cap = cap;
    s->ring = c->window_size + cpu_rollback_spare(c);
    int hd = c->head_dim;
    s->tokens = dsk_malloc(sizeof(int32_t) * (size_t)cap);
    s->cids = dsk_calloc((size_t)cap, sizeof(int32_t));
    s->win = dsk_calloc(MODEL_MAX_LAYERS, sizeof *s->win);
    s->cmp_as = dsk_calloc(MODEL_MAX_LAYERS, sizeof *s->cmp_as);
    s->ckv = dsk_calloc(MODEL_MAX_LAYERS, sizeof *s->ckv);
    s->ikv = dsk_calloc(MODEL_MAX_LAYERS, sizeof *s->ikv);
    s->rows_cap = dsk_calloc(MODEL_MAX_LAYERS, sizeof *s->rows_cap);
    s->dwin = dsk_calloc(MODEL_MAX_LAYERS, sizeof *s->dwin);
    s->m_last = dsk_calloc((size_t)c->dim, sizeof(uint16_t));
    if (!s->tokens || !s->cids || !s->win || !s->cmp_as || !s->ckv || !s->ikv || !s->rows_cap || !s->dwin ||
        !s->m_last)
        goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        if (!(s->win[l] = dsk_calloc((size_t)s->ring * hd, sizeof(uint16_t))))
            goto fail;
        if (c->roles[l].is_kv_source && c->roles[l].ratio == 2 &&
            !(s->cmp_as[l] = dsk_calloc((size_t)s->ring * 2 * hd, sizeof(float))))
            goto fail;
    }
    for (int k = 0; k < c->n_mtp_layers; k++)
        if (!(s->dwin[k] = dsk_calloc((size_t)s->ring * hd, sizeof(uint16_t))))
            goto fail;
    *out = s;
    return 0;
fail:
    cpu_seq_free(s);
    return dsk_err_ctx("allocating the sequence state (%lld positions)", (long long)cap);
}

void cpu_seq_free(cpu_seq *s)
{
    if (!s)
        return;
    for (int l = 0; l < MODEL_MAX_LAYERS; l++) {
        if (s->win)
            free(s->win[l]);
        if (s->cmp_as)
            free(s->cmp_as[l]);
        if (s->ckv)
            free(s->ckv[l]);
        if (s->ikv)
            free(s->ikv[l]);
        if (s->dwin)
            free(s->dwin[l]);
    }
    free(s->win);
    free(s->cmp_as);
    free(s->ckv);
    free(s->ikv);
    free(s->rows_cap);
    free(s->dwin);
    free(s->tokens);
    free(s->cids);
    free(s->m_last);
    free(s);
}

int block_forward(const cpu_model *m, int l, uint16_t *X, float *pi, int n, attention_fn attn, void *ctx)
{
    const model_config *c = &m->cfg;
    const block_weights *b = &m->blocks[l];
    int hc = c->hc_mult, d = c->dim;
    int64_t sd = (int64_t)hc * d;
    hc_coeffs *ka = dsk_malloc(sizeof *ka * (size_t)n), kf;
    uint16_t *a = dsk_malloc(sizeof(uint16_t) * (size_t)n * d);
    uint16_t *y = dsk_malloc(sizeof(uint16_t) * (size_t)n * d);
    uint16_t *x1 = dsk_malloc(sizeof(uint16_t) * (size_t)n * sd);
    int rc = -1;
    if (!ka || !a || !y || !x1)
        goto done;
    if (m->layer_hook)
        m->layer_hook(m->layer_ctx, l, CPU_HOOK_BLOCK_IN, X, pi, n);
    for (int i = 0; i < n; i++) {
        hc_mixes(c, b->hc_fn[0], b->hc_base[0], b->hc_scale[0], X + i * sd, &ka[i]);
        hc_pre(X + i * sd, pi + (int64_t)i * hc, hc, d, a + (int64_t)i * d);
    }
    ref_rmsnorm_bf16(a, b->attn_norm, a, n, d, c->norm_eps);
    if (attn(m, l, a, n, y, ctx))
        goto done;
    for (int i = 0; i < n; i++)
        hc_post(y + (int64_t)i * d, X + i * sd, &ka[i], hc, d, x1 + i * sd);
    if (m->layer_hook)
        m->layer_hook(m->layer_ctx, l, CPU_HOOK_ATTN_OUT, x1, NULL, n);
    /* single pass: the ffn input uses the attn sublayer's pre; the ffn pre goes to the next block */
    for (int i = 0; i < n; i++)
        hc_pre(x1 + i * sd, ka[i].pre, hc, d, a + (int64_t)i * d);
    ref_rmsnorm_bf16(a, b->ffn_norm, a, n, d, c->norm_eps);
    if (moe_rows(m, b, a, n, y))
        goto done;
    for (int i = 0; i < n; i++) {
        hc_mixes(c, b->hc_fn[1], b->hc_base[1], b->hc_scale[1], x1 + i * sd, &kf);
        hc_post(y + (int64_t)i * d, x1 + i * sd, &kf, hc, d, X + i * sd);
        memcpy(pi + (int64_t)i * hc, kf.pre, sizeof(float) * hc);
    }
    if (m->layer_hook)
        m->layer_hook(m->layer_ctx, l, CPU_HOOK_BLOCK_OUT, X, pi, n);
    rc = 0;
done:
    free(ka);
    free(a);
    free(y);
    free(x1);
    return rc;
}

int embed_rows(const cpu_model *m, const int32_t *tokens, int n, uint16_t *X, float *pi)
{
    const model_config *c = &m->cfg;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return dsk_err("token id %d is outside the vocabulary (%d)", tokens[i], c->vocab_size);
    ref_embed(m->embed, c->vocab_size, c->dim, tokens, n, c->hc_mult, X, pi);
    return 0;
}

int head_rows(const cpu_model *m, const uint16_t *X, const float *pi, int n, const uint16_t *norm, float *logits,
              uint16_t *u_out)
{
    const model_config *c = &m->cfg;
    cpu_split sp = cpu_rank_split(m, NULL);
    int hc = c->hc_mult, d = c->dim, V = c->vocab_size, vl = sp.v1 - sp.v0, tp = m->xchg->tp;
    uint16_t *u = dsk_malloc(sizeof(uint16_t) * (size_t)n * d);
    uint16_t *un = dsk_malloc(sizeof(uint16_t) * (size_t)n * d);
    float *part = tp > 1 ? dsk_malloc(sizeof(float) * (size_t)n * vl) : NULL;
    float *all = tp > 1 ? dsk_malloc(sizeof(float) * (size_t)n * V) : NULL;
    int rc = -1;
    if (!u || !un || (tp > 1 && (!part || !all)))
        goto done;
    for (int i = 0; i < n; i++)
        hc_pre(X + (int64_t)i * hc * d, pi + (int64_t)i * hc, hc, d, u + (int64_t)i * d);
    ref_rmsnorm_bf16(u, norm, un, n, d, c->norm_eps);
    if (u_out)
        memcpy(u_out, u, sizeof(uint16_t) * (size_t)n * d);
    if (tp == 1) {
        rc = linear_f32(&m->head, un, n, logits);
        goto done;
    }
    /* this rank's vocabulary rows, gathered: rank r's block holds columns [r·V/tp, (r+1)·V/tp) of every row */
    if (linear_apply_cols(&m->head, un, n, sp.v0, sp.v1, part) ||
        m->xchg->allgather(m->xchg, part, sizeof(float) * (size_t)n * vl, all))
        goto done;
    for (int r = 0; r < tp; r++)
        for (int i = 0; i < n; i++)
            memcpy(logits + (int64_t)i * V + (int64_t)r * vl, all + ((int64_t)r * n + i) * vl, sizeof(float) * vl);
    rc = 0;
done:
    free(u);
    free(un);
    free(part);
    free(all);
    return rc;
}

/* One call's Engram rows: their table indices and records per Engram layer, and the store's fetch. */
typedef struct {
    int64_t *rows[ENGRAM_MAX_LAYERS];
    uint8_t *rec[ENGRAM_MAX_LAYERS];
    engram_fetch *f;
} engram_round;

static int engram_begin(const cpu_model *m, const cpu_seq *s, int64_t pos0, int n, engram_round *eg)
{
    const model_config *c = &m->cfg;
    int cols = model_engram_cols(c);
    engram_fetch_layer want[ENGRAM_MAX_LAYERS];
    for (int slot = 0; slot < c->n_engram_layers; slot++) {
        size_t nrows = (size_t)n * cols;
        eg->rows[slot] = dsk_malloc(sizeof(int64_t) * nrows);
        eg->rec[slot] = dsk_malloc(nrows * (size_t)engram_record_bytes(c->engram_head_dim));
        if (!eg->rows[slot] || !eg->rec[slot])
            return -1;
        engram_hash(&m->engram, slot, s->cids + pos0, pos0, n, eg->rows[slot]);
        want[slot] = (engram_fetch_layer){eg->rows[slot], (int64_t)nrows, eg->rec[slot]};
    }
    return engram_fetch_begin(m->eg, want, &eg->f);
}

static void engram_end(engram_round *eg)
{
    engram_fetch_end(eg->f);
    for (int slot = 0; slot < ENGRAM_MAX_LAYERS; slot++) {
        free(eg->rows[slot]);
        free(eg->rec[slot]);
    }
}

static int backbone_attention(const cpu_model *m, int l, const uint16_t *xn, int n, uint16_t *out, void *ctx)
{
    fwd_ctx *fc = ctx;
    return attention_layer(m, fc->s, &fc->f, l, xn, out);
}

int cpu_forward(const cpu_model *m, cpu_seq *s, const int32_t *tokens, int n, int logits_from, float *logits,
                  uint16_t *taps)
{
    const model_config *c = &m->cfg;
    int hc = c->hc_mult, d = c->dim;
    int64_t pos0 = s->len, sd = (int64_t)hc * d;
    if (n <= 0)
        return dsk_err("forward: no rows");
    if (pos0 + n > s->cap)
        return dsk_err("context limit: %lld positions held, %d more asked, the limit is %lld; start a new "
                       "sequence or raise the context",
                       (long long)pos0, n, (long long)s->cap);
    fwd_ctx fc = {.s = s, .f = {.n = n, .pos0 = pos0}};
    engram_round eg = {0};
    int eg_failed = 0;
    char eg_msg[512] = "";
    uint16_t *X = dsk_malloc(sizeof(uint16_t) * (size_t)n * sd);
    float *pi = dsk_malloc(sizeof(float) * (size_t)n * hc);
    int rc = -1;
    if (!X || !pi || embed_rows(m, tokens, n, X, pi))
        goto done;
    for (int i = 0; i < n; i++) {
        s->tokens[pos0 + i] = tokens[i];
        s->cids[pos0 + i] = m->token_map ? m->token_map[tokens[i]] : 0;
    }
    /* every Engram row the call needs is asked for now; each layer waits for its own just before it runs */
    if (c->n_engram_layers > 0 && engram_begin(m, s, pos0, n, &eg))
        goto done;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_role *r = &c->roles[l];
        if (r->engram >= 0) {
            /* a failed read fails the call, but only after it has run (with the zero records the store
             * leaves): the exchanges of a tensor-parallel step must stay in step on every rank */
            if (!eg_failed && engram_fetch_wait(eg.f, r->engram, m->eg_timeout_ms)) {
                dsk_err_ctx("layer %d: Engram rows", l);
                snprintf(eg_msg, sizeof eg_msg, "%s", dsk_err_msg());
                eg_failed = 1;
            }
            if (eg_failed)
                memset(eg.rec[r->engram], 0, (size_t)n * model_engram_cols(c) * engram_record_bytes(c->engram_head_dim));
            if (engram_rows(m, l, n, eg.rec[r->engram], X))
                goto done;
        }
        if (r->dspark_tap >= 0 && taps)
            ref_tap_mean(X, n, hc, d, taps, c->n_dspark_targets, r->dspark_tap);
        if (block_forward(m, l, X, pi, n, backbone_attention, &fc)) {
            dsk_err_ctx("layer %d", l);
            goto done;
        }
    }
    if (logits && logits_from < n &&
        head_rows(m, X + logits_from * sd, pi + (int64_t)logits_from * hc, n - logits_from, m->norm, logits, NULL))
        goto done;
    rc = eg_failed ? dsk_err("%s", eg_msg) : 0;
done:
    for (int l = 0; l < MODEL_MAX_LAYERS; l++) {
        free(fc.f.topk[l]);
        free(fc.f.topk_n[l]);
    }
    free(fc.f.cand);
    free(fc.f.cand_n);
    engram_end(&eg);
    free(X);
    free(pi);
    return rc;
}
