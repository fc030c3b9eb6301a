#include "runtime/launch/topk.h"
#include "kit/src/topk_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <stdio.h>
#include <string.h>

size_t op_topk_ws_bytes_blocks(int rows, int blocks)
{
    return blocks > 1 ? (size_t)rows * (size_t)TOPK_MB_WS_INTS(blocks) * 4 : 0;
}

size_t op_topk_tl_ws_bytes(int rows, int blocks, int kk)
{
    return blocks > 1 ? ((size_t)TOPK_TL_HEAD(rows) + (size_t)rows * (size_t)TOPK_TL_ROW_INTS(blocks, kk)) * 4 : 0;
}

size_t op_topk_ws_bytes(int rows, int N, int kk)
{
    rule_variant v;
    int blocks = rule_topk_pick(N, kk, &v);
    if (blocks <= 1)
        return 0;
    return !strcmp(v.family, "topk_tl") ? op_topk_tl_ws_bytes(rows, blocks, kk) : op_topk_ws_bytes_blocks(rows, blocks);
}

/* topk_tl: the rows' counters zeroed, then one launch (kit/src/topk_tl.cu) */
static int launch_tl(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk_,
                     int64_t ld, CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes, int blocks)
{
    if (rows > 65535)
        return dsk_err("topk: %d rows of %d entries: at most 65535 rows per call", rows, N);
    if ((int64_t)N / blocks < kk_)
        return dsk_err("topk: %d blocks per row leave slices of %d entries, fewer than the k (%d) one launch needs",
                       blocks, N / blocks, kk_);
    size_t need = op_topk_tl_ws_bytes(rows, blocks, kk_);
    if (!ws || ws_bytes < need)
        return dsk_err("topk: %d rows of %d entries on %d blocks each in one launch need a workspace of %zu bytes, "
                       "got %zu",
                       rows, N, blocks, need, ws ? ws_bytes : 0);
    const kit_kernel *kk = kit_find(k, "topk_tl", "T=256");
    if (!kk)
        return -1;
    CU_TRY(cu.cuMemsetD32Async(ws, 0, (size_t)TOPK_TL_HEAD(rows), s));
    int64_t stride = TOPK_TL_ROW_INTS(blocks, kk_);
    void *args[] = {&scores, &bias, &N, &kk_, &ld, &idx, &val, &ws, &stride};
    if (kit_launch(kk, (unsigned)blocks, (unsigned)rows, 1, s, args, 9))
        return dsk_err_ctx("topk: the one-launch top-k of %d blocks per row", blocks);
    return 0;
}

int op_topk_tl(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk_, int64_t ld,
               CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes, int blocks)
{
    if (kk_ < 1 || kk_ > N || ld < N)
        return dsk_err("topk: need 1 <= k (%d) <= N (%d) <= ld (%lld)", kk_, N, (long long)ld);
    if (blocks < 1 || blocks > 1024 || rows < 0)
        return dsk_err("topk: %d blocks per row (1..1024), %d rows", blocks, rows);
    return rows == 0 ? 0 : launch_tl(k, s, scores, bias, rows, N, kk_, ld, idx, val, ws, ws_bytes, blocks);
}

int op_topk(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk_, int64_t ld,
            CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes)
{
    return op_topk_blocks(k, s, scores, bias, rows, N, kk_, ld, idx, val, ws, ws_bytes, 0);
}

int op_topk_blocks(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk_, int64_t ld,
                   CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes, int blocks)
{
    if (kk_ < 1 || kk_ > N || ld < N)
        return dsk_err("topk: need 1 <= k (%d) <= N (%d) <= ld (%lld)", kk_, N, (long long)ld);
    if (blocks < 0 || blocks > N || rows < 0)
        return dsk_err("topk: %d blocks per row for %d entries, %d rows", blocks, N, rows);
    if (rows == 0)
        return 0;
    rule_variant v;
    int rule_blocks = rule_topk_pick(N, kk_, &v);
    if (!blocks && !strcmp(v.family, "topk_tl"))
        return launch_tl(k, s, scores, bias, rows, N, kk_, ld, idx, val, ws, ws_bytes, rule_blocks);
    if (!blocks)
        blocks = rule_blocks;
    if (blocks > 1) {
        if (rows > 65535)
            return dsk_err("topk: %d rows of %d entries: at most 65535 rows per call", rows, N);
        size_t need = op_topk_ws_bytes_blocks(rows, blocks);
        if (!ws || ws_bytes < need)
            return dsk_err("topk: %d rows of %d entries on %d blocks each need a workspace of %zu bytes, got %zu",
                           rows, N, blocks, need, ws ? ws_bytes : 0);
        const kit_kernel *kk = kit_find(k, "topk_mb", "T=256");
        if (!kk)
            return -1;
        CU_TRY(cu.cuMemsetD32Async(ws, 0, need / 4, s));
        int stride = TOPK_MB_WS_INTS(blocks);
        for (int step = 0; step < 6; step++) {
            void *args[] = {&scores, &bias, &N, &kk_, &ld, &idx, &val, &ws, &stride, &step};
            if (kit_launch(kk, (unsigned)blocks, (unsigned)rows, 1, s, args, 10))
                return dsk_err_ctx("topk: step %d of the multi-block top-k", step);
        }
        return 0;
    }
    /* one block per row: the rule's kernel, or the radix kernel when one block is forced on long rows */
    if (rule_blocks > 1) {
        v.family = "topk";
        snprintf(v.params, sizeof v.params, "T=%d", rule_topk_threads(N));
    }
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    if (!strcmp(v.family, "topk_small")) {
        void *args[] = {&scores, &bias, &N, &kk_, &ld, &rows, &idx, &val};
        return kit_launch(kk, (unsigned)((rows + 3) / 4), 1, 1, s, args, 8);
    }
    void *args[] = {&scores, &bias, &N, &kk_, &ld, &idx, &val};
    return kit_launch(kk, (unsigned)rows, 1, 1, s, args, 7);
}
