/* The DSpark drafter on the device (model.md §3.9; the CPU's runtime/cpu/drafter.c, step for step):
 * committed positions feed each stage's main-KV ring (main_proj of the round's taps, main_norm, the
 * stage's window key); a draft runs the block [t0, N, N, N, N] of every request through the stages
 * (window attention over the ring, then the whole block), the head with mtp_norm, then per draft in order
 * the Markov bias of the previous token, the confidence logit and the draw — all on one stream, the
 * previous token never leaving the device; the drafts come back in one copy. */
#include "runtime/common/error.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/launch/dspark_conf.h"
#include "runtime/launch/embed.h"
#include "runtime/launch/mhc.h"
#include "runtime/launch/rmsnorm.h"
#include "runtime/launch/rows_copy.h"
#include "runtime/launch/sample.h"
#include "runtime/launch/vec_glue.h"
#include "kit/src/sparse_attn_abi.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gpu_draft_feed(gpu_backend *b, int seq, int64_t len)
{
    const model_config *c = b->cfg;
    gpu_seq *s = &b->seqs[seq];
    int d = c->dim, hd = c->head_dim, tw = c->n_dspark_targets * d;
    if (len <= s->draft_len) {
        s->draft_len = len; /* a roll back: the rings' later slots are written again when re-committed */
        return 0;
    }
    int64_t from = s->draft_len - s->taps_pos0;
    if (from < 0 || len - s->taps_pos0 > s->taps_n)
        return dsk_err("DSpark: sequence %d commits positions %lld..%lld, but its last round held %lld..%lld", seq,
                       (long long)s->draft_len, (long long)len, (long long)s->taps_pos0,
                       (long long)(s->taps_pos0 + s->taps_n));
    int n = (int)(len - s->draft_len);
    if (n > b->max_rows)
        return dsk_err("DSpark: %d positions fed at once, a round holds %d", n, b->max_rows);
    /* pinned: the copies read them after this returns (the stream orders them before the next round) */
    int32_t *pos = IO(b, io_feed), *dst = pos + b->max_rows;
    for (int i = 0; i < n; i++) {
        int64_t p = s->draft_len + i;
        pos[i] = (int32_t)p;
        dst[i] = n - i <= b->ring ? seq * b->ring + (int32_t)(p % b->ring) : -1;
    }
    CU_TRY(cu.cuMemcpyHtoDAsync(b->feed_pos, pos, sizeof(int32_t) * (size_t)n, b->s));
    CU_TRY(cu.cuMemcpyHtoDAsync(b->feed_dst, dst, sizeof(int32_t) * (size_t)n, b->s));
    /* m = main_norm(main_proj(taps)); the same m for every stage */
    CUdeviceptr taps = b->taps + (CUdeviceptr)(s->taps_row0 + from) * tw * 2;
    TRY(op_exl3_matmul(b->k, b->s, &b->w.main_proj, taps, tw, n, b->y16, d, EXL3_OUT_BF16, &b->ws));
    TRY(op_rmsnorm(b->k, b->s, b->y16, b->w.main_norm, b->xn, n, d, c->norm_eps));
    for (int k = 0; k < c->n_mtp_layers; k++) {
        const gpu_block *g = &b->w.blocks[c->n_layers + k];
        TRY(op_exl3_matmul(b->k, b->s, &g->wkv, b->xn, d, n, b->kv, hd, EXL3_OUT_BF16, &b->ws));
        vec_glue_op kvop = {.norm_w = g->kv_norm, .eps = c->norm_eps, .rope_dim = c->rope_head_dim,
                            .freqs = b->freqs[0], .pos = b->feed_pos, .qdq = KVQ_FP8_E4M3};
        TRY(op_vec_glue(b->k, b->s, &kvop, b->kv, hd, b->kv, hd, n, 1, hd));
        CUdeviceptr ring = b->dring + (CUdeviceptr)k * b->max_seqs * b->ring * hd * 2;
        TRY(op_rows_copy(b->k, b->s, b->kv, (int64_t)hd * 2, 0, ring, (int64_t)hd * 2, b->feed_dst, n, hd * 2));
    }
    s->draft_len = len;
    return 0;
}

/* A draft call's launches, from the embedding to the last draw: what a draft graph captures (the plan and
 * the draw's parameters are uploaded before, the drafts copied back after). */
typedef struct {
    int n, trunc;
    size_t sws;
} draft_shape;

static int draft_device(gpu_backend *b, const round_shape *sh, void *arg)
{
    const draft_shape *ds = arg;
    const model_config *c = b->cfg;
    int B = c->dspark_block_size, hc = c->hc_mult, d = c->dim, V = c->vocab_size, Rk = c->dspark_markov_rank;
    int n = ds->n, R = sh->R;
    /* the stages */
    TRY(op_embed(b->k, b->s, b->w.embed, V, DEV(b, tokens), b->X, b->pi0, R, hc, d));
    layer_ctx L = {b, sh, b->pi0, hc, 0, 0};
    for (int k = 0; k < c->n_mtp_layers; k++)
        if (gpu_layer(&L, c->n_layers + k))
            return dsk_err_ctx("DSpark stage %d", k);
    /* the head with mtp_norm; u (the un-normed hc_pre) for the confidence */
    CUdeviceptr u = b->head_in;
    TRY(op_mhc_pre(b->k, b->s, b->X, L.pi, L.pi_stride, b->w.mtp_norm, c->norm_eps, b->xn, u, R, hc, d));
    TRY(gpu_head_logits(b, b->xn, R));
    /* draft by draft: the previous token's Markov row, the bias, the confidence and the add, the draw */
    for (int j = 0; j < B; j++) {
        TRY(op_rows_copy(b->k, b->s, b->w.markov_embed, (int64_t)Rk * 2, b->draft_prev, b->draft_e, (int64_t)Rk * 2, 0, n,
                         Rk * 2));
        TRY(op_dspark_markov_bias(b->k, b->s, b->draft_e, n, Rk, b->w.markov_head, V, b->draft_bias));
        dspark_conf_args ca = {.u = u + (CUdeviceptr)j * d * 2, .ldu = (int64_t)B * d, .d = d, .e = b->draft_e,
                               .lde = Rk, .R = Rk, .w = b->w.confidence,
                               .conf = b->draft_conf + (CUdeviceptr)j * b->draft_ld * 4, .bias = b->draft_bias,
                               .ldb = V, .logits = b->logits + (CUdeviceptr)j * V * 4, .ldl = (int64_t)B * V, .V = V,
                               .rows = n};
        TRY(op_dspark_conf(b->k, b->s, &ca));
        sample_args sa = {.logits = b->logits + (CUdeviceptr)j * V * 4, .ldl = (int64_t)B * V, .V = V, .rows = n,
                          .vocab = b->valid_dev, .allow = 0, .ldw = (V + 31) / 32,
                          .params = b->sample_params + (CUdeviceptr)j * n * sizeof(sample_row_params),
                          .candidates = ds->trunc, .tokens = b->draft_tok + (CUdeviceptr)j * b->draft_ld * 4,
                          .logprob = b->logprob_out, .top_ids = b->top_ids_out, .top_lp = b->top_lp_out,
                          .ws = b->ws_misc, .ws_bytes = ds->sws};
        TRY(op_sample(b->k, b->s, &sa));
        CU_TRY(cu.cuMemcpyDtoDAsync(b->draft_prev, b->draft_tok + (CUdeviceptr)j * b->draft_ld * 4,
                                    sizeof(int32_t) * (size_t)n, b->s));
    }
    return 0;
}

/* The graph of this draft shape: found, or captured now. NULL when every slot is taken (*failed 0: this
 * call runs eagerly) or when the capture fails (*failed 1, with a message). */
static CUgraphExec draft_graph(gpu_backend *b, const round_shape *sh, const draft_shape *ds, int *failed)
{
    *failed = 0;
    for (int i = 0; i < b->n_draft_graphs; i++)
        if (b->draft_graphs[i].n == ds->n && b->draft_graphs[i].trunc == ds->trunc)
            return b->draft_graphs[i].g;
    if (b->n_draft_graphs == GPU_MAX_DRAFT_GRAPHS)
        return NULL;
    CUgraphExec g = NULL;
    if (gpu_capture(b, sh, draft_device, (void *)ds, &g)) {
        *failed = 1;
        return NULL;
    }
    b->draft_graphs[b->n_draft_graphs++] = (struct gpu_draft_graph){ds->n, ds->trunc, g};
    return g;
}

static int draft_run(gpu_backend *b, const engine_draft_req *req, int n, int32_t *drafts, float *conf)
{
    const model_config *c = b->cfg;
    int B = c->dspark_block_size, W = c->window_size, V = c->vocab_size, R = n * B;
    if (c->n_mtp_layers == 0)
        return dsk_err("this model has no DSpark stages (num_nextn_predict_layers = 0)");
    if (n > b->max_draft)
        return dsk_err("a GPU draft takes %d sequences at most, %d given", b->max_draft, n);
    if (gpu_xchg_init(b))
        return -1;
    /* the feed's pinned positions are reused below: its copies must be done */
    CU_TRY(cu.cuStreamSynchronize(b->s));
    /* the plan of the block rows: request i's rows i·B .. i·B + B - 1 at positions p+1 .. p+B (p its last
     * committed position), attending to ring positions max(0, p-W+1) .. p, then to its B block rows */
    int32_t *tok = P32(b, tokens), *rpos = P32(b, rope_pos), *pos = P32(b, pos);
    sparse_attn_row *a = (sparse_attn_row *)((char *)b->plan_host + b->plan.attn[0]);
    int32_t *prev = P32(b, ring_dst); /* scratch: the first previous tokens (uploaded separately) */
    for (int i = 0; i < n; i++) {
        const gpu_seq *s = &b->seqs[req[i].seq];
        if (!(s->flags & ENGINE_SEQ_DRAFT) || s->draft_len < 1 || s->draft_len != s->len)
            return dsk_err("DSpark: sequence %d's rings hold %lld positions, %lld are committed%s", req[i].seq,
                           (long long)s->draft_len, (long long)s->len,
                           s->flags & ENGINE_SEQ_DRAFT ? "" : " (it was not opened for drafting)");
        int64_t p = s->len - 1;
        for (int j = 0; j < B; j++) {
            int r = i * B + j;
            tok[r] = j == 0 ? req[i].t0 : c->dspark_noise_token_id;
            pos[r] = rpos[r] = (int32_t)(p + 1 + j);
            a[r] = (sparse_attn_row){(int)(p + 1 + j), (int)(p - W + 1 < 0 ? 0 : p - W + 1), (int)p, (int)(p + 1),
                                     i * B, req[i].seq * b->ring, i * B, B};
        }
        prev[i] = req[i].t0;
    }
    CU_TRY(cu.cuMemcpyHtoDAsync(b->plan_dev, b->plan_host, b->plan.bytes, b->s));
    CU_TRY(cu.cuMemcpyHtoDAsync(b->draft_prev, prev, sizeof(int32_t) * (size_t)n, b->s));
    /* the draw's parameters: draft j of request i at position p + 2 + j, in rows j·n + i */
    sample_row_params *sp = IO(b, io_sp);
    for (int j = 0; j < B; j++)
        for (int i = 0; i < n; i++)
            sp[j * n + i] = (sample_row_params){req[i].sp.temperature, req[i].sp.top_p, req[i].sp.top_k, -1,
                                                req[i].sp.seed, b->seqs[req[i].seq].len + 1 + j, -1, {0, 0, 0}};
    int trunc = 0;
    for (int i = 0; i < n; i++)
        trunc |= req[i].sp.temperature > 0 && (req[i].sp.top_k > 0 || req[i].sp.top_p < 1.0f);
    CU_TRY(cu.cuMemcpyHtoDAsync(b->sample_params, sp, sizeof *sp * (size_t)R, b->s));
    /* the stages, the head and the draws: replayed from the shape's graph, or eagerly */
    size_t sws = op_sample_ws_bytes(n, V, trunc);
    if (sws > b->ws_misc_bytes)
        return dsk_err("the draft's draw needs %zu bytes of scratch, %zu are there", sws, b->ws_misc_bytes);
    round_shape sh = {.R = R, .S = 0};
    draft_shape ds = {n, trunc, sws};
    int failed = 0;
    int graph = b->use_graphs && !b->draft_no_graphs && !b->hook && !kit_sync_launches();
    CUgraphExec g = graph ? draft_graph(b, &sh, &ds, &failed) : NULL;
    if (failed) { /* said once; the rounds keep theirs */
        fprintf(stderr, "gpu: drafts run without CUDA graphs from now on (capturing a draft of %d: %s)\n", n,
                dsk_err_msg());
        b->draft_no_graphs = 1;
    }
    if (g) {
        if (cu.cuGraphLaunch(g, b->s) != CUDA_SUCCESS)
            return dsk_err("cuGraphLaunch failed (a draft of %d)", n);
        b->draft_replays++;
    } else
        TRY(draft_device(b, &sh, &ds));
    int32_t *tk = IO(b, io_tid); /* [B][draft_ld] fits the top-ids slot */
    float *cf = IO(b, io_tlp);
    CU_TRY(cu.cuMemcpyDtoHAsync(tk, b->draft_tok, sizeof(int32_t) * (size_t)B * b->draft_ld, b->s));
    CU_TRY(cu.cuMemcpyDtoHAsync(cf, b->draft_conf, sizeof(float) * (size_t)B * b->draft_ld, b->s));
    CUresult cr = cu.cuStreamSynchronize(b->s);
    if (cr != CUDA_SUCCESS)
        return dsk_cu_fail(cr, "the draft on the device"), dsk_err_ctx("%s", kit_root(b->k));
    if (gpu_xchg_check(b))
        return -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < B; j++) {
            int32_t t = tk[j * b->draft_ld + i];
            if (t < 0)
                return dsk_err("sequence %d: draft %d could not be drawn (no id of the tokenizer is drawable)",
                               req[i].seq, j);
            drafts[(size_t)i * B + j] = t;
            if (conf)
                conf[(size_t)i * B + j] = cf[j * b->draft_ld + i];
        }
    return 0;
}

int gpu_draft_run(gpu_backend *b, const engine_draft_req *req, int n, int32_t *drafts, float *conf)
{
    if (!draft_run(b, req, n, drafts, conf))
        return 0;
    cu.cuStreamSynchronize(b->s); /* nothing of the draft may still run when it returns */
    gpu_counters_reset(b);
    return -1;
}
