#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_vision_glue_pick(int op, rule_variant *v)
{
    v->family = "vision_glue";
    snprintf(v->params, sizeof v->params, "OP=%d", op);
}
