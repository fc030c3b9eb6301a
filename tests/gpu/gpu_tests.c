/* GPU tests: every kernel family of the kit against its CPU reference on fresh random inputs.
 * usage: gpu_tests KIT [FAMILY...]. Prints one line per check and a summary; exit 0 all passed, 1 a check
 * failed, 2 no GPU or the kit cannot be loaded. The same program runs on the kernel emulator
 * (gpu_tests_emu, docs/emulator.md), where the model-sized cases shrink unless DSKIT_EMU_FULL=1. */
#include "tests/gpu/gpu_check.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void must(int rc, const char *what)
{
    if (rc) {
        fprintf(stderr, "gpu_tests: %s: %s\n", what, dsk_err_msg());
        exit(2);
    }
}

static void cu_must(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS)
        must(dsk_cu_fail(r, what), what);
}

CUdeviceptr dev_alloc(size_t bytes)
{
    CUdeviceptr d;
    cu_must(cu.cuMemAlloc(&d, bytes ? bytes : 16), "cuMemAlloc");
    return d;
}

CUdeviceptr dev_upload(const void *host, size_t bytes)
{
    CUdeviceptr d = dev_alloc(bytes);
    cu_must(cu.cuMemcpyHtoD(d, host, bytes), "cuMemcpyHtoD");
    /* a pageable copy may still be in flight when cuMemcpyHtoD returns; the tests launch on a
     * non-blocking stream, which does not wait for the legacy stream */
    cu_must(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    return d;
}

void dev_upload_to(CUdeviceptr d, const void *host, size_t bytes)
{
    cu_must(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    cu_must(cu.cuMemcpyHtoD(d, host, bytes), "cuMemcpyHtoD");
    cu_must(cu.cuCtxSynchronize(), "cuCtxSynchronize");
}

void dev_download(void *host, CUdeviceptr d, size_t bytes)
{
    /* the copy runs on the legacy stream, which does not wait for the tests' non-blocking stream */
    cu_must(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    cu_must(cu.cuMemcpyDtoH(host, d, bytes), "cuMemcpyDtoH");
}

void dev_memset(CUdeviceptr d, unsigned char v, size_t bytes)
{
    /* legacy stream, like the copies: wait for the tests' stream before, and for the memset after */
    cu_must(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    cu_must(cu.cuMemsetD8(d, v, bytes), "cuMemsetD8");
    cu_must(cu.cuCtxSynchronize(), "cuCtxSynchronize");
}

void dev_free(CUdeviceptr d)
{
    cu.cuMemFree(d);
}

void dev_sync(gpu_ctx *c)
{
    cu_must(cu.cuStreamSynchronize(c->s), "cuStreamSynchronize");
}

CUdeviceptr dev_alloc_guarded(size_t bytes)
{
    CUdeviceptr d = dev_alloc(bytes + 2 * GPU_GUARD_BYTES) + GPU_GUARD_BYTES;
    dev_poison(d, bytes);
    return d;
}

void dev_poison(CUdeviceptr d, size_t bytes)
{
    dev_memset(d - GPU_GUARD_BYTES, GPU_GUARD_BYTE, bytes + 2 * GPU_GUARD_BYTES);
}

int dev_guard_intact(CUdeviceptr d, size_t bytes)
{
    unsigned char g[2][GPU_GUARD_BYTES];
    dev_download(g[0], d - GPU_GUARD_BYTES, GPU_GUARD_BYTES);
    dev_download(g[1], d + bytes, GPU_GUARD_BYTES);
    for (int i = 0; i < GPU_GUARD_BYTES; i++)
        if (g[0][i] != GPU_GUARD_BYTE || g[1][i] != GPU_GUARD_BYTE)
            return 0;
    return 1;
}

void dev_free_guarded(CUdeviceptr d)
{
    dev_free(d - GPU_GUARD_BYTES);
}

typedef struct {
    const char *name;
    void (*fn)(gpu_ctx *);
} family_test;

static const family_test tests[] = {
    {"stream_read", test_stream_read}, {"rmsnorm", test_rmsnorm}, {"rope", test_rope},
    {"rowmm_bf16", test_rowmm},         {"topk", test_topk},
    {"exl3_recon", test_exl3_decode},   {"exl3_mm", test_exl3_mm},   {"exl3_moe", test_exl3_moe},
    {"cast", test_cast},
    {"index_score", test_index_score},  {"cand_blocks", test_cand_blocks}, {"moe_route", test_moe_route},
    {"sample", test_sample},            {"dspark_conf", test_dspark_conf},
    {"embed", test_embed},              {"mhc_mix", test_mhc_mix},   {"mhc_pre", test_mhc_pre},
    {"mhc_post", test_mhc_post},        {"tap_mean", test_tap_mean},
    {"vec_glue", test_vec_glue},        {"rows_copy", test_rows_copy}, {"compress_pool", test_compress_pool},
    {"engram_rows", test_engram_rows},  {"engram_gate", test_engram_gate},
    {"sparse_attn", test_sparse_attn},
    {"vision_mm", test_vision_mm},      {"vision_glue", test_vision_glue},
    {"vision_attn", test_vision_attn},
    {"xchg", test_xchg},                /* two ranks' exchanges through peer memory (two streams) */
    {"xchg_nccl", test_xchg_nccl},      /* the NCCL transport with one GPU */
    {"engine", test_engine},
    {"vision_tower", test_vision_tower}, /* the tower on the GPU against the CPU's, stage by stage */
    {"engine_draft", test_engine_draft}, /* drafted == serial on the GPU */
    {"engine_fill", test_engine_fill},   /* masks written while the forward runs == given */
    {"engine_exact", test_engine_exact}, /* the GPU against itself: batched, chunked == alone */
    {"engine_tp2", test_engine_tp2},           /* two ranks (threads on GPU 0) against one, layer by layer */
    {"engine_counters", test_engine_counters}, /* the EXL3 arrival counters: zero after every round, cleared on failure */
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_tests KIT [FAMILY...]\n");
        return 2;
    }
    dsk_gpu g;
    kit *k;
    must(dsk_gpu_open(0, &g), "opening GPU 0");
    double t0 = dsk_now();
    must(kit_open(argv[1], NULL, &k), "opening the kit");
    must(kit_load(k, &g), "loading the kit");
    printf("GPU 0: %s (cc %d.%d, %d SMs); kit %s loaded in %.3f s (%d kernels)\n", g.name, g.cc_major, g.cc_minor,
           g.sms, argv[1], dsk_now() - t0, kit_nkernels(k));
    gpu_ctx c = {.k = k, .g = &g};
    c.small = !strncmp(g.name, "dskit emulator", 14) && !getenv("DSKIT_EMU_FULL");
    setenv("DSKIT_TEST_KIT", argv[1], 0); /* the engine test opens the kit itself, through the backend */
    cu_must(cu.cuStreamCreate(&c.s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int run = argc == 2;
        for (int a = 2; a < argc; a++)
            run |= !strcmp(argv[a], tests[i].name);
        if (run)
            tests[i].fn(&c);
    }
    printf("%d checks, %d failed (%.1f s)\n", c.checks, c.failures, dsk_now() - t0);
    cu.cuStreamDestroy(c.s);
    kit_close(k);
    dsk_gpu_close(&g);
    return c.failures ? 1 : 0;
}
