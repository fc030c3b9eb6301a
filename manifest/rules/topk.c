#include "manifest/rules/rules.h"

#include <stdio.h>

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

int rule_topk_blocks(int N)
{
    /* slices of about 4096 entries (16 per thread), at most 1024 blocks per row */
    if (N < RULE_TOPK_MB_MIN_N)
        return 1;
    int b = (N + 4095) / 4096;
    return b > 1024 ? 1024 : b;
}


int rule_topk_tl_fits(int N, int k)
{
    int blocks = rule_topk_blocks(N);
    return blocks > 1 && (long long)blocks * k <= RULE_TOPK_TL_MAX_CAND && N / blocks >= k;
}

int rule_topk_pick(int N, int k, rule_variant *v)
{
    int blocks = rule_topk_blocks(N), npl = rule_topk_small_npl(N, k);
    if (blocks > 1) {
        v->family = "topk_mb";
        snprintf(v->params, sizeof v->params, "T=256");
    } else if (npl) {
        v->family = "topk_small";
        snprintf(v->params, sizeof v->params, "NPL=%d", npl);
    } else {
        v->family = "topk";
        snprintf(v->params, sizeof v->params, "T=%d", rule_topk_threads(N));
    }
    return blocks;
}
