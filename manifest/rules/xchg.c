#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_xchg_pick(int mode, rule_variant *v)
{
    v->family = "xchg";
    snprintf(v->params, sizeof v->params, "MODE=%d", mode ? 1 : 0);
}

int rule_xchg_blocks(long long n)
{
    long long b = (n + 4095) / 4096;
    return b < 1 ? 1 : b > 128 ? 128 : (int)b;
}
