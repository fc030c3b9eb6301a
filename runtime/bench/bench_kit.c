/* Benchmarks of the kit itself: how long the builder takes (cold and warm cache), how long the runtime
 * takes to open, check, load and resolve a kit (eager and lazy module loading, each in a fresh process),
 * the card's streaming-read bandwidth (the roofline), and the first kernel families against it. */
#include "runtime/cli.h"
#include "runtime/bench/bench_kit_engine.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "runtime/launch/gpu_time.h"
#include "runtime/launch/rmsnorm.h"
#include "runtime/launch/rope.h"
#include "runtime/launch/rowmm.h"
#include "runtime/launch/sparse_attn.h"
#include "kit/src/sparse_attn_abi.cuh"
#include "runtime/launch/stream_read.h"
#include "runtime/launch/topk.h"
#include "runtime/launch/embed.h"
#include "runtime/launch/mhc.h"
#include "runtime/launch/tap_mean.h"
#include "runtime/launch/compress_pool.h"
#include "runtime/launch/engram_gate.h"
#include "runtime/launch/engram_rows.h"
#include "runtime/launch/rows_copy.h"
#include "runtime/launch/vec_glue.h"
#include "runtime/launch/vision_attn.h"
#include "runtime/ref/rope.h"
#include "manifest/rules/rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int self_dir(char *out, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0)
        return dsk_err_errno("cannot find this program's path (/proc/self/exe)");
    out[n] = 0;
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = 0;
    return 0;
}

/* Run argv with one extra environment variable (or none); capture stdout into buf. */
static int run_child(char *const argv[], const char *env_name, const char *env_value, char *buf, size_t cap,
                     double *secs)
{
    int fd[2];
    if (pipe(fd))
        return dsk_err_errno("pipe");
    double t0 = dsk_now();
    pid_t pid = fork();
    if (pid < 0)
        return dsk_err_errno("fork");
    if (pid == 0) {
        if (env_name)
            setenv(env_name, env_value, 1);
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(fd[0], buf + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    buf[got] = 0;
    char sink[4096];
    while (read(fd[0], sink, sizeof sink) > 0) {
    }
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    *secs = dsk_now() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        return dsk_err("%s exited with status %d:\n%s", argv[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1, buf);
    return 0;
}

static long long dir_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

int bench_build(int argc, char **argv)
{
    const char *arch = "sm_90";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--arch") && i + 1 < argc)
            arch = argv[++i];
        else {
            fprintf(stderr, "usage: dskit bench build [--arch sm_90]\n");
            return 2;
        }
    }
    char dir[4096], builder[4200], tmp[] = "/tmp/dskit-bench-build-XXXXXX";
    if (self_dir(dir, sizeof dir) || !mkdtemp(tmp)) {
        fprintf(stderr, "dskit bench build: %s\n", dsk_err_msg()[0] ? dsk_err_msg() : "cannot make a temporary folder");
        return 2;
    }
    snprintf(builder, sizeof builder, "%s/dskit-build", dir);
    char cache[4200], kitpath[4300];
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    snprintf(kitpath, sizeof kitpath, "%s/dskit-%s.tar.zst", tmp, arch);
    char *args[] = {builder, "--arch", (char *)arch, "--out", tmp, "--cache", cache, NULL};
    char out[8192];
    double cold, warm;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (run_child(args, NULL, NULL, out, sizeof out, &cold) || run_child(args, NULL, NULL, out, sizeof out, &warm)) {
        fprintf(stderr, "dskit bench build: %s\n", dsk_err_msg());
        return 1;
    }
    printf("kit build, %s, %ld cores\n%-28s %10s\n", arch, ncpu, "what", "value");
    printf("%-28s %9.2fs\n%-28s %9.2fs\n%-28s %9.1fx\n%-28s %7.1fKiB\n", "cold cache (all compiled)", cold,
           "warm cache (nothing compiled)", warm, "cold / warm", cold / warm, "kit size",
           (double)dir_file_size(kitpath) / 1024.0);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "dskit bench build: could not remove %s\n", tmp);
    return 0;
}

/* Child mode: time cuInit, kit open + verify, load + resolve; print one line. */
static int load_only(const char *path)
{
    double t0 = dsk_now();
    dsk_gpu g;
    if (dsk_gpu_open(0, &g))
        return -1;
    double t1 = dsk_now();
    kit *k;
    if (kit_open(path, NULL, &k))
        return -1;
    double t2 = dsk_now();
    if (kit_load(k, &g))
        return -1;
    double t3 = dsk_now();
    CUmoduleLoadingMode mode;
    const char *mname = cu.cuModuleGetLoadingMode(&mode) == CUDA_SUCCESS
                            ? (mode == CU_MODULE_LAZY_LOADING ? "lazy" : "eager") : "?";
    printf("%s %.6f %.6f %.6f %d\n", mname, t1 - t0, t2 - t1, t3 - t2, kit_nkernels(k));
    kit_close(k);
    dsk_gpu_close(&g);
    return 0;
}

typedef struct {
    const kit *k;
    CUstream s;
    CUdeviceptr a, b, c, d, e, ws;
    size_t ws_bytes;
    int i0, i1, i2, i3;
    int64_t l0;
    float f0;
} launch_ctx;

static int launch_stream(void *p)
{
    launch_ctx *c = p;
    return op_stream_read(c->k, c->s, c->a, (uint64_t)c->l0, c->b, c->i0);
}

static int launch_rmsnorm(void *p)
{
    launch_ctx *c = p;
    return op_rmsnorm(c->k, c->s, c->a, c->b, c->c, c->i0, c->i1, c->f0);
}

static int launch_rope(void *p)
{
    launch_ctx *c = p;
    return op_rope(c->k, c->s, c->a, c->b, c->c, c->i0, c->i1, c->i2, c->i3, 0);
}

static int launch_rowmm(void *p)
{
    launch_ctx *c = p;
    return op_rowmm_bf16(c->k, c->s, c->a, c->b, c->c, c->i0, c->i1, c->i2);
}

static int launch_topk(void *p)
{
    launch_ctx *c = p;
    return op_topk_blocks(c->k, c->s, c->a, c->e, c->i0, c->i1, c->i2, c->l0, c->c, c->d, c->ws, c->ws_bytes, c->i3);
}

static int launch_topk_tl(void *p)
{
    launch_ctx *c = p;
    return op_topk_tl(c->k, c->s, c->a, c->e, c->i0, c->i1, c->i2, c->l0, c->c, c->d, c->ws, c->ws_bytes, c->i3);
}

/* One table row: eager (host launches back to back) and graph (replayed CUDA graph: the GPU's own
 * time, as decode rounds launch); bandwidth from the graph time. */
static int row(const char *op, const char *shape, CUstream s, int batch, gpu_launch_fn fn, void *ctx, double bytes,
               double roof_gbs)
{
    double us = gpu_time_us(s, batch, 7, fn, ctx), gus = gpu_time_graph_us(s, batch, 7, fn, ctx);
    if (us < 0 || gus < 0)
        return -1;
    double gbs = bytes / (gus * 1e-6) / 1e9;
    printf("%-12s %-42s %10.2f %10.2f %10.1f %7.1f%%\n", op, shape, us, gus, gbs, 100.0 * gbs / roof_gbs);
    return 0;
}

/* The mHC families at the release's shapes (hc 4, d 5120, hc_fn 24 x 20480 fp32) */
typedef struct {
    const kit *k;
    CUstream s;
    mhc_dims md;
    CUdeviceptr x, fn, base, scale, coef, ws, y, yraw, xout, g, ids, table, pi, taps, cnt;
    size_t ws_bytes;
    int rows, norm;
} mhc_bench;

static int launch_mhc_mix(void *p)
{
    mhc_bench *b = p;
    return op_mhc_mix(b->k, b->s, &b->md, b->x, b->fn, b->base, b->scale, b->coef, b->rows, b->ws, b->ws_bytes,
                      b->cnt);
}

static int launch_mhc_pre(void *p)
{
    mhc_bench *b = p;
    return op_mhc_pre(b->k, b->s, b->x, b->coef, (2 + b->md.hc) * b->md.hc, b->norm ? b->g : 0, 1e-20f, b->y,
                      b->norm ? b->yraw : 0, b->rows, b->md.hc, b->md.d);
}

static int launch_mhc_post(void *p)
{
    mhc_bench *b = p;
    return op_mhc_post(b->k, b->s, b->y, b->x, b->coef, b->xout, b->rows, b->md.hc, b->md.d);
}

static int launch_embed(void *p)
{
    mhc_bench *b = p;
    return op_embed(b->k, b->s, b->table, 129280, b->ids, b->xout, b->pi, b->rows, b->md.hc, b->md.d);
}

static int launch_tap_mean(void *p)
{
    mhc_bench *b = p;
    return op_tap_mean(b->k, b->s, b->x, b->taps, b->rows, b->md.hc, b->md.d, 3, 1);
}

static int mhc_families(const kit *k, CUstream s, CUdeviceptr big, double roof)
{
    const int hc = 4, d = 5120, K = hc * d, M = (2 + hc) * hc, P = 4096;
    mhc_bench b = {.k = k, .s = s, .md = {hc, d, 20, 1e-20f, 1e-6f}};
    /* carved from the big buffer (its fill, bf16/fp32 0x3c00 patterns, is finite); the embedding table
     * last: 129280 x 5120 bf16 */
    b.x = big, b.fn = big + (256ull << 20), b.base = b.fn + (4ull << 20), b.scale = b.base + 4096;
    b.coef = b.base + (1ull << 20), b.ws = big + (272ull << 20), b.y = big + (512ull << 20);
    b.yraw = big + (600ull << 20), b.xout = big + (768ull << 20), b.g = big + (1000ull << 20);
    b.pi = big + (1010ull << 20), b.taps = big + (1020ull << 20), b.ids = big + (1180ull << 20);
    b.table = big + (1200ull << 20), b.cnt = big + (1190ull << 20);
    b.ws_bytes = op_mhc_mix_ws_bytes(P, hc, d);
    CU_TRY(cu.cuMemsetD32(b.cnt, 0, MHC_MIX_COUNTERS)); /* mhc_mix's arrival counters: zero at rest */
    int32_t *ids = malloc(sizeof(int32_t) * P);
    if (!ids)
        return dsk_err("bench kit: out of host memory");
    dsk_rng r;
    dsk_rng_seed(&r, 11);
    for (int i = 0; i < P; i++)
        ids[i] = (int32_t)dsk_rng_below(&r, 129280);
    CUresult cr = cu.cuMemcpyHtoD(b.ids, ids, sizeof(int32_t) * P);
    free(ids);
    CU_TRY(cr);
    char shape[64];
    /* mixes: the weight's bytes against the roofline (x adds rows x 40 KiB more) */
    const int mix_rows[] = {1, 8, 64, 1024, 4096};
    for (size_t i = 0; i < sizeof mix_rows / sizeof mix_rows[0]; i++) {
        b.rows = mix_rows[i];
        snprintf(shape, sizeof shape, "rows %d, 24 x 20480 (weight GB/s)", b.rows);
        if (row("mhc_mix", shape, s, 20, launch_mhc_mix, &b, 4.0 * M * K, roof))
            return -1;
    }
    /* the sublayer coefficients stay as mhc_mix left them for pre and post */
    const int rows[] = {1, 16, 64, P};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (b.norm = 0; b.norm < 2; b.norm++) {
            b.rows = rows[i];
            snprintf(shape, sizeof shape, "rows %d x hc 4 x 5120%s", b.rows, b.norm ? ", norm + y" : "");
            double bytes = 2.0 * b.rows * (hc + 1 + b.norm) * d + 4.0 * b.rows * M + 2.0 * b.norm * d;
            if (row("mhc_pre", shape, s, 20, launch_mhc_pre, &b, bytes, roof))
                return -1;
        }
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        b.rows = rows[i];
        snprintf(shape, sizeof shape, "rows %d x hc 4 x 5120", b.rows);
        if (row("mhc_post", shape, s, 20, launch_mhc_post, &b, 2.0 * b.rows * (2 * hc + 1) * d + 4.0 * b.rows * M,
                roof))
            return -1;
    }
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        b.rows = rows[i];
        snprintf(shape, sizeof shape, "rows %d -> hc 4 x 5120", b.rows);
        if (row("embed", shape, s, 20, launch_embed, &b, 2.0 * b.rows * (hc + 1) * d + 4.0 * b.rows * (hc + 1), roof))
            return -1;
    }
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        b.rows = rows[i];
        snprintf(shape, sizeof shape, "rows %d x hc 4 x 5120", b.rows);
        if (row("tap_mean", shape, s, 20, launch_tap_mean, &b, 2.0 * b.rows * (hc + 1) * d, roof))
            return -1;
    }
    return 0;
}
static int glue_families(const kit *k, CUstream s, CUdeviceptr big, double roof);
typedef struct {
    const kit *k;
    CUstream s;
    sparse_attn_args a;
    int split;
} attn_bench;

static int launch_attn(void *p)
{
    attn_bench *b = p;
    return op_sparse_attn_form(b->k, b->s, &b->a, b->split);
}

/* sparse_attn at the release shape (64 heads x 512, RoPE 64, window 128): decode rounds of rows from
 * distinct sequences deep into a long context (each row its own ring and 2048 compressed rows, lists of the
 * window only or the window + 512 selected), both forms; a 4096-row prompt chunk of one sequence (window
 * from the chunk, 512 of ~50k compressed rows per row). GB/s: the keys the lists read, against the roofline. */
static int bench_sparse_attn(const kit *k, CUstream s, CUdeviceptr big, double roof)
{
    enum { H = 64, HD = 512, W = 128, TOPK = 512, RING = W + 8, POOL = 2048, PROMPT = 4096 };
    CUdeviceptr q = big, out = big + (256ull << 20), pool = big + (512ull << 20), ring = big + (768ull << 20),
                call = big + (800ull << 20), meta = big + (900ull << 20), sel = big + (901ull << 20),
                sink = big + (920ull << 20), freqs = big + (921ull << 20), ws = big + (1024ull << 20);
    sparse_attn_row *m = malloc(sizeof(sparse_attn_row) * PROMPT);
    int32_t *ix = malloc(sizeof(int32_t) * (size_t)PROMPT * TOPK);
    float *f = malloc(sizeof(float) * H);
    if (!m || !ix || !f) {
        free(m), free(ix), free(f);
        return dsk_err("bench kit: out of host memory");
    }
    dsk_rng r;
    dsk_rng_seed(&r, 11);
    for (int h = 0; h < H; h++)
        f[h] = 0.5f;
    CUresult cr = cu.cuMemcpyHtoD(sink, f, sizeof(float) * H);
    for (int i = 0; i < 32; i++)
        f[i] = powf(10000.0f, -(float)i / 32.0f);
    if (cr == CUDA_SUCCESS)
        cr = cu.cuMemcpyHtoD(freqs, f, sizeof(float) * 32);
    free(f);
    attn_bench b = {.k = k, .s = s};
    b.a = (sparse_attn_args){.q = q, .kv_call = call, .kv_ring = ring, .kv2 = pool, .sel = sel, .rows_desc = meta,
                             .sink = sink, .freqs = freqs, .out = out, .ws = ws, .ws_bytes = 3ull << 30, .heads = H,
                             .head_dim = HD, .ring = RING, .sel_ld = TOPK, .rope_dim = 64};
    char shape[64];
    int rc = 0;
    for (int prompt = 0; prompt < 2 && rc == 0 && cr == CUDA_SUCCESS; prompt++) {
        const int decode_rows[] = {1, 4, 16, 64}, prompt_rows[] = {PROMPT};
        for (int ri = 0; ri < (prompt ? 1 : 4) && rc == 0; ri++)
            for (int nsel = prompt ? TOPK : 0; nsel <= TOPK && rc == 0; nsel += TOPK) {
                int rows = prompt ? prompt_rows[ri] : decode_rows[ri];
                int64_t reach = prompt ? (100000 + rows) / 2 : POOL; /* compressed rows a row selects from */
                for (int i = 0; i < rows; i++) {
                    int pos = 100000 + (prompt ? i : 0);
                    m[i] = (sparse_attn_row){.pos = pos, .win_lo = pos - W + 1, .win_hi = pos,
                                             .call_pos0 = prompt ? 100000 : pos, .call_row0 = prompt ? 0 : i,
                                             .ring_base = prompt ? 0 : i * RING, .base2 = prompt ? 0 : i * POOL,
                                             .nsel = nsel};
                    int got = 0; /* nsel ascending distinct rows of the reachable ones */
                    for (int64_t j = 0; j < reach && got < nsel; j++)
                        if ((int64_t)dsk_rng_below(&r, (uint64_t)(reach - j)) < nsel - got)
                            ix[(size_t)i * TOPK + got++] = (int32_t)j;
                }
                if ((cr = cu.cuMemcpyHtoD(meta, m, sizeof(sparse_attn_row) * (size_t)rows)) != CUDA_SUCCESS ||
                    (cr = cu.cuMemcpyHtoD(sel, ix, sizeof(int32_t) * (size_t)rows * TOPK)) != CUDA_SUCCESS ||
                    (cr = cu.cuCtxSynchronize()) != CUDA_SUCCESS)
                    break;
                b.a.rows = rows, b.a.max_list = W + TOPK;
                double bytes = (double)rows * (W + nsel) * HD * 2;
                int rule = rule_sparse_attn_split(rows, H, b.a.max_list);
                for (int form = 0; form < (prompt ? 1 : 2) && rc == 0; form++) {
                    b.split = prompt ? 0 : form;
                    snprintf(shape, sizeof shape, "%s %d, list %d, %s%s", prompt ? "prompt" : "rows", rows, W + nsel,
                             b.split ? "split" : "whole", b.split == rule ? " (rule)" : "");
                    rc = row("sparse_attn", shape, s, 10, launch_attn, &b, bytes, roof);
                }
            }
    }
    free(m);
    free(ix);
    if (cr != CUDA_SUCCESS)
        return dsk_cu_fail(cr, "bench kit: sparse_attn inputs");
    return rc;
}

typedef struct {
    const kit *k;
    CUstream s;
    CUdeviceptr qkv, out;
    int n;
} vision_bench;

static int launch_vision_attn(void *p)
{
    vision_bench *b = p;
    return op_vision_attn(b->k, b->s, b->qkv, b->out, b->n, 16, 64);
}

/* vision_attn at the release tower's shape (16 heads x 64) for images of 39 x 39, 55 x 74 and 69 x 122
 * patches, on random inputs (constant ones would never move a row's running maximum, which the kernel
 * exploits). TFLOP/s counts 4·N²·64·16 per launch (Q·Kᵀ and P·V) from the graph time; GB/s the bytes a
 * launch must move (qkv read once, out written once), against the roofline. */
static int bench_vision_attn(const kit *k, CUstream s, CUdeviceptr big, double roof)
{
    enum { H = 16, HD = 64, D = H * HD, NMAX = 8418 };
    const size_t nq = (size_t)NMAX * 3 * D;
    uint16_t *h = malloc(nq * sizeof(uint16_t));
    if (!h)
        return dsk_err("bench kit: out of host memory");
    dsk_rng r;
    dsk_rng_seed(&r, 13);
    for (size_t i = 0; i < nq; i++)
        h[i] = f32_to_bf16(dsk_rng_normal(&r));
    vision_bench b = {.k = k, .s = s, .qkv = big, .out = big + (256ull << 20)};
    CUresult cr = cu.cuMemcpyHtoD(b.qkv, h, nq * sizeof(uint16_t));
    free(h);
    CU_TRY(cr);
    CU_TRY(cu.cuCtxSynchronize());
    const int ns[] = {1521, 4070, NMAX};
    for (int i = 0; i < 3; i++) {
        b.n = ns[i];
        double us = gpu_time_us(s, 3, 7, launch_vision_attn, &b);
        double gus = gpu_time_graph_us(s, 3, 7, launch_vision_attn, &b);
        if (us < 0 || gus < 0)
            return dsk_err_ctx("bench kit: vision_attn N %d", b.n);
        double tflops = 4.0 * b.n * b.n * HD * H / (gus * 1e-6) / 1e12;
        double gbs = (double)b.n * 4 * D * 2 / (gus * 1e-6) / 1e9;
        char shape[64];
        snprintf(shape, sizeof shape, "N %d x %d x %d: %.1f TFLOP/s", b.n, H, HD, tflops);
        printf("%-12s %-42s %10.2f %10.2f %10.1f %7.1f%%\n", "vision_attn", shape, us, gus, gbs, 100.0 * gbs / roof);
    }
    return 0;
}

/* `dskit bench kit KIT --only FAMILY`: that family's rows alone (a kit holding it and stream_read will do). */
static const char *bench_only;

static int families(const kit *k, CUstream s, CUdeviceptr big, double roof)
{
    printf("\n%-12s %-42s %10s %10s %10s %8s\n", "family", "shape", "eager us", "graph us", "GB/s", "roof");
    if (bench_only) {
        if (!strcmp(bench_only, "sparse_attn"))
            return bench_sparse_attn(k, s, big, roof);
        if (!strcmp(bench_only, "vision_attn"))
            return bench_vision_attn(k, s, big, roof);
        if (!strcmp(bench_only, "glue"))
            return glue_families(k, s, big, roof);
        if (!strcmp(bench_only, "mhc"))
            return mhc_families(k, s, big, roof);
        if (!strcmp(bench_only, "engine"))
            return bench_kit_engine(k, s, roof);
        return dsk_err("bench kit: --only %s: a group with its own rows is one of: sparse_attn, vision_attn, glue "
                       "(vec_glue, rows_copy, compress_pool, engram_rows, engram_gate), mhc, engine (the engine's "
                       "other families)",
                       bench_only);
    }
    launch_ctx c = {.k = k, .s = s};
    char shape[64];
    /* buffers carved from the big one: inputs need no particular values for timing, only sizes */
    CUdeviceptr x = big, w = big + (256ull << 20), y = big + (512ull << 20), z = big + (768ull << 20);
    int widths[] = {512, 1280, 5120}, nrows[] = {1, 16, 4096};
    for (size_t wi = 0; wi < 3; wi++)
        for (size_t ri = 0; ri < 3; ri++) {
            c.a = x, c.b = w, c.c = y, c.i0 = nrows[ri], c.i1 = widths[wi], c.f0 = 1e-6f;
            snprintf(shape, sizeof shape, "rows %d x %d", nrows[ri], widths[wi]);
            double bytes = 2.0 * 2 * nrows[ri] * widths[wi] + 2.0 * widths[wi];
            if (row("rmsnorm", shape, s, 20, launch_rmsnorm, &c, bytes, roof))
                return -1;
        }
    int rrows[] = {1, 16, 4096};
    for (size_t ri = 0; ri < 3; ri++) {
        CU_TRY(cu.cuMemsetD32(z, 0, (size_t)rrows[ri])); /* positions 0 */
        CU_TRY(cu.cuCtxSynchronize());                   /* the memset ran on the legacy stream */
        c.a = x, c.b = z, c.c = w, c.i0 = rrows[ri], c.i1 = 64, c.i2 = 512, c.i3 = 64;
        snprintf(shape, sizeof shape, "rows %d x 64 heads x 512, R 64", rrows[ri]);
        if (row("rope", shape, s, 20, launch_rope, &c, 2.0 * 2 * rrows[ri] * 64 * 64, roof))
            return -1;
    }
    int mm_n[] = {384, 32}, mm_rows[] = {1, 4, 16};
    for (size_t ni = 0; ni < 2; ni++)
        for (size_t ri = 0; ri < 3; ri++) {
            c.a = x, c.b = w, c.c = y, c.i0 = mm_rows[ri], c.i1 = 5120, c.i2 = mm_n[ni];
            snprintf(shape, sizeof shape, "rows %d, 5120 -> %d", mm_rows[ri], mm_n[ni]);
            double bytes = 2.0 * 5120 * mm_n[ni] + 2.0 * mm_rows[ri] * 5120;
            if (row("rowmm_bf16", shape, s, 20, launch_rowmm, &c, bytes, roof))
                return -1;
        }
    /* top-k scores: random normal values (the buffer's constant fill would put every key in one bin),
     * and one row of a single repeated value, the worst case of the radix passes */
    enum { TK_FLOATS = 4 << 20 };
    float *h = malloc(sizeof(float) * TK_FLOATS);
    if (!h)
        return dsk_err("bench kit: out of host memory");
    dsk_rng r;
    dsk_rng_seed(&r, 7);
    for (int i = 0; i < TK_FLOATS; i++)
        h[i] = dsk_rng_normal(&r);
    CUdeviceptr tie = big + (1280ull << 20), ws = big + (1536ull << 20);
    CUresult cr = cu.cuMemcpyHtoD(x, h, sizeof(float) * TK_FLOATS);
    if (cr == CUDA_SUCCESS)
        cr = cu.cuMemcpyHtoD(w, h, sizeof(float) * 1024); /* a bias */
    free(h);
    CU_TRY(cr);
    CU_TRY(cu.cuMemsetD32(tie, 0x3f800000u, 1 << 20));
    CU_TRY(cu.cuCtxSynchronize());
    struct {
        int rows, N, k, bias, ties;
    } tk[] = {{1, 384, 6, 1, 0},       {16, 384, 6, 1, 0},       {1, 16384, 512, 0, 0},   {1, 32768, 512, 0, 0},
              {1, 131072, 2048, 0, 0}, {1, 262144, 512, 0, 0},   {1, 1048576, 512, 0, 0}, {4, 1048576, 512, 0, 0},
              {1, 1048576, 512, 0, 1}};
    for (size_t i = 0; i < sizeof tk / sizeof tk[0]; i++) {
        /* the rule's choice; where that is several blocks per row, one block per row beside it */
        int rule = rule_topk_blocks(tk[i].N);
        for (int v = 0; v < (rule > 1 ? 2 : 1); v++) {
            int nb = v ? 1 : rule;
            c.a = tk[i].ties ? tie : x, c.e = tk[i].bias ? w : 0, c.c = y, c.d = z, c.i0 = tk[i].rows;
            c.i1 = tk[i].N, c.i2 = tk[i].k, c.i3 = nb, c.l0 = tk[i].N, c.ws = ws;
            c.ws_bytes = op_topk_ws_bytes_blocks(tk[i].rows, nb);
            snprintf(shape, sizeof shape, "rows %d, top %d of %d%s%s, %d bl", tk[i].rows, tk[i].k, tk[i].N,
                     tk[i].bias ? " +bias" : "", tk[i].ties ? " equal" : "", nb);
            if (row("topk", shape, s, 10, launch_topk, &c, 4.0 * tk[i].rows * tk[i].N, roof))
                return -1;
        }
    }
    /* the multi-block top-k at other slice lengths (entries per block): what rule_topk_blocks chooses from */
    struct {
        int rows, N;
    } sw[] = {{1, 32768}, {1, 131072}, {1, 1048576}, {4, 1048576}};
    for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++)
        for (int slice = 16384; slice >= 1024; slice /= 2) {
            int nb = sw[i].N / slice;
            if (nb < 2 || nb > 1024)
                continue;
            c.a = x, c.e = 0, c.c = y, c.d = z, c.i0 = sw[i].rows, c.i1 = sw[i].N, c.i2 = 512, c.i3 = nb;
            c.l0 = sw[i].N, c.ws = ws, c.ws_bytes = op_topk_ws_bytes_blocks(sw[i].rows, nb);
            snprintf(shape, sizeof shape, "sweep: rows %d, top 512 of %d, %d bl", sw[i].rows, sw[i].N, nb);
            if (row("topk", shape, s, 10, launch_topk, &c, 4.0 * sw[i].rows * sw[i].N, roof))
                return -1;
        }
    /* the indexer's top 512 of 32K-128K keys at decode rows: six launches (topk_mb, the rule's) against one
     * (topk_tl; rule_topk_tl_fits says where it could take over: 128K has too many candidates), the same
     * blocks per row */
    struct {
        int rows, N;
    } tl[] = {{1, 32768}, {1, 65536}, {1, 131072}, {4, 65536}, {16, 65536}};
    for (size_t i = 0; i < sizeof tl / sizeof tl[0]; i++)
        for (int one = 0; one < 2; one++) {
            int nb = rule_topk_blocks(tl[i].N);
            c.a = x, c.e = 0, c.c = y, c.d = z, c.i0 = tl[i].rows, c.i1 = tl[i].N, c.i2 = 512, c.i3 = nb;
            c.l0 = tl[i].N, c.ws = ws;
            c.ws_bytes = one ? op_topk_tl_ws_bytes(tl[i].rows, nb, 512) : op_topk_ws_bytes_blocks(tl[i].rows, nb);
            snprintf(shape, sizeof shape, "rows %d, top 512 of %d, %d bl, %s", tl[i].rows, tl[i].N, nb,
                     one ? "one launch" : "six launches");
            if (row("topk", shape, s, 10, one ? launch_topk_tl : launch_topk, &c, 4.0 * tl[i].rows * tl[i].N, roof))
                return -1;
        }

    if (mhc_families(k, s, big, roof) || bench_kit_engine(k, s, roof) || glue_families(k, s, big, roof))
        return -1;
    return bench_vision_attn(k, s, big, roof);
}

/* The glue families (vec_glue, rows_copy, compress_pool, engram_rows, engram_gate) at the model's shapes. */
typedef struct {
    const kit *k;
    CUstream s;
    vec_glue_op op;
    compress_pool_src pool;
    CUdeviceptr x, y, a, b, c;
    int rows, heads, width, n, bytes, from_table;
} glue_ctx;

static int launch_vec_glue(void *p)
{
    glue_ctx *g = p;
    return op_vec_glue(g->k, g->s, &g->op, g->x, g->heads * g->width, g->y, g->heads * g->width, g->rows, g->heads,
                       g->width);
}

/* The attention's group as the engine launches it (op_vec_glue_multi, mixed kinds): q_norm of 1280, the
 * window key (norm, RoPE, FP8) and a ratio-1 latent's norm, 512 each; op.norm_w, freqs, pos from g->op. */
static int launch_vec_glue_group(void *p)
{
    glue_ctx *g = p;
    vec_glue_op qn = {.norm_w = g->op.norm_w, .eps = 1e-20f, .qdq = KVQ_NONE};
    vec_glue_op kv = {.norm_w = g->op.norm_w, .eps = 1e-20f, .rope_dim = 64, .freqs = g->op.freqs, .pos = g->op.pos,
                      .qdq = KVQ_FP8_E4M3};
    vec_glue_op cn = {.norm_w = g->op.norm_w, .eps = 1e-20f, .qdq = KVQ_NONE};
    int ld = 1280 + 2 * 512;
    vec_glue_call c[3] = {{&qn, g->x, ld, g->x, ld, 1, 1280, 0},
                          {&kv, g->x + 1280 * 2, ld, g->y, 512, 1, 512, 0},
                          {&cn, g->x + (1280 + 512) * 2, ld, g->y + (CUdeviceptr)g->rows * 512 * 2, 512, 1, 512, 0}};
    return op_vec_glue_multi(g->k, g->s, c, 3, g->rows);
}

static int launch_rows_copy(void *p)
{
    glue_ctx *g = p;
    return op_rows_copy(g->k, g->s, g->x, g->bytes, 0, g->y, g->bytes, g->a, g->n, g->bytes);
}

static int launch_compress_pool(void *p)
{
    glue_ctx *g = p;
    return op_compress_pool(g->k, g->s, &g->pool, g->a, g->y, 512, g->n, 512);
}

static int launch_engram_rows(void *p)
{
    glue_ctx *g = p;
    return g->from_table ? op_engram_table_rows(g->k, g->s, g->a, g->b, g->c, g->n, 24, 256, g->y, 24 * 256)
                         : op_engram_records(g->k, g->s, g->x, g->n, 24, 256, g->y, 24 * 256);
}

static int launch_engram_gate(void *p)
{
    glue_ctx *g = p;
    return op_engram_gate(g->k, g->s, g->x, g->a, g->b, g->rows, 4, 5120, 1e-20f);
}

static int upload(CUdeviceptr d, const void *h, size_t bytes)
{
    CU_TRY(cu.cuMemcpyHtoD(d, h, bytes));
    return 0;
}

static int glue_families(const kit *k, CUstream s, CUdeviceptr big, double roof)
{
    /* above the regions the other rows use (the first 2 GiB of the 4 GiB buffer) */
    const CUdeviceptr in = big + (2048ull << 20), out = big + (2304ull << 20), small = big + (2560ull << 20);
    const CUdeviceptr tab = big + (2600ull << 20), tab_sc = big + (2880ull << 20);
    const CUdeviceptr pos = small, freqs = small + (1 << 20), idx = small + (2 << 20), w = small + (4 << 20);
    enum { MAXR = 4096, TABLE_ROWS = 1 << 20 };
    int32_t *hp = malloc(sizeof(int32_t) * MAXR * 2);
    int64_t *hi = malloc(sizeof(int64_t) * 64 * 24);
    float hf[32];
    if (!hp || !hi) {
        free(hp);
        free(hi);
        return dsk_err("bench kit: out of host memory");
    }
    /* positions spread over a 1M context (the angles' cost does not depend on them, the values do) */
    dsk_rng r;
    dsk_rng_seed(&r, 11);
    for (int i = 0; i < MAXR; i++)
        hp[i] = (int32_t)dsk_rng_below(&r, 1 << 20);
    rope_params rp = {64, 160000.0, 16.0, 32, 1, 65536};
    ref_rope_freqs(&rp, hf);
    int rc = upload(pos, hp, sizeof(int32_t) * MAXR) || upload(freqs, hf, sizeof hf);
    /* distinct destination rows (a ring write), shuffled; then pool entries {2g, 2g+1} */
    for (int i = 0; i < MAXR; i++)
        hp[i] = i;
    for (int i = MAXR - 1; i > 0; i--) {
        int j = (int)dsk_rng_below(&r, (uint64_t)i + 1), t = hp[i];
        hp[i] = hp[j];
        hp[j] = t;
    }
    rc = rc || upload(idx, hp, sizeof(int32_t) * MAXR);
    for (int i = 0; i < MAXR * 2; i++)
        hp[i] = i;
    rc = rc || upload(idx + (1 << 20), hp, sizeof(int32_t) * MAXR * 2);
    for (int i = 0; i < 64 * 24; i++)
        hi[i] = (int64_t)dsk_rng_below(&r, TABLE_ROWS);
    rc = rc || upload(idx + (2 << 20) - (64 * 24 * 8), hi, sizeof(int64_t) * 64 * 24);
    free(hp);
    free(hi);
    if (rc)
        return -1;
    CU_TRY(cu.cuCtxSynchronize());
    glue_ctx g = {.k = k, .s = s};
    char shape[64];
    /* vec_glue at its launch sites: window keys (norm, RoPE, FP8, in place), Q's RoPE (in place: only the
     * rotated 64 of 512 dims move), index queries (RoPE, FP4/e8m0), q_norm (to another buffer) */
    struct {
        const char *site;
        int heads, width, norm, rope, qdq, in_place, moved; /* moved: bytes read (= written) per vector */
    } vg[] = {{"window key", 1, 512, 1, 64, KVQ_FP8_E4M3, 1, 1024},
              {"Q rope", 64, 512, 0, 64, KVQ_NONE, 1, 128},
              {"index query", 32, 128, 0, 64, KVQ_FP4_E8M0, 1, 256},
              {"q_norm", 1, 1280, 1, 0, KVQ_NONE, 0, 2560}};
    const int vrows[] = {1, 16, 64, 4096};
    for (size_t si = 0; si < sizeof vg / sizeof vg[0]; si++)
        for (int ri = 0; ri < 4; ri++) {
            g.op = (vec_glue_op){.norm_w = vg[si].norm ? w : 0, .eps = 1e-20f, .rope_dim = vg[si].rope,
                                 .freqs = freqs, .pos = pos, .qdq = vg[si].qdq};
            g.x = in, g.y = vg[si].in_place ? in : out, g.rows = vrows[ri], g.heads = vg[si].heads;
            g.width = vg[si].width;
            snprintf(shape, sizeof shape, "%s, rows %d x %d x %d", vg[si].site, vrows[ri], vg[si].heads, vg[si].width);
            double bytes = 2.0 * vrows[ri] * vg[si].heads * vg[si].moved + (vg[si].norm ? 2.0 * vg[si].width : 0);
            if (row("vec_glue", shape, s, 20, launch_vec_glue, &g, bytes, roof))
                return -1;
        }
    /* the attention's group (3 ops of mixed kinds in one launch), rows as a decode round */
    for (int ri = 0; ri < 3; ri++) {
        g.op = (vec_glue_op){.norm_w = w, .freqs = freqs, .pos = pos};
        g.x = in, g.y = out, g.rows = vrows[ri];
        snprintf(shape, sizeof shape, "attention group, rows %d (1280+512+512)", vrows[ri]);
        if (row("vec_glue", shape, s, 20, launch_vec_glue_group, &g, 2.0 * 2 * vrows[ri] * 2304 + 2.0 * 1280, roof))
            return -1;
    }
    /* rows_copy: window-ring writes (512 bf16) and ratio-2 state slots (2 x 512 fp32), scattered */
    const int crow[] = {1, 16, 64, 4096}, cbytes[] = {1024, 4096};
    for (int bi = 0; bi < 2; bi++)
        for (int ri = 0; ri < 4; ri++) {
            g.x = in, g.y = out, g.a = idx, g.n = crow[ri], g.bytes = cbytes[bi];
            snprintf(shape, sizeof shape, "rows %d of %d B, scattered", crow[ri], cbytes[bi]);
            if (row("rows_copy", shape, s, 20, launch_rows_copy, &g, 2.0 * crow[ri] * cbytes[bi] + 4.0 * crow[ri], roof))
                return -1;
        }
    /* compress_pool: groups of 512 channels from a round's [rows][a | s] */
    const int groups[] = {1, 16, 64, 2048};
    for (int gi = 0; gi < 4; gi++) {
        g.pool = (compress_pool_src){in, in + 2048, 1024, out, out + 2048, 1024};
        g.a = idx + (1 << 20), g.y = out + (64 << 20), g.n = groups[gi];
        snprintf(shape, sizeof shape, "%d groups x 512", groups[gi]);
        if (row("compress_pool", shape, s, 20, launch_compress_pool, &g, groups[gi] * (16.0 * 512 + 2.0 * 512), roof))
            return -1;
    }
    /* engram_rows: positions x 24 rows of 256, from records and from a device table of 1M rows */
    const int epos[] = {1, 16, 64};
    for (int t = 0; t < 2; t++)
        for (int pi = 0; pi < 3; pi++) {
            g.from_table = t, g.x = in, g.a = tab, g.b = tab_sc, g.c = idx + (2 << 20) - (64 * 24 * 8);
            g.y = out, g.n = epos[pi];
            snprintf(shape, sizeof shape, "%s, %d positions x 24 x 256", t ? "table" : "records", epos[pi]);
            if (row("engram_rows", shape, s, 20, launch_engram_rows, &g, epos[pi] * 24.0 * (264 + 512), roof))
                return -1;
        }
    /* engram_gate at d = 5120, 4 streams */
    const int grows[] = {1, 16, 64, 4096};
    for (int ri = 0; ri < 4; ri++) {
        g.x = out, g.a = in, g.b = small + (8 << 20), g.rows = grows[ri];
        snprintf(shape, sizeof shape, "rows %d x 4 x 5120", grows[ri]);
        double bytes = grows[ri] * (2.0 * 2 * 4 * 5120 + 2.0 * 5 * 5120) + 4.0 * 4 * 5120;
        if (row("engram_gate", shape, s, 20, launch_engram_gate, &g, bytes, roof))
            return -1;
    }
    if (bench_sparse_attn(k, s, big, roof))
        return -1;
    return 0;
}

int bench_kit(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[2], "--load-only")) {
        if (load_only(argv[1])) {
            fprintf(stderr, "dskit bench kit: %s\n", dsk_err_msg());
            return 2;
        }
        return 0;
    }
    if (argc == 4 && !strcmp(argv[2], "--only"))
        bench_only = argv[3];
    else if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: dskit bench kit KIT [--only sparse_attn|vision_attn|glue|mhc|engine]\n");
        return 2;
    }
    const char *path = argv[1];
    char dir[4096], self[4200];
    if (self_dir(dir, sizeof dir)) {
        fprintf(stderr, "dskit bench kit: %s\n", dsk_err_msg());
        return 2;
    }
    snprintf(self, sizeof self, "%s/dskit", dir);
    printf("kit start-up, each in a fresh process: %s (%lld bytes)\n", path, dir_file_size(path));
    printf("%-8s %10s %14s %14s %12s %10s\n", "loading", "cuInit s", "open+verify s", "load+resolve s", "process s",
           "kernels");
    const char *modes[] = {"EAGER", "LAZY"};
    for (int m = 0; m < 2; m++) {
        char *args[] = {self, "bench", "kit", (char *)path, "--load-only", NULL};
        char out[512], name[16];
        double total, ti, to, tl;
        int nk;
        if (run_child(args, "CUDA_MODULE_LOADING", modes[m], out, sizeof out, &total) ||
            sscanf(out, "%15s %lf %lf %lf %d", name, &ti, &to, &tl, &nk) != 5) {
            fprintf(stderr, "dskit bench kit: %s\n", dsk_err_msg());
            return 2;
        }
        printf("%-8s %10.3f %14.4f %14.4f %12.3f %10d\n", name, ti, to, tl, total, nk);
    }

    dsk_gpu g;
    kit *k;
    if (dsk_gpu_open(0, &g) || kit_open(path, NULL, &k) || kit_load(k, &g)) {
        fprintf(stderr, "dskit bench kit: %s\n", dsk_err_msg());
        return 2;
    }
    CUstream s;
    CUdeviceptr big, out;
    const uint64_t bytes = 4ull << 30;
    int rc = 1;
    if (cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS || cu.cuMemAlloc(&big, bytes) != CUDA_SUCCESS ||
        cu.cuMemAlloc(&out, 1 << 20) != CUDA_SUCCESS) {
        fprintf(stderr, "dskit bench kit: cannot allocate 4 GiB on GPU 0\n");
        return 2;
    }
    /* fill with bytes so the read is of real data */
    if (cu.cuMemsetD32(big, 0x3c003c00u, bytes / 4) != CUDA_SUCCESS || cu.cuCtxSynchronize() != CUDA_SUCCESS) {
        fprintf(stderr, "dskit bench kit: cannot fill the buffer on GPU 0\n");
        return 2;
    }
    printf("\nstreaming read on %s (%d SMs), %.0f MiB buffer\n%-12s %10s %10s\n", g.name, g.sms,
           (double)bytes / (1 << 20), "blocks", "time us", "GB/s");
    double best = 0;
    int grids[] = {g.sms * 2, g.sms * 4, g.sms * 8};
    for (int i = 0; i < 3; i++) {
        launch_ctx c = {.k = k, .s = s, .a = big, .b = out, .i0 = grids[i], .l0 = (int64_t)bytes};
        double us = gpu_time_us(s, 3, 7, launch_stream, &c);
        if (us < 0)
            goto done;
        double gbs = (double)bytes / (us * 1e-6) / 1e9;
        best = gbs > best ? gbs : best;
        printf("%-12d %10.1f %10.1f\n", grids[i], us, gbs);
    }
    printf("roofline (best): %.1f GB/s\n", best);
    if (families(k, s, big, best))
        goto done;
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "dskit bench kit: %s\n", dsk_err_msg());
    cu.cuMemFree(big);
    cu.cuMemFree(out);
    cu.cuStreamDestroy(s);
    kit_close(k);
    dsk_gpu_close(&g);
    return rc;
}
