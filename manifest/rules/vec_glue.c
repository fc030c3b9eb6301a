#include "manifest/rules/rules.h"

#include <stdio.h>

int rule_vec_glue_chunks(int width)
{
    /* 16-byte chunks per lane of the warp that holds one vector: the model's widths 128 (index keys, the
     * tiny preset), 512 (head_dim) and 1280 (q_lora) fill their bucket exactly */
    return width <= 256 ? 1 : width <= 512 ? 2 : width <= 1280 ? 5 : width <= 2048 ? 8 : 0;
}

void rule_vec_glue_pick(int width, int qdq, rule_variant *v)
{
    v->family = "vec_glue";
    snprintf(v->params, sizeof v->params, "C=%d,Q=%d", rule_vec_glue_chunks(width), qdq);
}
