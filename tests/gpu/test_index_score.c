/* GPU checks of index_score against runtime/ref/index_score.h: the release (32 heads) and tiny (4 heads)
 * shapes; rows of one sequence (causal reach, a verify window, a prompt chunk) and of many (each its own
 * keys and reach, 0 and 1 included); candidate bitmaps (Reindex layers). −∞ exactly where the reference
 * has it, relative L2 over the rest (the bf16 rounding points of the dot, the product and the sum turn
 * the mma's other fp32 order into whole-bf16-ulp differences on a few scores), and every row equal to
 * the row launched alone, on another grid, bit for bit. The queries and keys are FP4-QDQ'd as the model's
 * (e2m1 values times a power of two per 32 dims: their dots are exact in fp32 in any order, so these
 * scores equal the CPU's bit for bit), and general bf16 in a few cases. Bad arguments are refused. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/index_score.h"
#include "runtime/ref/index_score.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IHD 128

typedef struct {
    const char *what;
    int nh, rows, N;
    int seqs;      /* rows are spread over this many sequences (1: one sequence, causal reach) */
    int block;     /* candidate block size, 0: no candidates */
    int generic;   /* general bf16 q and keys instead of FP4-QDQ'd ones (whose dots are exact in fp32) */
} is_case;

/* Index-key-like bf16 values: FP4 e2m1 grid values times a power-of-two scale per 32 dims (the keys and
 * queries are FP4-QDQ'd), fresh every run. */
static void fill_fp4ish(dsk_rng *r, uint16_t *x, size_t vecs)
{
    for (size_t v = 0; v < vecs; v++)
        for (int b = 0; b < IHD / 32; b++) {
            float scale = ldexpf(1.0f, (int)dsk_rng_below(r, 6) - 4);
            for (int d = 0; d < 32; d++) {
                float g = e2m1_to_f32((uint8_t)dsk_rng_below(r, 16));
                x[v * IHD + (size_t)b * 32 + d] = f32_to_bf16(g * scale);
            }
        }
}

static void run_case(gpu_ctx *c, dsk_rng *r, const is_case *tc)
{
    const int nh = tc->nh, rows = tc->rows, N = tc->N;
    /* sequences: seq s owns keys [base_s, base_s + len_s) of one pool, len_s >= N for simplicity */
    int *base = xmalloc(sizeof(int) * (size_t)rows), *reach = xmalloc(sizeof(int) * (size_t)rows);
    int64_t pool = 0;
    int *seq_base = xmalloc(sizeof(int) * (size_t)tc->seqs);
    for (int s = 0; s < tc->seqs; s++) {
        seq_base[s] = (int)pool;
        pool += N + (int64_t)dsk_rng_below(r, 64);
    }
    for (int i = 0; i < rows; i++) {
        int s = tc->seqs == 1 ? 0 : (int)dsk_rng_below(r, (uint64_t)tc->seqs);
        base[i] = seq_base[s];
        if (tc->seqs == 1) /* one sequence: the rows are consecutive positions, the last reaching N */
            reach[i] = N - rows + 1 + i < 0 ? 0 : N - rows + 1 + i;
        else {
            uint64_t u = dsk_rng_below(r, 8);
            reach[i] = u == 0 ? 0 : u == 1 ? 1 : u == 2 ? N : u == 3 ? N + 5 : (int)dsk_rng_below(r, (uint64_t)N + 1);
        }
    }
    uint16_t *keys = xmalloc(sizeof(uint16_t) * (size_t)pool * IHD);
    uint16_t *q = xmalloc(sizeof(uint16_t) * (size_t)rows * nh * IHD);
    float *w = xmalloc(sizeof(float) * (size_t)rows * nh);
    if (tc->generic) {
        fill_bf16(r, keys, (int)pool, IHD, 1.0f);
        fill_bf16(r, q, rows * nh, IHD, 1.0f);
    } else {
        fill_fp4ish(r, keys, (size_t)pool);
        fill_fp4ish(r, q, (size_t)rows * nh);
    }
    for (int i = 0; i < rows * nh; i++) /* bf16(weights_proj x) / 64, as the CPU scales them */
        w[i] = bf16_round(bf16_round(2.0f * dsk_rng_normal(r)) * (1.0f / 64.0f));
    int nb = tc->block ? (N + tc->block - 1) / tc->block : 0, ldc = ((nb + 31) / 32 + 4) & ~3; /* 16-byte rows */
    uint32_t *cand = NULL;
    if (tc->block) {
        cand = xmalloc(sizeof(uint32_t) * (size_t)rows * ldc);
        for (size_t i = 0; i < (size_t)rows * ldc; i++) /* about a third of the blocks kept, some words empty */
            cand[i] = dsk_rng_below(r, 5) == 0 ? 0u : (uint32_t)(dsk_rng_u64(r) & dsk_rng_u64(r));
    }
    /* the reference: −∞ beyond reach and outside the candidates, up to N */
    float *ref = xmalloc(sizeof(float) * (size_t)rows * N), *got = xmalloc(sizeof(float) * (size_t)rows * N);
    for (int i = 0; i < rows; i++) { /* a reach past N (the launch's width) counts as N */
        float *sr = ref + (size_t)i * N;
        int rc = reach[i] < N ? reach[i] : N;
        ref_index_score(q + (size_t)i * nh * IHD, w + (size_t)i * nh, nh, IHD, keys + (size_t)base[i] * IHD, rc, sr);
        if (cand)
            ref_index_score_mask(sr, rc, tc->block, cand + (size_t)i * ldc);
        for (int j = rc; j < N; j++)
            sr[j] = -INFINITY;
    }
    CUdeviceptr dq = dev_upload(q, sizeof(uint16_t) * (size_t)rows * nh * IHD),
                dw = dev_upload(w, sizeof(float) * (size_t)rows * nh),
                dk = dev_upload(keys, sizeof(uint16_t) * (size_t)pool * IHD),
                db = dev_upload(base, sizeof(int) * (size_t)rows), dr = dev_upload(reach, sizeof(int) * (size_t)rows),
                dc = cand ? dev_upload(cand, sizeof(uint32_t) * (size_t)rows * ldc) : 0;
    int64_t lds = N + 4;
    CUdeviceptr dout = dev_alloc(sizeof(float) * (size_t)rows * lds), d1 = dev_alloc(sizeof(float) * (size_t)lds);
    dev_memset(dout, 0xff, sizeof(float) * (size_t)rows * lds);
    /* rows in groups sharing key tiles (4 for one sequence; 3 over several, whose rows mostly load their own),
     * then the same launch one row per block on 5 slices: the same bits */
    index_score_args a = {.q = dq, .w = dw, .keys = dk, .key_base = db, .reach = dr, .cand = dc, .ldc = ldc,
                          .cand_block = tc->block, .rows = rows, .nh = nh, .ihd = IHD, .N = N,
                          .group = tc->seqs == 1 ? 4 : 3, .out = dout, .lds = lds};
    must(op_index_score(c->k, c->s, &a), "index_score");
    dev_sync(c);
    float *tmp = xmalloc(sizeof(float) * (size_t)lds);
    for (int i = 0; i < rows; i++) {
        dev_download(tmp, dout + (CUdeviceptr)i * lds * 4, sizeof(float) * (size_t)N);
        memcpy(got + (size_t)i * N, tmp, sizeof(float) * (size_t)N);
    }
    index_score_args a1 = a;
    a1.group = 1;
    dev_memset(dout, 0xff, sizeof(float) * (size_t)rows * lds);
    must(op_index_score_slices(c->k, c->s, &a1, 5), "index_score one row per block");
    dev_sync(c);
    int group_bad = 0;
    for (int i = 0; i < rows; i++) {
        dev_download(tmp, dout + (CUdeviceptr)i * lds * 4, sizeof(float) * (size_t)N);
        group_bad += memcmp(tmp, got + (size_t)i * N, sizeof(float) * (size_t)N) != 0;
    }
    /* −∞ where the reference has it; rel L2 and the share of scores off by more than a bf16 ulp elsewhere */
    size_t inf_bad = 0, finite = 0, far = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)rows * N; i++) {
        int ri = isinf(ref[i]) && ref[i] < 0, gi = isinf(got[i]) && got[i] < 0;
        if (ri != gi) {
            inf_bad++;
            continue;
        }
        if (ri)
            continue;
        finite++;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        far += fabs(d) > fabs(ref[i]) * 0x1p-7 + 1e-30;
    }
    double e = den > 0 ? sqrt(num / den) : sqrt(num);
    /* each row alone (one row, another grid: 1 and 3 slices) equals its row of the launch */
    int alone_bad = 0, checked = 0;
    for (int i = 0; i < rows; i++) {
        if (rows > 16 && i != 0 && i != rows - 1 && i % (rows / 5) != 1)
            continue;
        index_score_args b = a;
        b.q = dq + (CUdeviceptr)i * nh * IHD * 2;
        b.w = dw + (CUdeviceptr)i * nh * 4;
        b.key_base = db + (CUdeviceptr)i * 4;
        b.reach = dr + (CUdeviceptr)i * 4;
        b.cand = dc ? dc + (CUdeviceptr)i * ldc * 4 : 0;
        b.rows = 1;
        b.group = 1;
        b.out = d1;
        /* q and w rows are 16-byte aligned for nh >= 4; base/reach rows are not, so copy them */
        CUdeviceptr b1 = dev_upload(&base[i], 4), r1 = dev_upload(&reach[i], 4);
        b.key_base = b1;
        b.reach = r1;
        must(op_index_score_slices(c->k, c->s, &b, 1 + 2 * (i & 1)), "index_score alone");
        dev_sync(c);
        dev_download(tmp, d1, sizeof(float) * (size_t)N);
        alone_bad += memcmp(tmp, got + (size_t)i * N, sizeof(float) * (size_t)N) != 0;
        checked++;
        dev_free(b1);
        dev_free(r1);
    }
    char shape[96];
    snprintf(shape, sizeof shape, "%s: nh %d, rows %d, N %d%s%s", tc->what, nh, rows, N, tc->block ? ", cand" : "",
             tc->generic ? ", bf16" : "");
    check(c, inf_bad == 0 && e <= 1e-3 && alone_bad == 0 && group_bad == 0, "index_score", shape,
          "rel L2 %.2e over %zu scores (%.3f%% off > 2^-7), -inf mismatches %zu, alone != batched %d of %d, "
          "ungrouped != grouped %d",
          e, finite, finite ? 100.0 * (double)far / (double)finite : 0.0, inf_bad, alone_bad, checked, group_bad);
    dev_free(dq);
    dev_free(dw);
    dev_free(dk);
    dev_free(db);
    dev_free(dr);
    if (dc)
        dev_free(dc);
    dev_free(dout);
    dev_free(d1);
    free(base);
    free(reach);
    free(seq_base);
    free(keys);
    free(q);
    free(w);
    free(cand);
    free(ref);
    free(got);
    free(tmp);
}

/* The launcher refuses what it cannot run, naming it. */
static void bad_arguments(gpu_ctx *c)
{
    CUdeviceptr d = dev_alloc(1 << 16);
    index_score_args ok = {.q = d, .w = d, .keys = d, .key_base = d, .reach = d, .rows = 1, .nh = 32, .ihd = 128,
                           .N = 64, .out = d, .lds = 64};
    struct {
        const char *what;
        index_score_args a;
    } bad[] = {{"8 heads", ok}, {"head dim 64", ok}, {"lds < N", ok}, {"misaligned q", ok},
               {"null reach", ok}, {"short bitmap rows", ok}, {"candidate block 0", ok}, {"groups of 5", ok}};
    bad[0].a.nh = 8;
    bad[1].a.ihd = 64;
    bad[2].a.lds = 63;
    bad[3].a.q = d + 4;
    bad[4].a.reach = 0;
    bad[5].a.cand = d, bad[5].a.cand_block = 1, bad[5].a.ldc = 1; /* 64 blocks need 2 words */
    bad[6].a.cand = d, bad[6].a.cand_block = 0, bad[6].a.ldc = 4;
    bad[7].a.group = 5;
    int refused = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = op_index_score(c->k, c->s, &bad[i].a);
        refused += rc != 0;
        if (rc == 0)
            printf("     index_score accepted %s\n", bad[i].what);
    }
    dev_sync(c);
    dev_free(d);
    check(c, refused == (int)(sizeof bad / sizeof bad[0]), "index_score", "bad arguments", "%d of %zu refused", refused,
          sizeof bad / sizeof bad[0]);
}

void test_index_score(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x1d5c);
    const is_case cases[] = {
        {"decode", 32, 1, 4096, 1, 0, 0},        {"decode", 32, 2, 1000, 2, 0, 0},      {"decode, 7 seqs", 32, 7, 777, 7, 0, 0},
        {"verify window", 32, 16, 2048, 1, 0, 0}, {"batch", 32, 64, 1024, 9, 0, 0},      {"prompt chunk", 32, 512, 1536, 1, 0, 0},
        {"long row", 32, 1, 65536 + 17, 1, 0, 0}, {"reindex", 32, 7, 3000, 7, 8, 0},     {"reindex", 32, 16, 4096, 1, 8, 0},
        {"tiny decode", 4, 1, 300, 1, 0, 0},      {"tiny", 4, 7, 129, 3, 0, 0},          {"tiny verify", 4, 16, 64, 1, 0, 0},
        {"tiny batch", 4, 64, 200, 20, 0, 0},     {"tiny prompt", 4, 300, 300, 1, 0, 0}, {"tiny reindex", 4, 7, 100, 7, 2, 0},
        {"decode", 32, 7, 2000, 7, 0, 1},      {"verify window", 32, 16, 1024, 1, 8, 1}, {"tiny", 4, 16, 500, 4, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(c, &r, &cases[i]);
    bad_arguments(c);
}
