/* `dskit bench decode --tp 2 --kit KIT --model DIR`: a decode round at TP2 against TP1, in the same run.
 * Both ranks are threads of this process on GPU 0 (one context, so their launches run at once, as ranks on
 * two GPUs do, but on one GPU's SMs), exchanging through peer memory in the rounds' graphs; rank 1 runs in
 * a worker thread woken by a spin on a counter. Per round of 1, 2, 4, 8, 16 rows and a 6-row verify window
 * at each context: the round's time replayed from its graph (min of N), per layer (the whole round over
 * the layers: head and embedding included, at both widths), TP2 over TP1, and a rank's launches per
 * layer (counted in an eager round, the launches outside the layers left out). On one GPU the two ranks share its SMs and memory bandwidth, so TP2 here is the exchanges' and
 * the split's cost, not two GPUs' speed-up (docs/ranks.md). */
#include "runtime/bench/bench_decode_tp.h"
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/ranks/threads_xchg.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TP_SEQS 16
#define TP_CHUNK 256
#define TP_SHAPES 6

/* What a rank runs next: a step, or a commit when n == 0. */
typedef struct {
    gpu_backend *b;
    const engine_backend_ops *ops;
    const engine_row *rows;
    int n, seq;
    int64_t old_len, len;
    int rc;
    char err[384];
} rank_job;

typedef struct {
    rank_job job;
    atomic_uint go, done;
    atomic_int quit;
    pthread_t th;
} worker;

static int job_run(rank_job *j)
{
    int32_t tok[TP_CHUNK];
    engine_out out = {.tokens = tok};
    j->rc = j->n ? j->ops->step(j->b, j->rows, j->n, &out, NULL) : j->ops->commit(j->b, j->seq, j->old_len, j->len);
    if (j->rc && !strncmp(dsk_err_msg(), "rank ", 5)) /* the engine's exchange errors name the rank */
        snprintf(j->err, sizeof j->err, "%s", dsk_err_msg());
    else if (j->rc)
        snprintf(j->err, sizeof j->err, "rank %d: %s", j->b->xchg->rank, dsk_err_msg());
    return j->rc;
}

static void *worker_main(void *p)
{
    worker *w = p;
    if (cu.cuCtxSetCurrent(w->job.b->g.ctx) != CUDA_SUCCESS)
        return NULL;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        while ((g = atomic_load(&w->go)) == seen) {
            if (atomic_load(&w->quit))
                return NULL;
            sched_yield();
        }
        seen = g;
        job_run(&w->job);
        atomic_store(&w->done, seen);
    }
}

/* The same call on rank 0 (here) and rank 1 (the worker). */
static int both(rank_job *j0, worker *w, const rank_job *j1)
{
    w->job.rows = j1->rows, w->job.n = j1->n, w->job.seq = j1->seq, w->job.old_len = j1->old_len,
    w->job.len = j1->len;
    unsigned g = atomic_fetch_add(&w->go, 1u) + 1u;
    int rc = job_run(j0);
    while (atomic_load(&w->done) != g) /* rank 1's exchanges are bounded: it returns */
        sched_yield();
    if (rc || w->job.rc)
        return dsk_err("%s%s%s", rc ? j0->err : "", rc && w->job.rc ? "; " : "", w->job.rc ? w->job.err : "");
    return 0;
}

typedef struct {
    int tp;
    gpu_backend *b[2];
    const engine_backend_ops *ops;
    worker w;
    threads_shared sh;
    threads_xchg x[2];
} ranks;

static int call(ranks *R, const engine_row *rows, int n, int seq, int64_t old_len, int64_t len)
{
    rank_job j = {R->b[0], R->ops, rows, n, seq, old_len, len, 0, ""};
    if (R->tp == 1)
        return job_run(&j) ? dsk_err("%s", j.err) : 0;
    return both(&j, &R->w, &j);
}

static int ranks_open(ranks *R, int tp, const char *kit_path, const char *model, int64_t cmax, const uint32_t *valid)
{
    memset(R, 0, sizeof *R);
    R->tp = tp;
    if (tp == 2 && threads_shared_init(&R->sh, 2, 60.0))
        return -1;
    for (int r = 0; r < tp; r++) {
        engine_opts o = {.backend = "gpu", .model_dir = model, .kit = kit_path, .max_seqs = TP_SEQS,
                         .max_rows = TP_CHUNK, .context = cmax, .engram = "host", .devices = tp == 2 ? "0,0" : NULL};
        engine_info info = {0};
        rank_xchg *x = rank_xchg_single();
        if (tp == 2) {
            threads_xchg_init(&R->x[r], &R->sh, r);
            x = &R->x[r].x;
        }
        engine_backend_args a = {&o, valid, &info, x};
        void *impl;
        if (gpu_backend_open(&a, &impl, &R->ops))
            return dsk_err_ctx("rank %d of %d", r, tp);
        R->b[r] = impl;
    }
    if (tp == 2) {
        R->w.job = (rank_job){R->b[1], R->ops, NULL, 0, 0, 0, 0, 0, ""};
        if (pthread_create(&R->w.th, NULL, worker_main, &R->w))
            return dsk_err("starting rank 1's thread failed");
    }
    for (int s = 0; s < TP_SEQS; s++)
        for (int r = 0; r < tp; r++)
            if (R->ops->seq_open(R->b[r], s, cmax, 0))
                return dsk_err_ctx("rank %d: opening sequence %d", r, s);
    return 0;
}

static void ranks_close(ranks *R)
{
    if (R->tp == 2 && R->b[1]) {
        atomic_store(&R->w.quit, 1);
        pthread_join(R->w.th, NULL);
    }
    for (int r = 0; r < R->tp; r++)
        if (R->b[r])
            R->ops->close(R->b[r]);
    if (R->tp == 2)
        threads_shared_destroy(&R->sh);
}

/* Every sequence's prompt from `from` to `to`, in chunks; the same random tokens at both widths. */
static int prefill(ranks *R, int64_t from, int64_t to, uint64_t seed)
{
    engine_row rows[TP_CHUNK];
    dsk_rng rng;
    dsk_rng_seed(&rng, seed);
    for (int s = 0; s < TP_SEQS; s++)
        for (int64_t p = from; p < to; p += TP_CHUNK) {
            int n = (int)(to - p < TP_CHUNK ? to - p : TP_CHUNK);
            for (int i = 0; i < n; i++)
                rows[i] = (engine_row){.seq = s, .token = (int32_t)dsk_rng_below(&rng, (uint64_t)R->b[0]->cfg->vocab_size / 2),
                                       .pos = p + i, .sample = i == n - 1, .sp = SAMPLE_GREEDY, .top_logprobs = -1};
            if (call(R, rows, n, s, 0, 0) || call(R, NULL, 0, s, p, p + n))
                return -1;
        }
    return 0;
}

/* The round times (ms, min of reps, from graphs) and a rank's launches per round of each shape. */
static int rounds(ranks *R, int64_t C, int reps, double *ms, double *launches)
{
    static const int shape_rows[TP_SHAPES] = {1, 2, 4, 8, 16, 6};
    for (int si = 0; si < TP_SHAPES; si++) {
        int n = shape_rows[si], win = si == TP_SHAPES - 1;
        engine_row rows[TP_SEQS];
        for (int i = 0; i < n; i++)
            rows[i] = (engine_row){.seq = win ? 0 : i, .token = 1000 + i, .pos = win ? C + i : C, .sample = 1,
                                   .sp = SAMPLE_GREEDY, .top_logprobs = -1};
        /* a rank's launches, counted eagerly (a replayed graph launches through the driver) */
        int graphs[2];
        for (int r = 0; r < R->tp; r++)
            graphs[r] = R->b[r]->use_graphs, R->b[r]->use_graphs = 0;
        unsigned long long l0 = kit_launches();
        int rc = call(R, rows, n, 0, 0, 0);
        launches[si] = ((double)(kit_launches() - l0) / R->tp - R->b[0]->outside_launches) / R->b[0]->cfg->n_layers;
        for (int r = 0; r < R->tp; r++)
            R->b[r]->use_graphs = graphs[r];
        if (rc || call(R, rows, n, 0, 0, 0) || call(R, rows, n, 0, 0, 0)) /* capture, then a replay */
            return -1;
        double best = 1e30;
        for (int i = 0; i < reps; i++) {
            double t0 = dsk_now();
            if (call(R, rows, n, 0, 0, 0))
                return -1;
            double t = (dsk_now() - t0) * 1e3;
            best = t < best ? t : best;
        }
        ms[si] = best;
    }
    return 0;
}

int bench_decode_tp(const char *kit_path, const char *model, const int64_t *contexts, int nctx, int reps)
{
    int64_t cmax = 0;
    for (int i = 0; i < nctx; i++)
        cmax = contexts[i] > cmax ? contexts[i] : cmax;
    cmax += 64;
    model_config cfg;
    if (model_config_load(model, &cfg))
        return dsk_err_ctx("dskit bench decode --tp 2");
    size_t words = (size_t)(cfg.vocab_size + 31) / 32;
    uint32_t *valid = dsk_malloc(sizeof(uint32_t) * words);
    double *ms = dsk_calloc((size_t)2 * nctx * TP_SHAPES, sizeof(double));
    double *ln = dsk_calloc((size_t)2 * nctx * TP_SHAPES, sizeof(double));
    if (!valid || !ms || !ln) {
        free(valid), free(ms), free(ln);
        return -1;
    }
    memset(valid, 0xff, sizeof(uint32_t) * words);
    setenv("DSKIT_XCHG", "peer", 0); /* two ranks of one context on one GPU: peer memory, in the graphs */
    int rc = 0;
    long long replays = 0;
    const char *kind = "";
    for (int tp = 1; tp <= 2 && !rc; tp++) {
        ranks R;
        rc = ranks_open(&R, tp, kit_path, model, cmax, valid);
        int64_t done = 0;
        for (int ci = 0; ci < nctx && !rc; ci++) {
            rc = prefill(&R, done, contexts[ci], 7 + (uint64_t)ci) ||
                 rounds(&R, contexts[ci], reps, ms + ((size_t)(tp - 1) * nctx + ci) * TP_SHAPES,
                        ln + ((size_t)(tp - 1) * nctx + ci) * TP_SHAPES);
            done = contexts[ci];
        }
        if (!rc && tp == 2) {
            replays = R.b[0]->graph_replays;
            kind = R.b[0]->xkind == GPU_XCHG_PEER ? "peer memory" : R.b[0]->xkind == GPU_XCHG_NCCL ? "NCCL" : "the host";
        }
        if (R.b[0] || R.tp == 2)
            ranks_close(&R);
    }
    if (!rc) {
        printf("\nTP2 against TP1: both ranks threads on GPU 0 (sharing its SMs), exchanging through %s; %lld TP2 "
               "rounds replayed from graphs; per layer = the round over %d layer%s, head included\n",
               kind, replays, cfg.n_layers, cfg.n_layers == 1 ? "" : "s");
        static const char *names[TP_SHAPES] = {"rows 1", "rows 2", "rows 4", "rows 8", "rows 16", "verify 6"};
        for (int ci = 0; ci < nctx; ci++) {
            printf("context %lld\n%-10s %10s %10s %13s %13s %9s %13s %13s\n", (long long)contexts[ci], "round",
                   "TP1 ms", "TP2 ms", "TP1 us/layer", "TP2 us/layer", "TP2/TP1", "TP1 launch/l", "TP2 launch/l");
            for (int si = 0; si < TP_SHAPES; si++) {
                double a = ms[(size_t)ci * TP_SHAPES + si], b2 = ms[((size_t)nctx + ci) * TP_SHAPES + si];
                printf("%-10s %10.3f %10.3f %13.1f %13.1f %8.2fx %13.1f %13.1f\n", names[si], a, b2,
                       a * 1e3 / cfg.n_layers, b2 * 1e3 / cfg.n_layers, b2 / a, ln[(size_t)ci * TP_SHAPES + si],
                       ln[((size_t)nctx + ci) * TP_SHAPES + si]);
            }
        }
    }
    free(valid), free(ms), free(ln);
    return rc;
}
