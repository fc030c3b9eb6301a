#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

#include <stdio.h>

int rule_index_score_pick(int nh, int ihd, rule_variant *v)
{
    if (ihd != 128 || (nh != 4 && nh != 32))
        return dsk_err("index_score: %d heads of %d: the kit scores 4 or 32 heads of 128 (tiny and release)", nh, ihd);
    v->family = "index_score";
    snprintf(v->params, sizeof v->params, "NH=%d", nh);
    return 0;
}

int rule_index_score_slices(int rows, int N)
{
    /* about 1024 blocks in all (H200: 132 SMs x 3 resident blocks of 4 warps, a few waves), never more
     * than one warp-tile of 32 keys per warp; at least one slice per row */
    int tiles = (N + 31) / 32, most = (tiles + RULE_INDEX_SCORE_WARPS - 1) / RULE_INDEX_SCORE_WARPS;
    int want = rows > 0 ? 1024 / rows : 1;
    want = want < 1 ? 1 : want;
    int s = want < most ? want : most;
    s = s < 1 ? 1 : s;
    return s > 65535 ? 65535 : s;
}
