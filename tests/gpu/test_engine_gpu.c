/* The GPU engine against the CPU reference, layer by layer with teacher forcing (docs/model.md
 * "Exactness"): a prompt, then the CPU's greedy tokens one round at a time; every GPU block is fed the
 * CPU's input to it (streams and π), and after its attention the CPU's attention output, so each sublayer
 * is compared on identical inputs. Reported per layer: the relative L2 error of the attention and MoE
 * outputs, the share of window-ring and compressed-cache codes that differ and by how many code steps, the rows whose MoE expert set
 * differs from the CPU's and the largest CPU margin at such a row's cut, and the logits' error given the
 * same last hidden state. Gates: the sublayer outputs within ENGINE_TOL (on random weights an ulp can flip
 * an expert or a top-k pick), every flipped expert choice a near-tie (margin under 1 % of the row's
 * largest score), and the same for the indexer's top-k and the candidate blocks (margin: the CPU's k-th minus
 * (k+1)-th score over the row's largest). Run: gpu_tests KIT engine, with
 * DSKIT_TEST_MODEL pointing at a model folder (the tiny preset), or the program makes one. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/cpu_model.h"
#include "runtime/cpu/vision_tower.h"
#include "runtime/engine/generate.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/model/vision_span.h"
#include "runtime/ref/cand_blocks.h"
#include "runtime/ref/kvquant.h"
#include "runtime/ref/moe_route.h"
#include "runtime/ref/sampling.h"
#include "tests/gpu/gpu_check.h"
#include "tests/engine/test_fill.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENGINE_TOL 2e-2 /* bf16 outputs of sums ordered differently, through norms that amplify */
#define N0 20
#define STEPS 64 /* greedy steps after the prompt (DSKIT_TEST_STEPS lowers it: full-width presets on the CPU are slow) */
#define CALLS (1 + STEPS)
#define MAXL 64

typedef struct {
    uint16_t *in[CALLS][MAXL], *attn[CALLS][MAXL], *out[CALLS][MAXL];
    float *pi_in[CALLS][MAXL];
    float *route[CALLS][MAXL]; /* the router's logits [n][n_experts] */
    int pi_stride[CALLS][MAXL];
    /* an index source's choices per row: its top-k (k ascending rows of index_topk), k, the margin at its
     * cut; on the candidate source its kept blocks (n ascending of candidate_topk_blocks), n, margin */
    int32_t *isel[CALLS][MAXL], *csel[CALLS][MAXL];
    int *ik[CALLS][MAXL], *cn[CALLS][MAXL];
    double *imargin[CALLS][MAXL], *cmargin[CALLS][MAXL];
    int call;
    const model_config *c;
    const cpu_model *m;
} cpu_rec;

/* The margin at a top-k cut of n scores: (the k-th largest − the (k+1)-th) over the largest finite |score|;
 * +∞ when nothing competes (n <= k, the (k+1)-th masked to −∞, or the k-th pinned to +∞). */
static double cut_margin(const float *v, int64_t n, int k)
{
    if (n <= k || k <= 0)
        return INFINITY;
    float *t = xmalloc(sizeof(float) * (size_t)n);
    memcpy(t, v, sizeof(float) * (size_t)n);
    /* the k + 1 largest, by selection (n is a context's reach at most) */
    for (int i = 0; i <= k; i++) {
        int64_t best = i;
        for (int64_t j = i + 1; j < n; j++)
            if (t[j] > t[best])
                best = j;
        float x = t[i];
        t[i] = t[best];
        t[best] = x;
    }
    double top = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i]) && fabs(v[i]) > top)
            top = fabs(v[i]);
    double kth = t[k - 1], next = t[k];
    free(t);
    if (!isfinite(kth) || !isfinite(next) || top == 0)
        return INFINITY;
    return (kth - next) / top;
}

static void cpu_index_hook(void *ctx, int l, int row, const float *score, int64_t reach, const int32_t *sel, int k,
                           const int32_t *cand, int cand_n)
{
    cpu_rec *r = ctx;
    const model_config *c = r->c;
    int K = c->index_topk, C = c->candidate_topk_blocks, call = r->call;
    if (l >= MAXL || row >= N0)
        return;
    if (!r->isel[call][l]) {
        r->isel[call][l] = xmalloc(sizeof(int32_t) * (size_t)N0 * K);
        r->ik[call][l] = xmalloc(sizeof(int) * N0);
        r->imargin[call][l] = xmalloc(sizeof(double) * N0);
    }
    memcpy(r->isel[call][l] + (size_t)row * K, sel, sizeof(int32_t) * (size_t)k);
    r->ik[call][l][row] = k;
    r->imargin[call][l][row] = cut_margin(score, reach, k);
    if (!cand)
        return;
    if (!r->csel[call][l]) {
        r->csel[call][l] = xmalloc(sizeof(int32_t) * (size_t)N0 * C);
        r->cn[call][l] = xmalloc(sizeof(int) * N0);
        r->cmargin[call][l] = xmalloc(sizeof(double) * N0);
    }
    memcpy(r->csel[call][l] + (size_t)row * C, cand, sizeof(int32_t) * (size_t)cand_n);
    r->cn[call][l][row] = cand_n;
    int B = c->candidate_block_size;
    float *bs = xmalloc(sizeof(float) * (size_t)((reach + B - 1) / B + 1));
    int64_t nb = ref_cand_block_scores(score, reach, B, bs);
    r->cmargin[call][l][row] = cut_margin(bs, nb, (int)(nb < C ? nb : C));
    free(bs);
}

static size_t stream_elems(const model_config *c, int n)
{
    return (size_t)n * c->hc_mult * c->dim;
}

static void cpu_hook(void *ctx, int l, int stage, uint16_t *X, float *pi, int n)
{
    cpu_rec *r = ctx;
    if (stage == CPU_HOOK_ROUTE) {
        size_t E = (size_t)r->m->blocks[l].n_experts;
        r->route[r->call][l] = xmalloc(sizeof(float) * (size_t)n * E);
        memcpy(r->route[r->call][l], pi, sizeof(float) * (size_t)n * E);
        return;
    }
    size_t e = stream_elems(r->c, n), bytes = e * 2;
    uint16_t *copy = xmalloc(bytes);
    memcpy(copy, X, bytes);
    if (stage == CPU_HOOK_BLOCK_IN) {
        r->in[r->call][l] = copy;
        float *p = xmalloc(sizeof(float) * (size_t)n * r->c->hc_mult);
        memcpy(p, pi, sizeof(float) * (size_t)n * r->c->hc_mult);
        r->pi_in[r->call][l] = p;
    } else if (stage == CPU_HOOK_ATTN_OUT)
        r->attn[r->call][l] = copy;
    else
        r->out[r->call][l] = copy;
}

typedef struct {
    cpu_rec *cpu;
    double err_in[MAXL], err_attn[MAXL], err_ffn[MAXL];
    int call;
    /* MoE selections: rows compared, rows whose expert set differs from the CPU's, the largest margin of
     * such a row (the CPU's k-th minus (k+1)-th biased score over the row's largest |score|) */
    long route_rows[MAXL], route_flips[MAXL];
    double flip_margin[MAXL];
    /* the same for the indexer's top-k and the candidate blocks */
    long idx_rows[MAXL], idx_flips[MAXL], cand_rows[MAXL], cand_flips[MAXL];
    double idx_margin[MAXL], cand_margin[MAXL];
    const uint8_t *image; /* the call's rows at image positions (they route with bias_vl), or NULL */
} gpu_forcing;

/* A row's MoE selection against the CPU's (its logits): 1 when the sets differ, with the CPU's margin at
 * the cut. */
static int route_differs(const block_weights *bw, const float *bias, float route_scale, const float *logits,
                         const int32_t *gpu_ids, double *margin)
{
    int E = bw->n_experts, K = bw->n_active;
    int32_t ids[64];
    float w[64], s[4096];
    moe_route(route_scale, E, K, bias, logits, ids, w);
    int same = 1;
    for (int j = 0; j < K; j++)
        same &= ids[j] == gpu_ids[j];
    if (same)
        return 0;
    float top = 0;
    for (int e = 0; e < E; e++) {
        s[e] = moe_sqrtsoftplus(logits[e]) + bias[e];
        top = fabsf(s[e]) > top ? fabsf(s[e]) : top;
    }
    /* the k-th and (k+1)-th scores: the smallest selected, the largest not selected */
    float kth = INFINITY, next = -INFINITY;
    for (int e = 0, j = 0; e < E; e++) {
        int in = j < K && ids[j] == e;
        j += in;
        if (in)
            kth = s[e] < kth ? s[e] : kth;
        else
            next = s[e] > next ? s[e] : next;
    }
    *margin = top > 0 ? (kth - next) / top : 0;
    return 1;
}

static void gpu_hook(void *ctx, int l, int stage, CUdeviceptr X, CUdeviceptr pi, int pi_stride, int n)
{
    gpu_forcing *f = ctx;
    const model_config *c = f->cpu->c;
    if (stage == GPU_HOOK_ROUTE) {
        const float *cpu_logits = l < c->n_layers ? f->cpu->route[f->call][l] : NULL;
        if (!cpu_logits)
            return;
        const block_weights *bw = &f->cpu->m->blocks[l];
        int K = bw->n_active;
        int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)n * K);
        dev_download(ids, X, sizeof(int32_t) * (size_t)n * K);
        for (int i = 0; i < n; i++) {
            double mg = 0;
            f->route_rows[l]++;
            const float *bias = f->image && f->image[i] ? bw->gate_bias_vl : bw->gate_bias;
            if (route_differs(bw, bias, c->route_scale, cpu_logits + (size_t)i * bw->n_experts, ids + (size_t)i * K, &mg)) {
                f->route_flips[l]++;
                f->flip_margin[l] = mg > f->flip_margin[l] ? mg : f->flip_margin[l];
            }
        }
        free(ids);
        return;
    }
    if (stage == GPU_HOOK_INDEX || stage == GPU_HOOK_CAND) {
        int idx = stage == GPU_HOOK_INDEX, ld = pi_stride, call = f->call;
        const int32_t *want = idx ? f->cpu->isel[call][l] : f->cpu->csel[call][l];
        if (!want || l >= MAXL)
            return;
        uint32_t *mine = xmalloc(sizeof(uint32_t) * (size_t)n * ld), *bits = xmalloc(sizeof(uint32_t) * (size_t)ld);
        dev_download(mine, X, sizeof(uint32_t) * (size_t)n * ld);
        for (int i = 0; i < n && i < N0; i++) {
            int differs;
            if (idx) {
                int k = f->cpu->ik[call][l][i];
                differs = memcmp(mine + (size_t)i * ld, want + (size_t)i * c->index_topk, sizeof(int32_t) * (size_t)k) != 0;
            } else {
                ref_cand_bitmap(want + (size_t)i * c->candidate_topk_blocks, f->cpu->cn[call][l][i], bits, ld);
                differs = memcmp(mine + (size_t)i * ld, bits, sizeof(uint32_t) * (size_t)ld) != 0;
            }
            double mg = (idx ? f->cpu->imargin : f->cpu->cmargin)[call][l][i];
            (idx ? f->idx_rows : f->cand_rows)[l]++;
            if (differs) {
                (idx ? f->idx_flips : f->cand_flips)[l]++;
                double *worst = idx ? &f->idx_margin[l] : &f->cand_margin[l];
                *worst = mg > *worst ? mg : *worst;
            }
        }
        free(mine);
        free(bits);
        return;
    }
    size_t e = stream_elems(c, n);
    if (stage == GPU_HOOK_BLOCK_IN) {
        /* the block's input after this layer's Engram and tap (on the forced output of the previous block) */
        uint16_t *mine = xmalloc(e * 2);
        dev_download(mine, X, e * 2);
        double err = rel_l2_bf16(mine, f->cpu->in[f->call][l], e);
        f->err_in[l] = err > f->err_in[l] ? err : f->err_in[l];
        free(mine);
        dev_upload_to(X, f->cpu->in[f->call][l], e * 2);
        /* π: the CPU's [n][hc] into the GPU's rows of pi_stride floats */
        float *rows = xmalloc(sizeof(float) * (size_t)n * pi_stride);
        dev_download(rows, pi, sizeof(float) * (size_t)n * pi_stride);
        for (int i = 0; i < n; i++)
            memcpy(rows + (size_t)i * pi_stride, f->cpu->pi_in[f->call][l] + (size_t)i * c->hc_mult,
                   sizeof(float) * c->hc_mult);
        dev_upload_to(pi, rows, sizeof(float) * (size_t)n * pi_stride);
        free(rows);
        return;
    }
    uint16_t *mine = xmalloc(e * 2);
    dev_download(mine, X, e * 2);
    const uint16_t *want = stage == GPU_HOOK_ATTN_OUT ? f->cpu->attn[f->call][l] : f->cpu->out[f->call][l];
    double err = rel_l2_bf16(mine, want, e);
    double *slot = stage == GPU_HOOK_ATTN_OUT ? &f->err_attn[l] : &f->err_ffn[l];
    *slot = err > *slot ? err : *slot;
    dev_upload_to(X, want, e * 2); /* teacher forcing: the next sublayer starts from the CPU's */
    free(mine);
}

/* The GPU backend alone (no engine above it: the tests reach its insides), every id drawable; *valid stays
 * with the backend until it is closed. */
static gpu_backend *open_gpu(const char *dir, const char *kit_path, int max_seqs, int V, uint32_t **valid,
                             const engine_backend_ops **ops)
{
    engine_opts o = {.backend = "gpu", .model_dir = dir, .kit = kit_path, .max_seqs = max_seqs, .max_rows = 64,
                     .context = 2048};
    *valid = xmalloc(sizeof(uint32_t) * (size_t)(V + 31) / 32);
    memset(*valid, 0xff, sizeof(uint32_t) * (size_t)(V + 31) / 32);
    engine_info info = {0};
    engine_backend_args a = {&o, *valid, &info, rank_xchg_single()};
    void *impl;
    must(gpu_backend_open(&a, &impl, ops), "opening the GPU backend");
    return impl;
}

/* How many code steps apart the GPU's and the CPU's dequantised cache values are (docs/model.md
 * "Exactness": the goal is at most one). Per scale block the scale is recovered from the CPU's values
 * (the FP8 window: the power of two at or above its amax / 448; the FP4 compressed rows: its amax / 6,
 * the largest code being 6), and both values are coded on that grid; a block whose GPU values give
 * another scale is counted apart. */
typedef struct {
    size_t one, more, scale_differs;
    int most;
    double more_mag; /* of the values more than one step apart: the largest |value| over its block's amax */
} code_steps;

static int e4m3_ord(float x)
{
    uint8_t c = f32_to_e4m3(x > 448.0f ? 448.0f : x < -448.0f ? -448.0f : x);
    return c & 0x80 ? -(int)(c & 0x7f) : (int)(c & 0x7f);
}

static int e2m1_ord(float x)
{
    uint8_t c = f32_to_e2m1(x);
    return c & 8 ? -(int)(c & 7) : (int)(c & 7);
}

static float amax_bf16(const uint16_t *v, int n)
{
    float a = 0;
    for (int i = 0; i < n; i++)
        a = fabsf(bf16_to_f32(v[i])) > a ? fabsf(bf16_to_f32(v[i])) : a;
    return a;
}

static void code_steps_add(code_steps *cs, const uint16_t *g, const uint16_t *w, int n, int fp8)
{
    int bl = fp8 ? 32 : 16;
    for (int b = 0; b + bl <= n; b += bl) {
        float aw = amax_bf16(w + b, bl), ag = amax_bf16(g + b, bl);
        if (aw == 0.0f)
            continue;
        float sw = fp8 ? kvq_pow2_ceil(aw / 448.0f) : aw / 6.0f, sg = fp8 ? kvq_pow2_ceil(ag / 448.0f) : ag / 6.0f;
        cs->scale_differs += sg != sw;
        for (int i = b; i < b + bl; i++) {
            if (g[i] == w[i])
                continue;
            float x = bf16_to_f32(g[i]) / sw, y = bf16_to_f32(w[i]) / sw;
            int d = fp8 ? abs(e4m3_ord(x) - e4m3_ord(y)) : abs(e2m1_ord(x) - e2m1_ord(y));
            cs->one += d <= 1;
            cs->more += d > 1;
            cs->most = d > cs->most ? d : cs->most;
            double mag = fmax(fabs(x), fabs(y)) * sw / aw;
            if (d > 1 && mag > cs->more_mag)
                cs->more_mag = mag;
        }
    }
}

void test_engine(gpu_ctx *c)
{
    const char *dir = getenv("DSKIT_TEST_MODEL");
    const char *kit_path = getenv("DSKIT_TEST_KIT");
    if (!dir || !kit_path) {
        printf("engine: skipped (DSKIT_TEST_MODEL names no model folder: dskit mkmodel --preset tiny --out DIR)\n");
        return;
    }
    int calls = CALLS;
    const char *st = getenv("DSKIT_TEST_STEPS");
    if (st && atoi(st) >= 1 && atoi(st) < STEPS)
        calls = 1 + atoi(st);
    cpu_model *m;
    must(cpu_model_load(dir, (size_t)4 << 30, &m), "loading the CPU model");
    const model_config *cfg = &m->cfg;
    if (cfg->n_layers > MAXL) {
        check(c, 0, "engine", "setup", "%d layers: at most %d here", cfg->n_layers, MAXL);
        cpu_model_free(m);
        return;
    }
    /* the CPU: a prompt, then greedy steps, every block recorded */
    static cpu_rec rec;
    memset(&rec, 0, sizeof rec);
    rec.c = cfg;
    rec.m = m;
    int V = cfg->vocab_size;
    int32_t tokens[N0 + STEPS + 1];
    dsk_rng r = fresh_rng(0xe61e);
    for (int i = 0; i < N0; i++)
        tokens[i] = (int32_t)dsk_rng_below(&r, (uint64_t)V / 2);
    cpu_seq *s;
    must(cpu_seq_new(m, 1024, &s), "a CPU sequence");
    /* a model with a tower: an image in the prompt at positions 2.. (a 4 x 7 patch grid: 10 positions) */
    int img_nh = 4, img_nw = 7, img_pos = 2, img_span = 0;
    uint16_t *patches = NULL;
    uint8_t image[N0] = {0};
    if (cfg->vision_n_layers > 0) {
        int K = 3 * cfg->vision_patch_size * cfg->vision_patch_size;
        patches = xmalloc(sizeof(uint16_t) * (size_t)img_nh * img_nw * K);
        fill_bf16(&r, patches, img_nh * img_nw, K, 1.0f);
        must(cpu_seq_image(m, s, img_pos, patches, img_nh, img_nw), "an image on the CPU");
        img_span = (int)vision_span_positions(cfg->vision_downsample_ratio, img_nh, img_nw);
        for (int i = img_pos; i < img_pos + img_span && i < N0; i++) {
            tokens[i] = cfg->image_token_id;
            image[i] = 1;
        }
    }
    m->layer_hook = cpu_hook;
    m->index_hook = cpu_index_hook;
    m->layer_ctx = &rec;
    float *cpu_logits = xmalloc(sizeof(float) * (size_t)V * CALLS);
    for (int call = 0; call < calls; call++) {
        int n = call ? 1 : N0, p0 = call ? N0 + call - 1 : 0;
        rec.call = call;
        must(cpu_forward(m, s, tokens + p0, n, n - 1, cpu_logits + (size_t)call * V, NULL), "the CPU forward");
        s->len += n;
        tokens[N0 + call] = sample_row(cpu_logits + (size_t)call * V, V, &SAMPLE_GREEDY, s->len, NULL);
    }
    m->layer_hook = NULL;
    m->index_hook = NULL;
    /* the GPU: the same rounds, teacher-forced */
    uint32_t *valid;
    const engine_backend_ops *ops;
    gpu_backend *b = open_gpu(dir, kit_path, 2, V, &valid, &ops);
    void *impl = b;
    static gpu_forcing f;
    memset(&f, 0, sizeof f);
    f.cpu = &rec;
    b->hook = gpu_hook;
    b->hook_ctx = &f;
    must(ops->seq_open(impl, 0, 1024, 0), "a GPU sequence");
    if (patches) {
        engine_image img = {.patches = patches, .n_vit_h = img_nh, .n_vit_w = img_nw, .key = 1};
        must(ops->image(impl, 0, img_pos, &img), "an image on the GPU");
    }
    float *gpu_logits = xmalloc(sizeof(float) * (size_t)V * N0);
    double worst_logits = 0;
    for (int call = 0; call < calls; call++) {
        int n = call ? 1 : N0, p0 = call ? N0 + call - 1 : 0;
        f.call = call;
        f.image = call == 0 && patches ? image : NULL;
        engine_row rows[N0];
        for (int i = 0; i < n; i++)
            rows[i] = (engine_row){.seq = 0, .token = tokens[p0 + i], .pos = p0 + i, .sample = i == n - 1,
                                   .sp = SAMPLE_GREEDY, .top_logprobs = -1};
        int32_t drawn[N0];
        engine_out out = {.tokens = drawn, .logits = gpu_logits};
        must(ops->step(impl, rows, n, &out, NULL), "a GPU round");
        must(ops->commit(impl, 0, p0, p0 + n), "a GPU commit");
        /* given the CPU's last hidden state (teacher-forced), the logits */
        double e = rel_l2(gpu_logits + (size_t)(n - 1) * V, cpu_logits + (size_t)call * V, (size_t)V);
        worst_logits = e > worst_logits ? e : worst_logits;
    }
    /* the caches: window rings and compressed rows, codes compared */
    for (int l = 0; l < cfg->n_layers; l++) {
        const layer_role *rl = &cfg->roles[l];
        int hd = cfg->head_dim;
        uint16_t *ring = xmalloc(sizeof(uint16_t) * (size_t)b->ring * hd);
        dev_download(ring, b->rings + (CUdeviceptr)l * b->max_seqs * b->ring * hd * 2, sizeof(uint16_t) * (size_t)b->ring * hd);
        size_t diff = 0, total = 0;
        code_steps rs = {0}, cs = {0};
        for (int64_t p = s->len - cfg->window_size; p < s->len; p++) {
            if (p < 0)
                continue;
            const uint16_t *g = ring + (p % b->ring) * hd, *w = s->win[l] + (p % s->ring) * hd;
            for (int i = 0; i < hd; i++)
                diff += g[i] != w[i];
            total += (size_t)hd;
            code_steps_add(&rs, g, w, hd, 1);
        }
        size_t cdiff = 0, ctotal = 0;
        if (rl->is_kv_source) {
            int64_t rows = s->len / rl->ratio;
            uint16_t *ck = xmalloc(sizeof(uint16_t) * (size_t)rows * hd);
            dev_download(ck, b->ckv[l], sizeof(uint16_t) * (size_t)rows * hd);
            for (int64_t i = 0; i < rows * hd; i++)
                cdiff += ck[i] != s->ckv[l][i];
            for (int64_t row = 0; row < rows; row++)
                code_steps_add(&cs, ck + row * hd, s->ckv[l] + row * hd, hd, 0);
            ctotal = (size_t)(rows * hd);
            free(ck);
        }
        char shape[64];
        snprintf(shape, sizeof shape, "layer %d (%s)", l, layer_mode_name(rl->mode));
        check(c, f.err_in[l] <= ENGINE_TOL && f.err_attn[l] <= ENGINE_TOL && f.err_ffn[l] <= ENGINE_TOL &&
                     (f.route_flips[l] == 0 || f.flip_margin[l] < 0.01) &&
                     (f.idx_flips[l] == 0 || f.idx_margin[l] < 0.01) && (f.cand_flips[l] == 0 || f.cand_margin[l] < 0.01),
              "engine", shape,
              "rel L2 input %.2e, attention %.2e, MoE %.2e; ring codes differing %.2f%% (%zu by one step, %zu by more, "
              "at most %d, those at most %.4f of their block's amax; %zu blocks' scales differ), compressed %.2f%% (%zu, "
              "%zu, at most %d, %.4f; %zu); experts: "
              "%ld of %ld rows chose otherwise (largest margin %.3f%%); index top-k: %ld of %ld (%.3f%%); candidate "
              "blocks: %ld of %ld (%.3f%%)",
              f.err_in[l], f.err_attn[l], f.err_ffn[l], total ? 100.0 * diff / total : 0.0, rs.one, rs.more, rs.most,
              rs.more_mag, rs.scale_differs, ctotal ? 100.0 * cdiff / ctotal : 0.0, cs.one, cs.more, cs.most,
              cs.more_mag, cs.scale_differs,
              f.route_flips[l], f.route_rows[l], 100.0 * f.flip_margin[l],
              f.idx_flips[l], f.idx_rows[l], 100.0 * f.idx_margin[l], f.cand_flips[l], f.cand_rows[l],
              100.0 * f.cand_margin[l]);
        free(ring);
    }
    check(c, worst_logits <= 1e-3, "engine", "head", "logits rel L2 %.2e given the CPU's hidden state", worst_logits);
    if (patches)
        printf("engine: the prompt held an image at positions %d..%d (its rows' layer-0 input: the GPU tower's span)\n",
               img_pos, img_pos + img_span - 1);
    free(patches);
    ops->seq_close(impl, 0);
    ops->close(impl);
    cpu_seq_free(s);
    for (int call = 0; call < calls; call++)
        for (int l = 0; l < cfg->n_layers; l++) {
            free(rec.in[call][l]);
            free(rec.attn[call][l]);
            free(rec.out[call][l]);
            free(rec.pi_in[call][l]);
            free(rec.route[call][l]);
            free(rec.isel[call][l]);
            free(rec.ik[call][l]);
            free(rec.imargin[call][l]);
            free(rec.csel[call][l]);
            free(rec.cn[call][l]);
            free(rec.cmargin[call][l]);
        }
    cpu_model_free(m); /* cfg is the model's: after the loop that reads it */
    free(cpu_logits);
    free(gpu_logits);
    free(valid);
}


/* The GPU against itself (docs/model.md "Exactness"): a sequence's logits, bit for bit, whether its rows run
 * alone, batched with another sequence's rows, or its prompt in two chunks, eagerly or replayed from CUDA
 * graphs; then greedy decode steps alone and batched among 15 other sequences. Sequences: 0 alone and eager
 * (the reference), 1 batched with 2 (another prompt), 3 chunked, 4 alone from graphs, 5 token by token, 6 to
 * 17 others (their own prompts); 1 to 17 from graphs. */
static int run_rows(gpu_ctx *c, void *impl, const engine_backend_ops *ops, const engine_row *rows, int n, float *logits)
{
    int32_t drawn[64];
    engine_out out = {.tokens = drawn, .logits = logits};
    if (ops->step(impl, rows, n, &out, NULL)) {
        check(c, 0, "engine_exact", "a round", "%s", dsk_err_msg());
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (rows[i].sample && ops->commit(impl, rows[i].seq, 0, rows[i].pos + 1)) {
            check(c, 0, "engine_exact", "a commit", "%s", dsk_err_msg());
            return -1;
        }
    return 0;
}

static engine_row prow(int seq, int32_t tok, int pos, int sample)
{
    return (engine_row){.seq = seq, .token = tok, .pos = pos, .sample = sample, .sp = SAMPLE_GREEDY, .top_logprobs = -1};
}

/* n rows again as sequence seq's (positions pos.., tokens p[pos..]), eagerly, with every launch on the
 * round's stream; the backend's side stream, graphs and rows[] restored after. */
static int one_stream(gpu_ctx *c, void *impl, const engine_backend_ops *ops, gpu_backend *gb, engine_row *rows, int n,
                      int seq, int pos, const int32_t *p, float *logits)
{
    int side_rows = gb->side_rows, graphs = gb->use_graphs;
    engine_row keep[64];
    memcpy(keep, rows, sizeof(engine_row) * (size_t)n);
    for (int i = 0; i < n; i++)
        rows[i] = prow(seq, p[pos + i], pos + i, i == n - 1);
    gb->side_rows = 0;
    gb->use_graphs = 0;
    int rc = run_rows(c, impl, ops, rows, n, logits);
    gb->side_rows = side_rows;
    gb->use_graphs = graphs;
    memcpy(rows, keep, sizeof(engine_row) * (size_t)n);
    return rc;
}

void test_engine_exact(gpu_ctx *c)
{
    const char *dir = getenv("DSKIT_TEST_MODEL");
    const char *kit_path = getenv("DSKIT_TEST_KIT");
    if (!dir || !kit_path) {
        printf("engine_exact: skipped (DSKIT_TEST_MODEL names no model folder)\n");
        return;
    }
    model_config cfg;
    must(model_config_load(dir, &cfg), "the model's config");
    int V = cfg.vocab_size;
    /* seq 18 repeats seq 0 with every launch on the round's stream (side_rows 0): the side stream's branches
     * give the same bits */
    enum { P = 24, Q = 17, STEPS2 = 8, NSEQ = 19, OTHER0 = 6, NOTHER = 12, OP = 4, ONE_STREAM = 18 };
    int32_t p[P + STEPS2], q[Q + STEPS2];
    dsk_rng r = fresh_rng(0xe7ac);
    for (int i = 0; i < P; i++)
        p[i] = (int32_t)dsk_rng_below(&r, (uint64_t)V / 2);
    for (int i = 0; i < Q; i++)
        q[i] = (int32_t)dsk_rng_below(&r, (uint64_t)V / 2);
    uint32_t *valid;
    const engine_backend_ops *ops;
    gpu_backend *gb = open_gpu(dir, kit_path, NSEQ, V, &valid, &ops);
    void *impl = gb;
    for (int s = 0; s < NSEQ; s++)
        must(ops->seq_open(impl, s, 256, 0), "a GPU sequence");
    float *alone = xmalloc(sizeof(float) * (size_t)V * 64), *other = xmalloc(sizeof(float) * (size_t)V * 64);
    engine_row rows[64];
    int bad_batch = 0, bad_chunk = 0, bad_graph = 0, bad_token = 0, bad_side = 0, steps = 0;
    float *graphed = xmalloc(sizeof(float) * (size_t)V * 64);
    /* prompts: seq 0 alone; seq 1 + seq 2 in one round; seq 3 in chunks of 10 and 14 */
    for (int i = 0; i < P; i++)
        rows[i] = prow(0, p[i], i, i == P - 1);
    gb->use_graphs = 0;
    if (run_rows(c, impl, ops, rows, P, alone))
        goto out;
    if (one_stream(c, impl, ops, gb, rows, P, ONE_STREAM, 0, p, other))
        goto out;
    bad_side += memcmp(alone + (size_t)(P - 1) * V, other + (size_t)(P - 1) * V, sizeof(float) * (size_t)V) != 0;
    gb->use_graphs = 1;
    for (int i = 0; i < P; i++)
        rows[i] = prow(4, p[i], i, i == P - 1);
    if (run_rows(c, impl, ops, rows, P, graphed))
        goto out;
    bad_graph += memcmp(alone + (size_t)(P - 1) * V, graphed + (size_t)(P - 1) * V, sizeof(float) * (size_t)V) != 0;
    for (int i = 0; i < P; i++)
        rows[i] = prow(1, p[i], i, i == P - 1);
    for (int i = 0; i < Q; i++)
        rows[P + i] = prow(2, q[i], i, i == Q - 1);
    if (run_rows(c, impl, ops, rows, P + Q, other))
        goto out;
    bad_batch += memcmp(alone + (size_t)(P - 1) * V, other + (size_t)(P - 1) * V, sizeof(float) * (size_t)V) != 0;
    for (int i = 0; i < 10; i++)
        rows[i] = prow(3, p[i], i, 0);
    if (run_rows(c, impl, ops, rows, 10, other) || ops->commit(impl, 3, 0, 10))
        goto out;
    for (int i = 10; i < P; i++)
        rows[i - 10] = prow(3, p[i], i, i == P - 1);
    if (run_rows(c, impl, ops, rows, P - 10, other))
        goto out;
    bad_chunk += memcmp(alone + (size_t)(P - 1) * V, other + (size_t)(P - 11) * V, sizeof(float) * (size_t)V) != 0;
    /* seq 5: the prompt token by token */
    for (int i = 0; i < P; i++) {
        rows[0] = prow(5, p[i], i, i == P - 1);
        if (run_rows(c, impl, ops, rows, 1, other) || ops->commit(impl, 5, i, i + 1))
            goto out;
    }
    bad_token += memcmp(alone + (size_t)(P - 1) * V, other, sizeof(float) * (size_t)V) != 0;
    /* the others' prompts, OP tokens each, in one round */
    for (int o2 = 0; o2 < NOTHER; o2++)
        for (int i = 0; i < OP; i++)
            rows[o2 * OP + i] = prow(OTHER0 + o2, (int32_t)dsk_rng_below(&r, (uint64_t)V / 2), i, i == OP - 1);
    if (run_rows(c, impl, ops, rows, NOTHER * OP, other))
        goto out;
    /* greedy steps: seq 0 alone; seqs 1, 2, 3, 5 and the others in one round of 16 rows, the same token for 1,
     * 3 and 5 */
    for (int t = 0; t < STEPS2; t++) {
        int pos = P + t;
        p[pos] = sample_row(alone + (size_t)(t == 0 ? P - 1 : 0) * V, V, &SAMPLE_GREEDY, pos, NULL);
        q[Q + t] = (int32_t)dsk_rng_below(&r, (uint64_t)V / 2);
        rows[0] = prow(0, p[pos], pos, 1);
        gb->use_graphs = 0;
        if (run_rows(c, impl, ops, rows, 1, alone))
            goto out;
        gb->use_graphs = 1;
        rows[0] = prow(4, p[pos], pos, 1);
        if (run_rows(c, impl, ops, rows, 1, graphed))
            goto out;
        bad_graph += memcmp(alone, graphed, sizeof(float) * (size_t)V) != 0;
        if (one_stream(c, impl, ops, gb, rows, 1, ONE_STREAM, pos, p, graphed))
            goto out;
        bad_side += memcmp(alone, graphed, sizeof(float) * (size_t)V) != 0;
        rows[0] = prow(1, p[pos], pos, 1);
        rows[1] = prow(2, q[Q + t], Q + t, 1);
        rows[2] = prow(3, p[pos], pos, 1);
        rows[3] = prow(5, p[pos], pos, 1);
        for (int o2 = 0; o2 < NOTHER; o2++)
            rows[4 + o2] = prow(OTHER0 + o2, (int32_t)dsk_rng_below(&r, (uint64_t)V / 2), OP + t, 1);
        if (run_rows(c, impl, ops, rows, 4 + NOTHER, other))
            goto out;
        bad_batch += memcmp(alone, other, sizeof(float) * (size_t)V) != 0;
        bad_chunk += memcmp(alone, other + (size_t)2 * V, sizeof(float) * (size_t)V) != 0;
        bad_token += memcmp(alone, other + (size_t)3 * V, sizeof(float) * (size_t)V) != 0;
        steps++;
    }
    check(c, bad_batch == 0, "engine_exact", "batched == alone",
          "%d of %d rounds' logits differ (a 24-row prompt with a 17-row one, then %d decode rounds of 16 rows)",
          bad_batch, steps + 1, steps);
    check(c, bad_token == 0, "engine_exact", "token by token == one-shot",
          "%d of %d rounds' logits differ (the prompt in 24 rounds of 1 row)", bad_token, steps + 1);
    check(c, bad_chunk == 0, "engine_exact", "chunked == one-shot", "%d of %d rounds' logits differ (chunks 10 + 14)",
          bad_chunk, steps + 1);
    check(c, bad_graph == 0 && gb->graph_replays > 0, "engine_exact", "graph == eager",
          "%d of %d rounds' logits differ (%lld rounds replayed from %lld captured graphs)", bad_graph, steps + 1,
          gb->graph_replays, gb->graph_captures);
    check(c, bad_side == 0, "engine_exact", "side stream == one stream",
          "%d of %d rounds' logits differ (eager rounds of seq 0 repeated with every launch on one stream; the "
          "backend's side stream %s)",
          bad_side, steps + 1, gb->side ? "on" : "off: DSKIT_GPU_SIDE=0");
out:
    for (int s = 0; s < NSEQ; s++)
        ops->seq_close(impl, s);
    ops->close(impl);
    free(graphed);
    free(alone);
    free(other);
    free(valid);
}

/* Masks written by a round's fill while its forward runs on the device (structured output) give the
 * draws given masks give, eagerly and from graphs; a failing fill fails the round, and the next runs. */
void test_engine_fill(gpu_ctx *c)
{
    const char *dir = getenv("DSKIT_TEST_MODEL");
    const char *kit_path = getenv("DSKIT_TEST_KIT");
    if (!dir || !kit_path) {
        printf("engine_fill: skipped (DSKIT_TEST_MODEL names no model folder)\n");
        return;
    }
    model_config cfg;
    must(model_config_load(dir, &cfg), "the model's config");
    int V = cfg.vocab_size;
    enum { N = 12, SEQS = 4 };
    size_t words = (size_t)(V + 31) / 32;
    uint32_t *valid;
    const engine_backend_ops *ops;
    gpu_backend *gb = open_gpu(dir, kit_path, SEQS, V, &valid, &ops);
    void *impl = gb;
    for (int s = 0; s < SEQS; s++)
        must(ops->seq_open(impl, s, 256, 0), "a GPU sequence");
    uint32_t *given = xmalloc(sizeof(uint32_t) * words * N), *filled = xmalloc(sizeof(uint32_t) * words * N);
    dsk_rng r = fresh_rng(0xf111);
    for (size_t w = 0; w < words * N; w++)
        given[w] = (uint32_t)dsk_rng_u64(&r) & (uint32_t)dsk_rng_u64(&r);
    int32_t t[N], ref[N], got[N];
    for (int i = 0; i < N; i++)
        t[i] = (int32_t)dsk_rng_below(&r, (uint64_t)V / 2);
    engine_row rows[N];
    int bad = 0, outside = 0, failed_ok = 0, calls = 0;
    for (int run = 0; run < 3; run++) { /* 0: masks given (eager); 1: filled, eager; 2: filled, from graphs */
        memset(filled, 0, sizeof(uint32_t) * words * N);
        for (int i = 0; i < N; i++)
            rows[i] = (engine_row){.seq = run, .token = t[i], .pos = i, .sample = 1, .sp = {1.0f, 1.0f, 0, 99},
                                   .allow = (run ? filled : given) + words * i, .top_logprobs = -1};
        gb->use_graphs = run == 2;
        fill_ctx f = {filled, given, words * N, 0, 0};
        engine_fill fill = {fill_copy, &f};
        engine_out out = {.tokens = run ? got : ref};
        if (ops->step(impl, rows, N, &out, run ? &fill : NULL)) {
            check(c, 0, "engine_fill", "a round", "%s", dsk_err_msg());
            goto out;
        }
        calls += f.calls;
        for (int i = 0; i < N; i++) {
            bad += run && got[i] != ref[i];
            int32_t d = run ? got[i] : ref[i];
            outside += !(given[words * i + (size_t)(d >> 5)] >> (d & 31) & 1u);
        }
    }
    /* a failing fill, on sequence 3's first row (left uncommitted), then the round again */
    gb->use_graphs = 1;
    rows[0] = (engine_row){.seq = 3, .token = t[0], .pos = 0, .sample = 1, .sp = {1.0f, 1.0f, 0, 99},
                           .allow = filled, .top_logprobs = -1};
    fill_ctx f = {filled, given, words, 0, 1};
    engine_fill fill = {fill_copy, &f};
    int rc = ops->step(impl, rows, 1, &(engine_out){.tokens = got}, &fill);
    failed_ok = rc == -1 && strstr(dsk_err_msg(), "the test's fill failed") != NULL;
    f.fail = 0;
    failed_ok = failed_ok && ops->step(impl, rows, 1, &(engine_out){.tokens = got}, &fill) == 0 && got[0] == ref[0];
    check(c, bad == 0 && outside == 0 && calls == 2, "engine_fill", "filled while the forward runs == given",
          "%d of %d draws differ, %d outside their masks, %d fills called (2 expected)", bad, 2 * N, outside, calls);
    check(c, failed_ok, "engine_fill", "a failing fill fails its round only", "%s", dsk_err_msg());
out:
    for (int s = 0; s < SEQS; s++)
        ops->seq_close(impl, s);
    ops->close(impl);
    free(given);
    free(filled);
    free(valid);
}

/* Draft calls replayed from graphs == the same calls run eagerly: two backends on one model, one with graphs
 * (a shape's first call captures, the next replay), one without; the same prompts and commits in both, then
 * drafts of one and of two sequences, greedy and seeded, each twice: drafts and confidence logits bit for
 * bit. */
static void draft_graph_eager(gpu_ctx *c, const char *dir, const char *kit_path, int V, int B, const int32_t *prompt,
                              int P)
{
    enum { NS = 2, NCALL = 2 };
    uint32_t *valid[2];
    const engine_backend_ops *ops[2];
    gpu_backend *gb[2];
    for (int k = 0; k < 2; k++)
        gb[k] = open_gpu(dir, kit_path, NS, V, &valid[k], &ops[k]);
    gb[1]->use_graphs = 0;
    engine_row *rows = xmalloc(sizeof *rows * (size_t)NS * P);
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < P; i++) /* the second sequence: the prompt reversed */
            rows[s * P + i] = prow(s, prompt[s ? P - 1 - i : i], i, i == P - 1);
    int32_t *d[2][NCALL], *tok = xmalloc(sizeof(int32_t) * NS * P);
    float *cf[2][NCALL];
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < NCALL; j++) {
            d[k][j] = xmalloc(sizeof(int32_t) * (size_t)NS * B);
            cf[k][j] = xmalloc(sizeof(float) * (size_t)NS * B);
        }
    int bad = 0, calls = 0, failed = 0;
    for (int k = 0; k < 2 && !failed; k++) {
        engine_out out = {.tokens = tok};
        for (int s = 0; s < NS && !failed; s++)
            failed = ops[k]->seq_open(gb[k], s, 256, ENGINE_SEQ_DRAFT);
        failed = failed || ops[k]->step(gb[k], rows, NS * P, &out, NULL);
        for (int s = 0; s < NS && !failed; s++)
            failed = ops[k]->commit(gb[k], s, 0, P);
    }
    for (int mode = 0; mode < 2 && !failed; mode++)
        for (int n = 1; n <= NS && !failed; n++) {
            engine_draft_req req[NS];
            for (int i = 0; i < n; i++)
                req[i] = (engine_draft_req){i, prompt[(3 * i + 1) % P],
                                            mode ? (sample_params){0.8f, 0.95f, 40, 77u + (unsigned)i} : SAMPLE_GREEDY};
            for (int k = 0; k < 2 && !failed; k++)
                for (int j = 0; j < NCALL && !failed; j++)
                    failed = ops[k]->draft(gb[k], req, n, d[k][j], cf[k][j]);
            for (int j = 0; j < NCALL && !failed; j++) {
                bad += memcmp(d[0][j], d[1][0], sizeof(int32_t) * (size_t)n * B) != 0 ||
                       memcmp(cf[0][j], cf[1][0], sizeof(float) * (size_t)n * B) != 0 ||
                       memcmp(d[1][j], d[1][0], sizeof(int32_t) * (size_t)n * B) != 0;
                calls++;
            }
        }
    if (failed)
        check(c, 0, "engine_draft", "graph == eager", "%s", dsk_err_msg());
    else
        check(c, bad == 0 && gb[0]->draft_replays > 0 && gb[1]->draft_replays == 0, "engine_draft", "graph == eager",
              "%d of %d draft calls' drafts or confidences differ from eager (%lld replayed from %d captured graphs; "
              "the eager backend replayed %lld)",
              bad, calls, gb[0]->draft_replays, gb[0]->n_draft_graphs, gb[1]->draft_replays);
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < NCALL; j++)
            free(d[k][j]), free(cf[k][j]);
        for (int s = 0; s < NS; s++)
            ops[k]->seq_close(gb[k], s);
        ops[k]->close(gb[k]);
        free(valid[k]);
    }
    free(rows);
    free(tok);
}

/* Drafting on the GPU (docs/model.md "Exactness"): generate with DSpark drafts and exact verification ==
 * generate serially, greedy and seeded; the share of drafts accepted is reported (random weights: low). */
void test_engine_draft(gpu_ctx *c)
{
    const char *dir = getenv("DSKIT_TEST_MODEL");
    const char *kit_path = getenv("DSKIT_TEST_KIT");
    if (!dir || !kit_path) {
        printf("engine_draft: skipped (DSKIT_TEST_MODEL names no model folder)\n");
        return;
    }
    engine_opts o = {.backend = "gpu", .model_dir = dir, .kit = kit_path, .max_seqs = 2, .max_rows = 64, .context = 2048};
    engine *e;
    must(engine_open(&o, &e), "opening the GPU engine");
    const engine_info *in = engine_get_info(e);
    if (in->draft_block == 0) {
        printf("engine_draft: skipped (the model has no DSpark stages)\n");
        engine_close(e);
        return;
    }
    enum { P = 16, T = 48 };
    int32_t prompt[P], serial[T], drafted[T];
    dsk_rng r = fresh_rng(0xd4af);
    for (int i = 0; i < P; i++)
        prompt[i] = (int32_t)dsk_rng_below(&r, (uint64_t)in->vocab / 2);
    for (int mode = 0; mode < 2; mode++) {
        gen_opts g = {.max_tokens = T, .sp = mode ? (sample_params){0.8f, 0.95f, 40, 1234} : SAMPLE_GREEDY};
        gen_stats s0, s1;
        int rc0 = engine_generate(e, prompt, P, &g, serial, &s0);
        g.draft = 1;
        int rc1 = rc0 ? -1 : engine_generate(e, prompt, P, &g, drafted, &s1);
        if (rc0 || rc1) {
            check(c, 0, "engine_draft", mode ? "seeded" : "greedy", "%s", dsk_err_msg());
            continue;
        }
        int same = s0.n_out == s1.n_out && !memcmp(serial, drafted, sizeof(int32_t) * (size_t)s0.n_out);
        check(c, same, "engine_draft", mode ? "seeded T 0.8 top_p 0.95 top_k 40" : "greedy",
              "drafted %s serial (%d tokens; %d verify rounds, %d drafts accepted, %.2f per round)",
              same ? "==" : "!=", s0.n_out, s1.rounds, s1.accepted, s1.rounds ? (double)s1.accepted / s1.rounds : 0.0);
    }
    int V = in->vocab, B = in->draft_block;
    engine_close(e);
    draft_graph_eager(c, dir, kit_path, V, B, prompt, P);
}

/* The vision tower on the GPU against the CPU tower, stage by stage, on fresh random patches: the patch
 * embedding (one linear: within 2e-3), the final norm, the aligner's rows and the span's rows (delimiters bit
 * for bit); the GPU's span the same bits twice. vision.md §3.7: two bf16 paths that sum in another order
 * differ by about what bf16 rounding itself moves the result (REF bf16 against REF fp32), 5e-3 at the tiny
 * config's two blocks; through 32 blocks both grow. So the gate after the blocks is relative: the GPU within
 * VISION_TOL of the CPU's bf16 tower, or within twice the CPU bf16 tower's own distance to the CPU fp32 tower
 * (VISION_F32), whichever is larger. */
#define VISION_TOL 2e-2

static double rel_l2_bf16_f32(const uint16_t *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = bf16_to_f32(a[i]), y = b[i];
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

void test_vision_tower(gpu_ctx *c)
{
    const char *dir = getenv("DSKIT_TEST_MODEL");
    const char *kit_path = getenv("DSKIT_TEST_KIT");
    if (!dir || !kit_path) {
        printf("vision_tower: skipped (DSKIT_TEST_MODEL names no model folder)\n");
        return;
    }
    cpu_model *m;
    must(cpu_model_load(dir, (size_t)4 << 30, &m), "loading the CPU model");
    const model_config *cfg = &m->cfg;
    if (cfg->vision_n_layers <= 0) {
        printf("vision_tower: skipped (the model in %s has no vision tower: mkmodel --preset tiny-vision)\n", dir);
        cpu_model_free(m);
        return;
    }
    uint32_t *valid;
    const engine_backend_ops *ops;
    gpu_backend *b = open_gpu(dir, kit_path, 1, cfg->vocab_size, &valid, &ops);
    int D = cfg->vision_dim, K = 3 * cfg->vision_patch_size * cfg->vision_patch_size, r = cfg->vision_downsample_ratio;
    /* the CPU tower at the release's width is slow: one small grid there */
    const int grids[][2] = {{1, 1}, {4, 7}, {6, 9}, {5, 12}};
    int ngrids = D >= 512 ? 1 : 4, first = D >= 512 ? 2 : 0;
    dsk_rng rg = fresh_rng(0x515);
    for (int gi = first; gi < first + ngrids; gi++) {
        int nh = grids[gi][0], nw = grids[gi][1], N = nh * nw, L = vision_cells(nh, r) * vision_cells(nw, r);
        int64_t span = vision_span_positions(r, nh, nw);
        uint16_t *patches = xmalloc(sizeof(uint16_t) * (size_t)N * K);
        fill_bf16(&rg, patches, N, K, 1.0f);
        float *embed = xmalloc(sizeof(float) * (size_t)N * D), *vit = xmalloc(sizeof(float) * (size_t)N * D);
        float *feat = xmalloc(sizeof(float) * (size_t)L * cfg->dim);
        vision_taps ct = {embed, vit};
        must(vision_tower_run(cfg, &m->vision, VISION_BF16, patches, nh, nw, feat, &ct), "the CPU tower");
        /* the same tower in fp32: how far bf16 rounding alone moves it */
        float *vit32 = xmalloc(sizeof(float) * (size_t)N * D), *feat32 = xmalloc(sizeof(float) * (size_t)L * cfg->dim);
        vision_taps ct32 = {NULL, vit32};
        must(vision_tower_run(cfg, &m->vision, VISION_F32, patches, nh, nw, feat32, &ct32), "the CPU tower in fp32");
        double own_vit = rel_l2(vit, vit32, (size_t)N * D), own_feat = rel_l2(feat, feat32, (size_t)L * cfg->dim);
        double tol_vit = 2 * own_vit > VISION_TOL ? 2 * own_vit : VISION_TOL;
        double tol_feat = 2 * own_feat > VISION_TOL ? 2 * own_feat : VISION_TOL;
        free(vit32);
        free(feat32);
        uint16_t *cpu_rows = xmalloc(sizeof(uint16_t) * (size_t)span * cfg->dim);
        vision_span_rows(cfg, &m->vision, feat, nh, nw, cpu_rows);
        uint16_t *g_embed = xmalloc(sizeof(uint16_t) * (size_t)N * D), *g_vit = xmalloc(sizeof(uint16_t) * (size_t)N * D);
        uint16_t *g_feat = xmalloc(sizeof(uint16_t) * (size_t)L * cfg->dim);
        uint16_t *rows = xmalloc(sizeof(uint16_t) * (size_t)span * cfg->dim), *rows2 = xmalloc(sizeof(uint16_t) * (size_t)span * cfg->dim);
        gpu_vision_taps gt = {g_embed, g_vit, g_feat};
        CUdeviceptr d1, d2;
        int64_t n1, n2;
        must(gpu_vision_run(b, patches, nh, nw, &d1, &n1, &gt), "the GPU tower");
        must(gpu_vision_run(b, patches, nh, nw, &d2, &n2, NULL), "the GPU tower again");
        dev_download(rows, d1, sizeof(uint16_t) * (size_t)span * cfg->dim);
        dev_download(rows2, d2, sizeof(uint16_t) * (size_t)span * cfg->dim);
        dev_free(d1);
        dev_free(d2);
        double e_embed = rel_l2_bf16_f32(g_embed, embed, (size_t)N * D), e_vit = rel_l2_bf16_f32(g_vit, vit, (size_t)N * D);
        double e_feat = rel_l2_bf16_f32(g_feat, feat, (size_t)L * cfg->dim);
        double e_rows = rel_l2_bf16(rows, cpu_rows, (size_t)span * cfg->dim);
        size_t delim_diff = 0;
        for (int64_t i = 0; i < span; i++) {
            int64_t cell;
            if (vision_span_slot(vision_cells(nh, r), vision_cells(nw, r), i, &cell) != VISION_IMAGE)
                delim_diff += memcmp(rows + i * cfg->dim, cpu_rows + i * cfg->dim, sizeof(uint16_t) * cfg->dim) != 0;
        }
        int same = n1 == span && n2 == span && !memcmp(rows, rows2, sizeof(uint16_t) * (size_t)span * cfg->dim);
        char shape[96];
        snprintf(shape, sizeof shape, "%d x %d patches (%d cells, %lld positions), width %d", nh, nw, L, (long long)span, D);
        check(c, e_embed <= 2e-3 && e_vit <= tol_vit && e_feat <= tol_feat && e_rows <= tol_feat && !delim_diff && same,
              "vision_tower", shape,
              "rel L2 to the CPU: patch embed %.2e, final norm %.2e (<= %.1e; CPU bf16 to fp32 %.2e), aligner %.2e "
              "(<= %.1e; %.2e), span %.2e; delimiter rows differing %zu; twice the same bits: %s",
              e_embed, e_vit, tol_vit, own_vit, e_feat, tol_feat, own_feat, e_rows, delim_diff, same ? "yes" : "NO");
        free(patches);
        free(embed);
        free(vit);
        free(feat);
        free(cpu_rows);
        free(g_embed);
        free(g_vit);
        free(g_feat);
        free(rows);
        free(rows2);
    }
    ops->close(b);
    free(valid);
    cpu_model_free(m);
}

/* The EXL3 arrival counters (zero at rest): with DSKIT_CHECK_COUNTERS=1 every round proves them zero; a
 * round that finds them not (poked here, as a launch that never ran to its end would leave them) fails
 * naming them, clears them, and the next round's logits equal a clean one's. */
void test_engine_counters(gpu_ctx *c)
{
    const char *dir = getenv("DSKIT_TEST_MODEL");
    const char *kit_path = getenv("DSKIT_TEST_KIT");
    if (!dir || !kit_path) {
        printf("engine_counters: skipped (DSKIT_TEST_MODEL names no model folder)\n");
        return;
    }
    model_config cfg;
    must(model_config_load(dir, &cfg), "the model's config");
    int V = cfg.vocab_size;
    enum { P = 12, NSEQ = 5 };
    dsk_rng r = fresh_rng(0xc0);
    engine_row rows[P];
    uint32_t *valid;
    const engine_backend_ops *ops;
    setenv("DSKIT_CHECK_COUNTERS", "1", 1);
    gpu_backend *gb = open_gpu(dir, kit_path, NSEQ, V, &valid, &ops);
    unsetenv("DSKIT_CHECK_COUNTERS");
    float *a = xmalloc(sizeof(float) * (size_t)V * P), *b2 = xmalloc(sizeof(float) * (size_t)V * P);
    int32_t toks[P], drawn[P];
    for (int i = 0; i < P; i++)
        toks[i] = (int32_t)dsk_rng_below(&r, (uint64_t)V / 2);
    for (int s = 0; s < NSEQ; s++)
        must(ops->seq_open(gb, s, 64, 0), "a GPU sequence");
    engine_out out = {.tokens = drawn, .logits = a};
    for (int i = 0; i < P; i++)
        rows[i] = prow(0, toks[i], i, i == P - 1);
    int clean = ops->step(gb, rows, P, &out, NULL) == 0;
    check(c, clean && gb->check_counters, "engine_counters", "a clean round", "%s",
          clean ? "the counters are zero after it" : dsk_err_msg());
    /* a counter left set (the region's last, which no launch of these sizes reaches, so none resets it): the
     * round fails naming it; the round after runs clean. The round stream's EXL3 counters, then the side
     * stream's */
    const struct {
        CUdeviceptr ws;
        const char *name, *label, *after_label;
    } pokes[2] = {{gb->ws.ptr, "EXL3 arrival counter", "a counter left set", "the round after"},
                  {gb->ws_side.ptr, "side stream's EXL3 arrival counter", "a side stream counter left set",
                   "the round after the side's"}};
    for (int t = 0; t < 2 && pokes[t].ws; t++) {
        must(cu.cuMemsetD32(pokes[t].ws + EXL3_WS_COUNTER_BYTES - 4, 1, 1) != CUDA_SUCCESS, "poking a counter");
        for (int i = 0; i < P; i++)
            rows[i] = prow(1 + 2 * t, toks[i], i, i == P - 1);
        out.logits = b2;
        int failed = ops->step(gb, rows, P, &out, NULL) != 0;
        int named = failed && strstr(dsk_err_msg(), pokes[t].name) && (t == 1 || !strstr(dsk_err_msg(), "side stream"));
        check(c, named, "engine_counters", pokes[t].label, "the round %s: %s",
              failed ? "fails" : "PASSES", failed ? dsk_err_msg() : "");
        for (int i = 0; i < P; i++)
            rows[i] = prow(2 + 2 * t, toks[i], i, i == P - 1);
        int after = ops->step(gb, rows, P, &out, NULL) == 0;
        int same = after && !memcmp(a + (size_t)(P - 1) * V, b2 + (size_t)(P - 1) * V, sizeof(float) * (size_t)V);
        check(c, same, "engine_counters", pokes[t].after_label, "%s",
              !after ? dsk_err_msg() : same ? "runs, its logits equal the clean round's" : "its logits DIFFER");
    }
    for (int s = 0; s < NSEQ; s++)
        ops->seq_close(gb, s);
    ops->close(gb);
    free(a);
    free(b2);
    free(valid);
}
