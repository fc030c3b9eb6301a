#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_engram_rows_pick(int from_table, rule_variant *v)
{
    v->family = "engram_rows";
    snprintf(v->params, sizeof v->params, "SRC=%d", from_table ? 1 : 0);
}
