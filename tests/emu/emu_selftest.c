/* emu_selftest [KIT]: the emulator's own checks, through the driver API as the runtime calls it (the `cu`
 * table that dsk_cuda_open fills from the emulator): barriers and their reductions, every warp operation,
 * atomics, a deadlock and barrier mismatches reported with the kernel and the block, both mmas against
 * the fragment layout, cp.async landing at its wait, the shared-memory opt-in, the launch limits of the
 * hardware, poisoned fresh memory, stream capture and graph replay equal to eager launches with the
 * arguments copied at capture, a capture refusing a synchronous call. With KIT: every kernel of the kit
 * that the emulator holds has the parameter layout the manifest declares (cuFuncGetParamInfo).
 * Exit 0 all passed, 1 a check failed, 2 setup failed. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/driver/cuda_api.h"
#include "runtime/driver/kit.h"

#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks, failures;
static CUmodule tests_module;

static void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *name, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%-4s %-22s %s\n", ok ? "PASS" : "FAIL", name, detail);
    fflush(stdout);
    checks++;
    failures += !ok;
}

static void die(const char *what, CUresult r)
{
    const char *n = NULL;
    cu.cuGetErrorName(r, &n);
    fprintf(stderr, "emu_selftest: %s: %s\n", what, n ? n : "?");
    exit(2);
}

#define MUST(call)                                                                                                 \
    do {                                                                                                           \
        CUresult r_ = (call);                                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                                    \
            die(#call, r_);                                                                                        \
    } while (0)

static CUfunction kernel(const char *name)
{
    CUfunction f;
    MUST(cu.cuModuleGetFunction(&f, tests_module, name));
    return f;
}

static CUdeviceptr upload(const void *h, size_t n)
{
    CUdeviceptr d;
    MUST(cu.cuMemAlloc(&d, n));
    MUST(cu.cuMemcpyHtoD(d, h, n));
    return d;
}

static void download(void *h, CUdeviceptr d, size_t n)
{
    MUST(cu.cuMemcpyDtoH(h, d, n));
}

/* stderr into a temporary file while the emulator reports a failure we provoke */
static int saved_stderr = -1;
static FILE *captured;

static void stderr_capture(void)
{
    fflush(stderr);
    captured = tmpfile();
    saved_stderr = dup(2);
    dup2(fileno(captured), 2);
}

static char *stderr_release(void)
{
    static char text[8192];
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    rewind(captured);
    size_t n = fread(text, 1, sizeof text - 1, captured);
    text[n] = 0;
    fclose(captured);
    return text;
}

static void test_barrier(void)
{
    enum { N = 256, B = 3 };
    int in[N * B], out[N * B], counts[3 * B];
    for (int i = 0; i < N * B; i++)
        in[i] = (i * 7919) % 1000 - (i == 5 ? 2000 : 0);
    in[N + 3] = 7;
    CUdeviceptr din = upload(in, sizeof in), dout, dc;
    MUST(cu.cuMemAlloc(&dout, sizeof out));
    MUST(cu.cuMemAlloc(&dc, sizeof counts));
    void *args[] = {&din, &dout, &dc};
    MUST(cu.cuLaunchKernel(kernel("emutest_barrier"), B, 1, 1, N, 1, 1, 0, NULL, args, NULL));
    download(out, dout, sizeof out);
    download(counts, dc, sizeof counts);
    int bad = 0, bad_counts = 0;
    for (int b = 0; b < B; b++) {
        int odd = 0, nonneg = 1, seven = 0;
        for (int t = 0; t < N; t++) {
            bad += out[b * N + t] != in[b * N + N - 1 - t];
            odd += in[b * N + t] & 1;
            nonneg &= in[b * N + t] >= 0;
            seven |= in[b * N + t] == 7;
        }
        bad_counts += counts[3 * b] != odd || counts[3 * b + 1] != nonneg || counts[3 * b + 2] != seven;
    }
    check(bad == 0, "__syncthreads", "block reversal through shared memory: %d of %d wrong", bad, N * B);
    check(bad_counts == 0, "__syncthreads_count/and/or", "%d of %d blocks wrong", bad_counts, B);
    cu.cuMemFree(din);
    cu.cuMemFree(dout);
    cu.cuMemFree(dc);
}

static void test_warp(void)
{
    enum { N = 64 };
    int in[N], out[N * 16];
    for (int i = 0; i < N; i++)
        in[i] = (i * 37 + 11) % 97;
    in[40] = 42;
    CUdeviceptr din = upload(in, sizeof in), dout;
    MUST(cu.cuMemAlloc(&dout, sizeof out));
    void *args[] = {&din, &dout};
    MUST(cu.cuLaunchKernel(kernel("emutest_warp"), 1, 1, 1, N, 1, 1, 0, NULL, args, NULL));
    download(out, dout, sizeof out);
    const char *what[16] = {"__shfl_sync",        "__shfl_up_sync",       "__shfl_down_sync",    "__shfl_xor_sync",
                            "__shfl_xor_sync w8",  "__shfl_down_sync w8",  "__ballot_sync",       "__any_sync",
                            "__all_sync",          "__match_any_sync",     "__reduce_add_sync",   "__reduce_min_sync",
                            "__reduce_max_sync",   "__activemask",         "half-warp masks",     "64-bit shuffle"};
    int bad[16] = {0};
    for (int t = 0; t < N; t++) {
        int w = t & ~31, l = t & 31, e[16];
        unsigned ballot = 0, match = 0, sum = 0, umax = 0;
        int any = 0, all = 1, imin = 1 << 30;
        for (int o = 0; o < 32; o++) {
            int v = in[w + o];
            ballot |= (unsigned)(v & 1) << o;
            match |= (unsigned)(v % 3 == in[t] % 3) << o;
            sum += (unsigned)v;
            umax = (unsigned)v > umax ? (unsigned)v : umax;
            imin = v - 50 < imin ? v - 50 : imin;
            any |= v == 42;
            all &= v >= 0;
        }
        e[0] = in[w + 5];
        e[1] = l >= 3 ? in[t - 3] : in[t];
        e[2] = l + 3 < 32 ? in[t + 3] : in[t];
        e[3] = in[w + (l ^ 9)];
        e[4] = in[w + (l ^ 2)];
        e[5] = (l & 7) + 3 < 8 ? in[t + 3] : in[t];
        e[6] = (int)ballot;
        e[7] = any;
        e[8] = all;
        e[9] = (int)match;
        e[10] = (int)sum;
        e[11] = imin;
        e[12] = (int)umax;
        e[13] = -1;
        e[14] = in[w + (l ^ 1)];
        e[15] = in[w + 31];
        for (int k = 0; k < 16; k++)
            bad[k] += out[16 * t + k] != e[k];
    }
    for (int k = 0; k < 16; k++)
        check(bad[k] == 0, what[k], "%d of %d lanes wrong", bad[k], N);
    cu.cuMemFree(din);
    cu.cuMemFree(dout);
}

static void test_atomics(void)
{
    enum { B = 4, T = 96 };
    int i[5] = {0, -1000000, 1000000, 0, -1};
    unsigned u[5] = {0, 0, 0xffffffffu, 0, 0xffffffffu};
    float f[1] = {0};
    uint64_t l[2] = {0, 0};
    CUdeviceptr di = upload(i, sizeof i), du = upload(u, sizeof u), df = upload(f, sizeof f), dl = upload(l, sizeof l);
    void *args[] = {&di, &du, &df, &dl};
    MUST(cu.cuLaunchKernel(kernel("emutest_atomics"), B, 1, 1, T, 1, 1, 0, NULL, args, NULL));
    download(i, di, sizeof i);
    download(u, du, sizeof u);
    download(f, df, sizeof f);
    download(l, dl, sizeof l);
    int n = B * T, mx = -(1 << 30), mn = 1 << 30;
    unsigned umx = 0, umn = 0xffffffffu, andmask = 0xffffffffu;
    for (int t = 0; t < n; t++) {
        int v = (t * 37) % 1001 - 500;
        mx = v > mx ? v : mx;
        mn = v < mn ? v : mn;
        unsigned h = (unsigned)t * 2654435761u;
        umx = h > umx ? h : umx;
        umn = h + 1u < umn ? h + 1u : umn;
        andmask &= ~(1u << (t % 17));
    }
    check(i[0] == n && u[0] == 2u * n && f[0] == 0.5f * n && l[0] == (uint64_t)n << 33, "atomicAdd",
          "int %d, unsigned %u, float %g, u64 %llu (want %d each, x2, x0.5, x2^33)", i[0], u[0], f[0],
          (unsigned long long)l[0], n);
    check(i[1] == mx && i[2] == mn && u[3] == umx && u[4] == umn, "atomicMax/atomicMin", "int %d %d, unsigned %u %u", i[1],
          i[2], u[3], u[4]);
    check(i[3] == 3 * n && l[1] == 5ull * n, "atomicCAS 32/64", "loops gave %d and %llu", i[3], (unsigned long long)l[1]);
    check(i[4] >= 0 && i[4] < n, "atomicExch", "last value %d", i[4]);
    check(u[1] == 0xffffffffu && u[2] == andmask, "atomicOr/atomicAnd", "%08x %08x", u[1], u[2]);
    cu.cuMemFree(di);
    cu.cuMemFree(du);
    cu.cuMemFree(df);
    cu.cuMemFree(dl);
}

/* a kernel that must fail with a report naming it and its block, and the driver usable afterwards */
static void expect_report(const char *kname, unsigned threads, const char *want, const char *check_name)
{
    CUdeviceptr d;
    MUST(cu.cuMemAlloc(&d, 4096));
    void *args[] = {&d};
    stderr_capture();
    CUresult r = cu.cuLaunchKernel(kernel(kname), 2, 1, 1, threads, 1, 1, 0, NULL, args, NULL);
    CUresult s = cu.cuCtxSynchronize();
    const char *text = stderr_release();
    int named = strstr(text, kname) && strstr(text, "block (") && strstr(text, want);
    check(r == CUDA_ERROR_LAUNCH_FAILED && s == CUDA_ERROR_LAUNCH_FAILED && named, check_name, "launch %d, sync %d: %.*s",
          (int)r, (int)s, (int)strcspn(text, "\n"), text);
    check(cu.cuCtxSynchronize() == CUDA_SUCCESS, "error is reported once", "the next synchronize succeeds");
    cu.cuMemFree(d);
}

static void test_reports(void)
{
    expect_report("emutest_deadlock", 64, "deadlock", "deadlock reported");
    expect_report("emutest_mismatch", 64, "barrier mismatch", "barrier mismatch");
    expect_report("emutest_warp_mismatch", 32, "different warp operations", "warp op mismatch");
}

/* a segmentation fault inside a kernel names it, its block and thread, then kills the process as usual:
 * with the default action, by SIGSEGV; under a handler installed before (a sanitizer's), that handler's
 * way (AddressSanitizer reports and exits 1) */
static void test_fault(void)
{
    struct sigaction before;
    if (sigaction(SIGSEGV, NULL, &before))
        die("sigaction", CUDA_ERROR_UNKNOWN);
    int dfl = !(before.sa_flags & SA_SIGINFO) && before.sa_handler == SIG_DFL;
    int fds[2];
    if (pipe(fds))
        die("pipe", CUDA_ERROR_UNKNOWN);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(fds[1], 2);
        close(fds[0]);
        CUdeviceptr null = 0;
        void *args[] = {&null};
        cu.cuLaunchKernel(kernel("emutest_fault"), 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL);
        _exit(0);
    }
    close(fds[1]);
    char text[2048];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof text - 1 && (got = read(fds[0], text + n, sizeof text - 1 - n)) > 0)
        n += (size_t)got;
    text[n] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    int named = strstr(text, "emutest_fault") && strstr(text, "block (0,0,0)") && strstr(text, "thread 3");
    int died = dfl ? WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV : !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    check(died && named, "segfault reported", "%s, %.*s", dfl ? "SIGSEGV" : "the handler before",
          (int)strcspn(text, "\n"), text);
}

static void test_mma(void)
{
    uint16_t A[2][256], B[2][128];
    float ref[128], D[128];
    for (int kind = 0; kind < 2; kind++) {
        for (int i = 0; i < 256; i++) {
            float v = (float)((i * 29) % 23 - 11) / 8.0f;
            A[kind][i] = kind ? f32_to_bf16(v) : f32_to_f16(v);
        }
        for (int i = 0; i < 128; i++) {
            float v = (float)((i * 13) % 19 - 9) / 4.0f;
            B[kind][i] = kind ? f32_to_bf16(v) : f32_to_f16(v);
        }
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8; c++) {
                double s = 0;
                for (int k = 0; k < 16; k++) {
                    float a = kind ? bf16_to_f32(A[kind][r * 16 + k]) : f16_to_f32(A[kind][r * 16 + k]);
                    float b = kind ? bf16_to_f32(B[kind][k * 8 + c]) : f16_to_f32(B[kind][k * 8 + c]);
                    s += (double)a * b;
                }
                ref[r * 8 + c] = (float)s;
            }
        CUdeviceptr da = upload(A[kind], sizeof A[kind]), db = upload(B[kind], sizeof B[kind]), dd;
        MUST(cu.cuMemAlloc(&dd, sizeof D));
        void *args[] = {&da, &db, &dd, &kind};
        MUST(cu.cuLaunchKernel(kernel("emutest_mma"), 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
        download(D, dd, sizeof D);
        int bad = 0;
        for (int i = 0; i < 128; i++)
            bad += D[i] != ref[i];
        check(bad == 0, kind ? "mma m16n8k16 bf16" : "mma m16n8k16 f16", "%d of 128 outputs differ from A·B", bad);
        cu.cuMemFree(da);
        cu.cuMemFree(db);
        cu.cuMemFree(dd);
    }
}

static void test_cp_async(void)
{
    enum { T = 128, N16 = 4096 }; /* 64 KiB of dynamic shared memory: needs the opt-in */
    uint32_t *src = malloc(N16 * 16), *before = malloc(T * 16), *after = malloc(N16 * 16);
    for (int i = 0; i < N16 * 4; i++)
        src[i] = (uint32_t)i * 2654435761u;
    CUdeviceptr ds = upload(src, N16 * 16), db, da;
    MUST(cu.cuMemAlloc(&db, T * 16));
    MUST(cu.cuMemAlloc(&da, N16 * 16));
    int n16 = N16;
    void *args[] = {&ds, &db, &da, &n16};
    CUfunction f = kernel("emutest_cp_async");
    stderr_capture();
    CUresult r0 = cu.cuLaunchKernel(f, 1, 1, 1, T, 1, 1, N16 * 16, NULL, args, NULL);
    stderr_release();
    CUresult r1 = cu.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, N16 * 16);
    CUresult r2 = cu.cuLaunchKernel(f, 1, 1, 1, T, 1, 1, N16 * 16, NULL, args, NULL);
    check(r0 == CUDA_ERROR_INVALID_VALUE && r1 == CUDA_SUCCESS && r2 == CUDA_SUCCESS, "shared memory opt-in",
          "64 KiB without the attribute: %d, set: %d, with it: %d", (int)r0, (int)r1, (int)r2);
    download(before, db, T * 16);
    download(after, da, N16 * 16);
    int stale = 0, wrong = 0;
    for (int i = 0; i < T * 4; i++)
        stale += before[i] == 0xCDCDCDCDu;
    for (int i = 0; i < N16; i++)
        for (int w = 0; w < 4; w++)
            wrong += after[4 * i + w] != src[4 * (N16 - 1 - i) + w];
    check(stale == T * 4 && wrong == 0, "cp.async lands at wait", "%d of %d words unwritten before the wait, %d wrong after",
          stale, T * 4, wrong);
    cu.cuMemFree(ds);
    cu.cuMemFree(db);
    cu.cuMemFree(da);
    free(src);
    free(before);
    free(after);
}

static void test_intrinsics(void)
{
    int o[16];
    float f[8];
    CUdeviceptr dout, df;
    MUST(cu.cuMemAlloc(&dout, sizeof o));
    MUST(cu.cuMemAlloc(&df, sizeof f));
    void *args[] = {&dout, &df};
    MUST(cu.cuLaunchKernel(kernel("emutest_intrinsics"), 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    download(o, dout, sizeof o);
    download(f, df, sizeof f);
    const int want[16] = {2, 4, -2, 2147483647, 0, 0x55114400, 0x38, 16, 5, 31, (int)0x80000000u, 6,
                          (int)f32_to_f16(1.0f / 3.0f), (int)f32_to_bf16(1.0f / 3.0f), -1 + 2 + 3 + 4 + 10, 1};
    int bad = 0;
    for (int i = 0; i < 16; i++)
        if (o[i] != want[i]) {
            bad++;
            printf("     intrinsic result %d: %d (0x%x), want %d (0x%x)\n", i, o[i], (unsigned)o[i], want[i],
                   (unsigned)want[i]);
        }
    const float fw[8] = {1.0f, 0.0f, 1.0f, 3.140625f, sqrtf(2.0f), 0.5f, 1.0f, 1.0f / 3.0f};
    for (int i = 0; i < 8; i++)
        if (f[i] != fw[i]) {
            bad++;
            printf("     float intrinsic %d: %.9g, want %.9g\n", i, f[i], fw[i]);
        }
    check(bad == 0, "intrinsics", "%d of 24 results wrong", bad);
    cu.cuMemFree(dout);
    cu.cuMemFree(df);
}

static void test_limits(void)
{
    CUfunction f = kernel("emutest_axpy");
    CUdeviceptr d;
    MUST(cu.cuMemAlloc(&d, 1024));
    float a = 1;
    int n = 0;
    void *args[] = {&a, &d, &d, &n};
    stderr_capture();
    CUresult big_block = cu.cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, NULL, args, NULL);
    CUresult grid_y = cu.cuLaunchKernel(f, 1, 65536, 1, 32, 1, 1, 0, NULL, args, NULL);
    CUresult smem_cap = cu.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 228 * 1024);
    CUresult bad_free = cu.cuMemFree(d + 16);
    CUresult bad_copy = cu.cuMemcpyHtoD(d + 1000, &a, 64);
    stderr_release();
    CUresult ok = cu.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
    check(big_block == CUDA_ERROR_INVALID_VALUE && grid_y == CUDA_ERROR_INVALID_VALUE && ok == CUDA_SUCCESS, "launch limits",
          "1025 threads: %d, grid.y 65536: %d, a good launch: %d", (int)big_block, (int)grid_y, (int)ok);
    check(smem_cap == CUDA_ERROR_INVALID_VALUE, "shared memory limit", "228 KiB of dynamic shared memory: %d", (int)smem_cap);
    check(bad_free == CUDA_ERROR_INVALID_VALUE && bad_copy == CUDA_ERROR_INVALID_VALUE, "memory ranges",
          "free inside an allocation: %d, a copy past its end: %d", (int)bad_free, (int)bad_copy);
    CUdeviceptr fresh;
    unsigned char h[4096];
    MUST(cu.cuMemAlloc(&fresh, sizeof h));
    download(h, fresh, sizeof h);
    int poisoned = 0;
    for (size_t i = 0; i < sizeof h; i++)
        poisoned += h[i] == 0xA5;
    size_t free_b = 0, total = 0;
    MUST(cu.cuMemGetInfo(&free_b, &total));
    check(poisoned == (int)sizeof h && total > 0 && free_b <= total, "fresh memory poisoned",
          "%d of %zu bytes 0xA5; cuMemGetInfo %zu of %zu MiB free", poisoned, sizeof h, free_b >> 20, total >> 20);
    cu.cuMemFree(fresh);
    cu.cuMemFree(d);
}

/* y = 2x + y twice, with a memset, an upload and a download around it: eager, then captured and replayed */
static void test_graph(void)
{
    enum { N = 1000 };
    CUstream s;
    MUST(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    float *x = malloc(N * 4), *eager = malloc(N * 4), *graph_out = malloc(N * 4), *pinned;
    MUST(cu.cuMemAllocHost((void **)&pinned, N * 4));
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 0.25f - 3.0f;
    CUdeviceptr dx, dy;
    MUST(cu.cuMemAlloc(&dx, N * 4));
    MUST(cu.cuMemAlloc(&dy, N * 4));
    CUfunction f = kernel("emutest_axpy");
    float a = 2.0f;
    int n = N;
    void *args[] = {&a, &dx, &dy, &n};
    unsigned grid = (N + 255) / 256;
    CUevent e0, e1;
    MUST(cu.cuEventCreate(&e0, CU_EVENT_DEFAULT));
    MUST(cu.cuEventCreate(&e1, CU_EVENT_DEFAULT));

    memcpy(pinned, x, N * 4);
    MUST(cu.cuMemsetD32Async(dy, 0x3f800000u, N, s)); /* 1.0f */
    MUST(cu.cuMemcpyHtoDAsync(dx, pinned, N * 4, s));
    MUST(cu.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, s, args, NULL));
    MUST(cu.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, s, args, NULL));
    MUST(cu.cuMemcpyDtoHAsync(eager, dy, N * 4, s));
    MUST(cu.cuStreamSynchronize(s));

    CUgraph g;
    CUgraphExec ge;
    MUST(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    MUST(cu.cuEventRecord(e0, s));
    MUST(cu.cuMemsetD32Async(dy, 0x3f800000u, N, s));
    MUST(cu.cuMemcpyHtoDAsync(dx, pinned, N * 4, s));
    MUST(cu.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, s, args, NULL));
    MUST(cu.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, s, args, NULL));
    MUST(cu.cuMemcpyDtoHAsync(graph_out, dy, N * 4, s));
    MUST(cu.cuEventRecord(e1, s));
    MUST(cu.cuStreamEndCapture(s, &g));
    MUST(cu.cuGraphInstantiateWithFlags(&ge, g, 0));
    MUST(cu.cuGraphDestroy(g)); /* the executable graph stays */
    a = 100.0f;                 /* the capture copied a = 2 */
    memset(graph_out, 0, N * 4);
    MUST(cu.cuMemsetD32(dy, 0, N));
    int same = 1;
    for (int rep = 0; rep < 2; rep++) {
        MUST(cu.cuGraphLaunch(ge, s));
        MUST(cu.cuStreamSynchronize(s));
        same &= !memcmp(graph_out, eager, N * 4);
    }
    float ms = -1;
    CUresult et = cu.cuEventElapsedTime(&ms, e0, e1);
    check(same, "graph replay == eager", "memset, upload, 2 launches, download replayed twice; arguments copied at capture");
    check(et == CUDA_SUCCESS && ms >= 0, "events in a graph", "elapsed %.3f ms (%d)", ms, (int)et);

    /* a synchronous call inside a capture is refused and invalidates it */
    MUST(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    stderr_capture();
    CUresult sync_copy = cu.cuMemcpyHtoD(dx, x, 16);
    stderr_release();
    CUgraph bad = NULL;
    CUresult end = cu.cuStreamEndCapture(s, &bad);
    check(sync_copy == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && end == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && !bad,
          "capture forbids sync calls", "cuMemcpyHtoD in a capture: %d, end: %d", (int)sync_copy, (int)end);

    cu.cuGraphExecDestroy(ge);
    cu.cuEventDestroy(e0);
    cu.cuEventDestroy(e1);
    cu.cuMemFree(dx);
    cu.cuMemFree(dy);
    cu.cuMemFreeHost(pinned);
    cu.cuStreamDestroy(s);
    free(x);
    free(eager);
    free(graph_out);
}

/* A capture that forks a second stream and joins it back: the branch's work is in the graph; a branch
 * left unjoined, and a capturing stream waiting for an event from outside its capture, are refused. */
static void test_graph_fork(void)
{
    enum { N = 512 };
    CUstream s, t;
    CUevent fork, join, outside;
    MUST(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    MUST(cu.cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    MUST(cu.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    MUST(cu.cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    MUST(cu.cuEventCreate(&outside, CU_EVENT_DISABLE_TIMING));
    CUdeviceptr dx, dy;
    MUST(cu.cuMemAlloc(&dx, N * 4));
    MUST(cu.cuMemAlloc(&dy, N * 4));
    CUfunction f = kernel("emutest_axpy");
    float a = 1.0f, y[N];
    int n = N;
    void *xy[] = {&a, &dx, &dy, &n}, *yx[] = {&a, &dy, &dx, &n};
    MUST(cu.cuMemsetD32(dx, 0x3f800000u, N)); /* x = 1, y = 0 */
    MUST(cu.cuMemsetD32(dy, 0, N));

    CUgraph g;
    CUgraphExec ge;
    MUST(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    MUST(cu.cuEventRecord(fork, s));
    MUST(cu.cuStreamWaitEvent(t, fork, 0));
    MUST(cu.cuLaunchKernel(f, 2, 1, 1, 256, 1, 1, 0, t, xy, NULL)); /* on the branch: y += x */
    MUST(cu.cuEventRecord(join, t));
    MUST(cu.cuStreamWaitEvent(s, join, 0));
    MUST(cu.cuLaunchKernel(f, 2, 1, 1, 256, 1, 1, 0, s, yx, NULL)); /* after the join: x += y */
    MUST(cu.cuStreamEndCapture(s, &g));
    MUST(cu.cuGraphInstantiateWithFlags(&ge, g, 0));
    MUST(cu.cuGraphDestroy(g));
    MUST(cu.cuGraphLaunch(ge, s));
    MUST(cu.cuStreamSynchronize(s));
    MUST(cu.cuMemcpyDtoH(y, dx, sizeof y)); /* x = 1 + (0 + 1) = 2 */
    int ok = 1;
    for (int i = 0; i < N; i++)
        ok &= y[i] == 2.0f;
    /* the branch stream is free again after the capture: eager work on it runs */
    CUresult after = cu.cuLaunchKernel(f, 2, 1, 1, 256, 1, 1, 0, t, xy, NULL);
    MUST(cu.cuStreamSynchronize(t));
    check(ok && after == CUDA_SUCCESS, "graph fork and join", "a branch on a second stream replayed with the capture");

    /* unjoined: the branch has work after its last join */
    MUST(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    MUST(cu.cuEventRecord(fork, s));
    MUST(cu.cuStreamWaitEvent(t, fork, 0));
    MUST(cu.cuLaunchKernel(f, 2, 1, 1, 256, 1, 1, 0, t, xy, NULL));
    CUgraph bad = NULL;
    stderr_capture();
    CUresult unjoined = cu.cuStreamEndCapture(s, &bad);
    /* isolation: a capture waits for an event recorded outside it */
    MUST(cu.cuEventRecord(outside, t));
    MUST(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUresult isolated = cu.cuStreamWaitEvent(s, outside, 0);
    CUgraph g2 = NULL;
    MUST(cu.cuStreamEndCapture(s, &g2));
    stderr_release();
    check(unjoined == CUDA_ERROR_STREAM_CAPTURE_UNJOINED && !bad && isolated == CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
          "graph fork refusals", "unjoined branch: %d; waiting for an uncaptured event: %d", (int)unjoined,
          (int)isolated);
    if (g2)
        cu.cuGraphDestroy(g2);
    cu.cuGraphExecDestroy(ge);
    cu.cuEventDestroy(fork);
    cu.cuEventDestroy(join);
    cu.cuEventDestroy(outside);
    cu.cuMemFree(dx);
    cu.cuMemFree(dy);
    cu.cuStreamDestroy(t);
    cu.cuStreamDestroy(s);
}

/* Every kit kernel the emulator holds: its parameters as the manifest lists them. */
typedef CUresult (*param_info_fn)(CUfunction, size_t, size_t *, size_t *);

static void test_kit_abi(const char *path, const dsk_gpu *g)
{
    kit *k;
    if (kit_open(path, NULL, &k) || kit_load(k, g)) {
        fprintf(stderr, "emu_selftest: %s\n", dsk_err_msg());
        exit(2);
    }
    CUresult (*getproc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = NULL;
    *(void **)&getproc = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
    param_info_fn info = NULL;
    if (!getproc || getproc("cuFuncGetParamInfo", (void **)&info, CUDA_VERSION, 0, NULL) != CUDA_SUCCESS || !info) {
        fprintf(stderr, "emu_selftest: the driver has no cuFuncGetParamInfo\n");
        exit(2);
    }
    int held = 0, bad = 0;
    for (int i = 0; i < kit_nkernels(k); i++) {
        const kit_kernel *kk = kit_kernel_at(k, i);
        const mf_kernel *m = kk->meta;
        size_t off, size, end = 0;
        if (info(kk->fn, 0, &off, &size) == CUDA_ERROR_INVALID_HANDLE)
            continue; /* not compiled into this emulator */
        held++;
        int ok = info(kk->fn, (size_t)m->nargs, &off, &size) == CUDA_ERROR_INVALID_VALUE;
        for (int a = 0; a < m->nargs && ok; a++) {
            size_t want = m->args[a] == MF_ARG_I32 || m->args[a] == MF_ARG_U32 || m->args[a] == MF_ARG_F32 ? 4 : 8;
            ok = info(kk->fn, (size_t)a, &off, &size) == CUDA_SUCCESS && size == want && off >= end && off % want == 0;
            end = off + size;
        }
        if (!ok) {
            bad++;
            printf("     %s: the kernel's parameters differ from the manifest's %d kinds\n", m->symbol, m->nargs);
        }
    }
    /* the cubin's __launch_bounds__ hold: twice the bound is refused */
    CUresult over = CUDA_SUCCESS;
    const char *bounded = "none";
    for (int i = 0; i < kit_nkernels(k) && !strcmp(bounded, "none"); i++) {
        const kit_kernel *kk = kit_kernel_at(k, i);
        size_t off, size;
        if (kk->meta->max_threads > 0 && kk->meta->max_threads <= 512 && info(kk->fn, 0, &off, &size) == CUDA_SUCCESS) {
            bounded = kk->meta->symbol;
            stderr_capture();
            over = cu.cuLaunchKernel(kk->fn, 1, 1, 1, 2 * (unsigned)kk->meta->max_threads, 1, 1, 0, NULL, NULL, NULL);
            stderr_release();
        }
    }
    check(over == CUDA_ERROR_INVALID_VALUE, "launch bounds", "%s with twice its __launch_bounds__: %d", bounded, (int)over);
    check(bad == 0 && held > 0, "kit parameter ABI", "%d of %d kit kernels held by the emulator, %d differ from the manifest",
          held, kit_nkernels(k), bad);
    kit_close(k);
}

int main(int argc, char **argv)
{
    dsk_gpu g;
    if (dsk_gpu_open(0, &g)) {
        fprintf(stderr, "emu_selftest: %s\n", dsk_err_msg());
        return 2;
    }
    printf("device 0: %s, sm_%d%d, %d SMs\n", g.name, g.cc_major, g.cc_minor, g.sms);
    MUST(cu.cuModuleLoadData(&tests_module, "emulator test kernels (not a cubin)"));
    test_barrier();
    test_warp();
    test_atomics();
    test_reports();
    test_fault();
    test_mma();
    test_cp_async();
    test_intrinsics();
    test_limits();
    test_graph();
    test_graph_fork();
    if (argc > 1)
        test_kit_abi(argv[1], &g);
    printf("%d checks, %d failed\n", checks, failures);
    cu.cuModuleUnload(tests_module);
    dsk_gpu_close(&g);
    return failures ? 1 : 0;
}
