#include "runtime/launch/embed.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <stdint.h>

int op_embed(const kit *k, CUstream s, CUdeviceptr table, int vocab, CUdeviceptr ids, CUdeviceptr x, CUdeviceptr pi,
             int rows, int hc, int d)
{
    if (vocab < 1 || hc < 1 || hc > 16 || d < 8 || d % 8 || rows < 0)
        return dsk_err("embed: vocab %d, hc %d, d %d, rows %d: need vocab >= 1, hc 1..16, d a positive multiple of 8",
                       vocab, hc, d, rows);
    const CUdeviceptr p[] = {table, ids, x, pi};
    const char *names[] = {"the table", "ids", "x", "pi"};
    for (int i = 0; i < 4; i++) {
        if (!p[i])
            return dsk_err("embed: %s is missing (a null device pointer)", names[i]);
        if (p[i] % 16)
            return dsk_err("embed: %s (0x%llx) is not 16-byte aligned", names[i], (unsigned long long)p[i]);
    }
    int64_t threads = (int64_t)rows * (d / 8);
    if ((threads + 255) / 256 > INT32_MAX)
        return dsk_err("embed: %d rows of %d are more than one launch covers", rows, d);
    size_t xb = (size_t)rows * hc * d * 2, pb = (size_t)rows * hc * 4;
    if (x < pi + pb && pi < x + xb)
        return dsk_err("embed: x and pi overlap");
    if (rows == 0)
        return 0;
    rule_variant v;
    rule_embed_pick(hc, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    void *args[] = {&table, &ids, &x, &pi, &rows, &d, &vocab};
    if (kit_launch(kk, (unsigned)((threads + 255) / 256), 1, 1, s, args, 7))
        return dsk_err_ctx("embed %s: %d rows of %d", v.params, rows, d);
    return 0;
}
