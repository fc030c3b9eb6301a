// Exchanges between tensor-parallel ranks through peer memory (docs/ranks.md): one launch per exchange,
// so a round's exchanges sit in its CUDA graph. Every rank launches the same exchanges in the same order
// with the same grid, and block b owns the same chunk of the payload on every rank. Exchange e (the
// rank's counter + 1, the same on every rank): each block copies its chunk of this rank's part into this
// rank's slot e & 1, fences, sets its flag to e, waits (bounded) until every rank's flag of that block
// has reached e, then reads every rank's chunk:
//   MODE 0 (sum):    out[i] = part_0[i] + part_1[i] + ... in rank order (fp32, the same bits on every rank);
//   MODE 1 (gather): the parts [rows][cols] side by side, out[row][r·cols + col] = part_r[row][col].
// The last block to finish advances the counter. Slots alternate: a rank writes exchange e while another
// may still read e - 1; it cannot start e before every rank has flagged e - 1, which each does only after
// its launch for e - 2 has ended. A wait past desc.timeout_cycles sets desc.status (1 + the rank waited
// for): the runtime reads it after the round and fails the round, naming the rank.
#include "dskit_kernel.cuh"
#include "xchg_abi.cuh"

DSK_KERNEL void __launch_bounds__(256) DSK_SYMBOL(const xchg_desc *__restrict__ d, const float *__restrict__ mine,
                                                  float *__restrict__ out, long long n, int cols)
{
    __shared__ unsigned e_sh;
    __shared__ int ok_sh;
    const int b = blockIdx.x, tp = d->tp, rank = d->rank;
    long long per = (n + gridDim.x - 1) / gridDim.x;
    long long i0 = per * b, i1 = i0 + per < n ? i0 + per : n;
    if (threadIdx.x == 0)
        e_sh = *(volatile unsigned *)&d->epoch[0] + 1u; /* read before this launch's last block advances it */
    __syncthreads();
    const unsigned e = e_sh;
    const long long at = (long long)(e & 1u) * d->cap;
    float *own = d->slot[rank] + at;
    for (long long i = i0 + threadIdx.x; i < i1; i += blockDim.x)
        own[i] = mine[i];
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
        *(volatile unsigned *)&d->flag[rank][b] = e;
        __threadfence_system();
        int ok = 1;
        long long t0 = clock64();
        for (int r = 0; r < tp && ok; r++) {
            if (r == rank)
                continue;
            const volatile unsigned *f = d->flag[r] + b;
            while ((int)(*f - e) < 0) {
                if (clock64() - t0 > d->timeout_cycles) {
                    atomicCAS(d->status, 0u, 1u + (unsigned)r);
                    ok = 0;
                    break;
                }
                __nanosleep(64);
            }
        }
        __threadfence_system();
        ok_sh = ok;
    }
    __syncthreads();
    if (!ok_sh)
        return;
    for (long long i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
#if P_MODE == 0
        float acc = rank == 0 ? mine[i] : __ldcg(d->slot[0] + at + i);
        for (int r = 1; r < tp; r++)
            acc = __fadd_rn(acc, r == rank ? mine[i] : __ldcg(d->slot[r] + at + i));
        out[i] = acc;
#else
        long long row = i / cols, col = i - row * cols;
        for (int r = 0; r < tp; r++)
            out[(row * tp + r) * cols + col] = r == rank ? mine[i] : __ldcg(d->slot[r] + at + i);
#endif
    }
    /* the last block advances the counter (every block has read it by then) */
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&d->epoch[1], 1u) == gridDim.x - 1) {
            d->epoch[1] = 0;
            d->epoch[0] = e;
            __threadfence();
        }
    }
}
