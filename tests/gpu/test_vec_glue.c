/* GPU checks of vec_glue against runtime/ref/vec_glue.h, at every launch site of the real and tiny
 * models (window keys, q_norm, latents, index keys and queries, Q's RoPE, the inverse RoPE of o) and rows
 * 1, 2, 7, 16, 64 and a prompt, in place and to a strided buffer with guard bytes. RoPE and QDQ are
 * bit-exact; with a norm, the norm is within rel L2 1e-3 of the CPU's (its Σx² order differs) and the rest
 * of the chain, fed the GPU's own normed vectors, is bit-exact. QDQ sweeps every bf16 value
 * of a block at several scales (every code, every tie, saturation, -0, blocks below the amax floor). */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/vec_glue.h"
#include "runtime/ref/rope.h"
#include "runtime/ref/vec_glue.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0xabab

typedef struct {
    const char *site;
    int heads, width, rope, qdq, norm, inverse, yarn;
} vg_site;

static const vg_site sites[] = {
    {"window key", 1, 512, 64, KVQ_FP8_E4M3, 1, 0, 0},
    {"q_norm", 1, 1280, 0, KVQ_NONE, 1, 0, 0},
    {"latent norm", 1, 512, 0, KVQ_NONE, 1, 0, 1},
    {"latent", 1, 512, 64, KVQ_FP4_E4M3, 0, 0, 1},
    {"index key", 1, 128, 64, KVQ_FP4_E8M0, 1, 0, 1},
    {"index query", 32, 128, 64, KVQ_FP4_E8M0, 0, 0, 1},
    {"Q rope", 64, 512, 64, KVQ_NONE, 0, 0, 0},
    {"o inverse", 64, 512, 64, KVQ_NONE, 0, 1, 1},
    {"tiny window key", 1, 128, 32, KVQ_FP8_E4M3, 1, 0, 0},
    {"tiny latent", 1, 128, 32, KVQ_FP4_E4M3, 0, 0, 1},
    {"tiny index key", 1, 128, 32, KVQ_FP4_E8M0, 1, 0, 1},
    {"tiny index query", 4, 128, 32, KVQ_FP4_E8M0, 0, 0, 1},
    {"tiny Q rope", 8, 128, 32, KVQ_NONE, 0, 0, 0},
    {"tiny o inverse", 8, 128, 32, KVQ_NONE, 0, 1, 0},
    /* the other buckets and shapes the launcher takes: 2048 wide (8 chunks per lane), 3 heads (no shared
     * angles), RoPE of 8 dims with a norm and FP8 in one launch */
    {"wide", 3, 2048, 64, KVQ_FP8_E4M3, 1, 0, 1},
    {"narrow rope", 5, 256, 8, KVQ_FP4_E4M3, 1, 1, 0},
};

/* One problem on the host: inputs, the reference and the GPU's outputs. */
typedef struct {
    const vg_site *st;
    int rows, x_stride, y_stride;
    uint16_t *x, *w, *ref, *gpu;
    int32_t *pos, *trow;
    float *freqs, *table;
} problem;

static void make_problem(dsk_rng *r, const vg_site *st, int rows, int padded, problem *p)
{
    int hw = st->heads * st->width;
    p->st = st;
    p->rows = rows;
    p->x_stride = hw + (padded ? 8 * (int)(1 + dsk_rng_below(r, 4)) : 0);
    p->y_stride = hw + (padded ? 8 * (int)(1 + dsk_rng_below(r, 4)) : 0);
    p->x = xmalloc((size_t)rows * p->x_stride * 2);
    fill_bf16(r, p->x, rows, p->x_stride, 1.0f);
    p->w = xmalloc((size_t)st->width * 2);
    for (int i = 0; i < st->width; i++)
        p->w[i] = f32_to_bf16(1.0f + 0.3f * dsk_rng_normal(r));
    p->pos = xmalloc((size_t)rows * 4);
    p->trow = xmalloc((size_t)rows * 4);
    int R = st->rope ? st->rope : 2;
    p->freqs = xmalloc((size_t)R / 2 * 4);
    p->table = xmalloc((size_t)rows * R * 4);
    rope_params rp = {R, st->yarn ? 160000.0 : 10000.0, st->yarn ? 16.0 : 0, 32, 1, st->yarn ? 65536 : 0};
    ref_rope_freqs(&rp, p->freqs);
    for (int i = 0; i < rows; i++) {
        p->pos[i] = i == 0 ? (1 << 20) - 1 : (int32_t)dsk_rng_below(r, 1 << 20); /* row 0: the end of a 1M context */
        p->trow[i] = i;
        ref_rope_table(&rp, p->pos[i], 1, p->table + (size_t)i * R);
    }
    p->ref = xmalloc((size_t)rows * p->y_stride * 2);
    p->gpu = xmalloc((size_t)rows * p->y_stride * 2);
    for (size_t i = 0; i < (size_t)rows * p->y_stride; i++)
        p->ref[i] = POISON;
    ref_vec_glue_op op = {.norm_w = st->norm ? p->w : NULL, .eps = 1e-20f, .rope_dim = st->rope,
                          .cos_sin = p->table, .table_row = p->trow, .inverse = st->inverse, .qdq = st->qdq};
    ref_vec_glue(p->x, p->x_stride, p->ref, p->y_stride, rows, st->heads, st->width, &op);
}

static void free_problem(problem *p)
{
    free(p->x);
    free(p->w);
    free(p->ref);
    free(p->gpu);
    free(p->pos);
    free(p->trow);
    free(p->freqs);
    free(p->table);
}

enum { RUN_NORM = 1, RUN_ROPE = 2, RUN_QDQ = 4, RUN_ALL = 7 };

/* Run rows [r0, r0 + n) of p on the GPU (in place or to a strided buffer) into out (rows of y_stride;
 * in place, only the vectors are copied out), with the stages of `run` that the site has. */
static void run_gpu(gpu_ctx *c, const problem *p, int r0, int n, int in_place, int run, uint16_t *out)
{
    const vg_site *st = p->st;
    size_t xb = (size_t)n * p->x_stride * 2, yb = (size_t)n * p->y_stride * 2;
    CUdeviceptr dx = dev_upload(p->x + (size_t)r0 * p->x_stride, xb), dw = dev_upload(p->w, (size_t)st->width * 2);
    CUdeviceptr dpos = dev_upload(p->pos + r0, (size_t)n * 4);
    CUdeviceptr dfreq = dev_upload(p->freqs, (size_t)(st->rope ? st->rope : 2) / 2 * 4);
    CUdeviceptr dy = in_place ? dx : dev_alloc(yb);
    if (!in_place)
        dev_memset(dy, POISON & 0xff, yb);
    int rope = run & RUN_ROPE ? st->rope : 0;
    vec_glue_op op = {.norm_w = st->norm && (run & RUN_NORM) ? dw : 0, .eps = 1e-20f, .rope_dim = rope,
                      .freqs = dfreq, .pos = dpos, .inverse = rope ? st->inverse : 0,
                      .qdq = run & RUN_QDQ ? st->qdq : KVQ_NONE};
    int ys = in_place ? p->x_stride : p->y_stride;
    must(op_vec_glue(c->k, c->s, &op, dx, p->x_stride, dy, ys, n, st->heads, st->width), "vec_glue");
    dev_sync(c);
    if (in_place) {
        uint16_t *t = xmalloc(xb);
        dev_download(t, dx, xb);
        for (int i = 0; i < n; i++)
            memcpy(out + (size_t)i * p->y_stride, t + (size_t)i * p->x_stride, (size_t)st->heads * st->width * 2);
        free(t);
    } else {
        dev_download(out, dy, yb);
        dev_free(dy);
    }
    dev_free(dx);
    dev_free(dw);
    dev_free(dpos);
    dev_free(dfreq);
}

/* Elements of rows that differ (vector part) and guard elements (padding) that were written. */
static void compare(const problem *p, const uint16_t *a, const uint16_t *b, int rows, int guards, size_t *diff,
                    size_t *guard_bad)
{
    int hw = p->st->heads * p->st->width;
    *diff = *guard_bad = 0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < p->y_stride; j++) {
            size_t at = (size_t)i * p->y_stride + j;
            if (j < hw)
                *diff += a[at] != b[at];
            else if (guards)
                *guard_bad += a[at] != POISON;
        }
}

static double rel_l2_rows(const uint16_t *a, const uint16_t *b, const problem *p)
{
    int hw = p->st->heads * p->st->width;
    size_t n = (size_t)p->rows * hw;
    float *fa = xmalloc(n * 4), *fb = xmalloc(n * 4);
    for (int i = 0; i < p->rows; i++)
        for (int j = 0; j < hw; j++) {
            fa[(size_t)i * hw + j] = bf16_to_f32(a[(size_t)i * p->y_stride + j]);
            fb[(size_t)i * hw + j] = bf16_to_f32(b[(size_t)i * p->y_stride + j]);
        }
    double e = rel_l2(fa, fb, n);
    free(fa);
    free(fb);
    return e;
}

static void check_site(gpu_ctx *c, dsk_rng *r, const vg_site *st, int rows, int in_place)
{
    problem p;
    make_problem(r, st, rows, !in_place, &p);
    char shape[96];
    snprintf(shape, sizeof shape, "%s, rows %d x %d x %d%s", st->site, rows, st->heads, st->width,
             in_place ? ", in place" : ", strided");
    run_gpu(c, &p, 0, rows, in_place, RUN_ALL, p.gpu);
    size_t diff, guard;
    compare(&p, p.gpu, p.ref, rows, !in_place, &diff, &guard);
    size_t n = (size_t)rows * st->heads * st->width;
    if (!st->norm) {
        check(c, diff == 0 && guard == 0, "vec_glue", shape, "%zu of %zu values differ from the CPU, %zu guard writes",
              diff, n, guard);
    } else {
        /* the norm alone against the CPU's (its Σx² runs in another order), then the rest of the chain fed
         * the GPU's own normed vectors, bit for bit; together they pin the whole output. The output against
         * the CPU's is printed too: after a QDQ an ulp of the norm can move a code by one step (up to 2^-3
         * of the value in FP8, a third in FP4) or a block's power-of-two scale, a rounding point that makes
         * it larger than the norm's error */
        uint16_t *normed = xmalloc((size_t)rows * p.y_stride * 2), *nref = xmalloc((size_t)rows * p.y_stride * 2);
        run_gpu(c, &p, 0, rows, 0, RUN_NORM, normed);
        ref_vec_glue_op nop = {.norm_w = p.w, .eps = 1e-20f};
        ref_vec_glue(p.x, p.x_stride, nref, p.y_stride, rows, st->heads, st->width, &nop);
        double en = rel_l2_rows(normed, nref, &p), e = rel_l2_rows(p.gpu, p.ref, &p);
        int ok = en <= 1e-3 && guard == 0 && (st->qdq != KVQ_NONE || e <= 1e-3);
        check(c, ok, "vec_glue", shape, "norm rel L2 %.2e; output rel L2 %.2e, %.3f%% bit-equal%s, %zu guard writes", en,
              e, 100.0 * (double)(n - diff) / (double)n, st->qdq != KVQ_NONE ? " (QDQ after the norm)" : "", guard);
        if (st->rope || st->qdq) {
            uint16_t *chain = xmalloc((size_t)rows * p.y_stride * 2);
            vg_site rest = *st;
            rest.norm = 0;
            ref_vec_glue_op op = {.rope_dim = st->rope, .cos_sin = p.table, .table_row = p.trow,
                                  .inverse = st->inverse, .qdq = st->qdq};
            ref_vec_glue(normed, p.y_stride, chain, p.y_stride, rows, st->heads, st->width, &op);
            problem q = p;
            q.st = &rest;
            compare(&q, p.gpu, chain, rows, 0, &diff, &guard);
            char s2[128];
            snprintf(s2, sizeof s2, "%s, after the GPU norm", shape);
            check(c, diff == 0, "vec_glue", s2, "%zu of %zu values differ from the CPU", diff, n);
            free(chain);
        }
        free(normed);
        free(nref);
    }
    /* rows launched alone give the same bits as inside the launch */
    int picks[3] = {0, rows / 2, rows - 1}, bad = 0;
    uint16_t *one = xmalloc((size_t)p.y_stride * 2);
    for (int i = 0; i < (rows < 3 ? rows : 3); i++) {
        run_gpu(c, &p, picks[i], 1, in_place, RUN_ALL, one);
        bad += memcmp(one, p.gpu + (size_t)picks[i] * p.y_stride, (size_t)st->heads * st->width * 2) != 0;
    }
    check(c, bad == 0, "vec_glue", shape, "%d of %d rows launched alone differ from the batch", bad,
          rows < 3 ? rows : 3);
    free(one);
    free_problem(&p);
}

/* Every bf16 value of [-lim, lim] in blocks whose first entry is ±lim (so the block's scale is known), at
 * the power-of-two scales 2^e: the QDQ of each value against the CPU, bit for bit. Also blocks below the
 * amax floor (bf16 subnormals among them) and blocks of ±0. */
static void check_qdq_sweep(gpu_ctx *c, dsk_rng *r, int qdq, float lim, float floor_amax)
{
    const int width = 128, B = kvq_block(qdq);
    int nvals = 0;
    uint16_t *vals = xmalloc(65536 * 2);
    for (uint32_t b = 0; b < 65536; b++) {
        float f = bf16_to_f32((uint16_t)b);
        if (fabsf(f) <= lim) /* NaN fails this */
            vals[nvals++] = (uint16_t)b;
    }
    const int per_block = B - 1, scales[] = {0, -20, -3, 5, 60};
    int nblocks = (nvals + per_block - 1) / per_block;
    int rows_scale = (nblocks * B + width - 1) / width;
    int rows = rows_scale * 5 + 64;
    uint16_t *x = xmalloc((size_t)rows * width * 2);
    for (int si = 0; si < 5; si++) {
        uint16_t *base = x + (size_t)si * rows_scale * width;
        float m = ldexpf(1.0f, scales[si]);
        for (int blk = 0; blk < rows_scale * width / B; blk++) {
            uint16_t *v = base + (size_t)blk * B;
            v[0] = f32_to_bf16((blk & 1 ? -lim : lim) * m);
            for (int i = 1; i < B; i++) {
                int k = blk * per_block + i - 1;
                float f = k < nvals ? bf16_to_f32(vals[k]) : lim * (2.0f * dsk_rng_f32(r) - 1.0f);
                v[i] = f32_to_bf16(f * m);
            }
        }
    }
    /* 64 rows of tiny blocks: amax below the floor (including bf16 subnormals), and zeros of both signs */
    uint16_t *tail = x + (size_t)rows_scale * 5 * width;
    for (int i = 0; i < 64 * width; i++) {
        int kind = (i / B) % 4;
        float f = kind == 0 ? floor_amax * 0.9f * (2.0f * dsk_rng_f32(r) - 1.0f)
                : kind == 1 ? ldexpf(dsk_rng_normal(r), -130)
                : kind == 2 ? (i & 1 ? -0.0f : 0.0f)
                            : floor_amax * ldexpf(dsk_rng_normal(r), -(int)dsk_rng_below(r, 8));
        tail[i] = f32_to_bf16(f);
    }
    size_t n = (size_t)rows * width;
    uint16_t *ref = xmalloc(n * 2), *gpu = xmalloc(n * 2);
    ref_vec_glue_op op = {.qdq = qdq};
    ref_vec_glue(x, width, ref, width, rows, 1, width, &op);
    CUdeviceptr dx = dev_upload(x, n * 2), dy = dev_alloc(n * 2);
    vec_glue_op gop = {.qdq = qdq};
    must(op_vec_glue(c->k, c->s, &gop, dx, width, dy, width, rows, 1, width), "vec_glue");
    dev_sync(c);
    dev_download(gpu, dy, n * 2);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += gpu[i] != ref[i];
    /* the sweep reaches every code of the format at scale 1: count the distinct values it produced */
    static uint8_t seen[65536];
    memset(seen, 0, sizeof seen);
    int distinct = 0;
    for (size_t i = 0; i < (size_t)rows_scale * width; i++)
        if (!seen[ref[i]]) {
            seen[ref[i]] = 1;
            distinct++;
        }
    int expect = qdq == KVQ_FP8_E4M3 ? 254 : 16; /* all finite codes, ±0 distinct */
    char shape[80];
    snprintf(shape, sizeof shape, "QDQ %s sweep, %d blocks", qdq == KVQ_FP8_E4M3 ? "fp8" : qdq == KVQ_FP4_E4M3 ? "fp4/e4m3" : "fp4/e8m0",
             (int)(n / B));
    check(c, diff == 0 && distinct == expect, "vec_glue", shape, "%zu of %zu values differ; %d of %d codes reached", diff,
          n, distinct, expect);
    dev_free(dx);
    dev_free(dy);
    free(vals);
    free(x);
    free(ref);
    free(gpu);
}

/* FP4 with an e4m3 scale: the scale is amax/6 rounded to e4m3, so a block's amax picks the scale; sweep
 * amax over every positive e4m3 code times 6 (and random neighbours: rounded scales below amax/6 make
 * quotients above 6 saturate). */
static void check_fp4_e4m3_scales(gpu_ctx *c, dsk_rng *r)
{
    const int width = 128, B = 16;
    int rows = 2 * 126 * B / width + 1;
    size_t n = (size_t)rows * width;
    uint16_t *x = xmalloc(n * 2);
    for (size_t blk = 0; blk < n / B; blk++) {
        int code = 1 + (int)(blk % 126);
        float amax = 6.0f * e4m3_to_f32((uint8_t)code) * (blk >= 126 ? 1.0f + 0.1f * dsk_rng_f32(r) : 1.0f);
        uint16_t *v = x + blk * B;
        for (int i = 0; i < B; i++)
            v[i] = f32_to_bf16(amax * (2.0f * dsk_rng_f32(r) - 1.0f));
        v[dsk_rng_below(r, B)] = f32_to_bf16(blk & 1 ? -amax : amax);
    }
    uint16_t *ref = xmalloc(n * 2), *gpu = xmalloc(n * 2);
    ref_vec_glue_op op = {.qdq = KVQ_FP4_E4M3};
    ref_vec_glue(x, width, ref, width, rows, 1, width, &op);
    CUdeviceptr dx = dev_upload(x, n * 2);
    vec_glue_op gop = {.qdq = KVQ_FP4_E4M3};
    must(op_vec_glue(c->k, c->s, &gop, dx, width, dx, width, rows, 1, width), "vec_glue");
    dev_sync(c);
    dev_download(gpu, dx, n * 2);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += gpu[i] != ref[i];
    check(c, diff == 0, "vec_glue", "QDQ fp4/e4m3 every scale code", "%zu of %zu values differ", diff, n);
    dev_free(dx);
    free(x);
    free(ref);
    free(gpu);
}

/* Sites launched together (op_vec_glue_multi) == each launched alone, bit for bit (check_site holds the
 * lone launch to the reference): the engine's groups, of mixed QDQ kinds and widths, and a same-kind pair.
 * scatter: each op stores row r at y row perm[r] of a random permutation with about a quarter of the rows
 * dropped (-1: stored nowhere), as the compressor stores into its pool rows; the dropped destinations stay
 * as they were. */
static void check_multi(gpu_ctx *c, dsk_rng *r, const int *ids, int n, int rows, int scatter)
{
    int32_t *perm = xmalloc((size_t)rows * 4);
    for (int i = 0; i < rows; i++)
        perm[i] = i;
    for (int i = rows - 1; i > 0; i--) {
        int j = (int)dsk_rng_below(r, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int i = 0; i < rows && scatter; i++)
        if (rows > 1 && dsk_rng_below(r, 4) == 0)
            perm[i] = -1;
    CUdeviceptr dperm = scatter ? dev_upload(perm, (size_t)rows * 4) : 0;
    problem p[VG_MAX_OPS];
    CUdeviceptr dx[VG_MAX_OPS], dy[VG_MAX_OPS], dw[VG_MAX_OPS], dpos[VG_MAX_OPS], dfreq[VG_MAX_OPS];
    vec_glue_op op[VG_MAX_OPS];
    vec_glue_call call[VG_MAX_OPS];
    char shape[160];
    int len = snprintf(shape, sizeof shape, "rows %d:", rows);
    for (int i = 0; i < n; i++) {
        const vg_site *st = &sites[ids[i]];
        make_problem(r, st, rows, 1, &p[i]);
        size_t xb = (size_t)rows * p[i].x_stride * 2, yb = (size_t)rows * p[i].y_stride * 2;
        dx[i] = dev_upload(p[i].x, xb);
        dw[i] = dev_upload(p[i].w, (size_t)st->width * 2);
        dpos[i] = dev_upload(p[i].pos, (size_t)rows * 4);
        dfreq[i] = dev_upload(p[i].freqs, (size_t)(st->rope ? st->rope : 2) / 2 * 4);
        dy[i] = dev_alloc(yb);
        dev_memset(dy[i], POISON & 0xff, yb);
        op[i] = (vec_glue_op){.norm_w = st->norm ? dw[i] : 0, .eps = 1e-20f, .rope_dim = st->rope,
                              .freqs = dfreq[i], .pos = dpos[i], .inverse = st->inverse, .qdq = st->qdq};
        call[i] = (vec_glue_call){&op[i], dx[i], p[i].x_stride, dy[i], p[i].y_stride, st->heads, st->width, dperm};
        len += snprintf(shape + len, sizeof shape - (size_t)len, "%s %s", i ? " +" : "", st->site);
    }
    if (scatter)
        len += snprintf(shape + len, sizeof shape - (size_t)len, ", rows scattered");
    must(op_vec_glue_multi(c->k, c->s, call, n, rows), "vec_glue, ops in one launch");
    dev_sync(c);
    size_t diff = 0;
    for (int i = 0; i < n; i++) {
        size_t yb = (size_t)rows * p[i].y_stride * 2, ys = (size_t)p[i].y_stride;
        uint16_t *alone = xmalloc(yb), *want = xmalloc(yb);
        dev_download(p[i].gpu, dy[i], yb);
        run_gpu(c, &p[i], 0, rows, 0, RUN_ALL, alone);
        for (size_t e = 0; e < yb / 2; e++)
            want[e] = scatter ? POISON : alone[e];
        for (int rr = 0; rr < rows && scatter; rr++)
            if (perm[rr] >= 0)
                memcpy(want + (size_t)perm[rr] * ys, alone + (size_t)rr * ys, ys * 2);
        for (size_t e = 0; e < yb / 2; e++)
            diff += p[i].gpu[e] != want[e];
        free(alone);
        free(want);
        dev_free(dx[i]);
        dev_free(dy[i]);
        dev_free(dw[i]);
        dev_free(dpos[i]);
        dev_free(dfreq[i]);
        free_problem(&p[i]);
    }
    check(c, diff == 0, "vec_glue", shape, "one launch == each alone: %zu elements differ (guards included)", diff);
    if (dperm)
        dev_free(dperm);
    free(perm);
}

static void check_refusals(gpu_ctx *c)
{
    CUdeviceptr buf = dev_alloc(1 << 16);
    vec_glue_op ok = {.qdq = KVQ_FP8_E4M3}, bad_qdq = {.qdq = (kvq_kind)7}, bad_rope = {.rope_dim = 12, .freqs = buf,
                                                                                         .pos = buf};
    int refused = 0, cases = 0;
#define REFUSE(call)                                                                                               \
    do {                                                                                                           \
        cases++;                                                                                                   \
        refused += (call) != 0 && strstr(dsk_err_msg(), "vec_glue") != NULL;                                       \
    } while (0)
    REFUSE(op_vec_glue(c->k, c->s, &ok, buf, 512, buf, 512, 4, 1, 520));      /* width not a multiple of 32 */
    REFUSE(op_vec_glue(c->k, c->s, &ok, buf + 8, 512, buf, 512, 4, 1, 512));  /* misaligned x */
    REFUSE(op_vec_glue(c->k, c->s, &ok, buf, 256, buf, 256, 4, 1, 512));      /* stride below the row */
    REFUSE(op_vec_glue(c->k, c->s, &ok, buf, 512, buf, 1024, 4, 1, 512));     /* in place, two strides */
    REFUSE(op_vec_glue(c->k, c->s, &bad_qdq, buf, 512, buf, 512, 4, 1, 512)); /* unknown QDQ */
    REFUSE(op_vec_glue(c->k, c->s, &bad_rope, buf, 512, buf, 512, 4, 1, 512)); /* rope_dim 12 */
    REFUSE(op_vec_glue(c->k, c->s, &ok, buf, 4096, buf, 4096, 4, 1, 4096));   /* wider than 2048 */
    vec_glue_call two[4] = {{&ok, buf, 512, buf, 512, 1, 512, 0},
                            {&bad_rope, buf + 4096, 512, buf + 4096, 512, 1, 512, 0}};
    REFUSE(op_vec_glue_multi(c->k, c->s, two, 2, 4)); /* the second op's rope_dim 12 */
    two[1] = two[0];
    REFUSE(op_vec_glue_multi(c->k, c->s, two, 4, 4)); /* four ops */
    REFUSE(op_vec_glue_multi(c->k, c->s, two, 0, 4)); /* none */
    vec_glue_call idx[2] = {{&ok, buf, 512, buf, 512, 1, 512, buf + 8192},         /* row index, in place */
                            {&ok, buf, 512, buf + 4096, 512, 1, 512, buf + 8194}}; /* misaligned index */
    REFUSE(op_vec_glue_multi(c->k, c->s, idx, 1, 4));
    REFUSE(op_vec_glue_multi(c->k, c->s, idx + 1, 1, 4));
    check(c, refused == cases, "vec_glue", "bad arguments", "%d of %d refused with a vec_glue message", refused, cases);
#undef REFUSE
    dev_free(buf);
}

void test_vec_glue(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x7e6);
    for (size_t si = 0; si < sizeof sites / sizeof sites[0]; si++) {
        const vg_site *st = &sites[si];
        int prompt = st->heads >= 8 ? 300 : 1000;
        const int nrows[] = {1, 2, 7, 16, 64};
        for (int ri = 0; ri < 5; ri++)
            for (int in_place = 0; in_place < 2; in_place++)
                check_site(c, &r, st, nrows[ri], in_place);
        check_site(c, &r, st, prompt, 1);
    }
    check_qdq_sweep(c, &r, KVQ_FP8_E4M3, 448.0f, 1e-4f);
    check_qdq_sweep(c, &r, KVQ_FP4_E8M0, 6.0f, 6.0f * 0x1p-126f);
    check_qdq_sweep(c, &r, KVQ_FP4_E4M3, 6.0f, 6.0f * 0x1p-9f);
    check_fp4_e4m3_scales(c, &r);
    /* the engine's groups: Q RoPE + window key + latent norm; index key + latent; tiny's; a same-kind pair */
    const int attn[] = {6, 0, 2}, comp[] = {4, 3}, tiny_attn[] = {12, 8}, tiny_comp[] = {10, 9}, same[] = {6, 7};
    const int mrows[] = {1, 7, 64, 300};
    for (int i = 0; i < 4; i++) {
        check_multi(c, &r, attn, 3, mrows[i], 0);
        check_multi(c, &r, comp, 2, mrows[i], 0);
        check_multi(c, &r, comp, 2, mrows[i], 1); /* the compressor's store into its pool rows */
        check_multi(c, &r, tiny_attn, 2, mrows[i], 0);
        check_multi(c, &r, tiny_comp, 2, mrows[i], 0);
        check_multi(c, &r, tiny_comp, 2, mrows[i], 1);
        check_multi(c, &r, same, 2, mrows[i], 1);
    }
    check_refusals(c);
}
