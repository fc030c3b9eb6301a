#include "runtime/launch/stream_read.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

int op_stream_read(const kit *k, CUstream s, CUdeviceptr src, uint64_t bytes, CUdeviceptr out, int blocks)
{
    if (bytes % 16)
        return dsk_err("stream_read: %llu bytes is not a multiple of 16", (unsigned long long)bytes);
    rule_variant v;
    rule_stream_read_pick(&v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    uint64_t n16 = bytes / 16;
    void *args[] = {&src, &n16, &out};
    return kit_launch(kk, (unsigned)blocks, 1, 1, s, args, 3);
}
