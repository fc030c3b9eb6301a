#include "runtime/model/rope.h"

rope_params model_rope(const model_config *c, int ratio)
{
    rope_params p = {c->rope_head_dim, c->rope_theta, 0, c->beta_fast, c->beta_slow, 0};
    if (ratio > 0) {
        p.base = c->compress_rope_theta;
        p.factor = c->rope_factor;
        p.original_seq_len = c->original_seq_len;
    }
    return p;
}
