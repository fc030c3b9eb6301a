#include "runtime/gpu/variant_rules.h"

int rule_rmsnorm_threads(int width)
{
    return width <= 256 ? 32 : width <= 1280 ? 128 : 256;
}

int rule_topk_threads(int N)
{
    return N <= 4096 ? 256 : 1024;
}

int rule_topk_small_npl(int N, int k)
{
    if (k > 16 || N > 32 * 32)
        return 0;
    return N <= 128 ? 4 : N <= 384 ? 12 : 32;
}

int rule_rowmm_bucket(int rows)
{
    return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : rows <= 8 ? 8 : 16;
}
