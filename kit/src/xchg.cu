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

#if P_MODE == 1
/* rank r's pair of elements (row, col) and the next one (col + 1, or the next row's first) into the
 * gathered rows: out[row][r·cols + col] */
__device__ __forceinline__ void gather_pair(float *out, int tp, int r, int cols, unsigned row, unsigned col, int two,
                                            float v0, float v1)
{
    out[((long long)row * tp + r) * cols + col] = v0;
    if (two) {
        const int wrap = col + 1 == (unsigned)cols;
        const unsigned row1 = row + (unsigned)wrap, col1 = wrap ? 0u : col + 1;
        out[((long long)row1 * tp + r) * cols + col1] = v1;
    }
}
#endif

#if P_MODE <= 1
/* Wait for the other ranks' pairs of this thread (from pair j0, every stride-th) and combine them in
 * rank order (in place: mine[i] is read before out[i] is written, by the same thread). TWO: a thread's
 * pairs two at a time (a and b = a + stride: 16 decode rows give a quarter of the threads two), both
 * words loaded before either is waited for, so the second costs no round trip of its own; launches
 * whose threads have one pair at most take the plain loop. */
template <bool TWO>
__device__ __forceinline__ void combine(const xchg_desc *__restrict__ d, const float *mine, float *out, long long n,
                                        int cols, unsigned e, long long base, long long j0, long long stride)
{
    const int tp = d->tp, rank = d->rank;
    const long long cap = d->cap, pairs = (n + 1) >> 1;
    int gave_up = 0;
    for (long long ja = j0; ja < pairs && !gave_up; ja += (TWO ? 2 : 1) * stride) {
        const long long jb = ja + stride, ia = 2 * ja, ib = 2 * jb;
        const int has_b = TWO && jb < pairs, two_a = ia + 1 < n, two_b = ib + 1 < n;
#if P_MODE == 0
        float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
#else
        /* the pairs' places in out: row and column of element ia (32-bit: n < 2^31), the next one's after */
        const unsigned ucols = (unsigned)cols, rowa = (unsigned)ia / ucols, cola = (unsigned)ia - rowa * ucols;
        const unsigned rowb = has_b ? (unsigned)ib / ucols : 0u, colb = (unsigned)ib - rowb * ucols;
#endif
        for (int r = 0; r < tp; r++) {
            float va0, va1, vb0 = 0.0f, vb1 = 0.0f;
            if (r == rank) {
                va0 = mine[ia];
                va1 = two_a ? mine[ia + 1] : 0.0f;
                if (has_b) {
                    vb0 = mine[ib];
                    vb1 = two_b ? mine[ib + 1] : 0.0f;
                }
            } else {
                const unsigned long long *pa = d->recv[rank] + base + (long long)r * cap + ia;
                const unsigned long long *pb = pa + (ib - ia);
                uint4 wa = dsk_ld_volatile16(pa), wb = has_b ? dsk_ld_volatile16(pb) : make_uint4(0u, e, 0u, e);
                long long t0 = clock64();
                for (unsigned spin = 1; wa.y != e || wa.w != e || wb.y != e || wb.w != e; spin++) {
                    if ((spin & 255u) == 0u) {
                        if (*(volatile unsigned *)d->status || clock64() - t0 > d->timeout_cycles) {
                            atomicCAS(d->status, 0u, 1u + (unsigned)r);
                            gave_up = 1;
                            break;
                        }
                        if (spin > 4096u)
                            __nanosleep(128);
                    }
                    if (wa.y != e || wa.w != e)
                        wa = dsk_ld_volatile16(pa);
                    if (wb.y != e || wb.w != e)
                        wb = dsk_ld_volatile16(pb);
                }
                if (gave_up)
                    break;
                va0 = __uint_as_float(wa.x);
                va1 = __uint_as_float(wa.z);
                vb0 = __uint_as_float(wb.x);
                vb1 = __uint_as_float(wb.z);
            }
#if P_MODE == 0
            a0 = r == 0 ? va0 : __fadd_rn(a0, va0);
            a1 = r == 0 ? va1 : __fadd_rn(a1, va1);
            b0 = r == 0 ? vb0 : __fadd_rn(b0, vb0);
            b1 = r == 0 ? vb1 : __fadd_rn(b1, vb1);
#else
            gather_pair(out, tp, r, cols, rowa, cola, two_a, va0, va1);
            if (has_b)
                gather_pair(out, tp, r, cols, rowb, colb, two_b, vb0, vb1);
#endif
        }
#if P_MODE == 0
        if (!gave_up) {
            out[ia] = a0;
            if (two_a)
                out[ia + 1] = a1;
            if (has_b) {
                out[ib] = b0;
                if (two_b)
                    out[ib + 1] = b1;
            }
        }
#endif
    }
}
#endif

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
    /* wait for the others' pairs and combine them (combine above) */
    if (pairs > stride)
        combine<true>(d, mine, out, n, cols, e, base, j0, stride);
    else
        combine<false>(d, mine, out, n, cols, e, base, j0, stride);
    /* this block's count, once every thread of it has read it */
    __syncthreads();
    if (threadIdx.x == 0)
        d->epoch[blockIdx.x] = e;
#endif
}
