#include "manifest/rules/rules.h"

#include <stdio.h>

int rule_engram_gate_threads(int d)
{
    /* one block per (row, stream); d/8 chunks of 16 bytes over the threads: 640 for the release (2-3
     * each at 256), 16 for the tiny preset (one warp) */
    return d <= 256 ? 32 : d <= 2048 ? 128 : 256;
}

void rule_engram_gate_pick(int d, rule_variant *v)
{
    v->family = "engram_gate";
    snprintf(v->params, sizeof v->params, "T=%d", rule_engram_gate_threads(d));
}
