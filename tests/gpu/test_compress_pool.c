/* GPU checks of compress_pool against runtime/ref/compress_pool.h: groups whose first token is in the
 * round or in the state ring, gates with large and equal differences, rel L2 <= 1e-3 (the exp is the
 * double exp rounded, glibc's expf differs from it only at rare near-ties; the share of bit-equal values
 * is printed), each group launched alone equal to the batch bit for bit. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/compress_pool.h"
#include "runtime/ref/compress_pool.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill_gates(dsk_rng *r, float *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t k = dsk_rng_below(r, 16);
        /* mostly O(1) gates, some far apart (one token dominates), some exactly equal (set below) */
        s[i] = k == 0 ? 30.0f * dsk_rng_normal(r) : 2.0f * dsk_rng_normal(r);
    }
}

static void check_case(gpu_ctx *c, dsk_rng *r, int groups, int hd, int from_state)
{
    /* a round of 2·groups rows (a prompt from an even position), or 2·groups − 1 rows whose first group
     * opens in the previous round: entries {−1 − state row, 0}, then {2g − 1, 2g} */
    int rows = from_state ? 2 * groups - 1 : 2 * groups, st_rows = 8;
    int64_t stride = 2 * hd + 4 * (int64_t)dsk_rng_below(r, 3), st_stride = 2 * hd, out_stride = hd + 8;
    size_t rn = (size_t)rows * stride, sn = (size_t)st_rows * st_stride;
    float *as = xmalloc(rn * 4), *st = xmalloc(sn * 4);
    for (size_t i = 0; i < rn; i++)
        as[i] = dsk_rng_normal(r);
    for (size_t i = 0; i < sn; i++)
        st[i] = dsk_rng_normal(r);
    /* the round's a and s share rows ([rows][a | s], the grouped projection's output); the state slot is
     * [a | s] too */
    for (int i = 0; i < rows; i++)
        fill_gates(r, as + (size_t)i * stride + hd, (size_t)hd);
    for (int i = 0; i < st_rows; i++)
        fill_gates(r, st + (size_t)i * st_stride + hd, (size_t)hd);
    if (rows >= 2)
        for (int d = 0; d < hd; d += 7) /* equal gates: the average of the two values */
            as[(size_t)1 * stride + hd + d] = as[hd + d];
    int32_t *e = xmalloc((size_t)groups * 8 + 16);
    int srow = (int)dsk_rng_below(r, st_rows);
    for (int g = 0; g < groups; g++) {
        if (from_state) {
            e[2 * g] = g == 0 ? -1 - srow : 2 * g - 1;
            e[2 * g + 1] = 2 * g;
        } else {
            e[2 * g] = 2 * g;
            e[2 * g + 1] = 2 * g + 1;
        }
    }
    size_t on = (size_t)groups * out_stride;
    uint16_t *ref = xmalloc(on * 2), *gpu = xmalloc(on * 2), *one = xmalloc((size_t)out_stride * 2);
    memset(ref, 0xab, on * 2);
    ref_compress_pool(as, as + hd, stride, st, st + hd, st_stride, e, ref, out_stride, groups, hd);
    CUdeviceptr das = dev_upload(as, rn * 4), dst = dev_upload(st, sn * 4), de = dev_upload(e, (size_t)groups * 8 + 16);
    CUdeviceptr dout = dev_alloc(on * 2);
    dev_memset(dout, 0xab, on * 2);
    /* a + hd floats is 16-byte aligned: hd is a multiple of 8 */
    compress_pool_src src = {das, das + (CUdeviceptr)hd * 4, stride, dst, dst + (CUdeviceptr)hd * 4, st_stride};
    must(op_compress_pool(c->k, c->s, &src, de, dout, out_stride, groups, hd), "compress_pool");
    dev_sync(c);
    dev_download(gpu, dout, on * 2);
    float *fa = xmalloc((size_t)groups * hd * 4), *fb = xmalloc((size_t)groups * hd * 4);
    size_t same = 0, guard = 0;
    for (int g = 0; g < groups; g++)
        for (int j = 0; j < out_stride; j++) {
            size_t at = (size_t)g * out_stride + j;
            if (j >= hd) {
                guard += gpu[at] != 0xabab;
                continue;
            }
            fa[(size_t)g * hd + j] = bf16_to_f32(gpu[at]);
            fb[(size_t)g * hd + j] = bf16_to_f32(ref[at]);
            same += gpu[at] == ref[at];
        }
    double err = rel_l2(fa, fb, (size_t)groups * hd);
    char shape[80];
    snprintf(shape, sizeof shape, "%d groups x %d%s", groups, hd, from_state ? ", first from state" : "");
    check(c, err <= 1e-3 && guard == 0, "compress_pool", shape, "rel L2 %.2e, %.4f%% bit-equal, %zu guard writes",
          err, 100.0 * (double)same / ((double)groups * hd), guard);
    /* groups alone: the same bits as in the batch */
    int bad = 0, picks[3] = {0, groups / 2, groups - 1};
    for (int i = 0; i < (groups < 3 ? groups : 3); i++) {
        int g = picks[i];
        CUdeviceptr d1 = dev_upload(e + 2 * g, 16), o1 = dev_alloc((size_t)out_stride * 2);
        must(op_compress_pool(c->k, c->s, &src, d1, o1, out_stride, 1, hd), "compress_pool");
        dev_sync(c);
        dev_download(one, o1, (size_t)hd * 2);
        bad += memcmp(one, gpu + (size_t)g * out_stride, (size_t)hd * 2) != 0;
        dev_free(d1);
        dev_free(o1);
    }
    check(c, bad == 0, "compress_pool", shape, "%d groups launched alone differ from the batch", bad);
    dev_free(das);
    dev_free(dst);
    dev_free(de);
    dev_free(dout);
    free(as);
    free(st);
    free(e);
    free(ref);
    free(gpu);
    free(one);
    free(fa);
    free(fb);
}

void test_compress_pool(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0xc09);
    const int groups[] = {1, 2, 7, 16, 64, 2048};
    const int hds[] = {512, 128};
    for (int hi = 0; hi < 2; hi++)
        for (int gi = 0; gi < 6; gi++)
            for (int fs = 0; fs < 2; fs++)
                check_case(c, &r, groups[gi], hds[hi], fs);
    CUdeviceptr buf = dev_alloc(1 << 20);
    compress_pool_src ok = {buf, buf + 2048, 1024, buf, buf + 2048, 1024}, mis = ok;
    mis.s += 4;
    int refused = 0;
    refused += op_compress_pool(c->k, c->s, &ok, buf, buf, 512, 4, 500) != 0;  /* hd not a multiple of 8 */
    refused += op_compress_pool(c->k, c->s, &mis, buf, buf, 512, 4, 512) != 0; /* misaligned s */
    refused += op_compress_pool(c->k, c->s, &ok, buf, buf, 256, 4, 512) != 0;  /* out stride below hd */
    refused += op_compress_pool(c->k, c->s, &ok, 0, buf, 512, 4, 512) != 0;    /* no entries */
    check(c, refused == 4, "compress_pool", "bad arguments", "%d of 4 refused", refused);
    dev_free(buf);
}
