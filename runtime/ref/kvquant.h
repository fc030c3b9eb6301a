/* KV-cache quantise-dequantise (model.md §3.6): REF rounds KV vectors through FP8 or FP4 and stores the
 * dequantised bf16 values; these reproduce that in place. All work on bf16 vectors whose length is a
 * multiple of the block. */
#ifndef DSK_REF_KVQUANT_H
#define DSK_REF_KVQUANT_H

#include <stdint.h>

/* The power of two 2^ceil(log2 f) by REF's bit rule: f's exponent, plus one if any mantissa bit is set
 * (an exact power of two stays put). f must be a positive normal fp32. */
float kvq_pow2_ceil(float f);

/* Window KV (and REF's activation quantiser): FP8 e4m3, blocks of 32, amax floored at 1e-4, scale =
 * pow2_ceil(amax · fp32(1/448)), q = clamp(x / s, ±448) rounded to e4m3, value bf16(q · s). */
void kvq_fp8_e4m3(uint16_t *v, int n);
/* Compressed main KV: FP4 e2m1, blocks of 16, amax floored at 6·2^-9, scale = e4m3(amax / 6). */
void kvq_fp4_e4m3(uint16_t *v, int n);
/* Indexer K and Q: FP4 e2m1, blocks of 32, amax floored at 6·2^-126, scale = pow2_ceil(amax · fp32(1/6)). */
void kvq_fp4_e8m0(uint16_t *v, int n);

#endif
