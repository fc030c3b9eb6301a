#include "manifest/rules/rules.h"

#include <stdio.h>

void rule_stream_read_pick(rule_variant *v)
{
    /* 512 threads per block measured best for 16-byte streaming loads on the H200 (docs/kernels.md) */
    v->family = "stream_read";
    snprintf(v->params, sizeof v->params, "BLOCK=512");
}
