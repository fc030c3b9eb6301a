/* Number formats the model and the EXL3 weights use, converted bit-exactly on the CPU.
 * Every conversion to a narrower format rounds to nearest, ties to even, unless its comment says
 * otherwise. These are the CPU references that GPU kernels and the model's rounding points follow. */
#ifndef DSK_NUMERICS_H
#define DSK_NUMERICS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bfloat16 */
static inline float bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* A double rounded once to bf16 (nearest, ties to even; finite values within bf16's range): going through
 * fp32 would round twice. The quantum of v's binade (2^(e-7), or the subnormal one) divides v exactly. */
static inline uint16_t f64_to_bf16(double v)
{
    if (v == 0.0 || !isfinite(v))
        return f32_to_bf16((float)v);
    int e = ilogb(v) < -126 ? -126 : ilogb(v);
    double q = ldexp(1.0, e - 7);
    return f32_to_bf16((float)(nearbyint(v / q) * q));
}

/* The value f takes after a round trip through bf16. */
static inline float bf16_round(float f)
{
    return bf16_to_f32(f32_to_bf16(f));
}

/* IEEE binary16 */
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

static inline float f16_round(float f)
{
    return f16_to_f32(f32_to_f16(f));
}

/* FP8 E4M3 (OCP "fn": bias 7, no infinities, max 448, NaN = 0x7f/0xff). Encoding saturates finite
 * values beyond ±448 to ±448 (callers that model REF clamp first anyway); NaN encodes to 0x7f. */
float e4m3_to_f32(uint8_t b);
uint8_t f32_to_e4m3(float f);

/* E8M0 scale: 2^(b-127); 0xff is NaN. */
static inline float e8m0_to_f32(uint8_t b)
{
    return b == 0xff ? NAN : ldexpf(1.0f, (int)b - 127);
}

/* FP4 E2M1: codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign (code 8 is -0). Encoding
 * rounds to the nearest grid value, ties to the even code, and saturates at ±6. */
extern const float e2m1_values[16];
static inline float e2m1_to_f32(uint8_t code)
{
    return e2m1_values[code & 15];
}
uint8_t f32_to_e2m1(float f);

#endif
