/* GPU checks of engram_rows against runtime/ref/engram_rows.h, bit for bit: records (the Engram store's
 * layout, 264-byte records of the release and 33-byte records of the tiny preset) and a device table at
 * i64 row indices, every e4m3 code (NaN included) and scales from 2^-127 to NaN, with guard bytes in
 * the output's row padding. */
#include "runtime/common/rng.h"
#include "runtime/launch/engram_rows.h"
#include "runtime/ref/engram_rows.h"
#include "tests/gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A scale byte: mostly the range a trained table uses, sometimes the extremes (2^-127, 2^127, NaN). */
static uint8_t rand_scale(dsk_rng *r)
{
    uint64_t k = dsk_rng_below(r, 64);
    return k == 0 ? 0 : k == 1 ? 0xfe : k == 2 ? 0xff : (uint8_t)(110 + dsk_rng_below(r, 30));
}

static size_t compare_out(const uint16_t *a, const uint16_t *b, int n, int64_t stride, int row_w, size_t *guard)
{
    size_t diff = 0;
    *guard = 0;
    for (int p = 0; p < n; p++)
        for (int64_t j = 0; j < stride; j++) {
            size_t at = (size_t)p * stride + j;
            if (j < row_w)
                diff += a[at] != b[at];
            else
                *guard += a[at] != 0xabab;
        }
    return diff;
}

static void check_records(gpu_ctx *c, dsk_rng *r, int n, int cols, int w)
{
    int rb = ref_engram_record_bytes(w);
    size_t nrec = (size_t)n * cols, bytes = nrec * rb;
    uint8_t *rec = xmalloc(bytes + 16);
    for (size_t i = 0; i < nrec; i++) {
        uint8_t *q = rec + i * rb;
        for (int j = 0; j < w; j++)
            q[j] = (uint8_t)dsk_rng_u64(r); /* every code, NaN (0x7f, 0xff) included */
        for (int j = 0; j < w / 32; j++)
            q[w + j] = rand_scale(r);
    }
    int64_t stride = (int64_t)cols * w + 8;
    size_t on = (size_t)n * stride;
    uint16_t *ref = xmalloc(on * 2), *gpu = xmalloc(on * 2);
    memset(ref, 0xab, on * 2);
    ref_engram_records(rec, n, cols, w, ref, stride);
    CUdeviceptr drec = dev_upload(rec, bytes + 16), dout = dev_alloc(on * 2);
    dev_memset(dout, 0xab, on * 2);
    must(op_engram_records(c->k, c->s, drec, n, cols, w, dout, stride), "engram_rows");
    dev_sync(c);
    dev_download(gpu, dout, on * 2);
    size_t guard, diff = compare_out(gpu, ref, n, stride, cols * w, &guard);
    char shape[80];
    snprintf(shape, sizeof shape, "records, %d positions x %d x %d", n, cols, w);
    check(c, diff == 0 && guard == 0, "engram_rows", shape, "%zu of %zu values differ, %zu guard writes", diff,
          (size_t)n * cols * w, guard);
    /* the last position alone (its records at an offset that is 16-byte aligned only for some widths:
     * upload them on their own) */
    CUdeviceptr d1 = dev_upload(rec + (size_t)(n - 1) * cols * rb, (size_t)cols * rb), o1 = dev_alloc((size_t)stride * 2);
    must(op_engram_records(c->k, c->s, d1, 1, cols, w, o1, stride), "engram_rows");
    dev_sync(c);
    uint16_t *one = xmalloc((size_t)stride * 2);
    dev_download(one, o1, (size_t)stride * 2);
    check(c, !memcmp(one, gpu + (size_t)(n - 1) * stride, (size_t)cols * w * 2), "engram_rows", shape,
          "the last position launched alone %s the batch", memcmp(one, gpu + (size_t)(n - 1) * stride,
                                                                  (size_t)cols * w * 2) ? "differs from" : "equals");
    dev_free(d1);
    dev_free(o1);
    dev_free(drec);
    dev_free(dout);
    free(rec);
    free(ref);
    free(gpu);
    free(one);
}

static void check_table(gpu_ctx *c, dsk_rng *r, int n, int cols, int w, int64_t rows)
{
    size_t vb = (size_t)rows * w, sb = (size_t)rows * (w / 32);
    uint8_t *val = xmalloc(vb), *sc = xmalloc(sb + 16);
    for (size_t i = 0; i < vb; i++)
        val[i] = (uint8_t)dsk_rng_u64(r);
    for (size_t i = 0; i < sb; i++)
        sc[i] = rand_scale(r);
    int64_t *idx = xmalloc((size_t)n * cols * 8);
    for (size_t i = 0; i < (size_t)n * cols; i++)
        idx[i] = (int64_t)dsk_rng_below(r, (uint64_t)rows);
    idx[0] = rows - 1;
    int64_t stride = (int64_t)cols * w;
    size_t on = (size_t)n * stride;
    uint16_t *ref = xmalloc(on * 2), *gpu = xmalloc(on * 2);
    ref_engram_table_rows(val, sc, idx, n, cols, w, ref, stride);
    CUdeviceptr dv = dev_upload(val, vb), ds = dev_upload(sc, sb + 16), di = dev_upload(idx, (size_t)n * cols * 8);
    CUdeviceptr dout = dev_alloc(on * 2);
    must(op_engram_table_rows(c->k, c->s, dv, ds, di, n, cols, w, dout, stride), "engram_rows");
    dev_sync(c);
    dev_download(gpu, dout, on * 2);
    size_t diff = 0;
    for (size_t i = 0; i < on; i++)
        diff += gpu[i] != ref[i];
    char shape[80];
    snprintf(shape, sizeof shape, "table of %lld, %d positions x %d x %d", (long long)rows, n, cols, w);
    check(c, diff == 0, "engram_rows", shape, "%zu of %zu values differ", diff, on);
    dev_free(dv);
    dev_free(ds);
    dev_free(di);
    dev_free(dout);
    free(val);
    free(sc);
    free(idx);
    free(ref);
    free(gpu);
}

void test_engram_rows(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0xe6a);
    const int nrows[] = {1, 2, 7, 16, 64, 1024};
    for (int i = 0; i < 6; i++) {
        check_records(c, &r, nrows[i], 24, 256); /* the release */
        check_records(c, &r, nrows[i], 12, 32);  /* the tiny preset: 33-byte records */
        check_table(c, &r, nrows[i], 24, 256, 100003);
        check_table(c, &r, nrows[i], 12, 32, 1402);
    }
    CUdeviceptr buf = dev_alloc(1 << 16);
    int refused = 0;
    refused += op_engram_records(c->k, c->s, buf, 4, 24, 250, buf, 6000) != 0;      /* width not a multiple of 32 */
    refused += op_engram_records(c->k, c->s, buf + 8, 4, 24, 256, buf, 6144) != 0;  /* misaligned records */
    refused += op_engram_records(c->k, c->s, buf, 4, 24, 256, buf, 6000) != 0;      /* stride below cols·w */
    refused += op_engram_table_rows(c->k, c->s, buf, 0, buf, 4, 24, 256, buf, 6144) != 0; /* no scales */
    check(c, refused == 4, "engram_rows", "bad arguments", "%d of 4 refused", refused);
    dev_free(buf);
}
