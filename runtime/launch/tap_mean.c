#include "runtime/launch/tap_mean.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <stdint.h>

int op_tap_mean(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr taps, int rows, int hc, int d, int n_targets,
                int target)
{
    if (hc < 1 || hc > 16 || d < 8 || d % 8 || rows < 0)
        return dsk_err("tap_mean: hc %d, d %d, rows %d: need hc 1..16 and d a positive multiple of 8", hc, d, rows);
    if (n_targets < 1 || target < 0 || target >= n_targets)
        return dsk_err("tap_mean: target %d is outside the %d targets", target, n_targets);
    if (!x || !taps)
        return dsk_err("tap_mean: %s is missing (a null device pointer)", !x ? "x" : "taps");
    if (x % 16 || taps % 16)
        return dsk_err("tap_mean: %s (0x%llx) is not 16-byte aligned", x % 16 ? "x" : "taps",
                       (unsigned long long)(x % 16 ? x : taps));
    int64_t threads = (int64_t)rows * (d / 8);
    if ((threads + 255) / 256 > INT32_MAX)
        return dsk_err("tap_mean: %d rows of %d are more than one launch covers", rows, d);
    size_t xb = (size_t)rows * hc * d * 2, tb = (size_t)rows * n_targets * d * 2;
    if (x < taps + tb && taps < x + xb)
        return dsk_err("tap_mean: taps overlaps x");
    if (rows == 0)
        return 0;
    rule_variant v;
    rule_tap_mean_pick(hc, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    void *args[] = {&x, &taps, &rows, &d, &n_targets, &target};
    if (kit_launch(kk, (unsigned)((threads + 255) / 256), 1, 1, s, args, 6))
        return dsk_err_ctx("tap_mean %s: %d rows of %d, target %d of %d", v.params, rows, d, target, n_targets);
    return 0;
}
