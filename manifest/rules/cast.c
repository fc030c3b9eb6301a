#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_cast_pick(int mode, rule_variant *v)
{
    v->family = "cast";
    snprintf(v->params, sizeof v->params, "MODE=%d", mode);
}
