#include "runtime/launch/xchg.h"
#include "kit/src/xchg_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

#include <string.h>

/* The local block: the descriptor, then (256 bytes in) a count per block, then the status. */
#define XCHG_DESC_BYTES (((size_t)sizeof(xchg_desc) + 255) & ~(size_t)255)
#define XCHG_LOCAL_WORDS (RULE_XCHG_BLOCKS + 1)

int xchg_mem_alloc(xchg_mem *m, int64_t cap, int tp)
{
    memset(m, 0, sizeof *m);
    if (cap < 2 || tp < 1 || tp > XCHG_MAX_RANKS)
        return dsk_err("xchg: a region of %lld floats for %d ranks (at most %d)", (long long)cap, tp, XCHG_MAX_RANKS);
    m->cap = (cap + 1) & ~(int64_t)1;
    m->tp = tp;
    /* two parities × tp senders × cap words of 8 bytes, zero: no word carries an exchange number yet */
    m->region_bytes = 2 * (size_t)tp * (size_t)m->cap * sizeof(unsigned long long);
    CU_TRY(cu.cuMemAlloc(&m->region, m->region_bytes));
    CU_TRY(cu.cuMemsetD8(m->region, 0, m->region_bytes));
    CU_TRY(cu.cuMemAlloc(&m->local, XCHG_DESC_BYTES + XCHG_LOCAL_WORDS * sizeof(unsigned)));
    CU_TRY(cu.cuMemsetD8(m->local + XCHG_DESC_BYTES, 0, XCHG_LOCAL_WORDS * sizeof(unsigned)));
    CU_TRY(cu.cuCtxSynchronize());
    return 0;
}

void xchg_mem_free(xchg_mem *m)
{
    if (m->region)
        cu.cuMemFree(m->region);
    if (m->local)
        cu.cuMemFree(m->local);
    m->region = m->local = 0;
}

CUdeviceptr xchg_desc_ptr(const xchg_mem *m)
{
    return m->local;
}

CUdeviceptr xchg_status_ptr(const xchg_mem *m)
{
    return m->local + XCHG_DESC_BYTES + RULE_XCHG_BLOCKS * sizeof(unsigned);
}

int xchg_desc_write(const xchg_mem *m, const CUdeviceptr *regions, int tp, int rank, CUdevice dev, double timeout_s)
{
    if (tp != m->tp || rank < 0 || rank >= tp)
        return dsk_err("xchg: rank %d of %d, in memory laid out for %d ranks", rank, tp, m->tp);
    xchg_desc d;
    memset(&d, 0, sizeof d);
    for (int r = 0; r < tp; r++)
        d.recv[r] = regions ? (unsigned long long *)(uintptr_t)regions[r] : NULL;
    int khz = 0;
    CU_TRY(cu.cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    d.epoch = (unsigned *)(uintptr_t)(m->local + XCHG_DESC_BYTES);
    d.status = d.epoch + RULE_XCHG_BLOCKS;
    d.cap = m->cap;
    d.timeout_cycles = (long long)((khz > 0 ? khz : 2000000) * 1000.0 * timeout_s);
    d.tp = tp;
    d.rank = rank;
    CU_TRY(cu.cuMemcpyHtoD(m->local, &d, sizeof d));
    return 0;
}

static int launch(const kit *k, CUstream s, int mode, CUdeviceptr desc, int64_t cap, CUdeviceptr mine, CUdeviceptr out,
                  int64_t n, int cols)
{
    if (!desc || n < 0 || n > cap || n >= (int64_t)1 << 31 || cols < 1 || ((mine | out) & 15))
        return dsk_err("xchg: %lld floats (the slots hold %lld; below 2^31) from 16-byte aligned pointers expected",
                       (long long)n, (long long)cap);
    if (n == 0)
        return 0;
    rule_variant v;
    rule_xchg_pick(mode, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    long long nn = n;
    void *args[] = {&desc, &mine, &out, &nn, &cols};
    return kit_launch(kk, (unsigned)rule_xchg_blocks(mode, n), 1, 1, s, args, 5);
}

int op_xchg_sum(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr mine, CUdeviceptr out, int64_t n)
{
    return launch(k, s, 0, desc, cap, mine, out, n, 1);
}

int op_xchg_gather(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr mine, CUdeviceptr out,
                   int rows, int cols)
{
    if (rows < 0 || cols < 1)
        return dsk_err("xchg: a gather of %d rows of %d floats", rows, cols);
    return launch(k, s, 1, desc, cap, mine, out, (int64_t)rows * cols, cols);
}

int op_xchg_combine(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr all, CUdeviceptr out, int64_t n)
{
    return launch(k, s, 2, desc, cap, all, out, n, 1);
}

int op_xchg_place(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr all, CUdeviceptr out, int rows,
                  int cols)
{
    if (rows < 0 || cols < 1)
        return dsk_err("xchg: placing %d rows of %d floats", rows, cols);
    return launch(k, s, 3, desc, cap, all, out, (int64_t)rows * cols, cols);
}
