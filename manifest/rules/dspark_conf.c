#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_dspark_conf_pick(rule_variant *v)
{
    v->family = "dspark_conf";
    snprintf(v->params, sizeof v->params, "T=256");
}

int rule_dspark_conf_bias_blocks(int V)
{
    /* blocks per row adding the Markov bias: 16K logits (64 KB) each, 8 per block thread */
    int b = (V + 16383) / 16384;
    return b < 1 ? 1 : b;
}
