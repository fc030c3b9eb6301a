/* Which rotary embedding a layer uses (model.md §3.5): the parameters of its frequency table.
 * Ratio-0 layers and the DSpark stages use rope_theta without YaRN; ratio > 0 layers use
 * compress_rope_theta with YaRN. The tables themselves are built by the rope family's reference
 * (runtime/ref/rope.h), on the host for both backends. */
#ifndef DSK_MODEL_ROPE_H
#define DSK_MODEL_ROPE_H

#include "runtime/model/config.h"

#include <stdint.h>

/* RoPE frequency parameters: base, rotated dims, and YaRN (factor 0 or original_seq_len 0 = no YaRN). */
typedef struct {
    int rope_dim;             /* R: rotated dims at the end of each vector (even) */
    double base;              /* rope_theta or compress_rope_theta */
    double factor;            /* YaRN rope_factor (16) */
    double beta_fast;         /* 32 */
    double beta_slow;         /* 1 */
    int64_t original_seq_len; /* 65536; 0 disables YaRN */
} rope_params;

/* The RoPE parameters of a layer of compress ratio `ratio` (0 also for the DSpark stages). */
rope_params model_rope(const model_config *c, int ratio);

#endif
