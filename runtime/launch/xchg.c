#include "runtime/launch/xchg.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

static int launch(const kit *k, CUstream s, int mode, CUdeviceptr desc, int64_t cap, CUdeviceptr mine, CUdeviceptr out,
                  int64_t n, int cols)
{
    if (!desc || n < 0 || n > cap || cols < 1 || ((mine | out) & 15))
        return dsk_err("xchg: %lld floats (the slots hold %lld) from 16-byte aligned pointers expected", (long long)n,
                       (long long)cap);
    if (n == 0)
        return 0;
    rule_variant v;
    rule_xchg_pick(mode, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    long long nn = n;
    void *args[] = {&desc, &mine, &out, &nn, &cols};
    return kit_launch(kk, (unsigned)rule_xchg_blocks(n), 1, 1, s, args, 5);
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
