#include "runtime/launch/rope.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

int op_rope(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr pos, CUdeviceptr table, int rows, int heads,
            int head_dim, int rope_dim, int inverse)
{
    if (rope_dim > head_dim || rope_dim % 2 || head_dim % 2)
        return dsk_err("rope: rope_dim %d must be even and <= head_dim %d", rope_dim, head_dim);
    rule_variant v;
    rule_rope_pick(rope_dim, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int64_t total = (int64_t)rows * heads * (rope_dim / 2);
    if (total == 0)
        return 0;
    void *args[] = {&x, &pos, &table, &rows, &heads, &head_dim, &inverse};
    return kit_launch(kk, (unsigned)((total + 255) / 256), 1, 1, s, args, 7);
}
