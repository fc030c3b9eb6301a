#include "runtime/common/numerics.h"

float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f)
        return f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return f32_from_bits(sign);
        /* subnormal: mant * 2^-24, exact in fp32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return sign | 0x7e00; /* NaN */
    if (ax >= 0x477ff000u)
        return sign | 0x7c00; /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {   /* below 2^-14: subnormal or zero */
        uint32_t e = ax >> 23;
        if (e < 102)
            return sign; /* below 2^-25: rounds to zero */
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return sign | (uint16_t)q;
    }
    uint32_t e16 = (ax >> 23) - 112;
    uint32_t q = (e16 << 10) | ((ax >> 13) & 0x3ff);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
        q++; /* a carry into the exponent is the correct result */
    return sign | (uint16_t)q;
}

float e4m3_to_f32(uint8_t b)
{
    float sign = (b & 0x80) ? -1.0f : 1.0f;
    uint32_t exp = (b >> 3) & 0xf;
    uint32_t mant = b & 7;
    if (exp == 0xf && mant == 7)
        return NAN;
    if (exp == 0)
        return sign * ldexpf((float)mant, -9);
    return sign * ldexpf((float)(8 + mant), (int)exp - 10);
}

uint8_t f32_to_e4m3(float f)
{
    if (isnan(f))
        return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f)
        return sign | 0x7e;
    if (a < 0x1p-6f) {
        /* subnormal grid: multiples of 2^-9; q == 8 is the smallest normal, code 0x08 */
        float q = rintf(a * 512.0f);
        return sign | (uint8_t)q;
    }
    int e;
    frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    e -= 1;        /* a in [2^e, 2^(e+1)) */
    float q = rintf(ldexpf(a, 3 - e)); /* in [8, 16] */
    if (q >= 16.0f) {
        q = 8.0f;
        e++;
    }
    int code = ((e + 7) << 3) | ((int)q - 8);
    if (code > 0x7e)
        code = 0x7e;
    return sign | (uint8_t)code;
}

const float e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

uint8_t f32_to_e2m1(float f)
{
    uint8_t sign = signbit(f) ? 8 : 0;
    float a = fabsf(f);
    if (isnan(f))
        return 7; /* no NaN in E2M1; saturate */
    int best = 0;
    float best_d = INFINITY;
    for (int c = 0; c < 8; c++) {
        float d = fabsf(a - e2m1_values[c]);
        /* strictly nearer wins; on a tie the even code wins */
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best = c;
            best_d = d;
        }
    }
    return sign | (uint8_t)best;
}
