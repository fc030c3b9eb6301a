#include "runtime/launch/basic.h"
#include "kit/src/topk_abi.cuh"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"
#include "manifest/rules/rules.h"

int op_rmsnorm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int width, float eps)
{
    if (width % 8 || width < 8 || width > 65536 || rows < 0)
        return dsk_err("rmsnorm: width %d must be a multiple of 8 in [8, 65536]", width);
    if (rows == 0)
        return 0;
    const kit_kernel *kk = kit_findf(k, "rmsnorm", "T=%d", rule_rmsnorm_threads(width));
    if (!kk)
        return -1;
    void *args[] = {&x, &w, &y, &rows, &width, &eps};
    return kit_launch(kk, (unsigned)rows, 1, 1, s, args, 6);
}

int op_rope(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr pos, CUdeviceptr table, int rows, int heads,
            int head_dim, int rope_dim, int inverse)
{
    if (rope_dim > head_dim || rope_dim % 2 || head_dim % 2)
        return dsk_err("rope: rope_dim %d must be even and <= head_dim %d", rope_dim, head_dim);
    const kit_kernel *kk = kit_findf(k, "rope", "R=%d", rope_dim);
    if (!kk)
        return -1;
    int64_t total = (int64_t)rows * heads * (rope_dim / 2);
    if (total == 0)
        return 0;
    void *args[] = {&x, &pos, &table, &rows, &heads, &head_dim, &inverse};
    return kit_launch(kk, (unsigned)((total + 255) / 256), 1, 1, s, args, 7);
}

int op_rowmm_bf16(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int K, int N)
{
    if (K % 32 || K <= 0 || N <= 0)
        return dsk_err("rowmm_bf16: K %d must be a positive multiple of 32, N %d positive", K, N);
    for (int r0 = 0; r0 < rows; r0 += 16) {
        int r = rows - r0 < 16 ? rows - r0 : 16;
        const kit_kernel *kk = kit_findf(k, "rowmm_bf16", "M=%d", rule_rowmm_bucket(r));
        if (!kk)
            return -1;
        CUdeviceptr xs = x + (CUdeviceptr)r0 * (CUdeviceptr)K * 2, ys = y + (CUdeviceptr)r0 * (CUdeviceptr)N * 4;
        void *args[] = {&xs, &w, &ys, &r, &K, &N};
        if (kit_launch(kk, (unsigned)((N + 7) / 8), 1, 1, s, args, 6))
            return -1;
    }
    return 0;
}

size_t op_topk_ws_bytes_blocks(int rows, int blocks)
{
    return blocks > 1 ? (size_t)rows * (size_t)TOPK_MB_WS_INTS(blocks) * 4 : 0;
}

size_t op_topk_ws_bytes(int rows, int N)
{
    return op_topk_ws_bytes_blocks(rows, rule_topk_blocks(N));
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
    if (!blocks)
        blocks = rule_topk_blocks(N);
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
    int npl = rule_topk_small_npl(N, kk_);
    if (npl) {
        const kit_kernel *kk = kit_findf(k, "topk_small", "NPL=%d", npl);
        if (!kk)
            return -1;
        void *args[] = {&scores, &bias, &N, &kk_, &ld, &rows, &idx, &val};
        return kit_launch(kk, (unsigned)((rows + 3) / 4), 1, 1, s, args, 8);
    }
    const kit_kernel *kk = kit_findf(k, "topk", "T=%d", rule_topk_threads(N));
    if (!kk)
        return -1;
    void *args[] = {&scores, &bias, &N, &kk_, &ld, &idx, &val};
    return kit_launch(kk, (unsigned)rows, 1, 1, s, args, 7);
}

int op_stream_read(const kit *k, CUstream s, CUdeviceptr src, uint64_t bytes, CUdeviceptr out, int blocks)
{
    if (bytes % 16)
        return dsk_err("stream_read: %llu bytes is not a multiple of 16", (unsigned long long)bytes);
    const kit_kernel *kk = kit_find(k, "stream_read", "BLOCK=512");
    if (!kk)
        return -1;
    uint64_t n16 = bytes / 16;
    void *args[] = {&src, &n16, &out};
    return kit_launch(kk, (unsigned)blocks, 1, 1, s, args, 3);
}
