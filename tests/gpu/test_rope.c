/* GPU checks of rope against runtime/ref/rope.h: bit for bit. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/rope.h"
#include "runtime/ref/rope.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_rope(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0);
    struct {
        int rows, heads, head_dim, R;
        double base;
        int yarn;
    } cases[] = {{1, 64, 512, 64, 160000.0, 1}, {37, 64, 512, 64, 10000.0, 0}, {5, 1, 128, 64, 160000.0, 1},
                 {19, 8, 128, 32, 160000.0, 1}, {3, 32, 128, 64, 10000.0, 0}};
    const int max_pos = 1 << 20;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int inverse = 0; inverse < 2; inverse++) {
            int rows = cases[ci].rows, heads = cases[ci].heads, hd = cases[ci].head_dim, R = cases[ci].R;
            rope_params p = {R, cases[ci].base, cases[ci].yarn ? 16.0 : 0, 32, 1, cases[ci].yarn ? 65536 : 0};
            int32_t *pos = xmalloc((size_t)rows * 4);
            for (int i = 0; i < rows; i++)
                pos[i] = (int32_t)dsk_rng_below(&r, (uint64_t)max_pos);
            pos[0] = max_pos - 1; /* the far end of a 1M context */
            /* a table holding just the rows used, re-indexed 0..rows-1 */
            float *table = xmalloc((size_t)rows * R * 4);
            int32_t *slot = xmalloc((size_t)rows * 4);
            for (int i = 0; i < rows; i++) {
                ref_rope_table(&p, pos[i], 1, table + (size_t)i * R);
                slot[i] = i;
            }
            size_t n = (size_t)rows * heads * hd;
            uint16_t *x = xmalloc(n * 2), *y = xmalloc(n * 2);
            fill_bf16(&r, x, rows * heads, hd, 1.0f);
            CUdeviceptr dx = dev_upload(x, n * 2), dp = dev_upload(slot, (size_t)rows * 4),
                        dt = dev_upload(table, (size_t)rows * R * 4);
            must(op_rope(c->k, c->s, dx, dp, dt, rows, heads, hd, R, inverse), "rope");
            dev_sync(c);
            dev_download(y, dx, n * 2);
            ref_rope_apply_bf16(x, rows, heads, hd, R, slot, table, inverse);
            size_t diff = 0;
            for (size_t i = 0; i < n; i++)
                diff += x[i] != y[i];
            char shape[80];
            snprintf(shape, sizeof shape, "%d x %d x %d, R %d%s%s", rows, heads, hd, R, cases[ci].yarn ? " yarn" : "",
                     inverse ? " inv" : "");
            check(c, diff == 0, "rope", shape, "%zu of %zu values differ from the CPU", diff, n);
            dev_free(dx);
            dev_free(dp);
            dev_free(dt);
            free(pos);
            free(table);
            free(slot);
            free(x);
            free(y);
        }
}
