#include "runtime/launch/engram_gate.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <limits.h>
#include <math.h>

int op_engram_gate(const kit *k, CUstream s, CUdeviceptr X, CUdeviceptr kv, CUdeviceptr w, int rows, int hc, int d,
                   float eps)
{
    if (rows < 0 || hc < 1 || d <= 0 || d % 8)
        return dsk_err("engram_gate: %d rows of %d streams of width %d (width a positive multiple of 8)", rows, hc, d);
    if (!X || X % 16 || !kv || kv % 16 || !w || w % 16)
        return dsk_err("engram_gate: X %#llx, kv %#llx, w %#llx: each is needed, 16-byte aligned",
                       (unsigned long long)X, (unsigned long long)kv, (unsigned long long)w);
    if ((int64_t)rows * hc > INT_MAX || (int64_t)(hc + 1) * d > INT_MAX)
        return dsk_err("engram_gate: %d rows of %d streams of %d is too large for one launch", rows, hc, d);
    if (rows == 0)
        return 0;
    rule_variant v;
    rule_engram_gate_pick(d, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    /* fp32(d^-1/2) as the reference takes it (runtime/ref/engram_gate.c: in double, rounded once) */
    float inv_sqrt_d = (float)(1.0 / sqrt((double)d));
    void *args[] = {&X, &kv, &w, &rows, &hc, &d, &eps, &inv_sqrt_d};
    if (kit_launch(kk, (unsigned)(rows * hc), 1, 1, s, args, 8))
        return dsk_err_ctx("engram_gate %s", v.params);
    return 0;
}
