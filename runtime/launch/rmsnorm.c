#include "runtime/launch/rmsnorm.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

int op_rmsnorm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int width, float eps)
{
    if (width % 8 || width < 8 || width > 65536 || rows < 0)
        return dsk_err("rmsnorm: width %d must be a multiple of 8 in [8, 65536]", width);
    if (rows == 0)
        return 0;
    const kit_kernel *kk = kit_findf(k, "rmsnorm", "T=%d", rule_rmsnorm_threads(width));
    if (!kk)
        return -1;
    void *args[] = {&x, &w, &y, &rows, &width, &eps};
    return kit_launch(kk, (unsigned)rows, 1, 1, s, args, 6);
}
