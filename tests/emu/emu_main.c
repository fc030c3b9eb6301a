/* exl3_emu KIT [FAMILY...]: the GPU test program's EXL3 checks (tests/gpu/test_exl3_gpu.c) run on the CPU
 * emulator, with the model-sized cases shrunk unless EXL3_EMU_FULL is set. A development tool: it runs the real kernel sources and
 * the real launchers, but its mma is a model of the tensor core, so passing here is evidence, not proof. */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "tests/gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int emu_install(kit *k);
extern int exl3_tests_small;

void must(int rc, const char *what)
{
    if (rc) {
        fprintf(stderr, "exl3_emu: %s: %s\n", what, dsk_err_msg());
        exit(2);
    }
}

CUdeviceptr dev_alloc(size_t bytes)
{
    CUdeviceptr d;
    if (cu.cuMemAlloc(&d, bytes ? bytes : 16) != CUDA_SUCCESS)
        must(dsk_err("out of memory"), "dev_alloc");
    return d;
}

CUdeviceptr dev_upload(const void *host, size_t bytes)
{
    CUdeviceptr d = dev_alloc(bytes);
    cu.cuMemcpyHtoD(d, host, bytes);
    return d;
}

void dev_download(void *host, CUdeviceptr d, size_t bytes)
{
    cu.cuMemcpyDtoH(host, d, bytes);
}

void dev_free(CUdeviceptr d)
{
    cu.cuMemFree(d);
}

void dev_sync(gpu_ctx *c)
{
    (void)c;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: exl3_emu KIT [exl3_recon|exl3_mm|exl3_moe ...]\n");
        return 2;
    }
    kit *k;
    must(kit_open(argv[1], NULL, &k), "opening the kit");
    int missing = emu_install(k);
    dsk_gpu g;
    memset(&g, 0, sizeof g);
    snprintf(g.name, sizeof g.name, "CPU emulator");
    g.sms = 132;
    gpu_ctx c = {.k = k, .g = &g};
    exl3_tests_small = !getenv("EXL3_EMU_FULL"); /* EXL3_EMU_FULL=1: the model's shapes too (slow) */
    printf("kit %s: %d kernels, %d without an emulated variant\n", argv[1], kit_nkernels(k), missing);
    const struct {
        const char *name;
        void (*fn)(gpu_ctx *);
    } tests[] = {{"exl3_recon", test_exl3_decode}, {"exl3_mm", test_exl3_mm}, {"exl3_moe", test_exl3_moe}};
    double t0 = dsk_now();
    for (size_t i = 0; i < 3; i++) {
        int run = argc == 2;
        for (int a = 2; a < argc; a++)
            run |= !strcmp(argv[a], tests[i].name);
        if (run)
            tests[i].fn(&c);
    }
    printf("%d checks, %d failed (%.1f s)\n", c.checks, c.failures, dsk_now() - t0);
    kit_close(k);
    return c.failures ? 1 : 0;
}
