#include "runtime/launch/compress_pool.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <limits.h>

int op_compress_pool(const kit *k, CUstream s, const compress_pool_src *src, CUdeviceptr entries, CUdeviceptr out,
                     int64_t out_stride, int groups, int hd)
{
    if (groups < 0 || hd <= 0 || hd % 8)
        return dsk_err("compress_pool: %d groups of %d channels (groups >= 0, channels a positive multiple of 8)",
                       groups, hd);
    if (src->stride < hd || src->stride % 4 || src->st_stride < hd || src->st_stride % 4 || out_stride < hd ||
        out_stride % 8)
        return dsk_err("compress_pool: strides %lld (round), %lld (state), %lld (out) must be at least %d and "
                       "multiples of 4, 4, 8", (long long)src->stride, (long long)src->st_stride,
                       (long long)out_stride, hd);
    const CUdeviceptr p[] = {src->a, src->s, src->st_a, src->st_s, entries, out};
    const char *const names[] = {"a", "s", "state a", "state s", "entries", "out"};
    for (int i = 0; i < 6; i++)
        if ((!p[i] && i != 2 && i != 3) || p[i] % 16) /* the state may be absent: no entry reads it then */
            return dsk_err("compress_pool: %s (%#llx) %s: every device pointer must be 16-byte aligned", names[i],
                           (unsigned long long)p[i], p[i] ? "is misaligned" : "is missing");
    if ((int64_t)groups * (hd / 8) > (int64_t)INT_MAX * 32)
        return dsk_err("compress_pool: %d groups of %d channels is too large for one launch", groups, hd);
    if (groups == 0)
        return 0;
    rule_variant v;
    rule_compress_pool_pick(&v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int64_t threads = (int64_t)groups * (hd / 8), T = kk->meta->block;
    CUdeviceptr a = src->a, sv = src->s, st_a = src->st_a, st_s = src->st_s;
    int64_t stride = src->stride, st_stride = src->st_stride;
    void *args[] = {&a, &sv, &stride, &st_a, &st_s, &st_stride, &entries, &out, &out_stride, &groups, &hd};
    if (kit_launch(kk, (unsigned)((threads + T - 1) / T), 1, 1, s, args, 11))
        return dsk_err_ctx("compress_pool %s", v.params);
    return 0;
}
