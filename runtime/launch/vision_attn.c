#include "runtime/launch/vision_attn.h"
#include "kit/src/vision_attn_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

int op_vision_attn(const kit *k, CUstream s, CUdeviceptr qkv, CUdeviceptr out, int n, int heads, int hd)
{
    rule_variant v;
    if (rule_vision_attn_pick(hd, &v))
        return -1;
    if (n < 1 || n > VISION_ATTN_MAX_N)
        return dsk_err("vision_attn: %d patches (an image has 1 .. %d)", n, VISION_ATTN_MAX_N);
    if (heads < 1 || heads > 65535)
        return dsk_err("vision_attn: %d heads (1 .. 65535)", heads);
    const CUdeviceptr p[] = {qkv, out};
    const char *names[] = {"qkv", "out"};
    for (int i = 0; i < 2; i++) {
        if (!p[i])
            return dsk_err("vision_attn: %s is missing (a null device pointer)", names[i]);
        if (p[i] % 16)
            return dsk_err("vision_attn: %s (0x%llx) is not 16-byte aligned", names[i], (unsigned long long)p[i]);
    }
    unsigned long long row = (unsigned long long)heads * (unsigned long long)hd * 2; /* bytes of one out row */
    unsigned long long qkv_bytes = 3 * row * (unsigned long long)n, out_bytes = row * (unsigned long long)n;
    if (out < qkv + qkv_bytes && qkv < out + out_bytes)
        return dsk_err("vision_attn: out overlaps qkv (the kernel reads keys while rows are written)");
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    /* a kit whose variant spec disagrees with the tiling this launcher was built with would run out of bounds */
    if (kk->meta->block != VISION_ATTN_THREADS || kk->meta->smem < VISION_ATTN_SMEM(hd))
        return dsk_err("vision_attn %s: the kit's variant has %d threads and %d bytes of shared memory, the launcher "
                       "needs %d and %d (kit/variants.json and kit/src/vision_attn_abi.cuh disagree)",
                       v.params, kk->meta->block, kk->meta->smem, VISION_ATTN_THREADS, VISION_ATTN_SMEM(hd));
    void *args[] = {&qkv, &out, &n, &heads};
    unsigned tiles = (unsigned)((n + VISION_ATTN_ROWS - 1) / VISION_ATTN_ROWS);
    if (kit_launch(kk, tiles, (unsigned)heads, 1, s, args, 4))
        return dsk_err_ctx("vision_attn %s: %d patches x %d heads", v.params, n, heads);
    return 0;
}
