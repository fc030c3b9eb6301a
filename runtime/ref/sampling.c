#include "runtime/ref/sampling.h"

#include <math.h>
#include <stdlib.h>

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

/* a ranks before b: larger value first, ties to the lower id */
static int before(float va, int32_t ia, float vb, int32_t ib)
{
    return va > vb || (va == vb && ia < ib);
}

static int cmp_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The n largest of v over the allowed ids, in rank order: ids[0..returned). Insertion into a sorted
 * buffer (n <= SAMPLE_TOP_P_CANDIDATES): the reference favours plainness over speed. */
static int top_n(const float *v, int V, const uint32_t *allow, int n, int32_t *ids)
{
    int have = 0;
    for (int32_t id = 0; id < V; id++) {
        if (!sample_allowed(allow, id))
            continue;
        if (have == n && !before(v[id], id, v[ids[n - 1]], ids[n - 1]))
            continue;
        int j = have < n ? have++ : n - 1;
        while (j > 0 && before(v[id], id, v[ids[j - 1]], ids[j - 1])) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = id;
    }
    return have;
}

int32_t sample_row(const float *logits, int V, const sample_params *sp, int64_t pos, const uint32_t *allow)
{
    int32_t best = -1;
    if (sp->temperature <= 0.0f) {
        for (int32_t v = 0; v < V; v++)
            if (sample_allowed(allow, v) && (best < 0 || logits[v] > logits[best]))
                best = v;
        return best;
    }
    float t = sp->temperature > 1e-5f ? sp->temperature : 1e-5f, mx = -INFINITY;
    float *z = malloc(sizeof(float) * (size_t)V);
    int32_t *cand = NULL;
    if (!z)
        abort();
    int any = 0;
    for (int32_t v = 0; v < V; v++) {
        z[v] = logits[v] / t;
        if (sample_allowed(allow, v)) {
            mx = z[v] > mx ? z[v] : mx;
            any = 1;
        }
    }
    int ncand = 0, kcap = sp->top_k > 0 ? sp->top_k : sp->top_p < 1.0f ? SAMPLE_TOP_P_CANDIDATES : 0;
    if (kcap > SAMPLE_TOP_P_CANDIDATES)
        kcap = SAMPLE_TOP_P_CANDIDATES;
    if (any && kcap > 0) {
        if (!(cand = malloc(sizeof(int32_t) * (size_t)kcap)))
            abort();
        ncand = top_n(z, V, allow, kcap, cand);
        if (sp->top_p < 1.0f) {
            /* the distribution's mass, summed in ascending id: over the top_k set when top_k is set,
             * else over every allowed id */
            float mass = 0.0f;
            if (sp->top_k > 0) {
                int32_t *asc = malloc(sizeof(int32_t) * (size_t)ncand);
                if (!asc)
                    abort();
                for (int i = 0; i < ncand; i++)
                    asc[i] = cand[i];
                qsort(asc, (size_t)ncand, sizeof *asc, cmp_id);
                for (int i = 0; i < ncand; i++)
                    mass += expf(z[asc[i]] - mx);
                free(asc);
            } else
                for (int32_t v = 0; v < V; v++)
                    if (sample_allowed(allow, v))
                        mass += expf(z[v] - mx);
            float thr = sp->top_p * mass, cum = 0.0f;
            int keep = 0;
            while (keep < ncand && (keep == 0 || cum < thr))
                cum += expf(z[cand[keep++]] - mx);
            ncand = keep;
        }
    }
    /* Gumbel-max over the kept candidates, or over every allowed id */
    float best_q = -1.0f;
    int n = kcap > 0 ? ncand : V;
    for (int i = 0; i < n; i++) {
        int32_t v = kcap > 0 ? cand[i] : i;
        if (!sample_allowed(allow, v))
            continue;
        float q = expf(z[v] - mx) / -logf(sample_uniform(sp->seed, pos, v));
        if (q > best_q || (q == best_q && v < best)) {
            best_q = q;
            best = v;
        }
    }
    free(z);
    free(cand);
    return best;
}

void sample_logprobs(const float *logits, int V, const uint32_t *allow, int32_t token, int n, float *lp,
                     int32_t *top_ids, float *top_lp)
{
    float mx = -INFINITY, sum = 0.0f;
    for (int32_t v = 0; v < V; v++)
        if (sample_allowed(allow, v))
            mx = logits[v] > mx ? logits[v] : mx;
    for (int32_t v = 0; v < V; v++)
        if (sample_allowed(allow, v))
            sum += expf(logits[v] - mx);
    float lse = mx + logf(sum);
    *lp = token >= 0 && token < V && sample_allowed(allow, token) ? logits[token] - lse : -INFINITY;
    if (n > SAMPLE_MAX_TOP_LOGPROBS)
        n = SAMPLE_MAX_TOP_LOGPROBS;
    int got = n > 0 ? top_n(logits, V, allow, n, top_ids) : 0;
    for (int i = 0; i < got; i++)
        top_lp[i] = logits[top_ids[i]] - lse;
    for (int i = got; i < n; i++) {
        top_ids[i] = -1;
        top_lp[i] = -INFINITY;
    }
}
