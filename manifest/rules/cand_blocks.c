#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_cand_blocks_pick(rule_variant *scores, rule_variant *mask)
{
    scores->family = "cand_blocks";
    snprintf(scores->params, sizeof scores->params, "T=256");
    mask->family = "cand_mask";
    snprintf(mask->params, sizeof mask->params, "T=256");
}

int rule_cand_blocks_need_topk(long long NB, int cap)
{
    return NB > cap;
}
