/* CPU reference of the EXL3 MoE form: per expert, the rows that chose it go through W1 and W3 in one
 * exl3_matmul call each, then W2; each row's expert outputs are then added in ascending expert id. */
#include "runtime/ref/exl3_moe.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int exl3_moe_ref(const exl3_linear *w1, const exl3_linear *w3, const exl3_linear *w2, int nexp, const float *x,
                 int rows, const int32_t *route, const float *weights, int topk, int e_lo, int accumulate, float *y)
{
    int k = (int)w1[0].k, n = (int)w1[0].n, slots = route ? topk : 1;
    size_t ne = (size_t)rows * (size_t)slots;
    float *o = dsk_malloc(ne * (size_t)k * sizeof(float));        /* o[entry] = bf16(W2 h), entry = r·slots + s */
    float *xg = dsk_malloc((size_t)rows * (size_t)k * sizeof(float)); /* the rows of one expert */
    float *g = dsk_malloc((size_t)rows * (size_t)n * sizeof(float));
    float *u = dsk_malloc((size_t)rows * (size_t)n * sizeof(float));
    float *og = dsk_malloc((size_t)rows * (size_t)k * sizeof(float));
    int *ent = dsk_malloc((size_t)rows * sizeof(int));
    int rc = -1;
    if (!o || !xg || !g || !u || !og || !ent)
        goto out;
    for (int e = 0; e < nexp; e++) {
        int m = 0;
        for (int r = 0; r < rows; r++)
            for (int s = 0; s < slots; s++)
                if (route ? route[(size_t)r * slots + s] == e_lo + e : e == 0) {
                    ent[m] = r * slots + s;
                    memcpy(xg + (size_t)m * k, x + (size_t)r * k, (size_t)k * sizeof(float));
                    m++;
                }
        if (m == 0)
            continue;
        if (exl3_matmul(&w1[e], xg, m, g) || exl3_matmul(&w3[e], xg, m, u))
            goto out;
        for (int i = 0; i < m; i++) {
            float w = route ? weights[ent[i]] : 1.0f;
            for (int c = 0; c < n; c++) {
                float gv = fminf(bf16_round(g[(size_t)i * n + c]), 10.0f);
                float uv = fminf(fmaxf(bf16_round(u[(size_t)i * n + c]), -10.0f), 10.0f);
                float sg = gv / (1.0f + expf(-gv));
                g[(size_t)i * n + c] = bf16_round(w * (sg * uv));
            }
        }
        if (exl3_matmul(&w2[e], g, m, og))
            goto out;
        for (int i = 0; i < m; i++)
            for (int c = 0; c < k; c++)
                o[(size_t)ent[i] * k + c] = bf16_round(og[(size_t)i * k + c]);
    }
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * k;
        if (!accumulate)
            memset(yr, 0, (size_t)k * sizeof(float));
        /* the row's local slots in ascending expert id */
        int order[64], ns = 0;
        for (int s = 0; s < slots && ns < 64; s++) {
            int32_t id = route ? route[(size_t)r * slots + s] : e_lo;
            if (id < e_lo || id >= e_lo + nexp)
                continue;
            int j = ns++;
            while (j > 0 && (route ? route[(size_t)r * slots + order[j - 1]] : e_lo) > id) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = s;
        }
        for (int i = 0; i < ns; i++) {
            const float *oe = o + ((size_t)r * slots + order[i]) * k;
            for (int c = 0; c < k; c++)
                yr[c] += oe[c];
        }
    }
    rc = 0;
out:
    free(o);
    free(xg);
    free(g);
    free(u);
    free(og);
    free(ent);
    return rc;
}
