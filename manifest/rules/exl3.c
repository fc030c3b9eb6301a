#include "manifest/rules/rules.h"

#include <stdio.h>

enum { EXL3_SPLIT_CTAS = 512 };

int rule_exl3_bucket(int rows)
{
    return rows <= 8 ? 8 : rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
}

int rule_exl3_pretransform(int rows)
{
    return rows > 16;
}

void rule_exl3_split(int k, int n, int *qb, int *groups)
{
    /* About 512 (column block, group) CTAs, the group count nearest to it: on the H200 (132 SMs) a
     * 1-row decode is fastest with ~4 CTAs per SM, each as deep in k as that allows (measured over the
     * model's shapes with `dskit bench exl3 KIT --split-sweep`: the head 3.5e12 weights/s at one group,
     * against 3.1e12 at the 1024-pair rule; the experts 25 % faster at two 128-blocks per group than
     * at one). At least two 128-blocks per group: one-block CTAs spend their time filling the
     * pipeline (the sweep after the x read-ahead: 5120->1152 16 % and 1152->5120 faster at two).
     * A function of the shape only: it fixes each output's sum order. */
    int kb = k / 128, nb = n / 128 > 0 ? n / 128 : 1;
    int g = (EXL3_SPLIT_CTAS + nb / 2) / nb;
    g = g > kb ? kb : g;
    g = g < 1 ? 1 : g;
    *qb = kb > 0 ? (kb + g - 1) / g : 1;
    if (*qb < 2 && kb >= 2)
        *qb = 2;
    *groups = kb > 0 ? (kb + *qb - 1) / *qb : 1;
}

int rule_exl3_variants(int K, int codebook, int max_rows, int moe, rule_variant *out, int cap)
{
    int n = 0;
    int top = rule_exl3_bucket(max_rows < 1 ? 1 : max_rows);
    for (int b = 8; b <= top; b *= 2, n++)
        if (n < cap) {
            out[n].family = "exl3_mm";
            snprintf(out[n].params, sizeof out[n].params, "K=%d,CB=%d,M=%d", K, codebook, b);
        }
    if (rule_exl3_pretransform(max_rows)) {
        if (n < cap) {
            out[n].family = "exl3_had";
            snprintf(out[n].params, sizeof out[n].params, "T=256");
        }
        n++;
    }
    if (moe) {
        if (n < cap) {
            out[n].family = "exl3_moe_plan";
            snprintf(out[n].params, sizeof out[n].params, "%s", RULE_MOE_PLAN_GIVEN);
        }
        n++;
    }
    if (n < cap) {
        out[n].family = "exl3_recon";
        snprintf(out[n].params, sizeof out[n].params, "K=%d,CB=%d", K, codebook);
    }
    return n + 1;
}
