#include "runtime/launch/moe_route.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

int op_moe_route(const kit *k, CUstream s, CUdeviceptr logits, int64_t ld, CUdeviceptr bias, int rows, int E,
                 int topk, float route_scale, CUdeviceptr ids, CUdeviceptr weights, CUdeviceptr scores_out)
{
    rule_variant v;
    if (rule_moe_route_pick(E, topk, &v))
        return -1;
    if (rows < 0 || ld < E)
        return dsk_err("moe_route %s: %d rows of %d logits with row stride %lld", v.params, rows, E, (long long)ld);
    const struct {
        const char *name;
        CUdeviceptr p;
        int required;
    } ptrs[] = {{"logits", logits, 1}, {"bias", bias, 1},          {"ids", ids, 1},
                {"weights", weights, 1}, {"scores_out", scores_out, 0}};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if ((!ptrs[i].p && ptrs[i].required) || ptrs[i].p % 4)
            return dsk_err("moe_route %s: %s (0x%llx) must be a 4-byte aligned device pointer", v.params, ptrs[i].name,
                           (unsigned long long)ptrs[i].p);
    if (rows == 0)
        return 0;
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    void *args[] = {&logits, &ld, &bias, &E, &topk, &route_scale, &rows, &ids, &weights, &scores_out};
    return kit_launch(kk, (unsigned)((rows + 3) / 4), 1, 1, s, args, 10);
}
