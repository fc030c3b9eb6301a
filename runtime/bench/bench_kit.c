/* Benchmarks of the kit itself: how long the builder takes (cold and warm cache), how long the runtime
 * takes to open, check, load and resolve a kit (eager and lazy module loading, each in a fresh process),
 * the card's streaming-read bandwidth (the roofline), and the first kernel families against it. */
#include "runtime/cli.h"
#include "runtime/bench/bench_kit_engine.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "runtime/launch/gpu_time.h"
#include "runtime/launch/rmsnorm.h"
#include "runtime/launch/rope.h"
#include "runtime/launch/rowmm.h"
#include "runtime/launch/stream_read.h"
#include "runtime/launch/topk.h"
#include "manifest/rules/rules.h"

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

static int families(const kit *k, CUstream s, CUdeviceptr big, double roof)
{
    launch_ctx c = {.k = k, .s = s};
    char shape[64];
    printf("\n%-12s %-42s %10s %10s %10s %8s\n", "family", "shape", "eager us", "graph us", "GB/s", "roof");
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

    return bench_kit_engine(k, s, roof);
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
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: dskit bench kit KIT\n");
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
