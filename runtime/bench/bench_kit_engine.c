/* `dskit bench kit` rows of the engine's indexer, routing, sampling and drafter families: graph-replayed
 * times and GB/s against the streaming-read roofline of the same run (runtime/bench/bench_kit.c). */
#include "runtime/bench/bench_kit_engine.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/launch/cand_blocks.h"
#include "runtime/launch/dspark_conf.h"
#include "runtime/launch/gpu_time.h"
#include "runtime/launch/index_score.h"
#include "runtime/launch/moe_route.h"
#include "runtime/launch/sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 129280

typedef struct {
    const kit *k;
    CUstream s;
    index_score_args is;
    cand_blocks_args cb;
    sample_args sa;
    dspark_conf_args dc;
    CUdeviceptr lg, bias, ids, wts;
    int rows, E, topk;
} eng_ctx;

static int launch_index_score(void *p)
{
    eng_ctx *c = p;
    return op_index_score(c->k, c->s, &c->is);
}
static int launch_cand_blocks(void *p)
{
    eng_ctx *c = p;
    return op_cand_blocks(c->k, c->s, &c->cb);
}
static int launch_moe_route(void *p)
{
    eng_ctx *c = p;
    return op_moe_route(c->k, c->s, c->lg, c->E, c->bias, c->rows, c->E, c->topk, 1.5f, c->ids, c->wts, 0);
}
static int launch_sample(void *p)
{
    eng_ctx *c = p;
    return op_sample(c->k, c->s, &c->sa);
}
static int launch_dspark_conf(void *p)
{
    eng_ctx *c = p;
    return op_dspark_conf(c->k, c->s, &c->dc);
}

/* One table row, as bench_kit.c prints them: eager, graph-replayed, GB/s of `bytes` from the graph time. */
static int eng_row(const char *op, const char *shape, CUstream s, int batch, gpu_launch_fn fn, void *ctx,
                   double bytes, double roof_gbs)
{
    double us = gpu_time_us(s, batch, 7, fn, ctx), gus = gpu_time_graph_us(s, batch, 7, fn, ctx);
    if (us < 0 || gus < 0)
        return dsk_err_ctx("bench kit: %s %s", op, shape);
    double gbs = bytes / (gus * 1e-6) / 1e9;
    printf("%-12s %-42s %10.2f %10.2f %10.1f %7.1f%%\n", op, shape, us, gus, gbs, 100.0 * gbs / roof_gbs);
    return 0;
}

typedef struct {
    CUdeviceptr p[64];
    int n;
} dev_list;

static int dalloc(dev_list *l, CUdeviceptr *out, size_t bytes)
{
    if (l->n == 64)
        return dsk_err("bench kit: too many buffers");
    CUresult r = cu.cuMemAlloc(out, bytes ? bytes : 16);
    if (r != CUDA_SUCCESS)
        return dsk_cu_fail(r, "bench kit: cuMemAlloc of the engine families' buffers");
    l->p[l->n++] = *out;
    return 0;
}

static int upload(CUdeviceptr d, const void *h, size_t bytes)
{
    CU_TRY(cu.cuMemcpyHtoD(d, h, bytes));
    return 0;
}

int bench_kit_engine(const kit *k, CUstream s, double roof)
{
    dev_list L = {{0}, 0};
    int rc = -1;
    eng_ctx c = {.k = k, .s = s};
    char shape[64];
    dsk_rng r;
    dsk_rng_seed(&r, 11);
    /* index keys: four sequences of 1M keys (1 GiB), FP4-like values; queries and head weights */
    const int64_t NMAX = 1 << 20, SEQS = 4;
    CUdeviceptr keys, q, w, base, reach, out, cand;
    int hb[16], hr[16];
    size_t kbytes = (size_t)SEQS * NMAX * 128 * 2;
    uint16_t *hq = malloc(sizeof(uint16_t) * 16 * 32 * 128);
    float *hw = malloc(sizeof(float) * 16 * 32);
    uint32_t *hc = calloc((size_t)(NMAX / 8 / 32), sizeof(uint32_t));
    if (!hq || !hw || !hc) {
        dsk_err("bench kit: out of host memory");
        goto done;
    }
    for (int i = 0; i < 16 * 32 * 128; i++)
        hq[i] = (uint16_t)(0x3f00 + (dsk_rng_u64(&r) & 0x7f)) ^ (uint16_t)(dsk_rng_u64(&r) & 0x8000);
    for (int i = 0; i < 16 * 32; i++)
        hw[i] = (float)(dsk_rng_f32(&r) - 0.5f) / 64.0f;
    for (int i = 0; i < 2048; i++) /* a Reindex row's 2048 kept blocks of 8 keys, spread over 1M */
        hc[(i * 64) >> 5] |= 1u << ((i * 64) & 31);
    if (dalloc(&L, &keys, kbytes) || dalloc(&L, &q, 16 * 32 * 128 * 2) || dalloc(&L, &w, 16 * 32 * 4) ||
        dalloc(&L, &base, 64) || dalloc(&L, &reach, 64) || dalloc(&L, &out, (size_t)16 * NMAX * 4) ||
        dalloc(&L, &cand, (size_t)16 * NMAX / 8 / 8) || upload(q, hq, 16 * 32 * 128 * 2) || upload(w, hw, 16 * 32 * 4))
        goto done;
    if (cu.cuMemsetD32(keys, 0x3f00bf00u, kbytes / 4) != CUDA_SUCCESS || cu.cuCtxSynchronize() != CUDA_SUCCESS) {
        dsk_err("bench kit: cannot fill the index keys");
        goto done;
    }
    for (int i = 0; i < 16; i++)
        if (upload(cand + (CUdeviceptr)i * (NMAX / 8 / 8), hc, NMAX / 8 / 8))
            goto done;
    const int is_rows[] = {1, 4, 16};
    const int64_t is_n[] = {4096, 65536, NMAX};
    for (int shared = 1; shared >= 0; shared--)
        for (size_t ni = 0; ni < 3; ni++)
            for (size_t ri = 0; ri < 3; ri++) {
                int R = is_rows[ri], N = (int)is_n[ni];
                /* rows of one sequence share its keys (read once, L2 serves the rest); rows of R
                 * sequences read R times the keys (at most four 1M sequences fit) */
                if (!shared && (R == 1 || (int64_t)R * N > SEQS * NMAX))
                    continue;
                for (int i = 0; i < R; i++) {
                    hb[i] = shared ? 0 : (int)((int64_t)i * N);
                    hr[i] = N;
                }
                if (upload(base, hb, sizeof(int) * (size_t)R) || upload(reach, hr, sizeof(int) * (size_t)R))
                    goto done;
                c.is = (index_score_args){.q = q, .w = w, .keys = keys, .key_base = base, .reach = reach, .rows = R,
                                          .nh = 32, .ihd = 128, .N = N, .group = shared ? (R < 4 ? R : 4) : 1,
                                          .out = out, .lds = N};
                snprintf(shape, sizeof shape, "rows %d, %d keys, %s", R, N,
                         shared ? "1 sequence, groups of 4" : "own sequences");
                double bytes = (shared ? 1.0 : R) * N * 256.0;
                if (eng_row("index_score", shape, s, 10, launch_index_score, &c, bytes, roof))
                    goto done;
            }
    /* a Reindex row: 2048 candidate blocks (16K keys) of 1M: scored keys only */
    for (int R = 1; R <= 16; R *= 4) {
        for (int i = 0; i < R; i++)
            hb[i] = 0, hr[i] = (int)NMAX;
        if (upload(base, hb, sizeof(int) * (size_t)R) || upload(reach, hr, sizeof(int) * (size_t)R))
            goto done;
        c.is = (index_score_args){.q = q, .w = w, .keys = keys, .key_base = base, .reach = reach, .cand = cand,
                                  .ldc = (int)(NMAX / 8 / 32), .cand_block = 8, .rows = R, .nh = 32, .ihd = 128,
                                  .N = (int)NMAX, .out = out, .lds = NMAX};
        snprintf(shape, sizeof shape, "rows %d, 1M keys, 2048 cand blocks", R);
        if (eng_row("index_score", shape, s, 10, launch_index_score, &c, R * (16384.0 * 256 + NMAX * 4.0), roof))
            goto done;
    }
    /* candidate blocks of the scores just written (1M keys: 131072 blocks, the top 2048) */
    for (int R = 1; R <= 16; R *= 4) {
        size_t wsb = op_cand_blocks_ws_bytes(R, (int)NMAX, 8, 2048);
        CUdeviceptr ws, bm;
        if (dalloc(&L, &ws, wsb) || dalloc(&L, &bm, (size_t)R * NMAX / 8 / 8))
            goto done;
        c.cb = (cand_blocks_args){.scores = out, .lds = NMAX, .N = (int)NMAX, .reach = reach, .rows = R, .block = 8,
                                  .cap = 2048, .bitmap = bm, .ldw = (int)(NMAX / 8 / 32), .ws = ws, .ws_bytes = wsb};
        snprintf(shape, sizeof shape, "rows %d, 1M scores, top 2048 of blocks", R);
        if (eng_row("cand_blocks", shape, s, 10, launch_cand_blocks, &c, R * NMAX * 4.0, roof))
            goto done;
    }
    /* routing: 384 experts, top 6 */
    {
        float *hl = malloc(sizeof(float) * 64 * 384);
        if (!hl) {
            dsk_err("bench kit: out of host memory");
            goto done;
        }
        for (int i = 0; i < 64 * 384; i++)
            hl[i] = 2.0f * dsk_rng_normal(&r);
        int bad = dalloc(&L, &c.lg, 64 * 384 * 4) || dalloc(&L, &c.bias, 384 * 4) || dalloc(&L, &c.ids, 64 * 6 * 4) ||
                  dalloc(&L, &c.wts, 64 * 6 * 4) || upload(c.lg, hl, 64 * 384 * 4) || upload(c.bias, hl, 384 * 4);
        free(hl);
        if (bad)
            goto done;
        const int mr[] = {1, 16, 64};
        for (int i = 0; i < 3; i++) {
            c.rows = mr[i], c.E = 384, c.topk = 6;
            snprintf(shape, sizeof shape, "rows %d, top 6 of 384", mr[i]);
            if (eng_row("moe_route", shape, s, 20, launch_moe_route, &c, mr[i] * 384 * 4.0, roof))
                goto done;
        }
    }
    /* sampling over the real vocabulary: greedy (no candidates), the card's T 1 / top_p 0.95, top_k 50 */
    {
        const int maxr = 64;
        float *hl = malloc(sizeof(float) * (size_t)maxr * VOCAB);
        sample_row_params *hp = calloc(maxr, sizeof *hp);
        if (!hl || !hp) {
            free(hl);
            free(hp);
            dsk_err("bench kit: out of host memory");
            goto done;
        }
        for (size_t i = 0; i < (size_t)maxr * VOCAB; i++)
            hl[i] = 3.0f * dsk_rng_normal(&r);
        CUdeviceptr lg, pg, ps, pk, tok, lp, ti, tl, ws;
        size_t wsb = op_sample_ws_bytes(maxr, VOCAB, 1);
        int bad = dalloc(&L, &lg, sizeof(float) * (size_t)maxr * VOCAB) || dalloc(&L, &pg, sizeof *hp * maxr) ||
                  dalloc(&L, &ps, sizeof *hp * maxr) || dalloc(&L, &pk, sizeof *hp * maxr) ||
                  dalloc(&L, &tok, 4 * maxr) || dalloc(&L, &lp, 4 * maxr) ||
                  dalloc(&L, &ti, 4 * maxr * SAMPLE_TOP_LOGPROBS) || dalloc(&L, &tl, 4 * maxr * SAMPLE_TOP_LOGPROBS) ||
                  dalloc(&L, &ws, wsb) || upload(lg, hl, sizeof(float) * (size_t)maxr * VOCAB);
        for (int i = 0; i < maxr && !bad; i++)
            hp[i] = (sample_row_params){.temperature = 0.0f, .top_p = 1.0f, .top_logprobs = -1, .allow_row = -1};
        bad = bad || upload(pg, hp, sizeof *hp * maxr);
        for (int i = 0; i < maxr && !bad; i++)
            hp[i] = (sample_row_params){.temperature = 1.0f, .top_p = 0.95f, .top_logprobs = -1, .seed = 7,
                                        .pos = 1000 + i, .allow_row = -1};
        bad = bad || upload(ps, hp, sizeof *hp * maxr);
        for (int i = 0; i < maxr && !bad; i++)
            hp[i] = (sample_row_params){.temperature = 0.7f, .top_p = 1.0f, .top_k = 50, .top_logprobs = 5, .seed = 7,
                                        .pos = 1000 + i, .allow_row = -1};
        bad = bad || upload(pk, hp, sizeof *hp * maxr);
        free(hl);
        free(hp);
        if (bad)
            goto done;
        const int sr[] = {1, 16, 64};
        const struct {
            const char *what;
            CUdeviceptr params;
            int candidates;
        } modes[] = {{"greedy", pg, 0}, {"T 1, top_p 0.95", ps, 1}, {"T 0.7, top_k 50, 5 logprobs", pk, 1}};
        for (int m = 0; m < 3; m++)
            for (int i = 0; i < 3; i++) {
                c.sa = (sample_args){.logits = lg, .ldl = VOCAB, .V = VOCAB, .rows = sr[i], .params = modes[m].params,
                                     .candidates = modes[m].candidates, .tokens = tok, .logprob = lp, .top_ids = ti,
                                     .top_lp = tl, .ws = ws, .ws_bytes = wsb};
                snprintf(shape, sizeof shape, "rows %d, %s", sr[i], modes[m].what);
                if (eng_row("sample", shape, s, 10, launch_sample, &c, sr[i] * (double)VOCAB * 4, roof))
                    goto done;
            }
        /* the drafter's confidence and Markov-bias add over the same logits (d 5120, rank 256) */
        CUdeviceptr u, e, cw, conf;
        if (dalloc(&L, &u, 64 * 5120 * 2) || dalloc(&L, &e, 64 * 256 * 2) || dalloc(&L, &cw, 5376 * 2) ||
            dalloc(&L, &conf, 64 * 4) || cu.cuMemsetD32(u, 0x3c003c00u, 64 * 5120 / 2) != CUDA_SUCCESS ||
            cu.cuMemsetD32(e, 0x3c003c00u, 64 * 256 / 2) != CUDA_SUCCESS ||
            cu.cuMemsetD32(cw, 0x3c003c00u, 5376 / 2) != CUDA_SUCCESS || cu.cuCtxSynchronize() != CUDA_SUCCESS) {
            dsk_err_ctx("bench kit: dspark_conf buffers");
            goto done;
        }
        for (int R = 1; R <= 5; R += 4) {
            c.dc = (dspark_conf_args){.u = u, .ldu = 5120, .d = 5120, .e = e, .lde = 256, .R = 256, .w = cw,
                                      .conf = conf, .bias = lg, .ldb = VOCAB, .logits = lg, .ldl = VOCAB, .V = VOCAB,
                                      .rows = R};
            snprintf(shape, sizeof shape, "rows %d, d 5120 + 256, bias add of %d", R, VOCAB);
            if (eng_row("dspark_conf", shape, s, 20, launch_dspark_conf, &c, R * (5376.0 * 2 + VOCAB * 12.0), roof))
                goto done;
        }
    }
    rc = 0;
done:
    free(hq);
    free(hw);
    free(hc);
    for (int i = 0; i < L.n; i++)
        cu.cuMemFree(L.p[i]);
    return rc;
}
