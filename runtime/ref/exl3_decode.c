/* EXL3 trellis decoding (exl3.md §2): codebooks, tail-biting states, tile order, and the packer. */
#include "runtime/common/numerics.h"
#include "runtime/ref/exl3.h"

#include <pthread.h>

/* 3INST / MCG: two fp16 halves of a masked product, added once in fp16. Both halves lie in
 * ±[0.125, 2), so the fp32 sum is exact and one RNE rounding to fp16 equals the hardware __hadd. */
static uint16_t sum_of_halves(uint32_t x)
{
    x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
    return f32_to_f16(f16_to_f32((uint16_t)(x & 0xFFFF)) + f16_to_f32((uint16_t)(x >> 16)));
}

/* MUL1: h = 1024 + (byte sum of the product), value = fp16(h·k_inv + k_bias). h·k_inv has at most
 * 21 significant bits and the sum stays exact in fp32, so this equals the hardware __hfma. */
static uint16_t mul1_value(uint32_t x)
{
    const float k_inv = 887.0f / 131072.0f; /* fp16 0x1EEE */
    const float k_bias = -10.3828125f;      /* fp16 0xC931 */
    uint32_t b = (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24);
    return f32_to_f16((float)(1024 + b) * k_inv + k_bias);
}

uint16_t exl3_codebook_value(uint16_t state, int codebook)
{
    uint32_t s = state;
    switch (codebook) {
    case EXL3_CB_MCG:
        return sum_of_halves(s * EXL3_MCG_MULT);
    case EXL3_CB_MUL1:
        return mul1_value(s * EXL3_MUL1_MULT);
    default:
        return sum_of_halves(s * 89226354u + 64248484u);
    }
}

static uint16_t lut16[3][65536];
static float lut32[3][65536];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void build_luts(void)
{
    for (int cb = 0; cb < 3; cb++)
        for (uint32_t s = 0; s < 65536; s++) {
            lut16[cb][s] = exl3_codebook_value((uint16_t)s, cb);
            lut32[cb][s] = f16_to_f32(lut16[cb][s]);
        }
}

const uint16_t *exl3_codebook_lut(int codebook)
{
    pthread_once(&lut_once, build_luts);
    return lut16[codebook >= 0 && codebook < 3 ? codebook : 0];
}

const float *exl3_codebook_lut_f32(int codebook)
{
    pthread_once(&lut_once, build_luts);
    return lut32[codebook >= 0 && codebook < 3 ? codebook : 0];
}

/* Tile element (r·16 + c) of trellis position p = 8l + e (exl3.md §2.4): lane l's mma B fragment. */
static const uint8_t position_rc[256] = {
#define E(l, e) (uint8_t)((2 * ((l) % 4) + ((e) & 1) + 8 * (((e) >> 1) & 1)) * 16 + (l) / 4 + 8 * ((e) >> 2))
#define LANE(l) E(l, 0), E(l, 1), E(l, 2), E(l, 3), E(l, 4), E(l, 5), E(l, 6), E(l, 7)
    LANE(0),  LANE(1),  LANE(2),  LANE(3),  LANE(4),  LANE(5),  LANE(6),  LANE(7),
    LANE(8),  LANE(9),  LANE(10), LANE(11), LANE(12), LANE(13), LANE(14), LANE(15),
    LANE(16), LANE(17), LANE(18), LANE(19), LANE(20), LANE(21), LANE(22), LANE(23),
    LANE(24), LANE(25), LANE(26), LANE(27), LANE(28), LANE(29), LANE(30), LANE(31),
#undef LANE
#undef E
};

int exl3_tile_position(int r, int c)
{
    for (int p = 0; p < 256; p++)
        if (position_rc[p] == r * 16 + c)
            return p;
    return -1;
}

/* The tile's bit stream as 8K 32-bit words plus a copy of word 0, so a 16-bit window that wraps
 * around the end reads the stream's start (the trellis is tail-biting). */
static void stream_words(const uint16_t *words, int K, uint32_t *u)
{
    for (int w = 0; w < 8 * K; w++)
        u[w] = (uint32_t)words[2 * w] | (uint32_t)words[2 * w + 1] << 16;
    u[8 * K] = u[0];
}

/* S_p: stream bits [(p+1)K - 16, (p+1)K) modulo 256K, MSB first (bit q = bit 31 - q%32 of u[q/32]). */
static inline uint32_t state_at(const uint32_t *u, int K, int p)
{
    int start = (p + 1) * K - 16;
    if (start < 0)
        start += 256 * K;
    uint64_t x = (uint64_t)u[start >> 5] << 32 | u[(start >> 5) + 1];
    return (uint32_t)(x >> (48 - (start & 31))) & 0xFFFF;
}

void exl3_tile_states(const uint16_t *words, int K, uint16_t states[256])
{
    uint32_t u[8 * 8 + 1];
    stream_words(words, K, u);
    for (int p = 0; p < 256; p++)
        states[p] = (uint16_t)state_at(u, K, p);
}

void exl3_decode_tile(const uint16_t *words, int K, int codebook, uint16_t out_fp16[256])
{
    const uint16_t *lut = exl3_codebook_lut(codebook);
    uint32_t u[8 * 8 + 1];
    stream_words(words, K, u);
    for (int p = 0; p < 256; p++)
        out_fp16[position_rc[p]] = lut[state_at(u, K, p)];
}

void exl3_decode_tile_f32(const uint16_t *words, int K, const float *lut, float out[256])
{
    uint32_t u[8 * 8 + 1];
    stream_words(words, K, u);
    for (int p = 0; p < 256; p++)
        out[position_rc[p]] = lut[state_at(u, K, p)];
}

void exl3_pack_tile(const uint16_t *values, int K, uint16_t *words)
{
    uint32_t u[8 * 8] = {0};
    for (int p = 0; p < 256; p++)
        for (int b = 0; b < K; b++) {
            int q = p * K + b; /* stream bit q holds bit K-1-b of v_p: MSB first */
            u[q >> 5] |= (uint32_t)((values[p] >> (K - 1 - b)) & 1) << (31 - (q & 31));
        }
    for (int w = 0; w < 8 * K; w++) {
        words[2 * w] = (uint16_t)(u[w] & 0xFFFF);
        words[2 * w + 1] = (uint16_t)(u[w] >> 16);
    }
}
