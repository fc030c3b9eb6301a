#include "runtime/launch/vision_mm.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

#include <string.h>

int op_vision_mm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr b, CUdeviceptr y, int M, int K,
                 int N, int mode)
{
    return op_vision_mm_as(k, kit_sm(k), s, x, w, b, y, M, K, N, mode);
}

int op_vision_mm_as(const kit *k, int sm, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr b, CUdeviceptr y,
                    int M, int K, int N, int mode)
{
    if (K <= 0 || K % 32 || N <= 0 || N % 8 || M < 0 || mode < VISION_MM_BIAS || mode > VISION_MM_SWIGLU)
        return dsk_err("vision_mm: K %d must be a positive multiple of 32, N %d of 8, mode %d in 0..3", K, N, mode);
    if (M == 0)
        return 0;
    int bm, bn;
    rule_variant v;
    rule_vision_mm_pick(sm, M, N, &v);
    const kit_kernel *kk = kit_findf(k, v.family, "%s", v.params);
    if (!kk)
        return -1;
    rule_vision_mm_shape(sm, rule_vision_mm_tile(sm, M, N), &bm, &bn);
    void *args[] = {&x, &w, &b, &y, &M, &K, &N, &mode};
    return kit_launch(kk, (unsigned)((N + bn - 1) / bn), (unsigned)((M + bm - 1) / bm), 1, s, args, 8);
}

void vision_mm_interleave(const uint16_t *w, int I, int K, uint16_t *out)
{
    for (int j = 0; j < I; j++) {
        memcpy(out + (size_t)(2 * j) * K, w + (size_t)j * K, sizeof(uint16_t) * (size_t)K);
        memcpy(out + (size_t)(2 * j + 1) * K, w + (size_t)(I + j) * K, sizeof(uint16_t) * (size_t)K);
    }
}
