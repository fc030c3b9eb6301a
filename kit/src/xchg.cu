// Exchanges between tensor-parallel ranks through peer memory (docs/ranks.md): one launch per exchange,
// so a round's exchanges sit in its CUDA graph. Every rank launches the same exchanges in the same order.
// Exchange e (the rank's count + 1, the same on every rank) pushes: each thread stores its pair of this
// rank's elements, each beside the number e ({value, e, value, e}: 16 bytes, one store), into every other
// rank's receive region (parity e & 1, this rank's row), then polls its own region until the other ranks'
// words for the same pair carry e. A word is written whole, so a reader that sees e sees e's value: no
// fence and no flag round trip. Then:
//   MODE 0 (sum):    out[i] = part_0[i] + part_1[i] + ... in rank order (fp32, the same bits on every rank);
//   MODE 1 (gather): the parts [rows][cols] side by side, out[row][r·cols + col] = part_r[row][col].
// MODE 2 and 3 are the same two combinations of parts another transport has already gathered (NCCL's
// all-gather: `mine` holds [tp][n], rank r's part at r·n); they touch no counter and wait for nothing.
// Why two parities suffice: rank q writes e + 2 into rank r's parity only after its launch for e + 1 has
// read r's words of e + 1, which r pushed after its launch for e (which read parity e & 1) had ended.
// Every launch of modes 0 and 1 has RULE_XCHG_BLOCKS blocks (manifest/rules/rules.h), each with its own
// count of exchanges. A wait past desc.timeout_cycles sets desc.status (1 + the rank waited for), and every
// thread that sees it gives up: the runtime reads it after the round and fails the round, naming the rank.
#include "dskit_kernel.cuh"
#include "xchg_abi.cuh"

DSK_KERNEL void __launch_bounds__(256)
    DSK_SYMBOL(const xchg_desc *__restrict__ d, const float *mine, float *out, long long n, int cols)
{
#if P_MODE >= 2
    const int tp = d->tp;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
#if P_MODE == 2
        float acc = mine[i];
        for (int r = 1; r < tp; r++)
            acc = __fadd_rn(acc, mine[(long long)r * n + i]);
        out[i] = acc;
#else
        long long row = i / cols, col = i - row * cols;
        for (int r = 0; r < tp; r++)
            out[(row * tp + r) * cols + col] = mine[(long long)r * n + i];
#endif
    }
#else
    /* the exchange number: every launch of modes 0 and 1 has the same blocks and block b keeps its
     * own count of them (no block waits for another, none counts arrivals) */
    const int tp = d->tp, rank = d->rank;
    const unsigned e = *(volatile unsigned *)&d->epoch[blockIdx.x] + 1u;
    const long long cap = d->cap, pairs = (n + 1) >> 1, stride = (long long)gridDim.x * blockDim.x;
    const long long base = (long long)(e & 1u) * tp * cap;
    const long long j0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    /* push this rank's pairs to every other rank */
    for (long long j = j0; j < pairs; j += stride) {
        long long i = 2 * j;
        uint4 w = {__float_as_uint(mine[i]), e, i + 1 < n ? __float_as_uint(mine[i + 1]) : 0u, e};
        for (int r = 0; r < tp; r++)
            if (r != rank)
                dsk_st_volatile16(d->recv[r] + base + (long long)rank * cap + i, w);
    }
    /* wait for the others' pairs and combine them in rank order (in place: mine[i] is read before out[i]
     * is written, by the same thread) */
    int gave_up = 0;
    for (long long j = j0; j < pairs && !gave_up; j += stride) {
        long long i = 2 * j;
        const int two = i + 1 < n;
        float acc0 = 0.0f, acc1 = 0.0f;
        for (int r = 0; r < tp; r++) {
            float v0, v1;
            if (r == rank) {
                v0 = mine[i];
                v1 = two ? mine[i + 1] : 0.0f;
            } else {
                const unsigned long long *p = d->recv[rank] + base + (long long)r * cap + i;
                uint4 w = dsk_ld_volatile16(p);
                long long t0 = clock64();
                for (unsigned spin = 1; w.y != e || w.w != e; spin++) {
                    if ((spin & 255u) == 0u) {
                        if (*(volatile unsigned *)d->status || clock64() - t0 > d->timeout_cycles) {
                            atomicCAS(d->status, 0u, 1u + (unsigned)r);
                            gave_up = 1;
                            break;
                        }
                        if (spin > 4096u)
                            __nanosleep(128);
                    }
                    w = dsk_ld_volatile16(p);
                }
                if (gave_up)
                    break;
                v0 = __uint_as_float(w.x);
                v1 = __uint_as_float(w.z);
            }
#if P_MODE == 0
            acc0 = r == 0 ? v0 : __fadd_rn(acc0, v0);
            acc1 = r == 0 ? v1 : __fadd_rn(acc1, v1);
#else
            long long row = i / cols, col = i - row * cols;
            out[(row * tp + r) * cols + col] = v0;
            if (two) {
                long long row1 = (i + 1) / cols, col1 = i + 1 - row1 * cols;
                out[(row1 * tp + r) * cols + col1] = v1;
            }
#endif
        }
#if P_MODE == 0
        if (!gave_up) {
            out[i] = acc0;
            if (two)
                out[i + 1] = acc1;
        }
#endif
    }
    /* this block's count, once every thread of it has read it */
    __syncthreads();
    if (threadIdx.x == 0)
        d->epoch[blockIdx.x] = e;
#endif
}
