/* The GPU test program's small harness: device buffers, comparisons, and one table row per check. */
#ifndef DSK_GPU_CHECK_H
#define DSK_GPU_CHECK_H

#include "runtime/common/rng.h"
#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const kit *k;
    const dsk_gpu *g;
    CUstream s;
    int small; /* the model-sized cases shrink (on the kernel emulator, unless DSKIT_EMU_FULL=1) */
    int failures;
    int checks;
} gpu_ctx;

/* Upload host data into a new device buffer; download; free. Failures abort the program with a message
 * (a test program, not a library). */
CUdeviceptr dev_upload(const void *host, size_t bytes);
CUdeviceptr dev_alloc(size_t bytes);
void dev_download(void *host, CUdeviceptr d, size_t bytes);
void dev_free(CUdeviceptr d);
/* Fill with a byte value (poisons outputs between runs that reuse them). */
void dev_memset(CUdeviceptr d, unsigned char v, size_t bytes);
void dev_sync(gpu_ctx *c);
/* Abort with the dskit error message if rc != 0. */
void must(int rc, const char *what);

/* Record one check: prints "PASS|FAIL family shape metric". */
void check(gpu_ctx *c, int ok, const char *family, const char *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ||a - b|| / ||b|| over n floats. */
double rel_l2(const float *a, const float *b, size_t n);

/* A generator seeded from the clock: every run checks fresh random inputs (salt tells callers apart). */
dsk_rng fresh_rng(uint64_t salt);
/* malloc that exits the program with a message when memory runs out. */
void *xmalloc(size_t n);
/* Random bf16 values with a per-row scale spanning several orders of magnitude. */
void fill_bf16(dsk_rng *r, uint16_t *x, int rows, int cols, float scale);

/* The test families; each runs its shapes and records checks. */
void test_stream_read(gpu_ctx *c);
void test_rmsnorm(gpu_ctx *c);
void test_rope(gpu_ctx *c);
void test_rowmm(gpu_ctx *c);
void test_topk(gpu_ctx *c);
void test_exl3_decode(gpu_ctx *c);
void test_exl3_mm(gpu_ctx *c);
void test_exl3_moe(gpu_ctx *c);
void test_cast(gpu_ctx *c);
void test_index_score(gpu_ctx *c);
void test_cand_blocks(gpu_ctx *c);
void test_moe_route(gpu_ctx *c);
void test_sample(gpu_ctx *c);
void test_dspark_conf(gpu_ctx *c);

#endif
