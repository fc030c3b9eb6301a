/* GPU checks of the cast family against runtime/ref/cast.h: bit for bit (elementwise, exact), on random
 * fp32 values spanning many magnitudes, ties, NaN and infinities, at lengths that are not multiples of 4. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/cast.h"
#include "runtime/ref/cast.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_cast(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0xca57);
    const int64_t lens[] = {1, 7, 4096, 5120 * 16 + 3};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int64_t n = lens[li];
        float *x = xmalloc(sizeof(float) * (size_t)n), *ys = xmalloc(sizeof(float) * (size_t)n);
        float *yg = xmalloc(sizeof(float) * (size_t)n);
        uint16_t *hb = xmalloc(sizeof(uint16_t) * (size_t)n), *gb = xmalloc(sizeof(uint16_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            x[i] = dsk_rng_normal(&r) * powf(10.0f, 6.0f * dsk_rng_f32(&r) - 3.0f);
        if (n > 8) { /* a bf16 tie, NaN, infinities, -0 */
            x[0] = f32_from_bits(0x3f808000u);
            x[1] = NAN;
            x[2] = INFINITY;
            x[3] = -INFINITY;
            x[4] = -0.0f;
        }
        CUdeviceptr dx = dev_upload(x, sizeof(float) * (size_t)n), dy = dev_alloc(sizeof(float) * (size_t)n);
        must(op_cast_bf16(c->k, c->s, dx, dy, n), "cast bf16");
        dev_download(gb, dy, sizeof(uint16_t) * (size_t)n);
        ref_cast_bf16(x, hb, (size_t)n);
        char shape[64];
        snprintf(shape, sizeof shape, "bf16 n=%lld", (long long)n);
        check(c, !memcmp(gb, hb, sizeof(uint16_t) * (size_t)n), "cast", shape, "bit for bit");
        float scale = 0.015625f * (1.0f + dsk_rng_f32(&r));
        must(op_cast_scale(c->k, c->s, dx, dy, n, scale), "cast scale");
        dev_download(yg, dy, sizeof(float) * (size_t)n);
        ref_cast_scale(x, ys, (size_t)n, scale);
        int same = 1;
        for (int64_t i = 0; i < n && same; i++)
            same = !memcmp(&yg[i], &ys[i], 4) || (isnan(yg[i]) && isnan(ys[i]));
        snprintf(shape, sizeof shape, "scale n=%lld", (long long)n);
        check(c, same, "cast", shape, "bit for bit");
        dev_free(dx);
        dev_free(dy);
        free(x), free(ys), free(yg), free(hb), free(gb);
    }
    check(c, op_cast_bf16(c->k, c->s, 8, 16, 4) != 0, "cast", "misaligned", "refused: %s", dsk_err_msg());
}
