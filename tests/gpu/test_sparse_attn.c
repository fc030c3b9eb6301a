/* GPU checks of sparse_attn against runtime/ref/sparse_attn.h (the canonical list and the row's attention,
 * then the inverse RoPE of runtime/ref/rope.h): rounds of several sequences whose windows reach into the
 * ring and start at position 0, selections of every length up to top-k, DSpark blocks, an empty list.
 * Gates: relative L2 error <= 1e-3 against the CPU; the whole-list and the split form equal bit for bit;
 * each row of a launch equal to the row launched alone; no write past the output; bad arguments refused. */
#include "kit/src/sparse_attn_abi.cuh"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/sparse_attn.h"
#include "runtime/launch/vec_glue.h"
#include "runtime/ref/rope.h"
#include "runtime/ref/sparse_attn.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GUARD = 256 };

typedef struct {
    const char *name;
    int heads, hd, rope, window, topk, pool;
    rope_params rp;
} attn_shape;

/* One launch's inputs on the host and the device. */
typedef struct {
    int rows, ring, sel_ld, max_list, dspark, rope;
    sparse_attn_row *meta;
    uint16_t *q, *kv_call, *kv_ring, *kv2;
    int32_t *sel;
    float *sink, *freqs;
    size_t n_call, n_ring, n_kv2;
    CUdeviceptr dq, dcall, dring, dkv2, dsel, dmeta, dsink, dfreqs, dout, dws;
    size_t ws_bytes;
} attn_round;

static int below(dsk_rng *r, int n)
{
    return n > 0 ? (int)dsk_rng_below(r, (uint64_t)n) : 0;
}

/* nsel distinct ascending indices below pool. */
static void pick_sorted(dsk_rng *r, int32_t *out, int nsel, int pool)
{
    int got = 0;
    for (int i = 0; i < pool && got < nsel; i++)
        if ((int)dsk_rng_below(r, (uint64_t)(pool - i)) < nsel - got) /* selection sampling: uniform subsets */
            out[got++] = i;
}

/* A round of `rows` rows. Backbone: the rows split into runs of consecutive positions of up to nseq
 * sequences (one sequence for a prompt chunk); each row's window from its run (this round's keys) and the
 * sequence's ring, then a selection of its sequence's compressed rows. DSpark: blocks of 5 rows whose
 * windows end before the block (all in the ring), then the block's 5 rows, no selection. */
static void make_round(dsk_rng *r, const attn_shape *sh, int rows, int nseq, int dspark, int rope, int empty_row,
                       attn_round *a)
{
    if (dspark)
        rows = 5 * nseq;
    memset(a, 0, sizeof *a);
    int hd = sh->hd, H = sh->heads, W = sh->window;
    a->rows = rows, a->dspark = dspark, a->rope = rope;
    a->ring = W + (dspark ? 6 : 8); /* window + spare: max(8, block + 1) */
    a->meta = xmalloc(sizeof(sparse_attn_row) * (size_t)rows);
    a->sel_ld = sh->topk;
    a->sel = dspark ? NULL : xmalloc(sizeof(int32_t) * (size_t)rows * (size_t)a->sel_ld);
    a->n_call = (size_t)rows, a->n_ring = (size_t)nseq * a->ring, a->n_kv2 = dspark ? 0 : (size_t)nseq * sh->pool;
    a->max_list = W + (dspark ? 5 : sh->topk);
    /* sequence s owns rows [s·rows/nseq, (s+1)·rows/nseq), consecutive positions from its pos0 (DSpark:
     * one block of 5 rows per sequence) */
    for (int s = 0; s < nseq; s++) {
        int r0 = dspark ? 5 * s : (int)((int64_t)s * rows / nseq), r1 = dspark ? 5 * s + 5 : (int)((int64_t)(s + 1) * rows / nseq);
        /* starts at 0, inside the first window, and far into a 1M context */
        int kind = below(r, 3);
        int pos0 = kind == 0 ? 0 : kind == 1 ? below(r, W) : 1000 + below(r, (1 << 20) - 2000 - rows);
        for (int row = r0; row < r1; row++) {
            int i = row - r0;
            sparse_attn_row *m = &a->meta[row];
            m->ring_base = s * a->ring;
            if (dspark) {
                /* the block sits at pos0 + 1 .. pos0 + 5 after the committed position pos0 */
                m->pos = pos0 + 1 + i;
                m->win_hi = pos0;
                m->win_lo = pos0 - W + 1 < 0 ? 0 : pos0 - W + 1;
                m->call_pos0 = pos0 + 1, m->call_row0 = r0;
                m->base2 = r0, m->nsel = 5;
            } else {
                int p = pos0 + i;
                m->pos = p, m->win_hi = p, m->win_lo = p - W + 1 < 0 ? 0 : p - W + 1;
                m->call_pos0 = pos0, m->call_row0 = r0;
                m->base2 = s * sh->pool;
                int cap = sh->topk < sh->pool ? sh->topk : sh->pool, pick = below(r, 4);
                m->nsel = pick == 0 ? cap : pick == 1 ? 0 : below(r, cap + 1);
                pick_sorted(r, a->sel + (size_t)row * a->sel_ld, m->nsel, sh->pool);
            }
        }
    }
    if (empty_row >= 0 && empty_row < rows) {
        a->meta[empty_row].win_lo = a->meta[empty_row].win_hi + 1;
        a->meta[empty_row].nsel = 0;
    }
    a->q = xmalloc((size_t)rows * H * hd * 2);
    fill_bf16(r, a->q, rows * H, hd, 0.5f);
    a->kv_call = xmalloc(a->n_call * hd * 2);
    fill_bf16(r, a->kv_call, (int)a->n_call, hd, 1.0f);
    a->kv_ring = xmalloc(a->n_ring * hd * 2);
    fill_bf16(r, a->kv_ring, (int)a->n_ring, hd, 1.0f);
    a->kv2 = xmalloc((a->n_kv2 ? a->n_kv2 : 1) * hd * 2);
    fill_bf16(r, a->kv2, (int)a->n_kv2, hd, 1.0f);
    a->sink = xmalloc(sizeof(float) * (size_t)H);
    for (int h = 0; h < H; h++)
        a->sink[h] = 4.0f * dsk_rng_f32(r) - 2.0f;
    a->freqs = xmalloc(sizeof(float) * (size_t)(sh->rope / 2 + 1));
    ref_rope_freqs(&sh->rp, a->freqs);

    a->dq = dev_upload(a->q, (size_t)rows * H * hd * 2);
    a->dcall = dev_upload(a->kv_call, a->n_call * hd * 2);
    a->dring = dev_upload(a->kv_ring, a->n_ring * hd * 2);
    a->dkv2 = dspark ? 0 : dev_upload(a->kv2, a->n_kv2 * hd * 2);
    a->dsel = dspark ? 0 : dev_upload(a->sel, sizeof(int32_t) * (size_t)rows * a->sel_ld);
    a->dmeta = dev_upload(a->meta, sizeof(sparse_attn_row) * (size_t)rows);
    a->dsink = dev_upload(a->sink, sizeof(float) * (size_t)H);
    a->dfreqs = dev_upload(a->freqs, sizeof(float) * (size_t)(sh->rope / 2 + 1));
    a->dout = dev_alloc((size_t)rows * H * hd * 2 + GUARD);
}

static sparse_attn_args round_args(const attn_shape *sh, const attn_round *a)
{
    sparse_attn_args g = {.q = a->dq, .kv_call = a->dcall, .kv_ring = a->dring, .kv2 = a->dspark ? a->dcall : a->dkv2,
                          .sel = a->dsel, .rows_desc = a->dmeta, .sink = a->dsink, .freqs = a->rope ? a->dfreqs : 0,
                          .out = a->dout, .ws = a->dws, .ws_bytes = a->ws_bytes, .rows = a->rows, .heads = sh->heads,
                          .head_dim = sh->hd, .ring = a->ring, .sel_ld = a->sel_ld, .rope_dim = a->rope ? sh->rope : 0,
                          .max_list = a->max_list};
    return g;
}

static void free_round(attn_round *a)
{
    CUdeviceptr d[] = {a->dq, a->dcall, a->dring, a->dkv2, a->dsel, a->dmeta, a->dsink, a->dfreqs, a->dout, a->dws};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (d[i])
            dev_free(d[i]);
    free(a->meta);
    free(a->q);
    free(a->kv_call);
    free(a->kv_ring);
    free(a->kv2);
    free(a->sel);
    free(a->sink);
    free(a->freqs);
}

/* The CPU's answer for every row: the canonical list, the row's attention, the inverse RoPE at its pos. */
static void reference(const attn_shape *sh, const attn_round *a, uint16_t *out)
{
    int hd = sh->hd, H = sh->heads, R = sh->rope;
    const uint16_t **keys = xmalloc(sizeof(*keys) * (size_t)a->max_list);
    float *table = xmalloc(sizeof(float) * (size_t)(R + 2));
    for (int i = 0; i < a->rows; i++) {
        const sparse_attn_row *m = &a->meta[i];
        ref_attn_keys src = {.call = a->kv_call + (int64_t)m->call_row0 * hd, .call_pos0 = m->call_pos0,
                             .ring = a->kv_ring + (int64_t)m->ring_base * hd, .ring_slots = a->ring,
                             .rows2 = (a->dspark ? a->kv_call : a->kv2) + (int64_t)m->base2 * hd, .hd = hd};
        int n = ref_attn_list(&src, m->win_lo, m->win_hi, a->sel ? a->sel + (size_t)i * a->sel_ld : NULL, m->nsel,
                              keys);
        uint16_t *o = out + (size_t)i * H * hd;
        sparse_attention_row(a->q + (size_t)i * H * hd, H, hd, keys, n, a->sink, o);
        if (a->rope) {
            int32_t zero = 0;
            ref_rope_table(&sh->rp, m->pos, 1, table);
            ref_rope_apply_bf16(o, 1, H, hd, R, &zero, table, 1);
        }
    }
    free(keys);
    free(table);
}

static int guard_intact(CUdeviceptr d, size_t bytes)
{
    unsigned char g[GUARD];
    dev_download(g, d + bytes, GUARD);
    for (int i = 0; i < GUARD; i++)
        if (g[i] != 0xa5)
            return 0;
    return 1;
}

/* Run one form into the round's output (poisoned with NaNs first, guard bytes after it); download. */
static int run_form(gpu_ctx *c, const attn_shape *sh, attn_round *a, int split, uint16_t *host)
{
    size_t bytes = (size_t)a->rows * sh->heads * sh->hd * 2;
    dev_memset(a->dout, 0xff, bytes);
    dev_memset(a->dout + bytes, 0xa5, GUARD);
    sparse_attn_args g = round_args(sh, a);
    must(op_sparse_attn_form(c->k, c->s, &g, split), "sparse_attn");
    dev_sync(c);
    dev_download(host, a->dout, bytes);
    return guard_intact(a->dout, bytes);
}

/* Row i launched alone (the rule's form for one row): its q, description, selection and output offset. */
static void run_alone(gpu_ctx *c, const attn_shape *sh, attn_round *a, int i, CUdeviceptr out1, uint16_t *host)
{
    size_t per = (size_t)sh->heads * sh->hd * 2;
    sparse_attn_args g = round_args(sh, a);
    g.rows = 1;
    g.q = a->dq + i * per;
    g.rows_desc = a->dmeta + (CUdeviceptr)i * sizeof(sparse_attn_row);
    g.sel = a->dsel ? a->dsel + (CUdeviceptr)i * a->sel_ld * 4 : 0;
    g.out = out1;
    g.ws_bytes = op_sparse_attn_ws_bytes(&g);
    CUdeviceptr ws = g.ws_bytes ? dev_alloc(g.ws_bytes) : 0;
    g.ws = ws;
    must(op_sparse_attn(c->k, c->s, &g), "sparse_attn alone");
    dev_sync(c);
    dev_download(host, out1, per);
    if (ws)
        dev_free(ws);
}

static void to_f32(const uint16_t *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = bf16_to_f32(x[i]);
}

static void check_round(gpu_ctx *c, dsk_rng *r, const attn_shape *sh, int rows, int nseq, int dspark, int rope,
                        int empty_row)
{
    attn_round a;
    make_round(r, sh, rows, nseq, dspark, rope, empty_row, &a);
    rows = a.rows;
    /* a workspace for the split form whatever the rule picks */
    sparse_attn_args g = round_args(sh, &a);
    a.ws_bytes = op_sparse_attn_ws_bytes_form(&g, 1);
    a.dws = dev_alloc(a.ws_bytes);
    size_t n = (size_t)rows * sh->heads * sh->hd;
    uint16_t *rule = xmalloc(n * 2), *whole = xmalloc(n * 2), *split = xmalloc(n * 2), *ref = xmalloc(n * 2);
    int guards = run_form(c, sh, &a, -1, rule);
    guards &= run_form(c, sh, &a, 0, whole);
    guards &= run_form(c, sh, &a, 1, split);
    reference(sh, &a, ref);
    float *gf = xmalloc(n * 4), *rf = xmalloc(n * 4);
    to_f32(rule, gf, n);
    to_f32(ref, rf, n);
    double e = rel_l2(gf, rf, n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += rule[i] != ref[i];
    int forms = !memcmp(whole, split, n * 2) && !memcmp(rule, whole, n * 2);
    /* each row alone (all of a decode round, eight of a prompt chunk) equals its row of the launch */
    size_t per = (size_t)sh->heads * sh->hd;
    CUdeviceptr out1 = dev_alloc(per * 2);
    uint16_t *alone = xmalloc(per * 2);
    int invariant = 1, tried = rows <= 16 ? rows : 8;
    for (int t = 0; t < tried && invariant; t++) {
        int i = rows <= 16 ? t : below(r, rows);
        run_alone(c, sh, &a, i, out1, alone);
        invariant = !memcmp(alone, rule + (size_t)i * per, per * 2);
    }
    char shape[96];
    snprintf(shape, sizeof shape, "%s%s rows %d x %d seq%s%s", sh->name, dspark ? " dspark" : "", rows, nseq,
             rope ? "" : " no-rope", empty_row >= 0 ? " +empty" : "");
    check(c, e <= 1e-3 && forms && invariant && guards, "sparse_attn", shape,
          "rel L2 %.2e (%zu of %zu bf16 differ), whole == split: %s, rows == alone: %s, guard: %s", e, differ, n,
          forms ? "yes" : "NO", invariant ? "yes" : "NO", guards ? "intact" : "OVERWRITTEN");
    dev_free(out1);
    free(alone);
    free(rule);
    free(whole);
    free(split);
    free(ref);
    free(gf);
    free(rf);
    free_round(&a);
}

/* The queries' RoPE on load (q_rope) == vec_glue's RoPE of q first, then the attention: bit for bit, in
 * both forms (the engine's round takes q unrotated). */
static void check_q_rope(gpu_ctx *c, dsk_rng *r, const attn_shape *sh, int rows, int nseq, int dspark)
{
    attn_round a;
    make_round(r, sh, rows, nseq, dspark, 1, -1, &a);
    rows = a.rows;
    sparse_attn_args g = round_args(sh, &a);
    a.ws_bytes = op_sparse_attn_ws_bytes_form(&g, 1);
    a.dws = dev_alloc(a.ws_bytes);
    size_t n = (size_t)rows * sh->heads * sh->hd;
    int32_t *pos = xmalloc(sizeof(int32_t) * (size_t)rows);
    for (int i = 0; i < rows; i++)
        pos[i] = a.meta[i].pos;
    CUdeviceptr dpos = dev_upload(pos, sizeof(int32_t) * (size_t)rows), dq2 = dev_alloc(n * 2);
    vec_glue_op rope = {.rope_dim = sh->rope, .freqs = a.dfreqs, .pos = dpos, .qdq = KVQ_NONE};
    must(op_vec_glue(c->k, c->s, &rope, a.dq, sh->heads * sh->hd, dq2, sh->heads * sh->hd, rows, sh->heads, sh->hd),
         "vec_glue RoPE of q");
    dev_sync(c);
    uint16_t *pre = xmalloc(n * 2), *load = xmalloc(n * 2);
    int differ = 0, guards = 1;
    for (int split = 0; split < 2; split++) {
        CUdeviceptr raw = a.dq;
        a.dq = dq2;
        guards &= run_form(c, sh, &a, split, pre);
        a.dq = raw;
        size_t bytes = n * 2;
        dev_memset(a.dout, 0xff, bytes);
        dev_memset(a.dout + bytes, 0xa5, GUARD);
        sparse_attn_args q1 = round_args(sh, &a);
        q1.q_rope = 1;
        must(op_sparse_attn_form(c->k, c->s, &q1, split), "sparse_attn, q RoPE on load");
        dev_sync(c);
        dev_download(load, a.dout, bytes);
        guards &= guard_intact(a.dout, bytes);
        for (size_t i = 0; i < n; i++)
            differ += pre[i] != load[i];
    }
    char shape[96];
    snprintf(shape, sizeof shape, "%s%s rows %d, q RoPE on load", sh->name, dspark ? " dspark" : "", rows);
    check(c, differ == 0 && guards, "sparse_attn", shape,
          "%d outputs differ from RoPE'd q (whole and split forms), guard: %s", differ, guards ? "intact" : "OVERWRITTEN");
    dev_free(dpos);
    dev_free(dq2);
    free(pos);
    free(pre);
    free(load);
    free_round(&a);
}

/* Bad arguments: each refused with a message naming the family, before any launch. */
static void check_refusals(gpu_ctx *c, dsk_rng *r, const attn_shape *sh)
{
    attn_round a;
    make_round(r, sh, 4, 2, 0, 1, -1, &a);
    struct {
        const char *what, *expect;
        sparse_attn_args g;
    } bad[9];
    int nb = 0;
    sparse_attn_args g0 = round_args(sh, &a);
    g0.ws_bytes = op_sparse_attn_ws_bytes_form(&g0, 1);
    a.dws = dev_alloc(g0.ws_bytes);
    g0.ws = a.dws;
    bad[nb].what = "head_dim 96", bad[nb].expect = "head_dim", bad[nb].g = g0, bad[nb++].g.head_dim = 96;
    bad[nb].what = "q misaligned", bad[nb].expect = "aligned", bad[nb].g = g0, bad[nb++].g.q = g0.q + 2;
    bad[nb].what = "odd rope_dim", bad[nb].expect = "rope_dim", bad[nb].g = g0, bad[nb++].g.rope_dim = 31;
    bad[nb].what = "rope without freqs", bad[nb].expect = "freq", bad[nb].g = g0, bad[nb++].g.freqs = 0;
    bad[nb].what = "no workspace", bad[nb].expect = "workspace", bad[nb].g = g0, bad[nb].g.ws = 0,
    bad[nb++].g.ws_bytes = 0;
    bad[nb].what = "small workspace", bad[nb].expect = "workspace", bad[nb].g = g0,
    bad[nb++].g.ws_bytes = g0.ws_bytes - 1;
    bad[nb].what = "ring 0", bad[nb].expect = "ring", bad[nb].g = g0, bad[nb++].g.ring = 0;
    bad[nb].what = "rows 70000", bad[nb].expect = "rows", bad[nb].g = g0, bad[nb++].g.rows = 70000;
    bad[nb].what = "q RoPE without rope_dim", bad[nb].expect = "multiple of 8", bad[nb].g = g0, bad[nb].g.rope_dim = 0,
    bad[nb].g.freqs = 0, bad[nb++].g.q_rope = 1;
    for (int i = 0; i < nb; i++) {
        int rc = op_sparse_attn_form(c->k, c->s, &bad[i].g, 1);
        const char *msg = dsk_err_msg();
        int ok = rc != 0 && strstr(msg, "sparse_attn") && strstr(msg, bad[i].expect);
        char shape[64];
        snprintf(shape, sizeof shape, "%s refuses %s", sh->name, bad[i].what);
        check(c, ok, "sparse_attn", shape, "%s", rc ? msg : "ACCEPTED");
    }
    free_round(&a);
}

void test_sparse_attn(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x5a77);
    const attn_shape shapes[] = {
        {"release", 64, 512, 64, 128, 512, 2048, {64, 160000.0, 16.0, 32, 1, 65536}},
        {"tiny", 8, 128, 32, 8, 4, 24, {32, 10000.0, 0, 32, 1, 0}},
        /* the tiny preset's heads with the release's list lengths: head_dim 128 over several blocks */
        {"hd128-long", 8, 128, 32, 128, 512, 2048, {32, 160000.0, 16.0, 32, 1, 65536}},
    };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const attn_shape *sh = &shapes[si];
        /* the emulator's small run: the release shape at 1 and 2 rows and one DSpark block only, the
         * head_dim 128 shapes with a 256-row prompt chunk */
        int small = c->small && si == 0;
        const int nrows[] = {1, 2, 7, 16, 64};
        for (size_t ri = 0; ri < (small ? 2 : sizeof nrows / sizeof nrows[0]); ri++)
            check_round(c, &r, sh, nrows[ri], nrows[ri] < 4 ? nrows[ri] : 4, 0, 1, nrows[ri] == 7 ? 3 : -1);
        if (!small) {
            check_round(c, &r, sh, 16, 3, 0, 0, -1); /* no inverse RoPE */
            /* a prompt chunk of one sequence: enough outputs that an fp32 ulp of difference between the
             * forms shows through the bf16 rounding */
            check_round(c, &r, sh, si == 0 ? 320 : c->small ? 256 : 2048, 1, 0, 1, -1);
        }
        check_round(c, &r, sh, 5, 1, 1, 1, -1); /* one DSpark block */
        if (!small) {
            check_round(c, &r, sh, 15, 3, 1, 1, -1); /* three sequences' blocks */
            check_round(c, &r, sh, 15, 3, 1, 0, -1);
        }
        check_q_rope(c, &r, sh, 1, 1, 0);
        check_q_rope(c, &r, sh, small ? 2 : 16, small ? 2 : 4, 0);
        check_q_rope(c, &r, sh, 5, 1, 1);
        check_refusals(c, &r, sh);
    }
}
