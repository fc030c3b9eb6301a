#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_tap_mean_pick(int hc, rule_variant *v)
{
    v->family = "tap_mean";
    snprintf(v->params, sizeof v->params, "HC=%d", hc);
}
