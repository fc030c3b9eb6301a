/* One round on the GPU (docs/engine.md "Shape of a round"): the host builds the plan (every per-row value
 * the kernels read) and uploads it in one copy; then the embedding, every layer's launches, the head over
 * the sampling rows and the draw, all on one stream; the drawn tokens come back in one copy. Each launch
 * is the family's own (runtime/launch); the order and the rounding points are the CPU forward's
 * (runtime/cpu/forward.c), so the two are compared layer by layer (tests/gpu/test_engine_gpu.c). */
#include "runtime/gpu/gpu_engine.h"
#include "kit/src/sparse_attn_abi.cuh"
#include "runtime/common/error.h"
#include "runtime/launch/cand_blocks.h"
#include "runtime/launch/cast.h"
#include "runtime/launch/compress_pool.h"
#include "runtime/launch/embed.h"
#include "runtime/launch/engram_gate.h"
#include "runtime/launch/engram_rows.h"
#include "runtime/launch/index_score.h"
#include "runtime/launch/mhc.h"
#include "runtime/launch/moe_route.h"
#include "runtime/launch/rowmm.h"
#include "runtime/launch/rows_copy.h"
#include "runtime/launch/sample.h"
#include "runtime/launch/sparse_attn.h"
#include "runtime/launch/tap_mean.h"
#include "runtime/launch/topk.h"
#include "runtime/launch/vec_glue.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The indexer's N in a graph: the widest reach rounded up to a power of two (at least 1024) and capped at
 * the score buffer's width. Scores past a row's reach are −∞ and a top-k's ties go to the lower index, so
 * any N >= the widest reach gives every row the same selection and the same bits. */
static int graph_bucket(const gpu_backend *b, int reach)
{
    int64_t n = 1024;
    while (n < reach)
        n *= 2;
    return (int)(n < b->score_cap ? n : b->score_cap);
}

/* ---- the plan ---- */

/* The span of s holding position p, or NULL when p is text. */
static const struct gpu_span *span_at(const gpu_seq *s, int64_t p)
{
    for (int i = 0; i < s->n_spans; i++)
        if (p >= s->spans[i].pos && p < s->spans[i].pos + s->spans[i].n)
            return &s->spans[i];
    return NULL;
}

/* The round's rows at image positions (vision.md §3.8), in runs of consecutive rows of one span, and their
 * index lists: the stage row and the stream row of every (row, stream), then the rows. */
static void image_rows(gpu_backend *b, const engine_row *rows, int n)
{
    b->img_n = b->img_nruns = 0;
    if (!b->img_runs)
        return;
    for (int r = 0; r < n; r++) {
        const struct gpu_span *sp = span_at(&b->seqs[rows[r].seq], rows[r].pos);
        if (!sp)
            continue;
        struct gpu_img_run *last = b->img_nruns ? &b->img_runs[b->img_nruns - 1] : NULL;
        CUdeviceptr src = sp->rows + (CUdeviceptr)(rows[r].pos - sp->pos) * b->cfg->dim * 2;
        if (last && last->row0 + last->n == r && last->src + (CUdeviceptr)last->n * b->cfg->dim * 2 == src)
            last->n++;
        else
            b->img_runs[b->img_nruns++] = (struct gpu_img_run){r, 1, b->img_n, src};
        b->img_n++;
    }
    int hc = b->cfg->hc_mult, m = b->img_n;
    int32_t *src = b->img_idx_host, *dst = src + (size_t)m * hc, *list = dst + (size_t)m * hc;
    for (int k = 0; k < b->img_nruns; k++)
        for (int j = 0; j < b->img_runs[k].n; j++) {
            int at = b->img_runs[k].at + j, row = b->img_runs[k].row0 + j;
            list[at] = row;
            for (int ch = 0; ch < hc; ch++) {
                src[at * hc + ch] = at;
                dst[at * hc + ch] = row * hc + ch;
            }
        }
}

/* The image rows' inputs: their span rows into every stream (after the embedding), the lists first. */
static int place_image_rows(gpu_backend *b)
{
    const model_config *c = b->cfg;
    int hc = c->hc_mult, m = b->img_n;
    size_t row = (size_t)c->dim * 2;
    CU_TRY(cu.cuMemcpyHtoDAsync(b->img_idx, b->img_idx_host, sizeof(int32_t) * (size_t)m * (2 * hc + 1), b->s));
    for (int k = 0; k < b->img_nruns; k++)
        CU_TRY(cu.cuMemcpyDtoDAsync(b->img_stage + (CUdeviceptr)b->img_runs[k].at * row, b->img_runs[k].src,
                                    (size_t)b->img_runs[k].n * row, b->s));
    return op_rows_copy(b->k, b->s, b->img_stage, (int64_t)row, b->img_idx, b->X, (int64_t)row,
                        b->img_idx + (CUdeviceptr)m * hc * 4, m * hc, (int)row);
}

/* Save (restore) the image rows' streams before (after) an Engram layer: their gate is 0 (vision.md §3.8). */
static int image_streams(gpu_backend *b, int restore)
{
    const model_config *c = b->cfg;
    int hc = c->hc_mult, m = b->img_n;
    int64_t sb = (int64_t)hc * c->dim * 2;
    CUdeviceptr list = b->img_idx + (CUdeviceptr)2 * m * hc * 4;
    return restore ? op_rows_copy(b->k, b->s, b->img_save, sb, 0, b->X, sb, list, m, (int)sb)
                   : op_rows_copy(b->k, b->s, b->X, sb, list, b->img_save, sb, 0, m, (int)sb);
}

static int build_plan(gpu_backend *b, const engine_row *rows, int n, int graph, round_shape *sh)
{
    const model_config *c = b->cfg;
    int W = c->window_size, K = c->index_topk;
    memset(sh, 0, sizeof *sh);
    sh->R = n;
    sh->graph = graph;
    int32_t *tok = P32(b, tokens), *pos = P32(b, pos), *rpos = P32(b, rope_pos), *ring_dst = P32(b, ring_dst);
    int32_t *state_dst = P32(b, state_dst), *pool2 = P32(b, pool2), *samp = P32(b, sample_src);
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && rows[j].seq == rows[i].seq)
            j++;
        gpu_seq *s = &b->seqs[rows[i].seq];
        int slot = rows[i].seq, n_s = j - i;
        int64_t p0 = rows[i].pos;
        s->taps_row0 = i, s->taps_pos0 = p0, s->taps_n = n_s; /* the drafter's feed on commit */
        for (int r = i; r < j; r++) {
            int64_t p = rows[r].pos;
            tok[r] = rows[r].token;
            pos[r] = rpos[r] = (int32_t)p;
            s->tokens[p] = rows[r].token;
            s->cids[p] = b->w.token_map ? b->w.token_map[rows[r].token] : 0;
            if (s->n_spans && span_at(s, p)) /* an image position: dead to Engram's n-grams */
                s->cids[p] = ENGRAM_DEAD;
            for (int ratio = 0; ratio < 3; ratio++) {
                sparse_attn_row *a = (sparse_attn_row *)((char *)b->plan_host + b->plan.attn[ratio]) + r;
                int64_t reach = ratio ? (p + 1) / ratio : 0;
                *a = (sparse_attn_row){(int)p, (int)(p - W + 1 < 0 ? 0 : p - W + 1), (int)p, (int)p0, i,
                                       slot * b->ring, ratio ? (int)(s->base / ratio) : 0,
                                       (int)(reach < K ? reach : K)};
                P32(b, key_base[ratio])[r] = ratio ? (int32_t)(s->base / ratio) : 0;
                P32(b, reach[ratio])[r] = (int32_t)reach;
                if (reach > sh->reach_max[ratio])
                    sh->reach_max[ratio] = (int)reach;
            }
            /* the last `ring` rows of the sequence's call enter its ring; the state ring takes every row */
            ring_dst[r] = j - r <= b->ring ? slot * b->ring + (int32_t)(p % b->ring) : -1;
            state_dst[r] = j - r <= b->ring ? slot * b->ring + (int32_t)(p % b->ring) : -1;
            /* ratio 1: every row emits its own latent; ratio 2: a row at an odd position closes a group */
            int e1 = sh->ne[1]++;
            P32(b, emit_src[1])[e1] = r;
            P32(b, emit_dst[1])[e1] = (int32_t)(s->base + p);
            P32(b, emit_pos[1])[e1] = (int32_t)p;
            if (p % 2 == 1) {
                int e2 = sh->ne[2]++;
                int64_t first = p - 1;
                pool2[2 * e2] = first >= p0 ? r - 1 : -1 - (slot * b->ring + (int32_t)(first % b->ring));
                pool2[2 * e2 + 1] = r;
                P32(b, emit_dst[2])[e2] = (int32_t)(s->base / 2 + p / 2);
                P32(b, emit_pos[2])[e2] = (int32_t)first;
            } else if (graph) { /* a graph pools every row: this one's latent is computed and not stored */
                int e2 = sh->ne[2]++;
                pool2[2 * e2] = pool2[2 * e2 + 1] = r;
                P32(b, emit_dst[2])[e2] = -1;
                P32(b, emit_pos[2])[e2] = (int32_t)p;
            }
            if (rows[r].sample)
                samp[sh->S++] = r;
            sh->any_allow |= rows[r].allow != NULL;
        }
        i = j;
    }
    for (int ratio = 1; ratio < 3; ratio++)
        sh->N[ratio] = graph ? graph_bucket(b, sh->reach_max[ratio]) : sh->reach_max[ratio];
    return 0;
}

/* Engram: the rows every Engram layer needs, from the host's hashes. From the device table: their
 * indices into the plan. From the store: their reads start here, and each layer's records are waited for
 * (engram_ready) only before the forward's segment that begins with that layer. */
static int engram_plan(gpu_backend *b, const engine_row *rows, int n)
{
    const model_config *c = b->cfg;
    if (c->n_engram_layers == 0)
        return 0;
    int cols = model_engram_cols(c), rb = engram_record_bytes(c->engram_head_dim);
    int64_t *idx = b->eg_idx;
    for (int slot = 0; slot < c->n_engram_layers; slot++)
        for (int i = 0; i < n;) {
            int j = i;
            while (j < n && rows[j].seq == rows[i].seq)
                j++;
            const gpu_seq *s = &b->seqs[rows[i].seq];
            engram_hash(&b->w.engram, slot, s->cids + rows[i].pos, rows[i].pos, j - i,
                        idx + ((size_t)slot * n + i) * cols);
            i = j;
        }
    uint8_t *dst = (uint8_t *)b->plan_host + b->plan.engram;
    if (!b->eg) { /* device table: the row indices */
        for (int slot = 0; slot < c->n_engram_layers; slot++)
            memcpy(dst + (size_t)slot * b->max_rows * cols * 8, idx + (size_t)slot * n * cols,
                   sizeof(int64_t) * (size_t)n * cols);
        return 0;
    }
    engram_fetch_layer want[ENGRAM_MAX_LAYERS];
    for (int slot = 0; slot < c->n_engram_layers; slot++)
        want[slot] = (engram_fetch_layer){idx + (size_t)slot * n * cols, (int64_t)n * cols,
                                         dst + (size_t)slot * b->max_rows * cols * rb};
    return engram_fetch_begin(b->eg, want, &b->fetch) ? dsk_err_ctx("Engram rows") : 0;
}

/* Layer slot's records are in the plan's pinned memory (a no-op for the device table). */
static int engram_ready(gpu_backend *b, int slot)
{
    if (!b->fetch)
        return 0;
    if (engram_fetch_wait(b->fetch, slot, b->eg_timeout_ms))
        return dsk_err_ctx("Engram rows of layer %d", b->cfg->engram_layer_ids[slot]);
    return 0;
}

static void engram_done(gpu_backend *b)
{
    engram_fetch_end(b->fetch);
    b->fetch = NULL;
}

/* ---- one layer ---- */

/* The side stream (gpu_engine.h): what is queued on it after side_fork waits for all that b->s holds so
 * far; what b->s is given after side_join waits for all that the side holds. In a capture the side joins
 * the round's graph as a branch. Every fork of a layer is joined in that layer. */
static int side_on(const gpu_backend *b, int R)
{
    return b->side && R <= b->side_rows;
}

static int side_fork(gpu_backend *b)
{
    CU_TRY(cu.cuEventRecord(b->side_fork, b->s));
    CU_TRY(cu.cuStreamWaitEvent(b->side, b->side_fork, 0));
    return 0;
}

static int side_join(gpu_backend *b)
{
    CU_TRY(cu.cuEventRecord(b->side_join, b->side));
    CU_TRY(cu.cuStreamWaitEvent(b->s, b->side_join, 0));
    return 0;
}

/* The compressor of a kv source: the latents of the groups closing in this round, their index keys, both
 * stored at their pool rows (model.md §3.5; runtime/cpu/compressor.c). */
static int compressor(layer_ctx *L, int l, const gpu_block *g)
{
    gpu_backend *b = L->b;
    const model_config *c = b->cfg;
    const layer_role *r = &c->roles[l];
    int R = L->sh->R, hd = c->head_dim, ihd = c->index_head_dim, ratio = r->ratio, ne = L->sh->ne[ratio];
    CUdeviceptr lat = b->lat;
    if (ratio == 2) { /* ratio 1: lat = c_norm(c_wkv x) is made beside the window key (attention) */
        const exl3_dev_linear *ls[2] = {&g->c_wkv, &g->c_wgate};
        TRY(op_exl3_grouped(b->k, b->s, ls, 2, b->xn, c->dim, R, b->a32, 2 * hd, EXL3_OUT_F32, &b->ws, EXL3_AUTO));
        int si = b->state_index[l];
        size_t st_off = (size_t)si * b->max_seqs * b->ring * hd * 4;
        compress_pool_src src = {b->a32, b->a32 + (CUdeviceptr)hd * 4, 2 * hd, b->state_a + st_off,
                                 b->state_s + st_off, hd};
        if (ne > 0) {
            TRY(op_compress_pool(b->k, b->s, &src, DEV(b, pool2), lat, hd, ne, hd));
            vec_glue_op nrm = {.norm_w = g->c_norm, .eps = c->norm_eps, .qdq = KVQ_NONE};
            TRY(op_vec_glue(b->k, b->s, &nrm, lat, hd, lat, hd, ne, 1, hd));
        }
        /* then the round's a_t, s_t into the state ring (after the pooling read what it needed), one launch */
        rows_copy_job st[2] = {
            {b->a32, (int64_t)2 * hd * 4, 0, b->state_a + st_off, (int64_t)hd * 4, DEV(b, state_dst), R, hd * 4},
            {b->a32 + (CUdeviceptr)hd * 4, (int64_t)2 * hd * 4, 0, b->state_s + st_off, (int64_t)hd * 4,
             DEV(b, state_dst), R, hd * 4}};
        TRY(op_rows_copy_jobs(b->k, b->s, st, 2));
    }
    if (ne == 0)
        return 0;
    /* index key from the pre-RoPE latent: k_norm(ix_wk lat), RoPE at the latent's position, FP4 e8m0; and
     * the latent: RoPE at its position, FP4 with e4m3 scales; one launch that stores both at their pool rows */
    TRY(op_exl3_matmul(b->k, b->s, &g->ix_wk, lat, hd, ne, b->ik, ihd, EXL3_OUT_BF16, &b->ws));
    vec_glue_op ikop = {.norm_w = g->ix_k_norm, .eps = c->norm_eps, .rope_dim = c->rope_head_dim,
                        .freqs = b->freqs[1], .pos = DEV(b, emit_pos[ratio]), .qdq = KVQ_FP4_E8M0};
    vec_glue_op lop = {.rope_dim = c->rope_head_dim, .freqs = b->freqs[1], .pos = DEV(b, emit_pos[ratio]),
                       .qdq = KVQ_FP4_E4M3};
    CUdeviceptr dst = DEV(b, emit_dst[ratio]);
    vec_glue_call gc[2] = {{&ikop, b->ik, ihd, b->ikv[l], ihd, 1, ihd, dst}, {&lop, lat, hd, b->ckv[l], hd, 1, hd, dst}};
    return op_vec_glue_multi(b->k, b->s, gc, 2, ne);
}

/* The indexer's queries (FP4 e8m0, RoPE'd) and head weights of an index source, on stream st with
 * workspace ws: they read only the normed q latent and xn. */
static int indexer_queries(layer_ctx *L, const gpu_block *g, CUstream st, const exl3_workspace *ws)
{
    gpu_backend *b = L->b;
    const model_config *c = b->cfg;
    int R = L->sh->R, nh = c->index_n_heads, ihd = c->index_head_dim;
    TRY(op_exl3_matmul(b->k, st, &g->ix_wq_b, b->qkv, b->qkv_ld, R, b->qi, nh * ihd, EXL3_OUT_BF16, ws));
    vec_glue_op qop = {.rope_dim = c->rope_head_dim, .freqs = b->freqs[1], .pos = DEV(b, rope_pos),
                       .qdq = KVQ_FP4_E8M0};
    TRY(op_vec_glue(b->k, st, &qop, b->qi, nh * ihd, b->qi, nh * ihd, R, nh, ihd));
    /* head weights: bf16(weights_proj x), times ihd^-1/2 · nh^-1/2, rounded to bf16 */
    return op_rowmm_bf16_scaled(b->k, st, b->xn, g->ix_wproj, b->wix, R, c->dim, nh,
                                (float)(1.0 / sqrt((double)ihd) / sqrt((double)nh)));
}

/* The indexer of an index source, its queries made: scores, the candidate blocks (candidate source),
 * top-k into b->sel[l]. */
static int indexer(layer_ctx *L, int l)
{
    gpu_backend *b = L->b;
    const model_config *c = b->cfg;
    const layer_role *r = &c->roles[l];
    int R = L->sh->R, nh = c->index_n_heads, ihd = c->index_head_dim, ratio = r->ratio, K = c->index_topk;
    int N = L->sh->N[ratio];
    b->sel_ld[l] = 1; /* no row reaches a key: every row's selection is empty */
    if (N <= 0)
        return 0;
    int nb = (N + c->candidate_block_size - 1) / c->candidate_block_size;
    int ldw = (nb + 31) / 32 + 1;
    /* in chunks of rows: the score matrix is rows × N fp32 */
    int chunk = 64;
    for (int r0 = 0; r0 < R; r0 += chunk) {
        int rn = R - r0 < chunk ? R - r0 : chunk;
        index_score_args ia = {.q = b->qi + (CUdeviceptr)r0 * nh * ihd * 2, .w = b->wix + (CUdeviceptr)r0 * nh * 4,
                               .keys = b->ikv[r->kv_source], .key_base = DEV(b, key_base[ratio]) + (CUdeviceptr)r0 * 4,
                               .reach = DEV(b, reach[ratio]) + (CUdeviceptr)r0 * 4,
                               .cand = r->uses_candidates ? L->cand + (CUdeviceptr)r0 * L->cand_ldw * 4 : 0,
                               .ldc = L->cand_ldw, .cand_block = c->candidate_block_size, .rows = rn, .nh = nh,
                               .ihd = ihd, .N = N, .group = 4, .sms = b->g.sms, .out = b->score, .lds = N};
        TRY(op_index_score(b->k, b->s, &ia));
        if (r->is_candidate_source) {
            cand_blocks_args ca = {.scores = b->score, .lds = N, .N = N,
                                   .reach = DEV(b, reach[ratio]) + (CUdeviceptr)r0 * 4, .rows = rn,
                                   .block = c->candidate_block_size, .cap = c->candidate_topk_blocks,
                                   .bitmap = b->cand + (CUdeviceptr)r0 * ldw * 4, .ldw = ldw, .ws = b->ws_misc,
                                   .ws_bytes = b->ws_misc_bytes};
            TRY(op_cand_blocks(b->k, b->s, &ca));
        }
        /* rows of kk = min(N, K) ascending indices; a row's own count min(reach, K) <= kk are its first entries
         * (past its reach every score is −∞, and ties go to the lower index) */
        int kk = N < K ? N : K;
        size_t tws = op_topk_ws_bytes(rn, N, N < K ? N : K);
        b->sel_ld[l] = kk;
        TRY(op_topk(b->k, b->s, b->score, 0, rn, N, kk, N, b->sel[l] + (CUdeviceptr)r0 * kk * 4, b->topk_val, b->ws_misc,
                    tws));
    }
    if (r->is_candidate_source) {
        L->cand = b->cand;
        L->cand_ldw = ldw;
    }
    if (b->hook) {
        CU_TRY(cu.cuStreamSynchronize(b->s));
        b->hook(b->hook_ctx, l, GPU_HOOK_INDEX, b->sel[l], 0, b->sel_ld[l], R);
        if (r->is_candidate_source)
            b->hook(b->hook_ctx, l, GPU_HOOK_CAND, b->cand, 0, ldw, R);
    }
    return 0;
}

int gpu_wo_a(gpu_backend *b, const gpu_block *g, int R)
{
    const gpu_split *sp = &b->w.split;
    int G = sp->g1 - sp->g0, H = sp->h1 - sp->h0, hd = b->cfg->head_dim;
    const exl3_dev_linear *blocks[EXL3_MAX_BLOCKS];
    for (int gi = 0; gi < G; gi++)
        blocks[gi] = &g->wo_a[gi];
    return op_exl3_blockdiag(b->k, b->s, blocks, G, b->o, H * hd, R, b->z, G * b->cfg->o_lora_rank, EXL3_OUT_BF16,
                             &b->ws, EXL3_AUTO);
}

/* ring_store: the copy of the round's window keys into the layer's ring, for the launch after the
 * attention (n 0 in a DSpark stage, whose block keys are not cached) */
static int attention(layer_ctx *L, int l, const gpu_block *g, rows_copy_job *ring_store)
{
    gpu_backend *b = L->b;
    const model_config *c = b->cfg;
    const layer_role *r = &c->roles[l];
    const gpu_split *sp = &b->w.split;
    int R = L->sh->R, hd = c->head_dim, H = sp->h1 - sp->h0, ql = c->q_lora_rank, ratio = r->ratio; /* its heads */
    int kind = ratio > 0; /* RoPE: ratio 0 without YaRN, ratio > 0 with */
    /* q_lat | kv | (ratio-1 compressor): one grouped projection of the normed input */
    const exl3_dev_linear *ls[3] = {&g->wq_a, &g->wkv, &g->c_wkv};
    int nmat = r->is_kv_source && ratio == 1 ? 3 : 2;
    TRY(op_exl3_grouped(b->k, b->s, ls, nmat, b->xn, c->dim, R, b->qkv, b->qkv_ld, EXL3_OUT_BF16, &b->ws, EXL3_AUTO));
    /* one launch on the grouped projection's parts: q_norm (in place); the window key (kv_norm, RoPE, FP8);
     * a ratio-1 kv source's latent, c_norm of the third part. Q's RoPE is the attention's, as it loads q */
    vec_glue_op qn = {.norm_w = g->q_norm, .eps = c->norm_eps, .qdq = KVQ_NONE};
    vec_glue_op kvop = {.norm_w = g->kv_norm, .eps = c->norm_eps, .rope_dim = c->rope_head_dim, .freqs = b->freqs[kind],
                        .pos = DEV(b, rope_pos), .qdq = KVQ_FP8_E4M3};
    vec_glue_op cn = {.norm_w = g->c_norm, .eps = c->norm_eps, .qdq = KVQ_NONE};
    vec_glue_call gc[3] = {{&qn, b->qkv, b->qkv_ld, b->qkv, b->qkv_ld, 1, ql, 0},
                           {&kvop, b->qkv + (CUdeviceptr)ql * 2, b->qkv_ld, b->kv, hd, 1, hd, 0},
                           {&cn, b->qkv + (CUdeviceptr)(ql + hd) * 2, b->qkv_ld, b->lat, hd, 1, hd, 0}};
    TRY(op_vec_glue_multi(b->k, b->s, gc, r->is_kv_source && ratio == 1 ? 3 : 2, R));
    /* the indexer's queries and wq_b read only the normed q latent (and xn); the scores need the queries
     * and the compressor's keys, and only the attention reads q: the queries then wq_b on the side,
     * beside the compressor, whose short launches leave most of the GPU free */
    int side = side_on(b, R) && (r->is_kv_source || r->is_index_source);
    CUstream sq = side ? b->side : b->s;
    const exl3_workspace *wsq = side ? &b->ws_side : &b->ws;
    if (side)
        TRY(side_fork(b));
    if (r->is_index_source && indexer_queries(L, g, sq, wsq))
        return dsk_err_ctx("layer %d: the indexer's queries", l);
    if (side && r->is_index_source)
        CU_TRY(cu.cuEventRecord(b->side_mid, b->side));
    TRY(op_exl3_matmul(b->k, sq, &g->wq_b, b->qkv, b->qkv_ld, R, b->q, H * hd, EXL3_OUT_BF16, wsq));
    if (r->is_kv_source && compressor(L, l, g))
        return dsk_err_ctx("layer %d: the compressor", l);
    if (side && r->is_index_source)
        CU_TRY(cu.cuStreamWaitEvent(b->s, b->side_mid, 0)); /* the queries, not wq_b */
    if (r->is_index_source && indexer(L, l))
        return dsk_err_ctx("layer %d: the indexer", l);
    if (side)
        TRY(side_join(b));
    /* a DSpark stage attends to its main-KV ring, then to the whole block (this round's keys, rows base2 +
     * j of the call: the plan's rows say so); its block keys are not cached */
    int stage = l >= c->n_layers;
    CUdeviceptr ring = stage ? b->dring + (CUdeviceptr)(l - c->n_layers) * b->max_seqs * b->ring * hd * 2
                             : b->rings + (CUdeviceptr)l * b->max_seqs * b->ring * hd * 2;
    sparse_attn_args sa = {.q = b->q, .kv_call = b->kv, .kv_ring = ring,
                           .kv2 = stage ? b->kv : ratio > 0 ? b->ckv[r->kv_source] : 0,
                           .sel = !stage && ratio > 0 ? b->sel[r->topk_source] : 0,
                           .rows_desc = DEV(b, attn[ratio]), .sink = g->attn_sink, .freqs = b->freqs[kind],
                           .out = b->o, .ws = b->ws_misc, .ws_bytes = b->ws_misc_bytes, .rows = R, .heads = H,
                           .head_dim = hd, .ring = b->ring,
                           .sel_ld = !stage && ratio > 0 ? b->sel_ld[r->topk_source] : 1,
                           .rope_dim = c->rope_head_dim, .q_rope = 1,
                           .max_list = c->window_size + (stage ? c->dspark_block_size : ratio > 0 ? c->index_topk : 0)};
    TRY(op_sparse_attn(b->k, b->s, &sa));
    /* grouped wo_a: group gi (of the rank's) on its heads' outputs; then wo_b over the rank's groups: with
     * tp > 1 an fp32 partial, summed over the ranks in rank order (y32; hc_post rounds it to bf16) */
    int G = sp->g1 - sp->g0, ol = c->o_lora_rank;
    TRY(gpu_wo_a(b, g, R));
    if (b->xchg->tp > 1) {
        TRY(op_exl3_matmul(b->k, b->s, &g->wo_b, b->z, G * ol, R, b->y32, c->dim, EXL3_OUT_F32, &b->ws));
        TRY(gpu_xchg_sum(b, b->y32, (int64_t)R * c->dim));
    } else
        TRY(op_exl3_matmul(b->k, b->s, &g->wo_b, b->z, G * ol, R, b->y16, c->dim, EXL3_OUT_BF16, &b->ws));
    /* the round's window keys enter the ring last (earlier rows of the round read them from b->kv): in
     * the hc_post launch that follows */
    *ring_store = (rows_copy_job){b->kv, (int64_t)hd * 2, 0, ring, (int64_t)hd * 2, DEV(b, ring_dst), stage ? 0 : R,
                                  hd * 2};
    return 0;
}

static int moe(layer_ctx *L, const gpu_block *g, int l)
{
    gpu_backend *b = L->b;
    const model_config *c = b->cfg;
    int R = L->sh->R, d = c->dim, E = g->n_experts, Kx = g->n_active;
    /* the shared expert's gate and up read only xn: on the side, beside the router, the plan and the routed
     * experts; its down adds to their sum after them, as when it runs after them on one stream */
    int side = side_on(b, R);
    if (side) {
        TRY(side_fork(b));
        TRY(op_exl3_moe_phase(b->k, b->side, &g->shared, b->xn, d, R, b->y32, d, 1, &b->ws_side, EXL3_AUTO,
                              EXL3_MOE_UP));
    }
    TRY(op_rowmm_bf16(b->k, b->s, b->xn, g->gate, b->gate_logits, R, d, E));
    /* a decode round's few rows are routed inside the MoE's plan launch (the same bits); image rows are
     * routed again over bias_vl (below) before the MoE, and a hook reads the routes first: apart */
    int in_plan = R <= RULE_ROUTE_PLAN_ROWS && !b->img_n && !b->hook;
    if (!in_plan)
        TRY(op_moe_route(b->k, b->s, b->gate_logits, E, g->gate_bias, R, E, Kx, c->route_scale, b->moe_ids, b->moe_w,
                         0));
    /* image positions pick their experts with bias_vl (vision.md §3.8): their runs routed again over it */
    for (int k = 0; b->img_n && l < c->n_layers && k < b->img_nruns; k++) {
        int r0 = b->img_runs[k].row0;
        TRY(op_moe_route(b->k, b->s, b->gate_logits + (CUdeviceptr)r0 * E * 4, E, g->gate_bias_vl, b->img_runs[k].n, E,
                         Kx, c->route_scale, b->moe_ids + (CUdeviceptr)r0 * Kx * 4, b->moe_w + (CUdeviceptr)r0 * Kx * 4,
                         0));
    }
    if (b->hook) {
        CU_TRY(cu.cuStreamSynchronize(b->s));
        b->hook(b->hook_ctx, l, GPU_HOOK_ROUTE, b->moe_ids, b->gate_logits, E, R);
    }
    /* the rank's experts (ascending id), the ranks' partials summed in rank order, then the shared expert */
    exl3_router rt = {b->gate_logits, E, g->gate_bias, E, c->route_scale};
    if (in_plan)
        TRY(op_exl3_moe_route(b->k, b->s, &g->experts, b->xn, d, R, &rt, b->moe_ids, b->moe_w, Kx, g->e0, b->y32, d, 0,
                              &b->ws, EXL3_AUTO));
    else
        TRY(op_exl3_moe(b->k, b->s, &g->experts, b->xn, d, R, b->moe_ids, b->moe_w, Kx, g->e0, b->y32, d, 0, &b->ws,
                        EXL3_AUTO));
    TRY(gpu_xchg_sum(b, b->y32, (int64_t)R * d));
    /* into y32: hc_post rounds it to bf16 */
    if (side) {
        TRY(side_join(b));
        return op_exl3_moe_phase(b->k, b->s, &g->shared, b->xn, d, R, b->y32, d, 1, &b->ws_side, EXL3_AUTO,
                                 EXL3_MOE_DOWN);
    }
    return op_exl3_moe(b->k, b->s, &g->shared, b->xn, d, R, 0, 0, 1, 0, b->y32, d, 1, &b->ws, EXL3_AUTO);
}

int gpu_layer(layer_ctx *L, int l)
{
    gpu_backend *b = L->b;
    const model_config *c = b->cfg;
    const gpu_block *g = &b->w.blocks[l];
    const layer_role *r = &c->roles[l];
    int R = L->sh->R, hc = c->hc_mult, d = c->dim, ncoef = 2 * hc + hc * hc;
    mhc_dims md = {hc, d, c->hc_sinkhorn_iters, c->norm_eps, c->hc_eps};
    size_t mws = op_mhc_mix_ws_bytes(R, hc, d);
    if (r->engram >= 0) {
        int cols = model_engram_cols(c), w = c->engram_head_dim;
        size_t rb = (size_t)engram_record_bytes(w);
        CUdeviceptr src = DEV(b, engram) + (CUdeviceptr)r->engram * b->max_rows * cols * (b->eg ? rb : 8);
        if (b->eg)
            TRY(op_engram_records(b->k, b->s, src, R, cols, w, b->eg_rows, (int64_t)cols * w));
        else
            TRY(op_engram_table_rows(b->k, b->s, g->eg_values, g->eg_scales, src, R, cols, w, b->eg_rows,
                                     (int64_t)cols * w));
        TRY(op_exl3_matmul(b->k, b->s, &g->eg_wkv, b->eg_rows, cols * w, R, b->eg_kv, (hc + 1) * d, EXL3_OUT_BF16,
                           &b->ws));
        if (b->img_n)
            TRY(image_streams(b, 0));
        TRY(op_engram_gate(b->k, b->s, b->X, b->eg_kv, g->eg_w, R, hc, d, c->norm_eps));
        if (b->img_n)
            TRY(image_streams(b, 1));
    }
    if (r->dspark_tap >= 0)
        TRY(op_tap_mean(b->k, b->s, b->X, b->taps, R, hc, d, c->n_dspark_targets, r->dspark_tap));
    if (b->hook) {
        CU_TRY(cu.cuStreamSynchronize(b->s));
        b->hook(b->hook_ctx, l, GPU_HOOK_BLOCK_IN, b->X, L->pi, L->pi_stride, R);
    }
    /* attention sublayer: its coefficients from X, its input from X and the previous block's π (one launch
     * at the release's width) */
    mhc_pre_call ap = {b->X, L->pi, L->pi_stride, g->attn_norm, c->norm_eps, b->xn, 0};
    TRY(op_mhc_mix_pre(b->k, b->s, &md, b->X, g->hc_fn[0], g->hc_base[0], g->hc_scale[0], b->coef, R, b->ws_misc, mws,
                       b->mix_cnt, &ap));
    rows_copy_job ring_store;
    if (attention(L, l, g, &ring_store))
        return dsk_err_ctx("layer %d: attention", l);
    int tp = b->xchg->tp;
    TRY(op_mhc_post_copy(b->k, b->s, tp > 1 ? b->y32 : b->y16, tp > 1, b->X, b->coef, b->X2, R, hc, d, &ring_store));
    if (b->hook) {
        CU_TRY(cu.cuStreamSynchronize(b->s));
        b->hook(b->hook_ctx, l, GPU_HOOK_ATTN_OUT, b->X2, 0, 0, R);
    }
    /* FFN sublayer: single pass, its input uses the attention's pre (model.md §3.4) */
    mhc_pre_call fp = {b->X2, b->coef, ncoef, g->ffn_norm, c->norm_eps, b->xn, 0};
    TRY(op_mhc_mix_pre(b->k, b->s, &md, b->X2, g->hc_fn[1], g->hc_base[1], g->hc_scale[1], b->coef2, R, b->ws_misc,
                       mws, b->mix_cnt, &fp));
    if (moe(L, g, l))
        return dsk_err_ctx("layer %d: MoE", l);
    TRY(op_mhc_post_f32(b->k, b->s, b->y32, b->X2, b->coef2, b->X, R, hc, d));
    /* the next block's π is this one's ffn pre: coef2's rows (pre first) */
    L->pi = b->coef2;
    L->pi_stride = ncoef;
    if (b->hook) {
        CU_TRY(cu.cuStreamSynchronize(b->s));
        b->hook(b->hook_ctx, l, GPU_HOOK_BLOCK_OUT, b->X, L->pi, L->pi_stride, R);
    }
    return 0;
}

/* The draw's parameters into pinned memory (the round's copies read them from there); which rows have
 * allow masks (their words are copied by copy_masks, once the step's fill has written them). */
static int sample_prep(gpu_backend *b, round_shape *sh, const engine_row *rows)
{
    const model_config *c = b->cfg;
    int S = sh->S, V = c->vocab_size, words = (V + 31) / 32;
    sample_row_params *sp = IO(b, io_sp);
    const int32_t *src = P32(b, sample_src);
    sh->masks = sh->trunc = 0;
    for (int i = 0; i < S; i++) {
        const engine_row *r = &rows[src[i]];
        sp[i] = (sample_row_params){r->sp.temperature, r->sp.top_p, r->sp.top_k, r->top_logprobs,
                                    r->sp.seed, r->pos + 1, -1, {0, 0, 0}};
        sh->trunc |= r->sp.temperature > 0 && (r->sp.top_k > 0 || r->sp.top_p < 1.0f);
        if (r->allow)
            sp[i].allow_row = sh->masks++;
    }
    sh->allow_bytes = sizeof(uint32_t) * (size_t)words * (size_t)sh->masks;
    sh->sample_ws = op_sample_ws_bytes(S > 0 ? S : 1, V, sh->trunc);
    if (((sh->allow_bytes + 255) & ~(size_t)255) + sh->sample_ws > b->ws_misc_bytes)
        return dsk_err("the round's %d allow masks and the draw's workspace exceed the scratch (%zu bytes)", sh->masks,
                       b->ws_misc_bytes);
    return 0;
}

/* The allow masks' words into pinned memory, in the order sample_prep numbered them. */
static void copy_masks(gpu_backend *b, const round_shape *sh, const engine_row *rows)
{
    int words = (b->cfg->vocab_size + 31) / 32;
    uint32_t *allow = IO(b, io_allow);
    const int32_t *src = P32(b, sample_src);
    for (int i = 0, m = 0; i < sh->S; i++)
        if (rows[src[i]].allow)
            memcpy(allow + (size_t)m++ * words, rows[src[i]].allow, sizeof(uint32_t) * (size_t)words);
}

/* The head over the sampling rows, on the device: their logits. */
static int head(gpu_backend *b, const round_shape *sh)
{
    const model_config *c = b->cfg;
    int S = sh->S, hc = c->hc_mult, d = c->dim, ncoef = 2 * hc + hc * hc;
    if (S == 0)
        return 0;
    /* gather the sampling rows' streams and π (coef2 rows) */
    TRY(op_rows_copy(b->k, b->s, b->X, (int64_t)hc * d * 2, DEV(b, sample_src), b->head_in, (int64_t)hc * d * 2, 0, S,
                     hc * d * 2));
    TRY(op_rows_copy(b->k, b->s, b->coef2, (int64_t)ncoef * 4, DEV(b, sample_src), b->coef, (int64_t)ncoef * 4, 0, S,
                     ncoef * 4));
    TRY(op_mhc_pre(b->k, b->s, b->head_in, b->coef, ncoef, b->w.norm, c->norm_eps, b->xn, 0, S, hc, d));
    return gpu_head_logits(b, b->xn, S);
}

/* The EXL3 launchers' arrival counters are zero at rest: each launch's last CTA leaves them so. After a
 * failed round (a launch that faulted or never ran to its end) they are cleared; with DSKIT_CHECK_COUNTERS=1
 * every round proves them zero (docs/engine.md). */
/* The round's arrival counters, each set zero at rest: the EXL3 launchers' (the first EXL3_WS_COUNTER_BYTES of
 * their workspace: the round stream's and the side stream's) and mhc_mix's. */
enum { COUNTER_SETS = 3 };
static int counter_sets(const gpu_backend *b, CUdeviceptr *ptr, size_t *n, const char **what)
{
    ptr[0] = b->ws.ptr, n[0] = EXL3_WS_COUNTER_BYTES / 4, what[0] = "EXL3";
    ptr[1] = b->mix_cnt, n[1] = MHC_MIX_COUNTERS, what[1] = "mhc_mix";
    ptr[2] = b->ws_side.ptr, n[2] = EXL3_WS_COUNTER_BYTES / 4, what[2] = "side stream's EXL3";
    return b->ws_side.ptr ? 3 : 2;
}

void gpu_counters_reset(gpu_backend *b)
{
    CUdeviceptr p[COUNTER_SETS];
    size_t n[COUNTER_SETS];
    const char *what[COUNTER_SETS];
    /* a failed round may have left work on the side stream (forked, never joined): let it end first */
    if (b->side && cu.cuStreamSynchronize(b->side) != CUDA_SUCCESS)
        fprintf(stderr, "gpu: the side stream failed too\n");
    for (int i = 0, sets = counter_sets(b, p, n, what); i < sets; i++)
        if (p[i] && (cu.cuMemsetD32Async(p[i], 0, n[i], b->s) != CUDA_SUCCESS ||
                     cu.cuStreamSynchronize(b->s) != CUDA_SUCCESS))
            fprintf(stderr, "gpu: clearing the %s arrival counters after a failed round failed too\n", what[i]);
}

int gpu_counters_check(gpu_backend *b)
{
    if (!b->check_counters)
        return 0;
    uint32_t *h = dsk_malloc(EXL3_WS_COUNTER_BYTES); /* the largest set */
    if (!h)
        return -1;
    CUdeviceptr p[COUNTER_SETS];
    size_t n[COUNTER_SETS];
    const char *what[COUNTER_SETS];
    int rc = 0;
    for (int s = 0, sets = counter_sets(b, p, n, what); !rc && s < sets; s++) {
        if (cu.cuMemcpyDtoHAsync(h, p[s], 4 * n[s], b->s) != CUDA_SUCCESS || cu.cuStreamSynchronize(b->s) != CUDA_SUCCESS)
            rc = dsk_err("reading the %s arrival counters failed", what[s]);
        for (size_t i = 0; !rc && i < n[s]; i++)
            if (h[i])
                rc = dsk_err("%s arrival counter %zu is %u after the round (they are zero at rest): a launch did not "
                             "run to its end",
                             what[s], i, h[i]);
    }
    free(h);
    return rc;
}

int gpu_head_logits(gpu_backend *b, CUdeviceptr x, int R)
{
    const model_config *c = b->cfg;
    int V = c->vocab_size, d = c->dim;
    if (b->xchg->tp == 1)
        return op_exl3_matmul(b->k, b->s, &b->w.head, x, d, R, b->logits, V, EXL3_OUT_F32, &b->ws);
    /* the rank's vocabulary rows, then every rank's side by side (a column split changes no sum) */
    int vl = b->w.split.v1 - b->w.split.v0;
    TRY(op_exl3_matmul(b->k, b->s, &b->w.head, x, d, R, b->logits_part, vl, EXL3_OUT_F32, &b->ws));
    return gpu_xchg_gather_cols(b, b->logits_part, b->logits, R, vl);
}

/* The draw over the head's logits, on the device (the masks and parameters go up first); the results into
 * pinned memory. */
static int draw(gpu_backend *b, const round_shape *sh, void *unused)
{
    (void)unused;
    int S = sh->S, V = b->cfg->vocab_size;
    if (S == 0)
        return 0;
    unsigned long long l0 = kit_launches();
    CUdeviceptr dallow = b->ws_misc;
    if ((sh->masks && cu.cuMemcpyHtoDAsync(dallow, IO(b, io_allow), sh->allow_bytes, b->s) != CUDA_SUCCESS) ||
        cu.cuMemcpyHtoDAsync(b->sample_params, IO(b, io_sp), sizeof(sample_row_params) * (size_t)S, b->s) !=
            CUDA_SUCCESS)
        return dsk_err("uploading the draw's parameters failed");
    sample_args sa = {.logits = b->logits, .ldl = V, .V = V, .rows = S, .vocab = b->valid_dev,
                      .allow = sh->masks ? dallow : 0, .ldw = (V + 31) / 32, .params = b->sample_params,
                      .candidates = sh->trunc, .tokens = b->tokens_out, .logprob = b->logprob_out,
                      .top_ids = b->top_ids_out, .top_lp = b->top_lp_out,
                      .ws = b->ws_misc + ((sh->allow_bytes + 255) & ~(size_t)255), .ws_bytes = sh->sample_ws};
    TRY(op_sample(b->k, b->s, &sa));
    /* the round's one copy back (with its one synchronisation, in gpu_round) */
    if (cu.cuMemcpyDtoHAsync(IO(b, io_tok), b->tokens_out, 4 * (size_t)S, b->s) != CUDA_SUCCESS ||
        cu.cuMemcpyDtoHAsync(IO(b, io_lp), b->logprob_out, 4 * (size_t)S, b->s) != CUDA_SUCCESS ||
        cu.cuMemcpyDtoHAsync(IO(b, io_tid), b->top_ids_out, 4 * (size_t)S * SAMPLE_TOP_LOGPROBS, b->s) !=
            CUDA_SUCCESS ||
        cu.cuMemcpyDtoHAsync(IO(b, io_tlp), b->top_lp_out, 4 * (size_t)S * SAMPLE_TOP_LOGPROBS, b->s) != CUDA_SUCCESS)
        return dsk_err("copying the drawn tokens back failed");
    b->outside_launches += (int)(kit_launches() - l0);
    return 0;
}

/* The forward's segments: segment 0 from the plan's upload to the first Engram layer; segment k >= 1 from
 * Engram layer k - 1 (its records' upload first) to the next, the last one ending with the head. */
typedef struct {
    layer_ctx L;
    int seg;
} fwd_ctx;

static int n_segments(const gpu_backend *b)
{
    return b->cfg->n_engram_layers + 1;
}

/* The first layer of segment k (n_layers past the last). */
static int segment_start(const gpu_backend *b, int k)
{
    const model_config *c = b->cfg;
    if (k == 0)
        return 0;
    if (k > c->n_engram_layers)
        return c->n_layers;
    for (int l = 0; l < c->n_layers; l++)
        if (c->roles[l].engram == k - 1)
            return l;
    return c->n_layers;
}

/* One segment's launches, on the stream: what each forward graph captures. */
static int device_segment(gpu_backend *b, const round_shape *sh, void *arg)
{
    fwd_ctx *f = arg;
    const model_config *c = b->cfg;
    int n = sh->R, k = f->seg;
    if (k == 0) {
        /* the plan without the Engram records: they go up per layer, below */
        CU_TRY(cu.cuMemcpyHtoDAsync(b->plan_dev, b->plan_host, (size_t)b->plan.engram, b->s));
        TRY(op_embed(b->k, b->s, b->w.embed, c->vocab_size, DEV(b, tokens), b->X, b->pi0, n, c->hc_mult, c->dim));
        if (b->img_n && place_image_rows(b))
            return dsk_err_ctx("the round's image rows");
        f->L = (layer_ctx){b, sh, b->pi0, c->hc_mult, 0, 0};
    } else {
        int cols = model_engram_cols(c);
        size_t rec = b->eg ? (size_t)engram_record_bytes(c->engram_head_dim) : 8;
        size_t at = b->plan.engram + (size_t)(k - 1) * b->max_rows * cols * rec;
        CU_TRY(cu.cuMemcpyHtoDAsync(b->plan_dev + at, (uint8_t *)b->plan_host + at, (size_t)n * cols * rec, b->s));
    }
    for (int l = segment_start(b, k); l < segment_start(b, k + 1) && !b->bench_no_layers; l++)
        if (gpu_layer(&f->L, l))
            return dsk_err_ctx("layer %d", l);
    if (k + 1 < n_segments(b))
        return 0;
    unsigned long long l1 = kit_launches();
    int rc = head(b, sh);
    b->outside_launches = (int)(kit_launches() - l1 + 1); /* the embedding and the head (draw adds its own) */
    return rc;
}

int gpu_capture(gpu_backend *b, const round_shape *sh, int (*fn)(gpu_backend *, const round_shape *, void *),
                void *arg, CUgraphExec *out)
{
    CUgraph graph;
    CUresult r = cu.cuStreamBeginCapture(b->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r != CUDA_SUCCESS)
        return dsk_cu_fail(r, "cuStreamBeginCapture");
    int rc = fn(b, sh, arg);
    r = cu.cuStreamEndCapture(b->s, &graph);
    if (rc || r != CUDA_SUCCESS) {
        if (!rc)
            dsk_cu_fail(r, "cuStreamEndCapture");
        if (r == CUDA_SUCCESS)
            cu.cuGraphDestroy(graph);
        return -1;
    }
    r = cu.cuGraphInstantiateWithFlags(out, graph, 0);
    cu.cuGraphDestroy(graph);
    return r == CUDA_SUCCESS ? 0 : dsk_cu_fail(r, "cuGraphInstantiateWithFlags");
}

/* The graphs of this round's shape: found, or captured now (once per shape). NULL when every slot is taken
 * (*failed 0: this round runs eagerly) or when a capture fails (*failed 1, with a message). */
static const struct gpu_graph *round_graph(gpu_backend *b, const round_shape *sh, int *failed)
{
    *failed = 0;
    for (int i = 0; i < b->ngraphs; i++) {
        const struct gpu_graph *g = &b->graphs[i];
        if (g->R == sh->R && g->S == sh->S && g->N1 == sh->N[1] && g->N2 == sh->N[2] && g->masks == sh->masks &&
            g->trunc == sh->trunc && g->no_layers == b->bench_no_layers)
            return g;
    }
    if (b->ngraphs == GPU_MAX_GRAPHS)
        return NULL; /* every slot taken: this shape runs eagerly */
    *failed = 1;
    struct gpu_graph g = {sh->R, sh->S, sh->N[1], sh->N[2], sh->masks, sh->trunc, b->bench_no_layers, {0}, NULL};
    fwd_ctx f = {0};
    int ok = 1;
    for (f.seg = 0; f.seg < n_segments(b) && ok; f.seg++)
        ok = !gpu_capture(b, sh, device_segment, &f, &g.forward[f.seg]);
    ok = ok && !(sh->S > 0 && gpu_capture(b, sh, draw, NULL, &g.draw));
    if (!ok) {
        for (int k = 0; k < n_segments(b); k++)
            if (g.forward[k])
                cu.cuGraphExecDestroy(g.forward[k]);
        return NULL;
    }
    b->graphs[b->ngraphs] = g;
    b->graph_captures++;
    *failed = 0;
    return &b->graphs[b->ngraphs++];
}

int gpu_round(gpu_backend *b, const engine_row *rows, int n, engine_out *out, const engine_fill *fill)
{
    const model_config *c = b->cfg;
    if (n > b->max_rows)
        return dsk_err("a GPU round takes %d rows at most, %d given", b->max_rows, n);
    if (gpu_xchg_init(b))
        return -1;
    image_rows(b, rows, n);
    int graph = b->use_graphs && !b->hook && !kit_sync_launches() && n <= GPU_GRAPH_MAX_ROWS && !b->img_n, failed = 0;
    round_shape sh;
    if (build_plan(b, rows, n, graph, &sh) || engram_plan(b, rows, n) || sample_prep(b, &sh, rows)) {
        engram_done(b);
        return -1;
    }
    if (out->tokens)
        for (int i = 0; i < n; i++)
            out->tokens[i] = -1;
    const struct gpu_graph *gg = graph ? round_graph(b, &sh, &failed) : NULL;
    if (graph && !gg) {
        /* eagerly, with the eager plan: every graph slot is taken, or the capture failed (said once, and
         * then no round captures again) */
        if (failed) {
            fprintf(stderr, "gpu: rounds run without CUDA graphs from now on (capturing %d rows: %s)\n", n,
                    dsk_err_msg());
            b->use_graphs = 0;
        }
        if (build_plan(b, rows, n, 0, &sh) || sample_prep(b, &sh, rows)) { /* the Engram reads go on */
            engram_done(b);
            return -1;
        }
    }
    /* the forward, queued segment by segment: before each Engram layer's segment the host waits for that
     * layer's rows (read since the plan, while the segments before ran); then the masks are written while
     * the forward runs, and go up with the draw */
    fwd_ctx f = {0};
    int rc = 0;
    for (f.seg = 0; f.seg < n_segments(b) && !rc; f.seg++) {
        rc = f.seg > 0 && engram_ready(b, f.seg - 1);
        if (!rc && gg)
            rc = cu.cuGraphLaunch(gg->forward[f.seg], b->s) != CUDA_SUCCESS ? dsk_err("cuGraphLaunch failed") : 0;
        else if (!rc)
            rc = device_segment(b, &sh, &f);
    }
    engram_done(b);
    if (gg)
        b->graph_replays++;
    rc = rc || engine_fill_run(fill);
    if (!rc) {
        copy_masks(b, &sh, rows);
        if (gg && gg->draw)
            rc = cu.cuGraphLaunch(gg->draw, b->s) != CUDA_SUCCESS ? dsk_err("cuGraphLaunch failed") : 0;
        else if (!gg)
            rc = draw(b, &sh, NULL);
    }
    if (rc) {
        cu.cuStreamSynchronize(b->s); /* nothing of this round may still run when the step returns */
        gpu_counters_reset(b);
        return -1;
    }
    CUresult cr = cu.cuStreamSynchronize(b->s);
    if (cr != CUDA_SUCCESS)
        return dsk_cu_fail(cr, "the round on the device"),
               dsk_err_ctx("kit %s; DSKIT_SYNC_LAUNCHES=1 names the kernel that faulted", kit_root(b->k));
    if (gpu_xchg_check(b) || gpu_counters_check(b)) {
        gpu_counters_reset(b);
        return -1;
    }
    /* the results */
    const int32_t *src = P32(b, sample_src), *tok = IO(b, io_tok), *tid = IO(b, io_tid);
    const float *lp = IO(b, io_lp), *tlp = IO(b, io_tlp);
    for (int i = 0; i < sh.S && !rc; i++) {
        int r = src[i];
        if (tok[i] < 0)
            rc = dsk_err("row %d: no token may be drawn (its allowed ids and the tokenizer's do not meet)", r);
        if (out->tokens)
            out->tokens[r] = tok[i];
        if (out->logprob && rows[r].top_logprobs >= 0) {
            out->logprob[r] = lp[i];
            memcpy(out->top_ids + (size_t)r * SAMPLE_MAX_TOP_LOGPROBS, tid + (size_t)i * SAMPLE_TOP_LOGPROBS,
                   sizeof(int32_t) * SAMPLE_MAX_TOP_LOGPROBS);
            memcpy(out->top_lp + (size_t)r * SAMPLE_MAX_TOP_LOGPROBS, tlp + (size_t)i * SAMPLE_TOP_LOGPROBS,
                   sizeof(float) * SAMPLE_MAX_TOP_LOGPROBS);
        }
        /* on the round's stream (a copy on the context's default stream could wait for another rank's
         * exchange where ranks share a context: the tests' threads) */
        if (out->logits && cu.cuMemcpyDtoHAsync(out->logits + (size_t)r * c->vocab_size,
                                                b->logits + (CUdeviceptr)i * c->vocab_size * 4,
                                                sizeof(float) * (size_t)c->vocab_size, b->s) != CUDA_SUCCESS)
            rc = dsk_err("copying the logits of row %d failed", r);
    }
    if (!rc && out->taps && c->n_dspark_targets > 0 &&
        cu.cuMemcpyDtoHAsync(out->taps, b->taps, sizeof(uint16_t) * (size_t)n * c->n_dspark_targets * c->dim, b->s) !=
            CUDA_SUCCESS)
        rc = dsk_err("copying the DSpark taps failed");
    if ((out->logits || out->taps) && cu.cuStreamSynchronize(b->s) != CUDA_SUCCESS)
        rc = dsk_err("copying the round's logits and taps back failed");
    return rc;
}
