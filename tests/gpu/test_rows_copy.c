/* GPU checks of rows_copy against runtime/ref/rows_copy.h: exact, with guard bytes around every row the
 * copy must not touch (skipped rows, strides' padding), for gathers, scatters with skips and both. */
#include "runtime/common/rng.h"
#include "runtime/launch/rows_copy.h"
#include "runtime/ref/rows_copy.h"
#include "tests/gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A random permutation prefix of 0..m-1 (distinct destinations). */
static void distinct_rows(dsk_rng *r, int32_t *out, int n, int m)
{
    int32_t *all = xmalloc((size_t)m * 4);
    for (int i = 0; i < m; i++)
        all[i] = i;
    for (int i = 0; i < n; i++) {
        int j = i + (int)dsk_rng_below(r, (uint64_t)(m - i));
        int32_t t = all[i];
        all[i] = all[j];
        all[j] = t;
        out[i] = all[i];
    }
    free(all);
}

static void check_case(gpu_ctx *c, dsk_rng *r, int n, int row_bytes, int gather, int scatter)
{
    int64_t ss = row_bytes + 16 * (int64_t)dsk_rng_below(r, 3), ds = row_bytes + 16 * (int64_t)dsk_rng_below(r, 3);
    int src_rows = gather ? n + 5 : n, dst_rows = scatter ? 2 * n + 3 : n;
    size_t sb = (size_t)src_rows * ss, db = (size_t)dst_rows * ds;
    uint8_t *src = xmalloc(sb), *dst = xmalloc(db), *ref = xmalloc(db);
    for (size_t i = 0; i < sb; i++)
        src[i] = (uint8_t)dsk_rng_u64(r);
    for (size_t i = 0; i < db; i++)
        dst[i] = ref[i] = (uint8_t)dsk_rng_u64(r); /* the rows the copy must leave alone keep these bytes */
    int32_t *si = xmalloc((size_t)n * 4 + 4), *di = xmalloc((size_t)n * 4 + 4);
    for (int i = 0; i < n; i++)
        si[i] = (int32_t)dsk_rng_below(r, (uint64_t)src_rows); /* a gather may read a row twice */
    distinct_rows(r, di, n, dst_rows);
    int skipped = 0;
    for (int i = 0; scatter && i < n; i++)
        if (dsk_rng_below(r, 4) == 0) {
            di[i] = -1; /* rows a ring write leaves out (older than the ring) */
            skipped++;
        }
    ref_rows_copy(src, ss, gather ? si : NULL, ref, ds, scatter ? di : NULL, n, row_bytes);
    CUdeviceptr dsrc = dev_upload(src, sb), ddst = dev_upload(dst, db);
    CUdeviceptr dsi = gather ? dev_upload(si, (size_t)n * 4 + 4) : 0, ddi = scatter ? dev_upload(di, (size_t)n * 4 + 4) : 0;
    must(op_rows_copy(c->k, c->s, dsrc, ss, dsi, ddst, ds, ddi, n, row_bytes), "rows_copy");
    dev_sync(c);
    dev_download(dst, ddst, db);
    size_t diff = 0;
    for (size_t i = 0; i < db; i++)
        diff += dst[i] != ref[i];
    char shape[80];
    snprintf(shape, sizeof shape, "%d rows of %d B%s%s", n, row_bytes, gather ? ", gather" : "",
             scatter ? ", scatter" : "");
    check(c, diff == 0, "rows_copy", shape, "%zu of %zu bytes differ (%d rows skipped)", diff, db, skipped);
    dev_free(dsrc);
    dev_free(ddst);
    if (dsi)
        dev_free(dsi);
    if (ddi)
        dev_free(ddi);
    free(src);
    free(dst);
    free(ref);
    free(si);
    free(di);
}

/* Two copies of different widths and row counts (a latent and its index key into their pools) in one
 * launch: each exactly what the reference makes of it, the rows around them untouched. */
static void check_pair(gpu_ctx *c, dsk_rng *r, const int n[2], const int row_bytes[2])
{
    rows_copy_job job[2];
    uint8_t *dst[2], *ref[2];
    size_t db[2];
    CUdeviceptr dsrc[2], ddst[2], ddi[2];
    for (int j = 0; j < 2; j++) {
        int64_t ss = row_bytes[j] + 16 * (int64_t)dsk_rng_below(r, 2), ds = row_bytes[j];
        int dst_rows = 2 * n[j] + 1;
        size_t sb = (size_t)n[j] * ss;
        db[j] = (size_t)dst_rows * ds;
        uint8_t *src = xmalloc(sb);
        dst[j] = xmalloc(db[j]);
        ref[j] = xmalloc(db[j]);
        for (size_t i = 0; i < sb; i++)
            src[i] = (uint8_t)dsk_rng_u64(r);
        for (size_t i = 0; i < db[j]; i++)
            dst[j][i] = ref[j][i] = (uint8_t)dsk_rng_u64(r);
        int32_t *di = xmalloc((size_t)n[j] * 4 + 4);
        distinct_rows(r, di, n[j], dst_rows);
        ref_rows_copy(src, ss, NULL, ref[j], ds, di, n[j], row_bytes[j]);
        dsrc[j] = dev_upload(src, sb);
        ddst[j] = dev_upload(dst[j], db[j]);
        ddi[j] = dev_upload(di, (size_t)n[j] * 4 + 4);
        job[j] = (rows_copy_job){dsrc[j], ss, 0, ddst[j], ds, ddi[j], n[j], row_bytes[j]};
        free(src);
        free(di);
    }
    must(op_rows_copy_jobs(c->k, c->s, job, 2), "rows_copy, two copies");
    dev_sync(c);
    size_t diff = 0;
    for (int j = 0; j < 2; j++) {
        dev_download(dst[j], ddst[j], db[j]);
        for (size_t i = 0; i < db[j]; i++)
            diff += dst[j][i] != ref[j][i];
        dev_free(dsrc[j]);
        dev_free(ddst[j]);
        dev_free(ddi[j]);
        free(dst[j]);
        free(ref[j]);
    }
    char shape[80];
    snprintf(shape, sizeof shape, "two copies: %d rows of %d B, %d of %d B", n[0], row_bytes[0], n[1], row_bytes[1]);
    check(c, diff == 0, "rows_copy", shape, "%zu bytes differ", diff);
}

void test_rows_copy(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x40c);
    /* window-key ring rows (512 bf16), ratio-2 state slots (2 x 512 fp32), index keys (128 bf16), tiny */
    const int widths[] = {1024, 4096, 256, 16, 48};
    const int nrows[] = {1, 2, 7, 16, 64, 4096};
    for (int wi = 0; wi < 5; wi++)
        for (int ri = 0; ri < 6; ri++)
            for (int mode = 0; mode < 3; mode++)
                check_case(c, &r, nrows[ri], widths[wi], mode != 1, mode != 0);
    const int pn[][2] = {{1, 1}, {3, 16}, {64, 2}, {1, 7}}, pw[][2] = {{1024, 256}, {256, 1024}, {4096, 16}, {1024, 256}};
    for (int i = 0; i < 4; i++)
        check_pair(c, &r, pn[i], pw[i]);
    CUdeviceptr buf = dev_alloc(1 << 16);
    int refused = 0;
    refused += op_rows_copy(c->k, c->s, buf, 64, 0, buf + 4096, 64, 0, 4, 40) != 0;      /* not a multiple of 16 */
    refused += op_rows_copy(c->k, c->s, buf, 32, 0, buf + 4096, 64, 0, 4, 64) != 0;      /* stride below the row */
    refused += op_rows_copy(c->k, c->s, buf + 8, 64, 0, buf + 4096, 64, 0, 4, 64) != 0;  /* misaligned src */
    refused += op_rows_copy(c->k, c->s, buf, 64, buf + 4, buf + 4096, 64, 0, 4, 64) != 0; /* misaligned index list */
    refused += op_rows_copy(c->k, c->s, 0, 64, 0, buf + 4096, 64, 0, 4, 64) != 0;        /* no src */
    rows_copy_job bad[3] = {{buf, 64, 0, buf + 4096, 64, 0, 4, 64}, {buf, 64, 0, buf + 8192, 64, 0, 4, 40}, {0}};
    refused += op_rows_copy_jobs(c->k, c->s, bad, 2) != 0; /* the second copy's rows not a multiple of 16 */
    refused += op_rows_copy_jobs(c->k, c->s, bad, 3) != 0; /* three copies */
    check(c, refused == 7, "rows_copy", "bad arguments", "%d of 7 refused", refused);
    dev_free(buf);
}
