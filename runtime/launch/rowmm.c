#include "runtime/launch/rowmm.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <math.h>

static int rowmm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int K, int N,
                 float scale)
{
    if (K % 32 || K <= 0 || N <= 0)
        return dsk_err("rowmm_bf16: K %d must be a positive multiple of 32, N %d positive", K, N);
    /* one launch: grid y takes chunks of M rows (M the bucket of the rows, 16 past 16 rows); slabs of at most
     * 65535 chunks (the grid's y limit) */
    const int64_t slab = (int64_t)65535 * 16;
    for (int64_t r0 = 0; r0 < rows; r0 += slab) {
        int r = (int)(rows - r0 < slab ? rows - r0 : slab), M = rule_rowmm_bucket(r < 16 ? r : 16);
        const kit_kernel *kk = kit_findf(k, "rowmm_bf16", "M=%d", M);
        if (!kk)
            return -1;
        CUdeviceptr xs = x + (CUdeviceptr)r0 * (CUdeviceptr)K * 2, ys = y + (CUdeviceptr)r0 * (CUdeviceptr)N * 4;
        void *args[] = {&xs, &w, &ys, &r, &K, &N, &scale};
        if (kit_launch(kk, (unsigned)((N + 7) / 8), (unsigned)((r + M - 1) / M), 1, s, args, 7))
            return -1;
    }
    return 0;
}

int op_rowmm_bf16(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int K, int N)
{
    return rowmm(k, s, x, w, y, rows, K, N, 0.0f);
}

int op_rowmm_bf16_scaled(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int K,
                         int N, float scale)
{
    if (!(scale != 0.0f) || !isfinite(scale))
        return dsk_err("rowmm_bf16: the output scale %g must be finite and not 0", (double)scale);
    return rowmm(k, s, x, w, y, rows, K, N, scale);
}
