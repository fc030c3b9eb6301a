#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_embed_pick(int hc, rule_variant *v)
{
    v->family = "embed";
    snprintf(v->params, sizeof v->params, "HC=%d", hc);
}
