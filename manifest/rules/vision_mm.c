#include "manifest/rules/rules.h"

#include <stdint.h>
#include <stdio.h>

int rule_vision_mm_tile(int M, int N)
{
    /* 128 x 128 tiles once they make at least 256 CTAs (two full waves on 132 SMs at two CTAs each);
     * smaller problems (the tiny tower, the aligner of a small image) take 64 x 64 tiles, four times as
     * many CTAs */
    int64_t ctas = (int64_t)((M + 127) / 128) * ((N + 127) / 128);
    return ctas >= 256 ? 0 : 1;
}

void rule_vision_mm_pick(int M, int N, rule_variant *v)
{
    v->family = "vision_mm";
    snprintf(v->params, sizeof v->params, "T=%d", rule_vision_mm_tile(M, N));
}
