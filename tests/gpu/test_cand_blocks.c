/* GPU checks of cand_blocks (block scores, the top-k, the kept set as a bitmap) against
 * runtime/ref/cand_blocks.h: exact. Real (blocks of 8, cap 2048: launches that keep every block and
 * launches that need the top-k, one block per row and several) and tiny (blocks of 2, cap 3) shapes;
 * reaches 0, 1, around block edges and full; ties, −∞ and NaN among the scores; every row equal to the
 * row launched alone. Bad arguments are refused. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/cand_blocks.h"
#include "runtime/ref/cand_blocks.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int block, cap, rows, N, levels;
} cb_case;

static void run_case(gpu_ctx *c, dsk_rng *r, const cb_case *tc)
{
    const int rows = tc->rows, N = tc->N, B = tc->block;
    const int64_t lds = (N + 8) & ~3, NB = (N + B - 1) / B, ldb = op_cand_blocks_ldb(N, B);
    const int ldw = (int)(((NB + 31) / 32 + 4) & ~3);
    float *s = xmalloc(sizeof(float) * (size_t)rows * lds);
    int *reach = xmalloc(sizeof(int) * (size_t)rows);
    for (int i = 0; i < rows; i++) {
        uint64_t u = dsk_rng_below(r, 8);
        reach[i] = u == 0 ? 0 : u == 1 ? 1 : u == 2 ? N : u == 3 ? B : u == 4 ? B + 1 : (int)dsk_rng_below(r, (uint64_t)N + 1);
        for (int64_t j = 0; j < lds; j++) {
            float v = bf16_round(dsk_rng_normal(r));
            if (tc->levels)
                v = (float)(int)(v * (float)tc->levels); /* exact ties across blocks */
            uint64_t x = dsk_rng_below(r, 500);
            s[(size_t)i * lds + j] = x == 0 ? NAN : x == 1 ? -INFINITY : x == 2 ? -0.0f : v;
        }
    }
    /* the reference: block scores (−∞ up to the launch's blocks) and the kept set */
    float *rbs = xmalloc(sizeof(float) * (size_t)rows * NB), *val = xmalloc(sizeof(float) * (size_t)NB);
    int32_t *kept = xmalloc(sizeof(int32_t) * (size_t)NB);
    uint32_t *rbm = xmalloc(sizeof(uint32_t) * (size_t)rows * ldw);
    for (int i = 0; i < rows; i++) {
        float *b = rbs + (size_t)i * NB;
        int64_t nb = ref_cand_block_scores(s + (size_t)i * lds, reach[i], B, b);
        for (int64_t k = nb; k < NB; k++)
            b[k] = -INFINITY;
        float *scratch = xmalloc(sizeof(float) * (size_t)NB);
        int n = ref_cand_blocks(s + (size_t)i * lds, reach[i], B, tc->cap, kept, scratch, val);
        ref_cand_bitmap(kept, n, rbm + (size_t)i * ldw, ldw);
        free(scratch);
    }
    size_t wsb = op_cand_blocks_ws_bytes(rows, N, B, tc->cap), wsb1 = op_cand_blocks_ws_bytes(1, N, B, tc->cap);
    CUdeviceptr ds = dev_upload(s, sizeof(float) * (size_t)rows * lds), dr = dev_upload(reach, sizeof(int) * (size_t)rows),
                dbm = dev_alloc(sizeof(uint32_t) * (size_t)rows * ldw), ws = dev_alloc(wsb), ws1 = dev_alloc(wsb1),
                d1 = dev_alloc(sizeof(uint32_t) * (size_t)ldw);
    dev_memset(dbm, 0xa5, sizeof(uint32_t) * (size_t)rows * ldw);
    cand_blocks_args a = {.scores = ds, .lds = lds, .N = N, .reach = dr, .rows = rows, .block = B, .cap = tc->cap,
                          .bitmap = dbm, .ldw = ldw, .ws = ws, .ws_bytes = wsb};
    must(op_cand_blocks(c->k, c->s, &a), "cand_blocks");
    dev_sync(c);
    uint32_t *bm = xmalloc(sizeof(uint32_t) * (size_t)rows * ldw), *one = xmalloc(sizeof(uint32_t) * (size_t)ldw);
    float *bs = xmalloc(sizeof(float) * (size_t)rows * ldb);
    dev_download(bm, dbm, sizeof(uint32_t) * (size_t)rows * ldw);
    dev_download(bs, ws, sizeof(float) * (size_t)rows * ldb);
    int bad_bm = 0, bad_bs = 0, alone_bad = 0;
    for (int i = 0; i < rows; i++) {
        bad_bm += memcmp(bm + (size_t)i * ldw, rbm + (size_t)i * ldw, sizeof(uint32_t) * (size_t)ldw) != 0;
        bad_bs += memcmp(bs + (size_t)i * ldb, rbs + (size_t)i * NB, sizeof(float) * (size_t)NB) != 0;
    }
    for (int i = 0; i < rows; i++) {
        if (rows > 16 && i != 0 && i != rows - 1 && i % 9 != 4)
            continue;
        CUdeviceptr r1 = dev_upload(&reach[i], 4);
        cand_blocks_args b = a;
        b.scores = ds + (CUdeviceptr)i * lds * 4;
        b.reach = r1;
        b.rows = 1;
        b.bitmap = d1;
        b.ws = ws1;
        b.ws_bytes = wsb1;
        must(op_cand_blocks(c->k, c->s, &b), "cand_blocks alone");
        dev_sync(c);
        dev_download(one, d1, sizeof(uint32_t) * (size_t)ldw);
        alone_bad += memcmp(one, bm + (size_t)i * ldw, sizeof(uint32_t) * (size_t)ldw) != 0;
        dev_free(r1);
    }
    char shape[96];
    snprintf(shape, sizeof shape, "rows %d, N %d, blocks of %d, cap %d%s%s", rows, N, B, tc->cap,
             NB > tc->cap ? " (top-k)" : "", tc->levels ? " ties" : "");
    check(c, !bad_bm && !bad_bs && !alone_bad, "cand_blocks", shape,
          "bitmap rows != CPU %d, block-score rows != CPU %d, alone != batched %d", bad_bm, bad_bs, alone_bad);
    dev_free(ds);
    dev_free(dr);
    dev_free(dbm);
    dev_free(ws);
    dev_free(ws1);
    dev_free(d1);
    free(s);
    free(reach);
    free(rbs);
    free(val);
    free(kept);
    free(rbm);
    free(bm);
    free(one);
    free(bs);
}

static void bad_arguments(gpu_ctx *c)
{
    CUdeviceptr d = dev_alloc(1 << 20);
    cand_blocks_args ok = {.scores = d, .lds = 1024, .N = 1024, .reach = d, .rows = 2, .block = 8, .cap = 2048,
                           .bitmap = d, .ldw = 4, .ws = d, .ws_bytes = 1 << 20};
    struct {
        const char *what;
        cand_blocks_args a;
    } bad[] = {{"block 0", ok}, {"cap 0", ok}, {"short bitmap rows", ok}, {"small workspace", ok},
               {"misaligned scores", ok}, {"lds < N", ok}, {"70000 rows", ok}};
    bad[0].a.block = 0;
    bad[1].a.cap = 0;
    bad[2].a.ldw = 3;
    bad[3].a.ws_bytes = 64;
    bad[4].a.scores = d + 8;
    bad[5].a.lds = 1000;
    bad[6].a.rows = 70000;
    int refused = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = op_cand_blocks(c->k, c->s, &bad[i].a);
        refused += rc != 0;
        if (rc == 0)
            printf("     cand_blocks accepted %s\n", bad[i].what);
    }
    dev_sync(c);
    dev_free(d);
    check(c, refused == (int)(sizeof bad / sizeof bad[0]), "cand_blocks", "bad arguments", "%d of %zu refused", refused,
          sizeof bad / sizeof bad[0]);
}

void test_cand_blocks(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0xcb10);
    const cb_case cases[] = {
        {8, 2048, 1, 1000, 0},   {8, 2048, 2, 16384, 0},  {8, 2048, 7, 16392, 3},  {8, 2048, 16, 65536, 0},
        {8, 2048, 64, 4096, 2},  {8, 2048, 1, 1048576, 0}, {8, 2048, 300, 40000, 0}, {8, 2048, 2, 300000, 1},
        {2, 3, 1, 5, 0},         {2, 3, 7, 9, 1},          {2, 3, 16, 100, 0},       {2, 3, 64, 33, 2},
        {2, 3, 300, 600, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(c, &r, &cases[i]);
    bad_arguments(c);
}
