/* The GPU backend behind the engine interface (docs/engine.md): opens the GPU and the kit, resolves every
 * variant the model needs before anything runs (a missing one is a start-up error naming it), uploads the
 * weights, allocates every sequence's state and a round's scratch up front (a refusal before anything is
 * half-loaded when the GPU lacks the memory), then runs rounds (gpu_round.c). */
#include "runtime/gpu/gpu_engine.h"
#include "manifest/needs.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/launch/cand_blocks.h"
#include "runtime/launch/mhc.h"
#include "runtime/launch/sample.h"
#include "runtime/launch/sparse_attn.h"
#include "runtime/launch/topk.h"
#include "runtime/ref/rope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 256

/* ---- device memory: every buffer of the backend comes from one arena, sized before it is allocated ---- */

typedef struct {
    gpu_backend *b;
    int dry;
    size_t at;
    CUdeviceptr base;
} arena;

static CUdeviceptr take(arena *a, size_t bytes)
{
    size_t off = (a->at + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    a->at = off + (bytes ? bytes : 16);
    return a->dry ? 0 : a->base + off;
}

/* The one scratch the round's launches take turns on: the most any of them needs at the round's sizes (the
 * sparse attention's split form, the indexer's top-k and candidate blocks over 64-row chunks of the widest
 * reach, the mHC mixes, the draw with its allow masks). */
static size_t misc_need(const gpu_backend *b)
{
    const model_config *c = b->cfg;
    int R = b->max_rows, chunk = R < 64 ? R : 64, N = (int)b->context;
    size_t most = op_mhc_mix_ws_bytes(R, c->hc_mult, c->dim);
#define MOST(x)                                                                                                  \
    do {                                                                                                         \
        size_t w_ = (x);                                                                                         \
        most = w_ > most ? w_ : most;                                                                            \
    } while (0)
    for (int rows = 1; rows <= R; rows++)
        for (int sel = 0; sel < 2; sel++) {
            sparse_attn_args sa = {.rows = rows, .heads = b->w.split.h1 - b->w.split.h0, .head_dim = c->head_dim,
                                   .max_list = c->window_size + (sel ? c->index_topk : 0)};
            MOST(op_sparse_attn_ws_bytes(&sa));
        }
    /* a round's indexer scores N = a power of two from 1024 up, at most the context (gpu_round.c): the top-k
     * of each may take another kernel, with another workspace */
    for (int n = 1024;; n *= 2) {
        int nn = n < N ? n : N;
        MOST(op_topk_ws_bytes(chunk, nn, nn < c->index_topk ? nn : c->index_topk));
        if (c->candidate_source_layer >= 0)
            MOST(op_cand_blocks_ws_bytes(chunk, nn, c->candidate_block_size, c->candidate_topk_blocks));
        if (nn == N)
            break;
    }
    size_t words = (size_t)(c->vocab_size + 31) / 32;
    MOST(((sizeof(uint32_t) * words * (size_t)R + 255) & ~(size_t)255) + op_sample_ws_bytes(R, c->vocab_size, 1) + 256);
#undef MOST
    return (most + 255) & ~(size_t)255;
}

/* Lay out (dry: count) every buffer of the backend: state, plan and scratch. */
static void layout(gpu_backend *b, arena *a)
{
    const model_config *c = b->cfg;
    size_t R = (size_t)b->max_rows, S = (size_t)b->max_seqs, hd = (size_t)c->head_dim, d = (size_t)c->dim;
    size_t hc = (size_t)c->hc_mult, ring = (size_t)b->ring, V = (size_t)c->vocab_size;
    size_t H = (size_t)c->n_heads, ihd = (size_t)c->index_head_dim, nh = (size_t)c->index_n_heads;
    size_t K = (size_t)c->index_topk, E = (size_t)(c->n_routed_experts > c->dspark_n_routed_experts
                                                        ? c->n_routed_experts
                                                        : c->dspark_n_routed_experts);
    size_t act = (size_t)(c->n_activated_experts > c->dspark_n_activated_experts ? c->n_activated_experts
                                                                                  : c->dspark_n_activated_experts);
    size_t ncoef = 2 * hc + hc * hc;
    b->rings = take(a, sizeof(uint16_t) * (size_t)c->n_layers * S * ring * hd);
    b->dring = take(a, sizeof(uint16_t) * (size_t)(c->n_mtp_layers > 0 ? c->n_mtp_layers : 1) * S * ring * hd);
    int n2 = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->roles[l].is_kv_source && c->roles[l].ratio == 2)
            b->state_index[l] = n2++;
    b->state_a = take(a, sizeof(float) * (size_t)(n2 ? n2 : 1) * S * ring * hd);
    b->state_s = take(a, sizeof(float) * (size_t)(n2 ? n2 : 1) * S * ring * hd);
    for (int l = 0; l < c->n_layers; l++)
        if (c->roles[l].is_kv_source) {
            size_t rows = (size_t)(b->pool / c->roles[l].ratio) + 2;
            b->ckv[l] = take(a, sizeof(uint16_t) * rows * hd);
            b->ikv[l] = take(a, sizeof(uint16_t) * rows * ihd);
        }
    b->freqs[0] = take(a, sizeof(float) * (size_t)c->rope_head_dim / 2);
    b->freqs[1] = take(a, sizeof(float) * (size_t)c->rope_head_dim / 2);
    b->valid_dev = take(a, sizeof(uint32_t) * ((V + 31) / 32));
    b->plan_dev = take(a, b->plan.bytes);
    b->X = take(a, sizeof(uint16_t) * R * hc * d);
    b->X2 = take(a, sizeof(uint16_t) * R * hc * d);
    b->coef = take(a, sizeof(float) * R * ncoef);
    b->coef2 = take(a, sizeof(float) * R * ncoef);
    b->pi0 = take(a, sizeof(float) * R * hc);
    b->xn = take(a, sizeof(uint16_t) * R * d);
    b->qkv_ld = c->q_lora_rank + c->head_dim * 2; /* wq_a | wkv | ratio-1 compressor */
    b->qkv = take(a, sizeof(uint16_t) * R * (size_t)b->qkv_ld);
    b->q = take(a, sizeof(uint16_t) * R * H * hd);
    b->qi = take(a, sizeof(uint16_t) * R * nh * ihd);
    b->kv = take(a, sizeof(uint16_t) * R * hd);
    b->o = take(a, sizeof(uint16_t) * R * H * hd);
    b->z = take(a, sizeof(uint16_t) * R * (size_t)c->o_groups * (size_t)c->o_lora_rank);
    b->y32 = take(a, sizeof(float) * R * d);
    b->y16 = take(a, sizeof(uint16_t) * R * d);
    b->wix = take(a, sizeof(float) * R * nh);
    b->score_cap = b->context;
    b->score = take(a, sizeof(float) * (R < 64 ? R : 64) * (size_t)b->score_cap);
    for (int l = 0; l < c->n_layers; l++)
        if (c->roles[l].is_index_source)
            b->sel[l] = take(a, sizeof(int32_t) * R * K);
    b->lat = take(a, sizeof(uint16_t) * R * hd);
    b->lat2 = take(a, sizeof(uint16_t) * R * hd);
    b->a32 = take(a, sizeof(float) * R * hd);
    b->s32 = take(a, sizeof(float) * R * hd);
    b->ik = take(a, sizeof(uint16_t) * R * ihd);
    size_t nb = (size_t)(b->context + c->candidate_block_size - 1) / (size_t)(c->candidate_block_size > 0 ? c->candidate_block_size : 1);
    b->bs = take(a, sizeof(float) * (R < 64 ? R : 64) * nb);
    b->topk_val = take(a, sizeof(float) * 64 * K);
    b->cand = take(a, sizeof(uint32_t) * R * ((nb + 31) / 32 + 1));
    b->logits = take(a, sizeof(float) * R * V);
    b->logits_part = take(a, b->xchg->tp > 1 ? sizeof(float) * R * V / (size_t)b->xchg->tp : 16);
    b->head_in = take(a, sizeof(uint16_t) * R * hc * d);
    b->tokens_out = take(a, sizeof(int32_t) * R);
    b->logprob_out = take(a, sizeof(float) * R);
    b->top_ids_out = take(a, sizeof(int32_t) * R * SAMPLE_MAX_TOP_LOGPROBS);
    b->top_lp_out = take(a, sizeof(float) * R * SAMPLE_MAX_TOP_LOGPROBS);
    b->sample_params = take(a, 64 * R);
    b->moe_ids = take(a, sizeof(int32_t) * R * act);
    b->moe_w = take(a, sizeof(float) * R * act);
    b->gate_logits = take(a, sizeof(float) * R * E);
    size_t cols = (size_t)model_engram_cols(c), ew = (size_t)c->engram_head_dim;
    b->eg_rows = take(a, sizeof(uint16_t) * R * cols * ew);
    b->eg_kv = take(a, sizeof(uint16_t) * R * (hc + 1) * d);
    b->taps = take(a, sizeof(uint16_t) * R * (size_t)(c->n_dspark_targets > 0 ? c->n_dspark_targets : 1) * d);
    if (c->vision_n_layers > 0) {
        b->img_stage = take(a, sizeof(uint16_t) * R * d);
        b->img_idx = take(a, sizeof(int32_t) * R * (2 * hc + 1));
        b->img_save = take(a, sizeof(uint16_t) * R * hc * d);
    }
    /* the drafter's: max_draft requests of B rows */
    size_t B = (size_t)(c->n_mtp_layers > 0 ? c->dspark_block_size : 1), D = (size_t)b->draft_ld;
    size_t Rk = (size_t)(c->n_mtp_layers > 0 ? c->dspark_markov_rank : 8);
    b->draft_prev = take(a, sizeof(int32_t) * D);
    b->draft_tok = take(a, sizeof(int32_t) * B * D);
    b->draft_conf = take(a, sizeof(float) * B * D);
    b->draft_e = take(a, sizeof(uint16_t) * D * Rk);
    b->draft_bias = take(a, c->n_mtp_layers > 0 ? sizeof(float) * D * V : 16);
    b->feed_pos = take(a, sizeof(int32_t) * R);
    b->feed_dst = take(a, sizeof(int32_t) * R);
    b->ws_misc_bytes = misc_need(b);
    b->ws_misc = take(a, b->ws_misc_bytes);
    b->mix_cnt = take(a, sizeof(uint32_t) * MHC_MIX_COUNTERS);
}

/* Engram's placement when none is asked for: the tables in GPU memory when they take at most an eighth of
 * what is free now (the small presets), else the checkpoint's rows through the host store (the release's
 * ~203 GB). Said on stderr. NULL: the GPU's memory could not be read. */
static const char *engram_default(const model_config *c, const st_set *st)
{
    if (c->n_engram_layers == 0)
        return "host";
    size_t bytes = 0, free_b = 0, total_b = 0;
    char nm[96];
    for (int k = 0; k < c->n_engram_layers; k++)
        for (int j = 0; j < 2; j++) {
            snprintf(nm, sizeof nm, "layers.%d.engram.embed.%s", c->engram_layer_ids[k], j ? "scale" : "weight");
            const st_tensor *t = st_get(st, nm);
            bytes += t ? t->nbytes : 0;
        }
    CUresult r = cu.cuMemGetInfo(&free_b, &total_b);
    if (r != CUDA_SUCCESS)
        return dsk_cu_fail(r, "cuMemGetInfo"), NULL;
    const char *p = bytes <= free_b / 8 ? "device" : "host";
    fprintf(stderr, "gpu: Engram tables %.2f GiB, %.2f GiB free: rows from %s (--engram to choose)\n",
            bytes / 1073741824.0, free_b / 1073741824.0, !strcmp(p, "device") ? "GPU memory" : "the checkpoint (host)");
    return p;
}

/* The plan's layout for max_rows rows (gpu_engine.h). */
static void plan_layout(gpu_backend *b)
{
    size_t R = (size_t)b->max_rows, at = 0;
    gpu_plan_layout *p = &b->plan;
#define FIELD(f, bytes)                                                                                          \
    do {                                                                                                         \
        p->f = at;                                                                                               \
        at = (at + (bytes) + 15) & ~(size_t)15;                                                                  \
    } while (0)
    FIELD(tokens, 4 * R);
    FIELD(pos, 4 * R);
    FIELD(rope_pos, 4 * R);
    for (int r = 0; r < 3; r++) {
        FIELD(attn[r], 32 * R);
        FIELD(key_base[r], 4 * R);
        FIELD(reach[r], 4 * R);
        FIELD(emit_src[r], 4 * R);
        FIELD(emit_dst[r], 4 * R);
        FIELD(emit_pos[r], 4 * R);
    }
    FIELD(ring_dst, 4 * R);
    FIELD(state_dst, 4 * R);
    FIELD(pool2, 8 * R);
    FIELD(sample_src, 4 * R);
    const model_config *c = b->cfg;
    size_t eg = (size_t)c->n_engram_layers * R * (size_t)model_engram_cols(c) *
                (size_t)(engram_record_bytes(c->engram_head_dim) > 8 ? engram_record_bytes(c->engram_head_dim) : 8);
    FIELD(engram, eg);
#undef FIELD
    p->bytes = at;
}

/* The EXL3 launchers' workspace: the most any launch of a round needs (every linear and grouped set at
 * the round's rows, every MoE at its rows and slots). */
static size_t ws_need(const gpu_backend *b)
{
    const model_config *c = b->cfg;
    int R = b->max_rows;
    size_t most = 0;
#define WS(x)                                                                                                        do {                                                                                                                 size_t w_ = (x);                                                                                                 most = w_ > most ? w_ : most;                                                                                } while (0)
    const exl3_dev_linear *head = &b->w.head;
    WS(exl3_ws_bytes_matmul(&head, 1, R));
    for (int l = 0; l < c->n_all_layers; l++) {
        const gpu_block *g = &b->w.blocks[l];
        const exl3_dev_linear *grp[3] = {&g->wq_a, &g->wkv, &g->c_wkv};
        WS(exl3_ws_bytes_matmul(grp, c->roles[l].is_kv_source && c->roles[l].ratio == 1 ? 3 : 2, R));
        const exl3_dev_linear *one[] = {&g->wq_b, &g->wo_b}, *woa[EXL3_MAX_BLOCKS];
        for (int i = 0; i < 2; i++)
            WS(exl3_ws_bytes_matmul(&one[i], 1, R));
        int G = b->w.split.g1 - b->w.split.g0;
        for (int gi = 0; gi < G; gi++)
            woa[gi] = &g->wo_a[gi];
        WS(exl3_ws_bytes_matmul(woa, G, R));
        if (c->roles[l].is_kv_source) {
            const exl3_dev_linear *cg[2] = {&g->c_wkv, &g->c_wgate}, *ik = &g->ix_wk;
            if (c->roles[l].ratio == 2)
                WS(exl3_ws_bytes_matmul(cg, 2, R));
            WS(exl3_ws_bytes_matmul(&ik, 1, R));
        }
        if (c->roles[l].is_index_source) {
            const exl3_dev_linear *iq = &g->ix_wq_b;
            WS(exl3_ws_bytes_matmul(&iq, 1, R));
        }
        if (c->roles[l].engram >= 0) {
            const exl3_dev_linear *eg = &g->eg_wkv;
            WS(exl3_ws_bytes_matmul(&eg, 1, R));
        }
        WS(exl3_ws_bytes_moe(&g->experts, R, g->n_active));
        WS(exl3_ws_bytes_moe(&g->shared, R, 1));
    }
#undef WS
    return most;
}

/* The side stream's EXL3 workspace: wq_b and the shared expert at rounds of R rows. */
static size_t ws_side_need(const gpu_backend *b, int R)
{
    size_t most = 0;
    for (int l = 0; l < b->cfg->n_all_layers; l++) {
        const exl3_dev_linear *wq_b = &b->w.blocks[l].wq_b;
        size_t a = exl3_ws_bytes_matmul(&wq_b, 1, R), m = exl3_ws_bytes_moe(&b->w.blocks[l].shared, R, 1);
        most = a > most ? a : most;
        most = m > most ? m : most;
    }
    return most;
}

/* The backend's context current on the calling thread: the server calls in from its scheduler thread, not
 * the one that opened the backend, and allocations (an image's tower and span) need it current. */
static int bind_ctx(gpu_backend *b)
{
    CUresult r = cu.cuCtxSetCurrent(b->g.ctx);
    return r == CUDA_SUCCESS ? 0 : dsk_cu_fail(r, "cuCtxSetCurrent");
}

/* Free the image spans of s that start at or after pos (a roll back below them, or the sequence's end). */
static void drop_spans(gpu_seq *s, int64_t pos)
{
    int k = 0;
    for (int i = 0; i < s->n_spans; i++) {
        if (s->spans[i].pos >= pos)
            cu.cuMemFree(s->spans[i].rows);
        else
            s->spans[k++] = s->spans[i];
    }
    s->n_spans = k;
    if (k == 0) {
        free(s->spans);
        s->spans = NULL;
    }
}

static void gpu_free_all(gpu_backend *b)
{
    for (int i = 0; i < b->ngraphs; i++) {
        for (int k = 0; k <= ENGRAM_MAX_LAYERS; k++)
            if (b->graphs[i].forward[k])
                cu.cuGraphExecDestroy(b->graphs[i].forward[k]);
        if (b->graphs[i].draw)
            cu.cuGraphExecDestroy(b->graphs[i].draw);
    }
    for (int i = 0; i < b->n_draft_graphs; i++)
        cu.cuGraphExecDestroy(b->draft_graphs[i].g);
    if (b->io_host)
        cu.cuMemFreeHost(b->io_host);
    gpu_xchg_free(b);
    if (b->ws.ptr)
        exl3_workspace_free(&b->ws);
    if (b->arena)
        cu.cuMemFree(b->arena);
    if (b->plan_host)
        cu.cuMemFreeHost(b->plan_host);
    if (b->eg_host)
        cu.cuMemFreeHost(b->eg_host);
    gpu_weights_free(&b->w);
    engram_fetch_end(b->fetch);
    free(b->eg_idx);
    engram_store_close(b->eg);
    st_close(b->st);
    if (b->ws_side.ptr)
        exl3_workspace_free(&b->ws_side);
    if (b->side_fork)
        cu.cuEventDestroy(b->side_fork);
    if (b->side_join)
        cu.cuEventDestroy(b->side_join);
    if (b->side_mid)
        cu.cuEventDestroy(b->side_mid);
    if (b->side)
        cu.cuStreamDestroy(b->side);
    if (b->s)
        cu.cuStreamDestroy(b->s);
    kit_close(b->k);
    for (int i = 0; b->seqs && i < b->max_seqs; i++) {
        free(b->seqs[i].tokens);
        free(b->seqs[i].cids);
        drop_spans(&b->seqs[i], 0);
    }
    free(b->img_runs);
    free(b->img_idx_host);
    if (b->vis_scratch)
        cu.cuMemFree(b->vis_scratch);
    free(b->seqs);
    free(b->range_base);
    free(b->range_len);
    dsk_gpu_close(&b->g);
    free(b);
}

static void gpu_close(void *impl)
{
    bind_ctx(impl);
    gpu_free_all(impl);
}

/* Every variant the model needs is in the kit (resolved by kit_load): else a start-up error naming each. */
static int check_needs(gpu_backend *b, const char *model_dir)
{
    need_list needs;
    needs_settings ns = {.max_rows = b->max_rows > 64 ? 64 : b->max_rows, .sm = kit_sm(b->k)};
    if (needs_for_model_dir(model_dir, &ns, &needs))
        return -1;
    char missing[2048] = "";
    int n = 0;
    for (int i = 0; i < needs.n; i++) {
        char name[128];
        need_describe(&needs.v[i], name, sizeof name);
        int pos = 0;
        char fam[64], params[96] = "";
        sscanf(name, "%63s %n", fam, &pos);
        snprintf(params, sizeof params, "%s", name + pos);
        for (char *q = params; *q; q++)
            if (*q == ' ')
                *q = ',';
        if (!kit_find(b->k, needs.v[i].family, params)) {
            if (n++ < 12)
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "\n  %s (%s)", name,
                         needs.v[i].why);
        }
    }
    need_list_free(&needs);
    if (n)
        return dsk_err("the kit lacks %d variant%s this model needs (build a kit with dskit-build --for %s):%s", n,
                       n == 1 ? "" : "s", model_dir, missing);
    return 0;
}

/* ---- sequences: a slot, and a contiguous range of the pool's positions (first fit) ---- */

static int range_alloc(gpu_backend *b, int64_t len, int64_t *base)
{
    int64_t at = 0;
    int i = 0;
    for (; i < b->nranges; i++) {
        if (b->range_base[i] - at >= len)
            break;
        at = b->range_base[i] + b->range_len[i];
    }
    if (at + len > b->pool)
        return dsk_err("the pool's %lld positions have no free range of %lld (in use by %d sequences)",
                       (long long)b->pool, (long long)len, b->nranges);
    memmove(b->range_base + i + 1, b->range_base + i, sizeof(int64_t) * (size_t)(b->nranges - i));
    memmove(b->range_len + i + 1, b->range_len + i, sizeof(int64_t) * (size_t)(b->nranges - i));
    b->range_base[i] = at;
    b->range_len[i] = len;
    b->nranges++;
    *base = at;
    return 0;
}

static void range_free(gpu_backend *b, int64_t base)
{
    for (int i = 0; i < b->nranges; i++)
        if (b->range_base[i] == base) {
            memmove(b->range_base + i, b->range_base + i + 1, sizeof(int64_t) * (size_t)(b->nranges - i - 1));
            memmove(b->range_len + i, b->range_len + i + 1, sizeof(int64_t) * (size_t)(b->nranges - i - 1));
            b->nranges--;
            return;
        }
}

static int gpu_seq_open(void *impl, int seq, int64_t reserve, unsigned flags)
{
    gpu_backend *b = impl;
    gpu_seq *s = &b->seqs[seq];
    /* ranges start at even positions: a ratio-2 source's rows of the range are base / 2 onwards */
    int64_t len = (reserve + 1) & ~(int64_t)1, base = 0;
    if (range_alloc(b, len, &base))
        return -1;
    s->tokens = dsk_malloc(sizeof(int32_t) * (size_t)reserve);
    s->cids = dsk_malloc(sizeof(int32_t) * (size_t)reserve);
    if (!s->tokens || !s->cids) {
        free(s->tokens);
        free(s->cids);
        range_free(b, base);
        return -1;
    }
    s->open = 1;
    s->flags = flags;
    s->reserve = reserve;
    s->base = base;
    s->len = 0;
    return 0;
}

static void gpu_seq_close(void *impl, int seq)
{
    gpu_backend *b = impl;
    gpu_seq *s = &b->seqs[seq];
    if (s->n_spans)
        bind_ctx(b); /* a failure leaves the spans' memory to the context's end */
    range_free(b, s->base);
    free(s->tokens);
    free(s->cids);
    drop_spans(s, 0);
    memset(s, 0, sizeof *s);
}

static int gpu_commit(void *impl, int seq, int64_t old_len, int64_t len)
{
    gpu_backend *b = impl;
    if (len < old_len && b->seqs[seq].n_spans) {
        bind_ctx(b); /* on failure the records go all the same, their memory with the context */
        drop_spans(&b->seqs[seq], len);
    }
    b->seqs[seq].len = len; /* every store is position-indexed and the rings keep the rollback window */
    return b->seqs[seq].flags & ENGINE_SEQ_DRAFT ? gpu_draft_feed(b, seq, len) : 0;
}

static int gpu_step(void *impl, const engine_row *rows, int n, engine_out *out, const engine_fill *fill)
{
    return gpu_round(impl, rows, n, out, fill);
}

static int gpu_draft(void *impl, const engine_draft_req *req, int n, int32_t *drafts, float *conf)
{
    return gpu_draft_run(impl, req, n, drafts, conf);
}

/* An image at pos: its tower runs now (gpu_vision.c); rounds give the span's positions its rows. */
static int gpu_image(void *impl, int seq, int64_t pos, const engine_image *img)
{
    gpu_backend *b = impl;
    gpu_seq *s = &b->seqs[seq];
    if (bind_ctx(b))
        return -1;
    struct gpu_span *sp = dsk_realloc(s->spans, sizeof *sp * (size_t)(s->n_spans + 1));
    if (!sp)
        return -1;
    s->spans = sp;
    CUdeviceptr rows;
    int64_t n;
    if (gpu_vision_run(b, img->patches, img->n_vit_h, img->n_vit_w, &rows, &n, NULL))
        return -1;
    s->spans[s->n_spans++] = (struct gpu_span){pos, n, rows};
    return 0;
}

static void gpu_engram_counters(void *impl, engine_engram_stats *out)
{
    gpu_backend *b = impl;
    if (!b->eg)
        return;
    engram_counters c;
    engram_store_counters(b->eg, &c);
    *out = (engine_engram_stats){c.rows,         c.reads,      c.read_bytes, c.cache_hits,
                                    c.cache_misses, c.slow_reads, c.errors,     c.timeouts};
}

static const engine_backend_ops gpu_ops = {gpu_close,  gpu_seq_open, gpu_seq_close, gpu_step,
                                           gpu_commit, gpu_draft,    gpu_image,     gpu_engram_counters};

/* This rank's GPU: rank r of "--devices D0,D1,..." (one per rank), else device r with tp > 1 (one GPU per
 * rank), else --device. */
static int pick_device(const engine_opts *o, const rank_xchg *x, int *dev)
{
    *dev = x->tp > 1 ? x->rank : o->device > 0 ? o->device : 0;
    if (!o->devices)
        return 0;
    const char *s = o->devices;
    for (int r = 0;; r++) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 63 || (*end && *end != ','))
            return dsk_err("--devices '%s': a list of GPU numbers, one per rank (0,1)", o->devices);
        if (r == x->rank)
            *dev = (int)v;
        if (!*end) {
            if (r + 1 != x->tp)
                return dsk_err("--devices '%s' names %d GPUs for %d ranks", o->devices, r + 1, x->tp);
            return 0;
        }
        s = end + 1;
    }
}

int gpu_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops)
{
    const engine_opts *o = a->opts;
    if (!o->kit)
        return dsk_err("--backend gpu needs a kit (--kit KIT: dskit-build --arch sm_90 --out kits)");
    gpu_backend *b = dsk_calloc(1, sizeof *b);
    if (!b)
        return -1;
    model_config cfg;
    double t0 = dsk_now();
    int dev = 0;
    if (model_config_load(o->model_dir, &cfg) || pick_device(o, a->xchg, &dev) || dsk_gpu_open(dev, &b->g)) {
        free(b);
        return -1;
    }
    b->xchg = a->xchg;
    b->valid = a->valid;
    b->max_seqs = o->max_seqs;
    b->max_rows = o->max_rows > 0 && o->max_rows < 1024 ? o->max_rows : 1024;
    if (cfg.n_mtp_layers > 0) {
        int per = b->max_rows / (cfg.dspark_block_size > 0 ? cfg.dspark_block_size : 1);
        b->max_draft = per < 64 ? per : 64;
        b->max_draft = b->max_draft < b->max_seqs ? b->max_draft : b->max_seqs;
    } else
        b->max_draft = 1;
    b->draft_ld = (b->max_draft + 3) & ~3;
    b->spare = cfg.dspark_block_size + 1 > 8 ? cfg.dspark_block_size + 1 : 8;
    b->ring = cfg.window_size + b->spare;
    b->context = o->context > 0 && o->context < cfg.max_seq_len ? o->context : cfg.max_seq_len;
    if (b->context > 1 << 20)
        b->context = 1 << 20;
    b->pool = o->pool > 0 ? o->pool : (int64_t)b->max_seqs * b->context;
    if (kit_open(o->kit, NULL, &b->k) || kit_load(b->k, &b->g) || check_needs(b, o->model_dir) ||
        st_open(o->model_dir, &b->st)) {
        gpu_free_all(b);
        return -1;
    }
    CU_TRY(cu.cuStreamCreate(&b->s, CU_STREAM_NON_BLOCKING));
    const char *placement = o->engram;
    if (!placement && (placement = engram_default(&cfg, b->st)) == NULL) {
        gpu_free_all(b);
        return -1;
    }
    gpu_weights_opts wo = {.engram_on_device = !strcmp(placement, "device"), .progress = b->xchg->rank == 0,
                           .tp = b->xchg->tp, .rank = b->xchg->rank};
    if (gpu_weights_load(&cfg, b->st, &wo, &b->w)) {
        gpu_free_all(b);
        return -1;
    }
    b->cfg = &b->w.cfg;
    plan_layout(b);
    arena ar = {b, 1, 0, 0};
    layout(b, &ar);
    size_t ws = ws_need(b);
    const char *side = getenv("DSKIT_GPU_SIDE");
    b->side_rows = side && !strcmp(side, "0") ? 0 : b->max_rows < GPU_SIDE_MAX_ROWS ? b->max_rows : GPU_SIDE_MAX_ROWS;
    size_t ws_side = b->side_rows ? ws_side_need(b, b->side_rows) : 0;
    size_t scratch = ar.at + ws + ws_side; /* the state and the round's scratch, both workspaces */
    size_t free_b = 0, total_b = 0;
    CU_TRY(cu.cuMemGetInfo(&free_b, &total_b));
    if (scratch > free_b) {
        dsk_err("not enough GPU memory for the sequences' state and a round's scratch: they need %.2f GiB (%d "
                "sequences of %lld positions, rounds of %d rows), %.2f GiB are free after the weights",
                scratch / 1073741824.0, b->max_seqs, (long long)b->context, b->max_rows, free_b / 1073741824.0);
        gpu_free_all(b);
        return -1;
    }
    if (cu.cuMemAlloc(&b->arena, ar.at) != CUDA_SUCCESS) {
        dsk_err("allocating %.2f GiB of GPU memory for the state and scratch failed", ar.at / 1073741824.0);
        gpu_free_all(b);
        return -1;
    }
    ar.base = b->arena;
    ar.dry = 0;
    ar.at = 0;
    layout(b, &ar);
    if (cu.cuMemsetD32(b->mix_cnt, 0, MHC_MIX_COUNTERS) != CUDA_SUCCESS) {
        dsk_err("clearing the mhc_mix arrival counters failed");
        gpu_free_all(b);
        return -1;
    }
    /* the draw's pinned host memory: parameters, masks and results of max_rows rows */
    {
        size_t R = (size_t)b->max_rows, at = 0, words = (size_t)(b->cfg->vocab_size + 31) / 32;
#define IO_AT(f, bytes) (b->f = at, at = (at + (bytes) + 63) & ~(size_t)63)
        IO_AT(io_sp, sizeof(sample_row_params) * R);
        IO_AT(io_allow, sizeof(uint32_t) * words * R);
        IO_AT(io_tok, sizeof(int32_t) * R);
        IO_AT(io_lp, sizeof(float) * R);
        IO_AT(io_tid, sizeof(int32_t) * R * SAMPLE_TOP_LOGPROBS);
        IO_AT(io_tlp, sizeof(float) * R * SAMPLE_TOP_LOGPROBS);
        IO_AT(io_feed, sizeof(int32_t) * 2 * R);
#undef IO_AT
        b->io_bytes = at;
    }
    const char *graphs = getenv("DSKIT_GPU_GRAPHS");
    if (b->side_rows && (cu.cuStreamCreate(&b->side, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
                         cu.cuEventCreate(&b->side_fork, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
                         cu.cuEventCreate(&b->side_join, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
                         cu.cuEventCreate(&b->side_mid, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
                         exl3_workspace_alloc(&b->ws_side, &b->g, ws_side))) {
        dsk_err("setting up the side stream (its stream, three events and %.1f MiB of EXL3 workspace) failed",
                ws_side / 1048576.0);
        gpu_free_all(b);
        return -1;
    }
    if (exl3_workspace_alloc(&b->ws, &b->g, ws) || cu.cuMemAllocHost(&b->plan_host, b->plan.bytes) != CUDA_SUCCESS ||
        cu.cuMemAllocHost(&b->io_host, b->io_bytes) != CUDA_SUCCESS) {
        gpu_free_all(b);
        return -1;
    }
    /* (the ranks' exchange transport is set up by the first round, once every rank has opened: gpu_xchg.c) */
    b->use_graphs = !(graphs && !strcmp(graphs, "0"));
    const char *cc = getenv("DSKIT_CHECK_COUNTERS");
    b->check_counters = cc && !strcmp(cc, "1");
    /* RoPE frequencies of the two kinds, and the tokenizer's ids */
    float f[2][64];
    rope_params rp0 = model_rope(b->cfg, 0), rp1 = model_rope(b->cfg, 1);
    ref_rope_freqs(&rp0, f[0]);
    ref_rope_freqs(&rp1, f[1]);
    CU_TRY(cu.cuMemcpyHtoD(b->freqs[0], f[0], sizeof(float) * (size_t)b->cfg->rope_head_dim / 2));
    CU_TRY(cu.cuMemcpyHtoD(b->freqs[1], f[1], sizeof(float) * (size_t)b->cfg->rope_head_dim / 2));
    CU_TRY(cu.cuMemcpyHtoD(b->valid_dev, b->valid, sizeof(uint32_t) * (size_t)((b->cfg->vocab_size + 31) / 32)));
    b->eg_timeout_ms = o->engram_timeout_ms > 0 ? o->engram_timeout_ms : 10000;
    if (b->cfg->n_engram_layers > 0 &&
        !(b->eg_idx = dsk_malloc(sizeof(int64_t) * (size_t)b->cfg->n_engram_layers * (size_t)b->max_rows *
                                 (size_t)model_engram_cols(b->cfg)))) {
        gpu_free_all(b);
        return -1;
    }
    if (b->cfg->n_engram_layers > 0 && !wo.engram_on_device) {
        engram_store_opts so = {.cache_bytes = o->engram_cache ? o->engram_cache : (size_t)256 << 20};
        if (engram_source_from_model(b->st, o->model_dir, &b->eg_src) ||
            engram_store_open(placement, &b->eg_src, &so, &b->eg)) {
            dsk_err_ctx("Engram rows from '%s'", placement);
            gpu_free_all(b);
            return -1;
        }
    }
    b->seqs = dsk_calloc((size_t)b->max_seqs, sizeof *b->seqs);
    b->range_base = dsk_calloc((size_t)b->max_seqs + 1, sizeof(int64_t));
    b->range_len = dsk_calloc((size_t)b->max_seqs + 1, sizeof(int64_t));
    if (cfg.vision_n_layers > 0) {
        b->img_runs = dsk_calloc((size_t)b->max_rows, sizeof *b->img_runs);
        b->img_idx_host = dsk_calloc((size_t)b->max_rows * (2 * (size_t)cfg.hc_mult + 1), sizeof(int32_t));
    }
    if (!b->seqs || !b->range_base || !b->range_len || (cfg.vision_n_layers > 0 && (!b->img_runs || !b->img_idx_host))) {
        gpu_free_all(b);
        return -1;
    }
    char rank[48] = "";
    if (b->xchg->tp > 1)
        snprintf(rank, sizeof rank, ", rank %d of %d", b->xchg->rank, b->xchg->tp);
    snprintf(b->device, sizeof b->device, "%s %d (cc %d.%d, %d SMs)%s, kit %s", b->g.name, dev, b->g.cc_major,
             b->g.cc_minor, b->g.sms, rank, kit_root(b->k));
    fprintf(stderr,
            "gpu: %s; weights %.2f GiB, state and scratch %.2f GiB (%d sequences, %lld positions in the pool), "
            "ready in %.1f s\n",
            b->device, b->w.arena_bytes / 1073741824.0, scratch / 1073741824.0, b->max_seqs, (long long)b->pool,
            dsk_now() - t0);
    engine_info *in = a->info;
    in->cfg = b->cfg;
    in->backend = "gpu";
    in->device = b->device;
    in->context = b->context;
    in->pool = b->pool;
    in->max_rollback = b->spare;
    in->draft_block = b->cfg->n_mtp_layers > 0 ? b->cfg->dspark_block_size : 0;
    *impl = b;
    *ops = &gpu_ops;
    return 0;
}
