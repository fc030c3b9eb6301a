/* The vision tower's CPU reference against vision.md §6's golden vectors (REF on CPU, tiny config of §5):
 * weights from §6's formula, images A (20 × 12, upscale and pad) and B (100 × 60, shrink) preprocessed by
 * runtime/vision. The fp32 path must match "REF fp32" tightly (≤ 1e-5 relative on Σx², ≤ 1e-5 absolute on
 * the first 8 values); the bf16 path "REF bf16" within the bf16 spread (§6 "How to check"). Also: the span
 * rows against §6's merged-span sums, and properties no golden pins (one patch's change reaches every
 * feature row through attention; the zero-padded cells still carry the biases). */
#include "tests/model/model_test_util.h"

#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/vision_tower.h"
#include "runtime/model/vision_span.h"
#include "runtime/vision/vision.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LM_DIM = 128 };

static model_config tiny_config(void)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.dim = LM_DIM;
    c.vision_n_layers = 2;
    c.vision_dim = 64;
    c.vision_n_heads = 4;
    c.vision_inter_dim = 96;
    c.vision_patch_size = 4;
    c.vision_downsample_ratio = 3;
    c.vision_max_n_token = 32;
    c.vision_min_pixels = 1024;
    c.vision_rope_theta = 10000.0;
    return c;
}

/* §6: w_t[i] = off + scale · (((i·40503 + 12345 + 7919·t) mod 65536) − 32768) / 32768, exact in double. */
static double formula(int t, int64_t i, double scale, double off)
{
    return off + scale * (double)(((i * 40503 + 12345 + 7919 * (int64_t)t) % 65536) - 32768) / 32768.0;
}

static uint16_t *bf16_tensor(int t, int64_t n, double scale)
{
    uint16_t *v = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) /* one rounding double -> bf16: via fp32 would round twice */
        v[i] = f64_to_bf16(formula(t, i, scale, 0.0));
    return v;
}

static float *f32_tensor(int t, int64_t n)
{
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)formula(t, i, 0.25, 1.0);
    return v;
}

typedef struct {
    vision_weights w;
    vision_block_weights blk[2];
    void *owned[32];
    int n_owned;
} golden_weights;

static const void *keep(golden_weights *g, void *p)
{
    g->owned[g->n_owned++] = p;
    return p;
}

static void golden_weights_make(golden_weights *g, const model_config *c)
{
    int64_t D = c->vision_dim, I = c->vision_inter_dim, K0 = 3 * 16, cell = 9 * D;
    memset(g, 0, sizeof *g);
    g->w.patch_w = keep(g, bf16_tensor(0, D * K0, 0.125));
    g->w.patch_b = keep(g, bf16_tensor(1, D, 0.0625));
    for (int b = 0; b < 2; b++) {
        int t = 2 + 8 * b;
        vision_block_weights *k = &g->blk[b];
        k->norm1 = keep(g, f32_tensor(t, D));
        k->wqkv = keep(g, bf16_tensor(t + 1, 3 * D * D, 0.125));
        k->bqkv = keep(g, bf16_tensor(t + 2, 3 * D, 0.0625));
        k->wo = keep(g, bf16_tensor(t + 3, D * D, 0.125));
        k->bo = keep(g, bf16_tensor(t + 4, D, 0.0625));
        k->norm2 = keep(g, f32_tensor(t + 5, D));
        k->w1 = keep(g, bf16_tensor(t + 6, 2 * I * D, 0.125));
        k->w2 = keep(g, bf16_tensor(t + 7, D * I, 0.125));
    }
    g->w.blocks = g->blk;
    g->w.norm = keep(g, f32_tensor(18, D));
    g->w.al_w1 = keep(g, bf16_tensor(19, LM_DIM * cell, 1.0 / 32));
    g->w.al_b1 = keep(g, bf16_tensor(20, LM_DIM, 0.0625));
    g->w.al_w2 = keep(g, bf16_tensor(21, LM_DIM * LM_DIM, 0.0625));
    g->w.al_b2 = keep(g, bf16_tensor(22, LM_DIM, 0.0625));
    g->w.start = keep(g, bf16_tensor(23, LM_DIM, 0.25));
    g->w.end = keep(g, bf16_tensor(24, LM_DIM, 0.25));
    g->w.newline = keep(g, bf16_tensor(25, LM_DIM, 0.25));
}

static void golden_weights_free(golden_weights *g)
{
    for (int i = 0; i < g->n_owned; i++)
        free(g->owned[i]);
}

/* §6's image: pixel(x, y, c) = (7x + 13y + 29c) mod 256. */
static void golden_image(const model_config *c, int W, int H, vision_image *img)
{
    vision_rgb rgb = {.width = W, .height = H, .rgb = malloc((size_t)W * H * 3)};
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int ch = 0; ch < 3; ch++)
                rgb.rgb[((size_t)y * W + x) * 3 + ch] = (uint8_t)((7 * x + 13 * y + 29 * ch) % 256);
    assert_ok(vision_preprocess(c, &rgb, img));
    vision_rgb_free(&rgb);
}

static void sums(const float *v, size_t n, double *s, double *s2)
{
    *s = *s2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        *s += v[i];
        *s2 += (double)v[i] * v[i];
    }
}

typedef struct {
    int W, H, L;
    double embed_s, embed_s2, vit_s, vit_s2;                   /* bf16 path */
    double bf_first[8], bf_s, bf_s2, f32_first[8], f32_s, f32_s2; /* features */
    double span_s, span_s2;                                    /* merged span (bf16) */
} golden_case;

static const golden_case cases[] = {
    {20, 12, 8, 15.033757627010345, 44.01458097844164, 190.55292510986328, 4338.549713438901,
     {0.09228515625, -0.0093994140625, -0.061767578125, -0.0257568359375, -0.107421875, 0.013671875, 0.0250244140625,
      0.0103759765625},
     -1.1342436075210571, 3.086164825804147,
     {0.09177093, -0.00946294, -0.06147806, -0.02581134, -0.10744743, 0.01323494, 0.02506148, 0.01055470},
     -1.1343634793011006, 3.089013541427776, -1.1274458169937134, 13.766747492399148},
    {100, 60, 15, -2.9268514811992645, 137.24050729357523, 80.62139892578125, 8832.283832597197,
     {0.0556640625, -0.0238037109375, -0.04638671875, -0.006744384765625, -0.09912109375, 0.0220947265625,
      0.01019287109375, -0.0140380859375},
     -2.5097870230674744, 5.790478260326328,
     {0.05535024, -0.02390999, -0.04626379, -0.00697476, -0.09888358, 0.02190573, 0.00998155, -0.01366613},
     -2.507600986864418, 5.788675479073508, -2.4505600333213806, 19.13903089322861},
};

static void test_golden(void **state)
{
    (void)state;
    model_config c = tiny_config();
    golden_weights g;
    golden_weights_make(&g, &c);
    /* §6 check values of the delimiters: the formula and its one rounding */
    assert_true(bf16_to_f32(g.w.start[0]) == 0.2333984375f && bf16_to_f32(g.w.start[3]) == 0.1611328125f);
    assert_true(bf16_to_f32(g.w.end[0]) == -0.2060546875f && bf16_to_f32(g.w.end[3]) == 0.2216796875f);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const golden_case *e = &cases[k];
        vision_image img;
        golden_image(&c, e->W, e->H, &img);
        int nh = img.plan.n_vit_h, nw = img.plan.n_vit_w, N = nh * nw, D = c.vision_dim;
        assert_int_equal(img.plan.n_llm_h * img.plan.n_llm_w, e->L);
        float *f = malloc(sizeof(float) * e->L * LM_DIM), *emb = malloc(sizeof(float) * N * D),
              *vit = malloc(sizeof(float) * N * D);
        vision_taps taps = {emb, vit};
        double s, s2, ms, ms2;
        /* fp32: tight */
        assert_ok(vision_tower_run(&c, &g.w, VISION_F32, img.patches, nh, nw, f, NULL));
        sums(f, (size_t)e->L * LM_DIM, &s, &s2);
        printf("image %dx%d fp32: sum %.9f (REF %.9f), sum sq %.9f (REF %.9f)\n", e->W, e->H, s, e->f32_s, s2, e->f32_s2);
        assert_true(fabs(s2 - e->f32_s2) <= 1e-5 * e->f32_s2);
        assert_true(fabs(s - e->f32_s) <= 1e-4);
        for (int i = 0; i < 8; i++)
            assert_true(fabs(f[i] - e->f32_first[i]) <= 1e-5);
        /* bf16: REF's rounding points, within the bf16 spread */
        assert_ok(vision_tower_run(&c, &g.w, VISION_BF16, img.patches, nh, nw, f, &taps));
        sums(emb, (size_t)N * D, &s, &s2);
        assert_true(fabs(s2 - e->embed_s2) <= 5e-3 * e->embed_s2 && fabs(s - e->embed_s) <= 2e-2);
        sums(vit, (size_t)N * D, &s, &s2);
        assert_true(fabs(s2 - e->vit_s2) <= 5e-3 * e->vit_s2);
        sums(f, (size_t)e->L * LM_DIM, &s, &s2);
        printf("image %dx%d bf16: sum %.9f (REF %.9f), sum sq %.9f (REF %.9f)\n", e->W, e->H, s, e->bf_s, s2, e->bf_s2);
        assert_true(fabs(s2 - e->bf_s2) <= 5e-3 * e->bf_s2);
        assert_true(fabs(s - e->bf_s) <= 2e-2);
        for (int i = 0; i < 8; i++) {
            assert_true(fabs(f[i] - e->bf_first[i]) <= 2e-3);
            assert_true(bf16_round(f[i]) == f[i]); /* bf16 values */
        }
        /* the merged span */
        int64_t P = img.plan.positions;
        uint16_t *rows = malloc(sizeof(uint16_t) * (size_t)P * LM_DIM);
        vision_span_rows(&c, &g.w, f, nh, nw, rows);
        ms = ms2 = 0.0;
        for (int64_t i = 0; i < P * LM_DIM; i++) {
            double v = bf16_to_f32(rows[i]);
            ms += v;
            ms2 += v * v;
        }
        assert_true(fabs(ms2 - e->span_s2) <= 5e-3 * e->span_s2 && fabs(ms - e->span_s) <= 2e-2);
        assert_memory_equal(rows, g.w.start, sizeof(uint16_t) * LM_DIM);
        assert_memory_equal(rows + (P - 1) * LM_DIM, g.w.end, sizeof(uint16_t) * LM_DIM);
        assert_memory_equal(rows + (int64_t)(img.plan.n_llm_w + 1) * LM_DIM, g.w.newline, sizeof(uint16_t) * LM_DIM);
        free(rows);
        free(f);
        free(emb);
        free(vit);
        vision_image_free(&img);
    }
    golden_weights_free(&g);
}

/* Attention is full and bidirectional: changing the last patch moves every feature row, the first cell
 * included. And a refused call: no tower. */
static void test_reach(void **state)
{
    (void)state;
    model_config c = tiny_config();
    golden_weights g;
    golden_weights_make(&g, &c);
    vision_image img;
    golden_image(&c, 20, 12, &img);
    int nh = img.plan.n_vit_h, nw = img.plan.n_vit_w, L = img.plan.n_llm_h * img.plan.n_llm_w;
    float *a = malloc(sizeof(float) * L * LM_DIM), *b = malloc(sizeof(float) * L * LM_DIM);
    assert_ok(vision_tower_run(&c, &g.w, VISION_F32, img.patches, nh, nw, a, NULL));
    size_t last = (size_t)(nh * nw - 1) * 48;
    for (int i = 0; i < 48; i++)
        img.patches[last + i] = f32_to_bf16(0.5f);
    assert_ok(vision_tower_run(&c, &g.w, VISION_F32, img.patches, nh, nw, b, NULL));
    for (int row = 0; row < L; row++) {
        int moved = 0;
        for (int k = 0; k < LM_DIM; k++)
            moved |= a[row * LM_DIM + k] != b[row * LM_DIM + k];
        assert_true(moved);
    }
    c.vision_n_layers = 0;
    assert_int_equal(vision_tower_run(&c, &g.w, VISION_F32, img.patches, nh, nw, a, NULL), -1);
    free(a);
    free(b);
    vision_image_free(&img);
    golden_weights_free(&g);
}

/* `dskit mkmodel --preset tiny-vision` writes §6's tower (its config §5, its weights §6's formula, the norms
 * fp32): the loaded checkpoint's tower gives the same bits as the formula's, in both precisions. */
static void test_checkpoint(void **state)
{
    (void)state;
    cpu_model *m = model_test_make("tiny-vision", 7);
    assert_non_null(m);
    model_config c = tiny_config();
    const model_config *mc = &m->cfg;
    assert_int_equal(mc->vision_n_layers, 2);
    assert_int_equal(mc->vision_dim, c.vision_dim);
    assert_int_equal(mc->vision_patch_size, c.vision_patch_size);
    assert_int_equal(mc->vision_max_n_token, c.vision_max_n_token);
    assert_true(mc->vision_min_pixels == c.vision_min_pixels && mc->vision_max_wh_ratio == 0.0);
    assert_int_equal(mc->dim, LM_DIM);
    golden_weights g;
    golden_weights_make(&g, &c);
    vision_image img;
    golden_image(mc, 100, 60, &img);
    int nh = img.plan.n_vit_h, nw = img.plan.n_vit_w, L = img.plan.n_llm_h * img.plan.n_llm_w;
    float *a = malloc(sizeof(float) * L * LM_DIM), *b = malloc(sizeof(float) * L * LM_DIM);
    for (int prec = 0; prec < 2; prec++) {
        assert_ok(vision_tower_run(mc, &m->vision, (vision_precision)prec, img.patches, nh, nw, a, NULL));
        assert_ok(vision_tower_run(&c, &g.w, (vision_precision)prec, img.patches, nh, nw, b, NULL));
        assert_memory_equal(a, b, sizeof(float) * L * LM_DIM);
    }
    for (int l = 0; l < mc->n_layers; l++)
        assert_non_null(m->blocks[l].gate_bias_vl);
    free(a);
    free(b);
    vision_image_free(&img);
    golden_weights_free(&g);
    model_test_cleanup(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_golden), cmocka_unit_test(test_reach),
                                       cmocka_unit_test(test_checkpoint)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
