#include "manifest/rules/rules.h"

#include <stdint.h>
#include <stdio.h>

int rule_vision_mm_tile(int sm, int M, int N)
{
    int64_t ctas;
    if (sm == 90) {
        /* wgmma: 128 x 256 tiles once they fill about three quarters of the 132 SMs at one CTA each (the
         * tower's 1024-wide products of a 1024 x 768 image: 128 CTAs); else 64 x 128, four times as many */
        ctas = (int64_t)((M + 127) / 128) * ((N + 255) / 256);
        return ctas >= 100 ? 0 : 1;
    }
    /* 128 x 128 tiles once they make at least 256 CTAs (two full waves on 132 SMs at two CTAs each);
     * smaller problems (the tiny tower, the aligner of a small image) take 64 x 64 tiles, four times as
     * many CTAs */
    ctas = (int64_t)((M + 127) / 128) * ((N + 127) / 128);
    return ctas >= 256 ? 0 : 1;
}

void rule_vision_mm_shape(int sm, int tile, int *bm, int *bn)
{
    if (sm == 90) {
        *bm = tile == 0 ? 128 : 64;
        *bn = tile == 0 ? 256 : 128;
    } else
        *bm = *bn = tile == 0 ? 128 : 64;
}

void rule_vision_mm_pick(int sm, int M, int N, rule_variant *v)
{
    v->family = sm == 90 ? "vision_mm_wgmma" : "vision_mm";
    snprintf(v->params, sizeof v->params, "T=%d", rule_vision_mm_tile(sm, M, N));
}
