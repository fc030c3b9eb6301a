/* Deterministic pseudo-random numbers for synthetic checkpoints and tests: xoshiro256** seeded through
 * splitmix64. The same seed gives the same stream on every machine. */
#ifndef DSK_RNG_H
#define DSK_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} dsk_rng;

static inline uint64_t dsk_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void dsk_rng_seed(dsk_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = dsk_splitmix64(&seed);
}

static inline uint64_t dsk_rng_u64(dsk_rng *r)
{
    uint64_t *s = r->s;
    uint64_t t = s[1] << 17;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1) with 24 random bits. */
static inline float dsk_rng_f32(dsk_rng *r)
{
    return (float)(dsk_rng_u64(r) >> 40) * 0x1p-24f;
}

/* Uniform integer in [0, n). */
static inline uint64_t dsk_rng_below(dsk_rng *r, uint64_t n)
{
    return n ? dsk_rng_u64(r) % n : 0;
}

/* Standard normal (Box-Muller, one value per call). */
static inline float dsk_rng_normal(dsk_rng *r)
{
    double u1 = ((double)(dsk_rng_u64(r) >> 11) + 1.0) * 0x1p-53;
    double u2 = (double)(dsk_rng_u64(r) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
