/* Two GPU ranks against one (docs/ranks.md), layer by layer with teacher forcing: a one-rank GPU backend
 * runs a prompt and then its own greedy tokens, recording every block's input, attention output and
 * output; two rank backends (threads of this process on GPU 0, exchanging through the threads transport
 * that stands in for the processes' shared memory) run the same calls, each block fed the one-rank input
 * to it and after its attention the one-rank attention output. Checks:
 *   - both ranks bit for bit the same: every sublayer output, the logits, the window rings and the
 *     compressed rows and index keys;
 *   - against one rank: the attention and MoE sublayer outputs within a relative L2 error of 2^-8 (the
 *     ranks' fp32 partials of wo_b and of the routed experts are summed in rank order, a sum one rank
 *     never makes; it is rounded to bf16 once, so each output moves by at most one bf16 step, 2^-8 of
 *     it: measured 8.9e-4 and 1.03e-3 on layer-a, 6e-6 on tiny), the caches and the logits given the
 *     same last hidden state bit for bit (replicated work on identical inputs; the head's vocabulary
 *     split changes no sum).
 * Run: gpu_tests KIT engine_tp2, with DSKIT_TEST_MODEL naming a model folder (tiny or a layer preset). */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/ref/sampling.h"
#include "tests/gpu/gpu_check.h"
#include "runtime/ranks/threads_xchg.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TP2_TOL (1.0 / 256) /* one bf16 step */
#define N0 20
#define STEPS 16
#define CALLS (1 + STEPS)
#define MAXL 64

typedef struct {
    const model_config *c;
    int call;
    /* the one-rank forward's, per call and layer: block input (streams and π [n][hc]), attention output,
     * block output */
    uint16_t *in[CALLS][MAXL], *attn[CALLS][MAXL], *out[CALLS][MAXL];
    float *pi[CALLS][MAXL];
} tp1_rec;

typedef struct {
    tp1_rec *rec;
    int rank;
    CUstream s;
    double err_attn[MAXL], err_ffn[MAXL];
    uint16_t *attn[CALLS][MAXL], *out[CALLS][MAXL]; /* this rank's own, before forcing */
} rank_rec;

static size_t stream_elems(const model_config *c, int n)
{
    return (size_t)n * c->hc_mult * c->dim;
}

static uint16_t *download16(CUdeviceptr X, size_t n)
{
    uint16_t *h = xmalloc(n * 2);
    dev_download(h, X, n * 2);
    return h;
}

static void tp1_hook(void *ctx, int l, int stage, CUdeviceptr X, CUdeviceptr pi, int pi_stride, int n)
{
    tp1_rec *r = ctx;
    const model_config *c = r->c;
    if (l >= c->n_layers || l >= MAXL || stage >= GPU_HOOK_ROUTE)
        return;
    size_t e = stream_elems(c, n);
    if (stage == GPU_HOOK_BLOCK_IN) {
        r->in[r->call][l] = download16(X, e);
        float *rows = xmalloc(sizeof(float) * (size_t)n * pi_stride);
        dev_download(rows, pi, sizeof(float) * (size_t)n * pi_stride);
        r->pi[r->call][l] = xmalloc(sizeof(float) * (size_t)n * c->hc_mult);
        for (int i = 0; i < n; i++)
            memcpy(r->pi[r->call][l] + (size_t)i * c->hc_mult, rows + (size_t)i * pi_stride, sizeof(float) * c->hc_mult);
        free(rows);
    } else if (stage == GPU_HOOK_ATTN_OUT)
        r->attn[r->call][l] = download16(X, e);
    else
        r->out[r->call][l] = download16(X, e);
}

/* Copies on the rank's own stream: the ranks share this process's context, and a copy on its default
 * stream could wait for the other rank's exchange kernel, which waits for this rank. */
static void s_down(CUstream s, void *host, CUdeviceptr d, size_t bytes)
{
    must(cu.cuMemcpyDtoHAsync(host, d, bytes, s) != CUDA_SUCCESS || cu.cuStreamSynchronize(s) != CUDA_SUCCESS,
         "a copy down");
}

static void s_up(CUstream s, CUdeviceptr d, const void *host, size_t bytes)
{
    must(cu.cuMemcpyHtoDAsync(d, host, bytes, s) != CUDA_SUCCESS || cu.cuStreamSynchronize(s) != CUDA_SUCCESS,
         "a copy up");
}

static void rank_hook(void *ctx, int l, int stage, CUdeviceptr X, CUdeviceptr pi, int pi_stride, int n)
{
    rank_rec *k = ctx;
    CUstream s = k->s;
    tp1_rec *r = k->rec;
    const model_config *c = r->c;
    int call = r->call;
    if (l >= c->n_layers || l >= MAXL || stage >= GPU_HOOK_ROUTE)
        return;
    size_t e = stream_elems(c, n);
    if (stage == GPU_HOOK_BLOCK_IN) {
        s_up(s, X, r->in[call][l], e * 2);
        float *rows = xmalloc(sizeof(float) * (size_t)n * pi_stride);
        s_down(s, rows, pi, sizeof(float) * (size_t)n * pi_stride);
        for (int i = 0; i < n; i++)
            memcpy(rows + (size_t)i * pi_stride, r->pi[call][l] + (size_t)i * c->hc_mult, sizeof(float) * c->hc_mult);
        s_up(s, pi, rows, sizeof(float) * (size_t)n * pi_stride);
        free(rows);
        return;
    }
    int attn = stage == GPU_HOOK_ATTN_OUT;
    uint16_t *mine = xmalloc(e * 2);
    s_down(s, mine, X, e * 2);
    const uint16_t *want = attn ? r->attn[call][l] : r->out[call][l];
    double err = rel_l2_bf16(mine, want, e), *slot = attn ? &k->err_attn[l] : &k->err_ffn[l];
    *slot = err > *slot ? err : *slot;
    (attn ? k->attn : k->out)[call][l] = mine;
    s_up(s, X, want, e * 2); /* teacher forcing */
}

static gpu_backend *open_rank(const char *dir, const char *kit_path, rank_xchg *x, const uint32_t *valid,
                              const engine_backend_ops **ops)
{
    engine_opts o = {.backend = "gpu", .model_dir = dir, .kit = kit_path, .max_seqs = 2, .max_rows = 64,
                     .context = 2048, .devices = x->tp > 1 ? "0,0" : NULL};
    engine_info info = {0};
    engine_backend_args a = {&o, valid, &info, x};
    void *impl;
    must(gpu_backend_open(&a, &impl, ops), "opening a GPU backend");
    return impl;
}

typedef struct {
    gpu_backend *b;
    const engine_backend_ops *ops;
    const engine_row *rows;
    int n;
    int64_t old_len, len;
    float *logits;
    int rc;
    char err[512];
} step_job;

static void *run_step(void *arg)
{
    step_job *j = arg;
    int seq = j->rows[0].seq;
    int32_t drawn[64];
    engine_out out = {.tokens = drawn, .logits = j->logits};
    j->rc = cu.cuCtxSetCurrent(j->b->g.ctx) != CUDA_SUCCESS ? dsk_err("cuCtxSetCurrent") : 0;
    j->rc = j->rc || j->ops->step(j->b, j->rows, j->n, &out, NULL) || j->ops->commit(j->b, seq, j->old_len, j->len);
    if (j->rc)
        snprintf(j->err, sizeof j->err, "%s", dsk_err_msg());
    return NULL;
}

/* The bytes of this sequence's caches (seq 0, base 0, len positions committed): each layer's ring rows of
 * the last window positions, then each kv source's compressed rows and index keys. */
static uint8_t *caches(const gpu_backend *b, int64_t len, size_t *bytes)
{
    const model_config *c = b->cfg;
    int hd = c->head_dim, ihd = c->index_head_dim;
    size_t cap = 0;
    for (int l = 0; l < c->n_layers; l++) {
        cap += (size_t)c->window_size * hd * 2;
        if (c->roles[l].is_kv_source)
            cap += (size_t)(len / c->roles[l].ratio) * (size_t)(hd + ihd) * 2;
    }
    uint8_t *h = xmalloc(cap + 1), *at = h;
    for (int l = 0; l < c->n_layers; l++) {
        int64_t p0 = len > c->window_size ? len - c->window_size : 0;
        for (int64_t p = p0; p < len; p++) {
            CUdeviceptr row = b->rings + ((CUdeviceptr)l * b->max_seqs * b->ring + (CUdeviceptr)(p % b->ring)) * hd * 2;
            dev_download(at, row, (size_t)hd * 2);
            at += (size_t)hd * 2;
        }
        if (c->roles[l].is_kv_source) {
            size_t rows = (size_t)(len / c->roles[l].ratio);
            if (rows) {
                dev_download(at, b->ckv[l], rows * hd * 2);
                at += rows * hd * 2;
                dev_download(at, b->ikv[l], rows * ihd * 2);
                at += rows * ihd * 2;
            }
        }
    }
    *bytes = (size_t)(at - h);
    return h;
}

/* Both ranks' rows of one call in two threads; 0, or -1 after a failed check. */
static int ranks_step(gpu_ctx *c, gpu_backend **rk, const engine_backend_ops *ops, const engine_row *rows, int n,
                      int64_t len, float **logits)
{
    step_job jr[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        jr[r] = (step_job){rk[r], ops, rows, n, len, len + n, logits[r], 0, ""};
        pthread_create(&th[r], NULL, run_step, &jr[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    if (jr[0].rc || jr[1].rc) {
        check(c, 0, "engine_tp2", "a round", "rank 0: %s; rank 1: %s", jr[0].err, jr[1].err);
        return -1;
    }
    return 0;
}

/* The ranks replaying graphs (no hooks) against the same calls eager, on sequence 1: a prompt, then greedy
 * steps; rank 0's logits bit for bit, and rank 1's equal rank 0's. */
static void graphs_check(gpu_ctx *c, gpu_backend **rk, const engine_backend_ops *ops, int V, const char *xchg)
{
    enum { P = 12, ST = 6 };
    float *lg[2][2];
    for (int m = 0; m < 2; m++)
        for (int r = 0; r < 2; r++)
            lg[m][r] = xmalloc(sizeof(float) * (size_t)V * P);
    int32_t toks[P + ST];
    dsk_rng g = fresh_rng(0x9a7);
    for (int i = 0; i < P; i++)
        toks[i] = (int32_t)dsk_rng_below(&g, (uint64_t)V / 2);
    int differ = 0, ranks = 0, calls = 0;
    long long replays = 0;
    engine_row rows[P];
    for (int r = 0; r < 2; r++)
        rk[r]->hook = NULL;
    for (int call = 0; call <= ST; call++) {
        int n = call == 0 ? P : 1;
        int64_t len = call == 0 ? 0 : P + call - 1;
        for (int mode = 0; mode < 2; mode++) { /* 0 eager, 1 graphs */
            for (int r = 0; r < 2; r++) {
                rk[r]->use_graphs = mode && rk[r]->xkind == GPU_XCHG_PEER;
                must(cu.cuCtxSetCurrent(rk[r]->g.ctx) != CUDA_SUCCESS, "cuCtxSetCurrent");
                if (call == 0)
                    must(ops->seq_open(rk[r], 1, 256, 0), "a GPU sequence");
            }
            for (int i = 0; i < n; i++)
                rows[i] = (engine_row){.seq = 1, .token = toks[len + i], .pos = (int)(len + i), .sample = i == n - 1,
                                       .sp = SAMPLE_GREEDY, .top_logprobs = -1};
            if (ranks_step(c, rk, ops, rows, n, len, lg[mode]))
                goto out;
            if (mode == 0) /* the same positions again, from graphs */
                for (int r = 0; r < 2; r++) {
                    must(cu.cuCtxSetCurrent(rk[r]->g.ctx) != CUDA_SUCCESS, "cuCtxSetCurrent");
                    if (call == 0) {
                        ops->seq_close(rk[r], 1);
                    } else
                        must(ops->commit(rk[r], 1, len + n, len), "a rollback");
                }
        }
        size_t at = (size_t)(n - 1) * V, row = sizeof(float) * (size_t)V;
        differ += memcmp(lg[0][0] + at, lg[1][0] + at, row) != 0;
        ranks += memcmp(lg[1][0] + at, lg[1][1] + at, row) != 0 || memcmp(lg[0][0] + at, lg[0][1] + at, row) != 0;
        if (call < ST)
            toks[P + call] = sample_row(lg[1][0] + at, V, &SAMPLE_GREEDY, P + call, NULL);
        calls++;
    }
    replays = rk[0]->graph_replays;
    check(c, differ == 0 && ranks == 0 && (strcmp(xchg, "peer") || rk[0]->xkind != GPU_XCHG_PEER || replays > 0),
          "engine_tp2", "graph == eager",
          "%s: %d of %d calls' logits differ from eager, %d between the ranks; %lld rounds replayed", xchg, differ, calls,
          ranks, replays);
out:
    for (int r = 0; r < 2; r++) {
        cu.cuCtxSetCurrent(rk[r]->g.ctx);
        ops->seq_close(rk[r], 1);
    }
    for (int m = 0; m < 2; m++)
        for (int r = 0; r < 2; r++)
            free(lg[m][r]);
}

static void run_tp2(gpu_ctx *c, const char *dir, const char *kit_path, const char *xchg)
{
    setenv("DSKIT_XCHG", xchg, 1);
    model_config cfg;
    must(model_config_load(dir, &cfg), "the model's config");
    int V = cfg.vocab_size, L = cfg.n_layers < MAXL ? cfg.n_layers : MAXL;
    uint32_t *valid = xmalloc(sizeof(uint32_t) * (size_t)(V + 31) / 32);
    memset(valid, 0xff, sizeof(uint32_t) * (size_t)(V + 31) / 32);
    threads_shared sh;
    threads_xchg X[2];
    must(threads_shared_init(&sh, 2, 60.0), "the threads transport");
    const engine_backend_ops *ops;
    gpu_backend *one = open_rank(dir, kit_path, rank_xchg_single(), valid, &ops), *rk[2];
    for (int r = 0; r < 2; r++) {
        threads_xchg_init(&X[r], &sh, r);
        rk[r] = open_rank(dir, kit_path, &X[r].x, valid, &ops);
    }
    must(cu.cuCtxSetCurrent(one->g.ctx) != CUDA_SUCCESS, "cuCtxSetCurrent");
    static tp1_rec rec;
    static rank_rec rr[2];
    memset(&rec, 0, sizeof rec);
    rec.c = one->cfg;
    one->hook = tp1_hook;
    one->hook_ctx = &rec;
    for (int r = 0; r < 2; r++) {
        memset(&rr[r], 0, sizeof rr[r]);
        rr[r].rec = &rec;
        rr[r].rank = r;
        rr[r].s = rk[r]->s;
        rk[r]->hook = rank_hook;
        rk[r]->hook_ctx = &rr[r];
    }
    for (int r = 0; r < 3; r++)
        must(ops->seq_open(r < 2 ? (void *)rk[r] : (void *)one, 0, 256, 0), "a GPU sequence");
    int32_t toks[N0 + STEPS];
    dsk_rng g = fresh_rng(0x7e02);
    for (int i = 0; i < N0; i++)
        toks[i] = (int32_t)dsk_rng_below(&g, (uint64_t)V / 2);
    float *lg1 = xmalloc(sizeof(float) * (size_t)V * N0), *lgr[2] = {xmalloc(sizeof(float) * (size_t)V * N0),
                                                                      xmalloc(sizeof(float) * (size_t)V * N0)};
    engine_row rows[N0];
    int calls = 0, ranks_differ = 0, logits_differ = 0, caches_differ = 0, failed = 0;
    int64_t len = 0;
    for (int call = 0; call < CALLS && !failed; call++) {
        int n = call == 0 ? N0 : 1;
        for (int i = 0; i < n; i++)
            rows[i] = (engine_row){.seq = 0, .token = toks[len + i], .pos = (int)(len + i), .sample = i == n - 1,
                                   .sp = SAMPLE_GREEDY, .top_logprobs = -1};
        rec.call = call;
        step_job j1 = {one, ops, rows, n, len, len + n, lg1, 0, ""};
        run_step(&j1);
        if (j1.rc) {
            check(c, 0, "engine_tp2", "a round", "one rank: %s", j1.err);
            failed = 1;
            break;
        }
        if (ranks_step(c, rk, ops, rows, n, len, lgr)) {
            failed = 1;
            break;
        }
        must(cu.cuCtxSetCurrent(one->g.ctx) != CUDA_SUCCESS, "cuCtxSetCurrent");
        len += n;
        size_t row = sizeof(float) * (size_t)V, at = (size_t)(n - 1) * V;
        ranks_differ += memcmp(lgr[0] + at, lgr[1] + at, row) != 0;
        logits_differ += memcmp(lgr[0] + at, lg1 + at, row) != 0;
        for (int l = 0; l < L; l++)
            ranks_differ += memcmp(rr[0].attn[call][l], rr[1].attn[call][l], stream_elems(&cfg, n) * 2) != 0 ||
                            memcmp(rr[0].out[call][l], rr[1].out[call][l], stream_elems(&cfg, n) * 2) != 0;
        size_t b1, b0, bb;
        uint8_t *c1 = caches(one, len, &b1), *c0 = caches(rk[0], len, &b0), *cb = caches(rk[1], len, &bb);
        ranks_differ += b0 != bb || memcmp(c0, cb, b0) != 0;
        caches_differ += b0 != b1 || memcmp(c0, c1, b0) != 0;
        free(c1);
        free(c0);
        free(cb);
        if (len < N0 + STEPS)
            toks[len] = sample_row(lg1 + at, V, &SAMPLE_GREEDY, (int)len, NULL);
        calls++;
    }
    if (!failed) {
        double worst_a = 0, worst_f = 0;
        int wa = 0, wf = 0;
        for (int l = 0; l < L; l++) {
            if (rr[0].err_attn[l] > worst_a)
                worst_a = rr[0].err_attn[l], wa = l;
            if (rr[0].err_ffn[l] > worst_f)
                worst_f = rr[0].err_ffn[l], wf = l;
            printf("engine_tp2: layer %d: attention %.2e, MoE %.2e against one rank\n", l, rr[0].err_attn[l],
                   rr[0].err_ffn[l]);
        }
        printf("engine_tp2: the ranks exchange through %s (asked: %s)\n",
               rk[0]->xkind == GPU_XCHG_PEER ? "peer memory" : "the host", xchg);
        check(c, ranks_differ == 0, "engine_tp2", "rank 0 == rank 1",
              "%s: %d differences in %d calls (sublayer outputs of %d layers, logits, caches)", xchg, ranks_differ, calls,
              L);
        check(c, worst_a <= TP2_TOL && worst_f <= TP2_TOL, "engine_tp2", "TP2 vs TP1 sublayers",
              "worst attention %.2e (layer %d), MoE %.2e (layer %d); gate %.2e", worst_a, wa, worst_f, wf, TP2_TOL);
        check(c, caches_differ == 0, "engine_tp2", "TP2 vs TP1 caches",
              "%d of %d calls' window rings, compressed rows and index keys differ", caches_differ, calls);
        check(c, logits_differ == 0, "engine_tp2", "TP2 vs TP1 logits",
              "%d of %d calls' logits differ given the same last hidden state", logits_differ, calls);
    }
    for (int call = 0; call < CALLS; call++)
        for (int l = 0; l < MAXL; l++) {
            free(rec.in[call][l]);
            free(rec.attn[call][l]);
            free(rec.out[call][l]);
            free(rec.pi[call][l]);
            for (int r = 0; r < 2; r++) {
                free(rr[r].attn[call][l]);
                free(rr[r].out[call][l]);
            }
        }
    if (!failed)
        graphs_check(c, rk, ops, V, xchg);
    for (int r = 0; r < 3; r++) {
        gpu_backend *b = r < 2 ? rk[r] : one;
        cu.cuCtxSetCurrent(b->g.ctx);
        ops->seq_close(b, 0);
        ops->close(b);
    }
    threads_shared_destroy(&sh);
    free(lg1);
    free(lgr[0]);
    free(lgr[1]);
    free(valid);
}

void test_engine_tp2(gpu_ctx *c)
{
    const char *dir = getenv("DSKIT_TEST_MODEL");
    const char *kit_path = getenv("DSKIT_TEST_KIT");
    if (!dir || !kit_path) {
        printf("engine_tp2: skipped (DSKIT_TEST_MODEL names no model folder)\n");
        return;
    }
    run_tp2(c, dir, kit_path, "peer");
    run_tp2(c, dir, kit_path, "host");
    unsetenv("DSKIT_XCHG");
}
