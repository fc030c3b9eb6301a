#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_rows_copy_pick(rule_variant *v)
{
    v->family = "rows_copy";
    snprintf(v->params, sizeof v->params, "T=256");
}
