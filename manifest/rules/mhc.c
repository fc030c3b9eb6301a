#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_mhc_mix_pick(int hc, rule_variant *v)
{
    v->family = "mhc_mix";
    snprintf(v->params, sizeof v->params, "HC=%d", hc);
}

int rule_mhc_mix_rows_per_cta(int rows)
{
    return rows <= 64 ? 16 : 64;
}

int rule_mhc_pre_threads(int d)
{
    return rule_rmsnorm_threads(d);
}

void rule_mhc_pre_pick(int hc, int d, rule_variant *v)
{
    v->family = "mhc_pre";
    snprintf(v->params, sizeof v->params, "HC=%d,T=%d", hc, rule_mhc_pre_threads(d));
}

void rule_mhc_post_pick(int hc, rule_variant *v)
{
    v->family = "mhc_post";
    snprintf(v->params, sizeof v->params, "HC=%d", hc);
}
