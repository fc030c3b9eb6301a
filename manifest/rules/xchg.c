#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_xchg_pick(int mode, rule_variant *v)
{
    v->family = "xchg";
    snprintf(v->params, sizeof v->params, "MODE=%d", mode >= 0 && mode <= 3 ? mode : 0);
}

int rule_xchg_blocks(int mode, long long n)
{
    if (mode == 0 || mode == 1)
        return RULE_XCHG_BLOCKS; /* each block keeps its own count of exchanges: every launch has them all */
    long long b = (n + 255) / 256;
    return b < 1 ? 1 : b > 2 * RULE_XCHG_BLOCKS ? 2 * RULE_XCHG_BLOCKS : (int)b;
}
