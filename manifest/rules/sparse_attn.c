#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_sparse_attn_pick(int head_dim, int mode, rule_variant *v)
{
    v->family = "sparse_attn";
    snprintf(v->params, sizeof v->params, "HD=%d,MODE=%d", head_dim, mode);
}

int rule_sparse_attn_split(int rows, int heads, int max_list)
{
    /* the whole-list grid has one CTA per (row, 16 heads), one per SM at head_dim 512: below 64 of them
     * most of the GPU waits on a few CTAs walking the list, so the list is split per 64-entry block */
    int groups = (heads + 15) / 16;
    return max_list > 64 && (long long)rows * groups < 64;
}
