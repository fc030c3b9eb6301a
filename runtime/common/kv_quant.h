/* The KV quantise-dequantise formats of the model (model.md §3.6), by the names the CPU reference
 * (runtime/ref/kvquant.h), the vec_glue launcher and its variant rule share. The values are the kit's
 * vec_glue axis Q, so they are part of the kit's variant names and never change. */
#ifndef DSK_COMMON_KV_QUANT_H
#define DSK_COMMON_KV_QUANT_H

typedef enum {
    KVQ_NONE = 0,     /* no quantisation */
    KVQ_FP8_E4M3 = 1, /* window KV (and DSpark main KV): FP8 e4m3, blocks of 32, power-of-two scale */
    KVQ_FP4_E4M3 = 2, /* compressed main KV: FP4 e2m1, blocks of 16, e4m3 scale */
    KVQ_FP4_E8M0 = 3, /* index keys and queries: FP4 e2m1, blocks of 32, power-of-two (e8m0) scale */
    KVQ_KINDS = 4,
} kvq_kind;

/* Values per scale block of a kind (0 for KVQ_NONE): a quantised vector's width is a multiple of it. */
static inline int kvq_block(int kind)
{
    return kind == KVQ_FP4_E4M3 ? 16 : kind == KVQ_FP8_E4M3 || kind == KVQ_FP4_E8M0 ? 32 : 0;
}

#endif
