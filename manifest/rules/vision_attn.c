#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

#include <stdio.h>

int rule_vision_attn_pick(int head_dim, rule_variant *v)
{
    /* 64: the release tower (1024 = 16 heads x 64); 16: the tiny tower (64 = 4 x 16) */
    if (head_dim != 16 && head_dim != 64)
        return dsk_err("vision_attn: head_dim %d: the kit has 16 and 64 (the tiny and the release tower)", head_dim);
    v->family = "vision_attn";
    snprintf(v->params, sizeof v->params, "HD=%d", head_dim);
    return 0;
}
