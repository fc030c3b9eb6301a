#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_rope_pick(int rope_dim, rule_variant *v)
{
    v->family = "rope";
    snprintf(v->params, sizeof v->params, "R=%d", rope_dim);
}
