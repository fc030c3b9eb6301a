/* The GPU backend's exchanges between ranks (docs/ranks.md), through the host: a rank's fp32 partial comes
 * down into pinned memory, the rank_xchg transport (host shared memory on one host, TCP across hosts) sums
 * every rank's in rank order, and the sum goes back up. So the ranks' activations are the same bits, as on
 * the CPU backend, whatever GPUs they run on (two ranks on one GPU too). Each exchange synchronises the
 * stream, so rounds with tp > 1 run eagerly (no CUDA graphs). */
#include "runtime/gpu/gpu_engine.h"
#include "runtime/common/error.h"

#include <string.h>

/* Floats per piece of a sum (4 MiB): larger exchanges go in pieces. */
#define XCHG_PIECE ((size_t)1 << 20)
/* Rows per piece of a gather (the head's logits). */
#define XCHG_GATHER_ROWS 16

int gpu_xchg_init(gpu_backend *b)
{
    if (b->xchg->tp == 1)
        return 0;
    size_t V = (size_t)b->cfg->vocab_size, vl = V / (size_t)b->xchg->tp;
    size_t sum = XCHG_PIECE * sizeof(float);
    size_t mine = XCHG_GATHER_ROWS * vl * sizeof(float), all = XCHG_GATHER_ROWS * V * sizeof(float);
    b->xs_bytes = sum > mine ? sum : mine;
    b->xs_all_bytes = all;
    if (cu.cuMemAllocHost(&b->xs_host, b->xs_bytes + 2 * all) != CUDA_SUCCESS) {
        b->xs_host = NULL;
        return dsk_err("allocating %.1f MiB of pinned memory for the ranks' exchanges failed",
                       (b->xs_bytes + 2 * all) / 1048576.0);
    }
    return 0;
}

void gpu_xchg_free(gpu_backend *b)
{
    if (b->xs_host)
        cu.cuMemFreeHost(b->xs_host);
    b->xs_host = NULL;
}

int gpu_xchg_sum(gpu_backend *b, CUdeviceptr buf, int64_t n)
{
    rank_xchg *x = b->xchg;
    if (x->tp == 1)
        return 0;
    float *h = b->xs_host;
    for (int64_t at = 0; at < n; at += (int64_t)XCHG_PIECE) {
        size_t m = (size_t)(n - at) < XCHG_PIECE ? (size_t)(n - at) : XCHG_PIECE;
        CUdeviceptr d = buf + (CUdeviceptr)at * 4;
        CU_TRY(cu.cuMemcpyDtoHAsync(h, d, m * 4, b->s));
        CU_TRY(cu.cuStreamSynchronize(b->s));
        if (x->allgather_sum(x, h, m))
            return dsk_err_ctx("rank %d: the exchange of %zu floats", x->rank, m);
        /* the copy up reads h before the next piece's copy down writes it (one stream) */
        CU_TRY(cu.cuMemcpyHtoDAsync(d, h, m * 4, b->s));
    }
    CU_TRY(cu.cuStreamSynchronize(b->s));
    return 0;
}

int gpu_xchg_gather_cols(gpu_backend *b, CUdeviceptr part, CUdeviceptr full, int rows, int cols)
{
    rank_xchg *x = b->xchg;
    int tp = x->tp;
    float *mine = b->xs_host, *all = (float *)((char *)b->xs_host + b->xs_bytes);
    float *out = (float *)((char *)all + b->xs_all_bytes);
    size_t row = (size_t)cols * 4;
    for (int r0 = 0; r0 < rows; r0 += XCHG_GATHER_ROWS) {
        int m = rows - r0 < XCHG_GATHER_ROWS ? rows - r0 : XCHG_GATHER_ROWS;
        CU_TRY(cu.cuMemcpyDtoHAsync(mine, part + (CUdeviceptr)r0 * row, (size_t)m * row, b->s));
        CU_TRY(cu.cuStreamSynchronize(b->s));
        if (x->allgather(x, mine, (size_t)m * row, all))
            return dsk_err_ctx("rank %d: the gather of %d rows of %d floats", x->rank, m, cols);
        /* all [tp][m][cols] -> out [m][tp·cols]: rank r's columns at r·cols */
        for (int r = 0; r < tp; r++)
            for (int i = 0; i < m; i++)
                memcpy(out + ((size_t)i * tp + r) * cols, all + ((size_t)r * m + i) * cols, row);
        CU_TRY(cu.cuMemcpyHtoDAsync(full + (CUdeviceptr)r0 * tp * row, out, (size_t)m * tp * row, b->s));
        CU_TRY(cu.cuStreamSynchronize(b->s));
    }
    return 0;
}
