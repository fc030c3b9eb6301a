#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

#include <stdio.h>

int rule_moe_route_pick(int E, int k, rule_variant *v)
{
    /* one warp per row, P_NPL logits per lane: 4 covers the drafter (128) and the tiny configs, 12 the
     * release's 384 */
    if (E < 1 || E > 384 || k < 1 || k > 16 || k > E)
        return dsk_err("moe_route: top %d of %d experts: the kit routes 1 <= k <= min(16, E), E <= 384", k, E);
    v->family = "moe_route";
    snprintf(v->params, sizeof v->params, "NPL=%d", E <= 128 ? 4 : 12);
    return 0;
}

int rule_moe_route_plan_pick(int E, int k, rule_variant *v)
{
    rule_variant r;
    if (rule_moe_route_pick(E, k, &r))
        return -1;
    v->family = "exl3_moe_plan";
    snprintf(v->params, sizeof v->params, "T=1024,R=%d", E <= 128 ? 4 : 12);
    return 0;
}
