#include "runtime/ref/embed.h"

#include <string.h>

void ref_embed(const uint16_t *table, int vocab, int d, const int32_t *ids, int rows, int hc, uint16_t *x, float *pi)
{
    for (int r = 0; r < rows; r++) {
        int ok = ids[r] >= 0 && ids[r] < vocab;
        for (int c = 0; c < hc; c++) {
            uint16_t *dst = x + ((int64_t)r * hc + c) * d;
            if (ok)
                memcpy(dst, table + (int64_t)ids[r] * d, sizeof(uint16_t) * (size_t)d);
            else
                memset(dst, 0, sizeof(uint16_t) * (size_t)d);
            pi[(int64_t)r * hc + c] = c == 0 ? 1.0f : 0.0f;
        }
    }
}
