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

int rule_index_score_slices(int blocks_x, int N, int sms)
{
    /* one wave of about four resident blocks per SM (~110 registers, 42 KB of shared memory a block),
     * split over the row groups; never more than one 32-key tile per warp, at least one slice */
    int target = (sms > 0 ? sms : 132) * 4;
    int tiles = (N + 31) / 32, most = (tiles + RULE_INDEX_SCORE_WARPS - 1) / RULE_INDEX_SCORE_WARPS;
    int want = blocks_x > 0 ? target / blocks_x : 1;
    int s = want < most ? want : most;
    s = s < 1 ? 1 : s;
    return s > 65535 ? 65535 : s;
}
