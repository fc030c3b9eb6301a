/* CPU reference of the compress_pool family: ratio-2 compressor pooling (model.md §3.5). */
#ifndef DSK_REF_COMPRESS_POOL_H
#define DSK_REF_COMPRESS_POOL_H

#include <stdint.h>

/* One group of two tokens: per channel, softmax over the two gates s_t (fp32: max, two expf, e/sum) times
 * the values a_t, summed, rounded to bf16: out[hd] = bf16(a0·(e0/Σ) + a1·(e1/Σ)). */
void ref_pool2(const float *a0, const float *s0, const float *a1, const float *s1, int hd, uint16_t *out);

/* The kernel's contract: group g pools entries[g] = {first, second}: first >= 0 is a round row (a, s at
 * first·stride floats from a and s), first < 0 the state row −1 − first (at that row·st_stride floats
 * from st_a and st_s); second is a round row. out row g at g·out_stride elements. */
void ref_compress_pool(const float *a, const float *s, int64_t stride, const float *st_a, const float *st_s,
                       int64_t st_stride, const int32_t *entries, uint16_t *out, int64_t out_stride, int groups,
                       int hd);

#endif
