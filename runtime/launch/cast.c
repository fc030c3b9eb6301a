#include "runtime/launch/cast.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

static int launch(const kit *k, CUstream s, int mode, CUdeviceptr x, CUdeviceptr y, int64_t n, float scale)
{
    if (n < 0 || ((x | y) & 15))
        return dsk_err("cast: %lld elements from 16-byte aligned pointers expected", (long long)n);
    if (n == 0)
        return 0;
    rule_variant v;
    rule_cast_pick(mode, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    long long nn = n;
    void *args[] = {&x, &y, &nn, &scale};
    return kit_launch(kk, (unsigned)((n + 1023) / 1024), 1, 1, s, args, 4);
}

int op_cast_bf16(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr y, int64_t n)
{
    return launch(k, s, 0, x, y, n, 1.0f);
}

int op_cast_scale(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr y, int64_t n, float scale)
{
    return launch(k, s, 1, x, y, n, scale);
}
