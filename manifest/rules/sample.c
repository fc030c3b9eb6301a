#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_sample_pick(rule_variant *v)
{
    v->family = "sample";
    snprintf(v->params, sizeof v->params, "T=%d", RULE_SAMPLE_THREADS);
}

int rule_sample_slices(int V)
{
    /* a function of V alone: it fixes the order of the vocabulary-wide sums (129,280: 32 slices) */
    int per = RULE_SAMPLE_THREADS * RULE_SAMPLE_PER_THREAD;
    return (V + per - 1) / per;
}

int rule_sample_candidates(int V)
{
    return V < RULE_SAMPLE_CANDIDATES ? V : RULE_SAMPLE_CANDIDATES;
}
