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
/* Copy host data into an existing device buffer (waits for the tests' stream first). */
void dev_upload_to(CUdeviceptr d, const void *host, size_t bytes);
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
/* The same over n bf16 values. */
double rel_l2_bf16(const uint16_t *a, const uint16_t *b, size_t n);

/* A generator seeded from the clock: every run checks fresh random inputs (salt tells callers apart). */
dsk_rng fresh_rng(uint64_t salt);
/* malloc that exits the program with a message when memory runs out. */
void *xmalloc(size_t n);
/* Random bf16 values with a per-row scale spanning several orders of magnitude. */
void fill_bf16(dsk_rng *r, uint16_t *x, int rows, int cols, float scale);

/* Output buffers with guard bands: GPU_GUARD_BYTES on either side of `bytes`, the whole filled with
 * GPU_GUARD_BYTE by dev_poison (call it before each launch); dev_guard_intact says whether a kernel
 * wrote outside the data. Free with dev_free_guarded. */
#define GPU_GUARD_BYTES 256
#define GPU_GUARD_BYTE 0xa5
CUdeviceptr dev_alloc_guarded(size_t bytes);
void dev_poison(CUdeviceptr d, size_t bytes);
int dev_guard_intact(CUdeviceptr d, size_t bytes);
void dev_free_guarded(CUdeviceptr d);

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
void test_embed(gpu_ctx *c);
void test_mhc_mix(gpu_ctx *c);
void test_mhc_pre(gpu_ctx *c);
void test_mhc_post(gpu_ctx *c);
void test_tap_mean(gpu_ctx *c);
void test_vec_glue(gpu_ctx *c);
void test_rows_copy(gpu_ctx *c);
void test_compress_pool(gpu_ctx *c);
void test_engram_rows(gpu_ctx *c);
void test_engram_gate(gpu_ctx *c);
void test_sparse_attn(gpu_ctx *c);
void test_vision_mm(gpu_ctx *c);
void test_vision_glue(gpu_ctx *c);
void test_vision_attn(gpu_ctx *c);
void test_engine(gpu_ctx *c);
void test_engine_exact(gpu_ctx *c);
void test_engine_fill(gpu_ctx *c);
void test_engine_draft(gpu_ctx *c);
void test_engine_tp2(gpu_ctx *c);
void test_engine_counters(gpu_ctx *c);
void test_xchg(gpu_ctx *c);
void test_xchg_nccl(gpu_ctx *c);
void test_vision_tower(gpu_ctx *c);

#endif
