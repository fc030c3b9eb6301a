#include "runtime/ref/sampling.h"

#include <math.h>

/* splitmix64's finaliser: integer-only, so a GPU kernel reproduces it bit for bit */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float sample_uniform(uint64_t seed, int64_t pos, int32_t id)
{
    uint64_t h = mix64(seed ^ 0x6a09e667f3bcc908ull);
    h = mix64(h ^ (uint64_t)pos * 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ (uint64_t)(uint32_t)id * 0xc2b2ae3d27d4eb4full);
    uint32_t k = (uint32_t)(h >> 41); /* 23 bits */
    return (float)(2u * k + 1u) * 0x1p-24f;
}

int32_t sample_token(const float *logits, int vocab, float temperature, uint64_t seed, int64_t pos)
{
    int32_t best = 0;
    if (temperature <= 0.0f) {
        for (int v = 1; v < vocab; v++)
            if (logits[v] > logits[best])
                best = v;
        return best;
    }
    float t = temperature > 1e-5f ? temperature : 1e-5f, mx = -INFINITY;
    for (int v = 0; v < vocab; v++) {
        float z = logits[v] / t;
        mx = z > mx ? z : mx;
    }
    /* softmax's common 1/Σ is left out: it cannot change the argmax, and no vocabulary-wide reduction
     * order enters the bits */
    float best_q = -1.0f;
    for (int v = 0; v < vocab; v++) {
        float q = expf(logits[v] / t - mx) / -logf(sample_uniform(seed, pos, v));
        if (q > best_q) {
            best_q = q;
            best = v;
        }
    }
    return best;
}
