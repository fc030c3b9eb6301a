#include "runtime/ref/topk.h"

#include <math.h>
#include <stdlib.h>

/* a ranks before b: larger key first, NaN last, then lower index first */
static int key_before(float ka, int ia, float kb, int ib)
{
    int na = isnan(ka), nb = isnan(kb);
    if (na != nb)
        return nb;
    if (!na && ka != kb)
        return ka > kb;
    return ia < ib;
}

typedef struct {
    float key;
    int idx;
} keyed;

static int cmp_rank(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->idx == y->idx)
        return 0;
    return key_before(x->key, x->idx, y->key, y->idx) ? -1 : 1;
}

static int cmp_idx(const void *a, const void *b)
{
    int x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void ref_topk(const float *score, const float *bias, int N, int k, int32_t *idx, float *val)
{
    keyed *all = malloc(sizeof(keyed) * (size_t)(N ? N : 1));
    if (!all)
        abort();
    for (int i = 0; i < N; i++) {
        all[i].key = bias ? score[i] + bias[i] : score[i];
        all[i].idx = i;
    }
    qsort(all, (size_t)N, sizeof(keyed), cmp_rank);
    for (int i = 0; i < k; i++)
        idx[i] = all[i].idx;
    qsort(idx, (size_t)k, sizeof(int32_t), cmp_idx);
    for (int i = 0; i < k; i++)
        val[i] = score[idx[i]];
    free(all);
}
