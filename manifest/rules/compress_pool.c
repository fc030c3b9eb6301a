#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_compress_pool_pick(rule_variant *v)
{
    v->family = "compress_pool";
    snprintf(v->params, sizeof v->params, "T=256");
}
