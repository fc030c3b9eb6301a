#include "runtime/launch/vision_glue.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

#include <stdint.h>

static int launch(const kit *k, CUstream s, int op, unsigned grid, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                  CUdeviceptr y, int i0, int i1, int i2, int i3)
{
    rule_variant v;
    rule_vision_glue_pick(op, &v);
    const kit_kernel *kk = kit_findf(k, v.family, "%s", v.params);
    if (!kk)
        return -1;
    void *args[] = {&a, &b, &c, &y, &i0, &i1, &i2, &i3};
    return kit_launch(kk, grid, 1, 1, s, args, 8);
}

/* blocks of 256 threads over n elements, capped (the kernels stride over the rest) */
static unsigned blocks(int64_t n)
{
    int64_t g = (n + 255) / 256;
    return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

int op_vision_rmsnorm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int width)
{
    if (width < 8 || width % 8 || rows < 0)
        return dsk_err("vision_rmsnorm: width %d must be a positive multiple of 8", width);
    if (rows == 0)
        return 0;
    return launch(k, s, 0, (unsigned)((rows + 7) / 8), x, w, 0, y, rows, width, 0, 0);
}

int op_vision_rope(const kit *k, CUstream s, CUdeviceptr qkv, int ld, CUdeviceptr cs, CUdeviceptr sn, int rows, int heads,
                   int hd)
{
    if (hd < 4 || hd % 4 || heads < 1 || rows < 0 || ld < 2 * heads * hd)
        return dsk_err("vision_rope: head dim %d (a multiple of 4), %d heads, row stride %d", hd, heads, ld);
    if (rows == 0)
        return 0;
    return launch(k, s, 1, blocks((int64_t)rows * heads * hd), 0, cs, sn, qkv, rows, heads, hd, ld);
}

int op_vision_s2d(const kit *k, CUstream s, CUdeviceptr grid, CUdeviceptr cells, int nh, int nw, int D, int r)
{
    if (nh < 1 || nw < 1 || D < 1 || r < 1)
        return dsk_err("vision_s2d: a %d x %d grid of width %d, ratio %d", nh, nw, D, r);
    int64_t n = (int64_t)((nh + r - 1) / r) * ((nw + r - 1) / r) * r * r * D;
    return launch(k, s, 2, blocks(n), grid, 0, 0, cells, nh, nw, D, r);
}
