/* RoPE tables and rotations for the rows of a forward call (each row at its own position). */
#include "runtime/common/error.h"
#include "runtime/cpu/layers.h"

#include <stdlib.h>

int rope_rows(const rope_params *p, const int64_t *pos, int n, float **table)
{
    int half = p->rope_dim / 2;
    float *t = dsk_malloc(sizeof(float) * 2 * (size_t)half * (size_t)(n ? n : 1));
    if (!t)
        return -1;
    for (int i = 0; i < n; i++)
        ref_rope_table(p, pos[i], 1, t + (size_t)i * 2 * half);
    *table = t;
    return 0;
}

/* RoPE on n rows of `heads` vectors, row i rotated by table row i. */
void rope_apply_rows(uint16_t *x, int n, int heads, int width, int rope_dim, const float *table, int inverse)
{
    for (int i = 0; i < n; i++) {
        int32_t row = i;
        ref_rope_apply_bf16(x + (int64_t)i * heads * width, 1, heads, width, rope_dim, &row, table, inverse);
    }
}
