/* Preprocessing (vision.md §2): the §2.2 worked examples of the resize plan on the release config, the §6
 * images A, B, C on the tiny config (plan, span types, canvas sums and pixels, patch values and sums, all
 * exact as the spec requires), the normalisation examples, and the plan's invariants on random sizes. The
 * bit-exact comparison with Pillow on random images is tests/vision/check_pillow.py. */
#include "tests/common/test_util.h"

#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/model/vision_span.h"
#include "runtime/vision/image_write.h"
#include "runtime/vision/vision.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The vision fields of a config (the rest is unused by preprocessing). */
static model_config vision_config(int patch, int max_tokens, int64_t min_pixels)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.vision_n_layers = 1;
    c.vision_patch_size = patch;
    c.vision_downsample_ratio = 3;
    c.vision_max_n_token = max_tokens;
    c.vision_min_pixels = min_pixels;
    return c;
}

typedef struct {
    int W, H;
    int best_w, best_h, vit_h, vit_w, llm_h, llm_w;
    int64_t positions;
    int fit_w, fit_h, off_x, off_y;
} plan_case;

static void check_plan(const model_config *c, const plan_case *k)
{
    vision_plan p;
    assert_ok(vision_plan_for(c, k->W, k->H, &p));
    int got[11] = {p.best_w, p.best_h, p.n_vit_h, p.n_vit_w, p.n_llm_h, p.n_llm_w, (int)p.positions,
                   p.fit_w, p.fit_h, p.off_x, p.off_y};
    int want[11] = {k->best_w, k->best_h, k->vit_h, k->vit_w, k->llm_h, k->llm_w, (int)k->positions,
                    k->fit_w, k->fit_h, k->off_x, k->off_y};
    static const char *names[11] = {"best_w", "best_h", "n_vit_h", "n_vit_w", "n_llm_h", "n_llm_w",
                                    "positions", "fit_w", "fit_h", "off_x", "off_y"};
    for (int i = 0; i < 11; i++)
        if (got[i] != want[i])
            fail_msg("%d x %d: %s is %d, the spec says %d", k->W, k->H, names[i], got[i], want[i]);
}

/* §2.2, released config (patch 14, ratio 3, 1024 positions, 544² pixels). */
static void test_worked_examples(void **state)
{
    (void)state;
    model_config c = vision_config(14, 1024, 295936);
    static const plan_case cases[] = {
        {1024, 768, 1036, 770, 55, 74, 19, 25, 496, 1027, 770, 4, 0},
        {200, 100, 770, 392, 28, 55, 10, 19, 202, 770, 385, 0, 4},
        {1920, 1080, 1708, 966, 69, 122, 23, 41, 968, 1708, 961, 0, 2},
        {448, 448, 546, 546, 39, 39, 13, 13, 184, 546, 546, 0, 0},
        {30, 30000, 42, 21462, 1533, 3, 511, 1, 1024, 21, 21462, 10, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_plan(&c, &cases[i]);
    /* step 2 of 200 x 100: s = pow(295936 / 20000, 0.5), printed to 16 digits in the spec */
    assert_true(fabs(pow(295936.0 / 20000.0, 0.5) - 3.846660889654818) < 1e-15);
}

/* Invariants on random sizes: a canvas of whole patches within the position budget, the fitted image
 * inside it and touching two opposite sides, the span count from the grid. */
static void test_plan_invariants(void **state)
{
    (void)state;
    dsk_rng r;
    uint64_t seed = test_seed("plan invariants");
    dsk_rng_seed(&r, seed);
    model_config rel = vision_config(14, 1024, 295936), tiny = vision_config(4, 32, 1024);
    for (int k = 0; k < 20000; k++) {
        const model_config *c = k & 1 ? &tiny : &rel;
        int W = 1 + (int)dsk_rng_below(&r, k % 3 ? 4000 : 60), H = 1 + (int)dsk_rng_below(&r, k % 5 ? 4000 : 60);
        if (k % 7 == 0)
            W = 1 + (int)dsk_rng_below(&r, 100000);
        vision_plan p;
        assert_ok(vision_plan_for(c, W, H, &p));
        int ps = c->vision_patch_size;
        assert_true(p.best_w % ps == 0 && p.best_h % ps == 0 && p.best_w >= ps && p.best_h >= ps);
        assert_true(p.positions <= c->vision_max_n_token);
        assert_int_equal(p.positions, vision_span_positions(3, p.n_vit_h, p.n_vit_w));
        assert_true(p.fit_w >= 0 && p.fit_h >= 0 && p.off_x + p.fit_w <= p.best_w && p.off_y + p.fit_h <= p.best_h);
        assert_true(p.fit_w == p.best_w || p.fit_h == p.best_h);
        assert_true(p.off_x == 0 || p.off_y == 0);
    }
}

/* pixel(x, y, c) = (7x + 13y + 29c) mod 256, the §6 image, as a PNG. */
static void golden_png(int w, int h, uint8_t **file, size_t *len)
{
    uint16_t *s = malloc(sizeof(uint16_t) * (size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                s[((size_t)y * w + x) * 3 + c] = (uint16_t)((7 * x + 13 * y + 29 * c) % 256);
    png_spec sp = {.width = w, .height = h, .channels = 3, .depth = 8, .trns_grey = -1};
    assert_ok(image_write_png(&sp, s, file, len));
    free(s);
}

typedef struct {
    int W, H;
    plan_case plan;
    const char *types;
    int64_t canvas_sum;
    uint8_t px[4][3]; /* at (y, x) = (0, 0), (0, 2), (5, 7), (last, last) */
    double p0[8], p1[8];
    double sum, sum2;
} golden_case;

/* §6, tiny config (patch 4, 32 positions, 1024 pixels). */
static const golden_case golden[] = {
    {20, 12, {20, 12, 44, 24, 6, 11, 2, 4, 12, 40, 24, 2, 0}, "0,1,1,1,1,2,1,1,1,1,2,3", 447908,
     {{127, 127, 127}, {0, 27, 56}, {45, 74, 103}, {127, 127, 127}},
     {-0.003936767578125, -0.003936767578125, -1.0, -1.0, -0.003936767578125, -0.003936767578125, -0.984375,
      -0.9765625},
     {-0.96875, -0.9375, -0.9140625, -0.8828125, -0.9453125, -0.9140625, -0.890625, -0.859375}, 345.5805358886719,
     755.8736321581528},
    {100, 60, {100, 60, 60, 36, 9, 15, 3, 5, 20, 60, 36, 0, 0}, "0,1,1,1,1,1,2,1,1,1,1,1,2,1,1,1,1,1,2,3", 826044,
     {{7, 36, 65}, {31, 60, 89}, {197, 236, 131}, {173, 202, 231}},
     {-0.9453125, -0.8515625, -0.7578125, -0.671875, -0.78125, -0.6875, -0.59375, -0.5078125},
     {-0.578125, -0.482421875, -0.396484375, -0.302734375, -0.412109375, -0.318359375, -0.2314453125,
      -0.1376953125},
     -1.229217529296875, 1867.8130838600919},
    {41, 24, {41, 24, 44, 24, 6, 11, 2, 4, 12, 41, 24, 2, 0}, "0,1,1,1,1,2,1,1,1,1,2,3", 400092,
     {{127, 127, 127}, {0, 29, 58}, {100, 129, 158}, {127, 127, 127}},
     {-0.003936767578125, -0.003936767578125, -1.0, -0.9453125, -0.003936767578125, -0.003936767578125,
      -0.8984375, -0.84375},
     {-0.890625, -0.8359375, -0.78125, -0.7265625, -0.7890625, -0.734375, -0.6796875, -0.625}, -30.073089599609375,
     992.6515354542062},
};

static void test_golden_images(void **state)
{
    (void)state;
    model_config c = vision_config(4, 32, 1024);
    for (size_t g = 0; g < sizeof golden / sizeof golden[0]; g++) {
        const golden_case *k = &golden[g];
        check_plan(&c, &k->plan);
        uint8_t *file, *canvas;
        size_t len;
        golden_png(k->W, k->H, &file, &len);
        vision_rgb img;
        vision_image vi;
        assert_ok(vision_decode(file, len, NULL, &img));
        assert_ok(vision_preprocess(&c, &img, &vi));
        const vision_plan *p = &vi.plan;
        /* the span's types */
        char types[256] = "";
        for (int64_t i = 0; i < p->positions; i++) {
            int64_t row;
            snprintf(types + strlen(types), sizeof types - strlen(types), "%s%d", i ? "," : "",
                     vision_span_slot(p->n_llm_h, p->n_llm_w, i, &row));
        }
        assert_string_equal(types, k->types);
        /* the canvas */
        assert_ok(vision_canvas(&img, p, &canvas));
        int64_t sum = 0;
        for (size_t i = 0; i < (size_t)p->best_w * p->best_h * 3; i++)
            sum += canvas[i];
        assert_int_equal(sum, k->canvas_sum);
        const int at[4][2] = {{0, 0}, {0, 2}, {5, 7}, {p->best_h - 1, p->best_w - 1}};
        for (int q = 0; q < 4; q++)
            assert_memory_equal(canvas + ((size_t)at[q][0] * p->best_w + at[q][1]) * 3, k->px[q], 3);
        /* the patches: [n][3][4][4] bf16, the first values and the fp64 sums in row-major order */
        size_t n = (size_t)p->n_vit_h * p->n_vit_w * 48;
        for (int i = 0; i < 8; i++) {
            assert_true(bf16_to_f32(vi.patches[i]) == (float)k->p0[i]);
            assert_true(bf16_to_f32(vi.patches[48 + i]) == (float)k->p1[i]);
        }
        double s = 0, s2 = 0;
        for (size_t i = 0; i < n; i++) {
            double v = bf16_to_f32(vi.patches[i]);
            s += v;
            s2 += v * v;
        }
        printf("image %d x %d: patches sum %.17g (spec %.17g), sum of squares %.17g (spec %.17g)\n", k->W, k->H, s,
               k->sum, s2, k->sum2);
        assert_true(fabs(s - k->sum) <= 1e-9 * fabs(k->sum) + 1e-12);
        assert_true(fabs(s2 - k->sum2) <= 1e-12 * k->sum2);
        free(canvas);
        vision_image_free(&vi);
        vision_rgb_free(&img);
        free(file);
    }
}

/* §2.4 examples, and every value against the formula in double (fp32 rounding cannot move a value by a
 * bf16 step). */
static void test_normalize(void **state)
{
    (void)state;
    assert_true(bf16_to_f32(vision_normalize(0)) == -1.0f);
    assert_true(bf16_to_f32(vision_normalize(127)) == -0.003936767578125f);
    assert_true(bf16_to_f32(vision_normalize(128)) == 0.003936767578125f);
    assert_true(bf16_to_f32(vision_normalize(255)) == 1.0f);
    for (int v = 0; v < 256; v++) {
        double x = (v / 255.0 - 0.5) / 0.5, got = bf16_to_f32(vision_normalize((uint8_t)v));
        assert_true(fabs(got - x) <= fabs(x) / 256 + 1e-30);
    }
}

/* A constant image stays that constant through any resize (the fixed-point weights sum to 2^22 within the
 * rounding the half bias absorbs), and an unchanged size is a copy. */
static void test_resize_basics(void **state)
{
    (void)state;
    int sw = 37, sh = 19;
    uint8_t *src = malloc((size_t)sw * sh * 3), *dst = malloc(400 * 400 * 3);
    for (int v = 0; v < 256; v += 51) {
        memset(src, v, (size_t)sw * sh * 3);
        static const int sizes[][2] = {{5, 3}, {80, 40}, {37, 60}, {200, 19}, {1, 1}};
        for (int k = 0; k < 5; k++) {
            assert_ok(vision_resize_bicubic(src, sw, sh, dst, sizes[k][0], sizes[k][1]));
            for (int i = 0; i < sizes[k][0] * sizes[k][1] * 3; i++)
                assert_int_equal(dst[i], v);
        }
    }
    for (int i = 0; i < sw * sh * 3; i++)
        src[i] = (uint8_t)(i * 7);
    assert_ok(vision_resize_bicubic(src, sw, sh, dst, sw, sh));
    assert_memory_equal(src, dst, (size_t)sw * sh * 3);
    free(src);
    free(dst);
}

/* The pass order when both axes change (Pillow 13's rule): a tall image losing most of its height runs the
 * vertical pass first, a shrink of comparable ratios the horizontal one; each two-axis resize must equal
 * its two one-axis resizes composed in that order (and, on these noise images, differ from the other order). */
static void test_resize_order(void **state)
{
    (void)state;
    static const int cases[][5] = {{27, 2454, 2, 180, 1}, {120, 90, 100, 10, 1}, {120, 90, 60, 60, 0},
                                   {20, 12, 40, 24, 0}, {100, 60, 60, 36, 0}};
    dsk_rng r;
    dsk_rng_seed(&r, (uint64_t)time(NULL));
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int sw = cases[k][0], sh = cases[k][1], dw = cases[k][2], dh = cases[k][3], vfirst = cases[k][4];
        uint8_t *src = malloc((size_t)sw * sh * 3), *both = malloc((size_t)dw * dh * 3);
        uint8_t *mid = malloc((size_t)(sw > dw ? sw : dw) * (sh > dh ? sh : dh) * 3), *two = malloc((size_t)dw * dh * 3);
        for (size_t i = 0; i < (size_t)sw * sh * 3; i++)
            src[i] = (uint8_t)dsk_rng_below(&r, 256);
        assert_ok(vision_resize_bicubic(src, sw, sh, both, dw, dh));
        if (vfirst) {
            assert_ok(vision_resize_bicubic(src, sw, sh, mid, sw, dh));
            assert_ok(vision_resize_bicubic(mid, sw, dh, two, dw, dh));
        } else {
            assert_ok(vision_resize_bicubic(src, sw, sh, mid, dw, sh));
            assert_ok(vision_resize_bicubic(mid, dw, sh, two, dw, dh));
        }
        assert_memory_equal(both, two, (size_t)dw * dh * 3);
        free(src);
        free(both);
        free(mid);
        free(two);
    }
}

/* An image so tall that its fitted width rounds to 0 (2 x 2192 on the tiny 12 x 180 canvas): REF's
 * contain() returns an empty image, so the canvas is all grey. */
static void test_empty_fit(void **state)
{
    (void)state;
    model_config tiny = vision_config(4, 32, 1024);
    vision_rgb img = {.width = 2, .height = 2192, .rgb = malloc(2 * 2192 * 3)};
    memset(img.rgb, 200, 2 * 2192 * 3);
    vision_plan p;
    uint8_t *canvas;
    assert_ok(vision_plan_for(&tiny, img.width, img.height, &p));
    assert_int_equal(p.best_w, 12);
    assert_int_equal(p.best_h, 180);
    assert_int_equal(p.fit_w, 0);
    assert_ok(vision_canvas(&img, &p, &canvas));
    for (int i = 0; i < 12 * 180 * 3; i++)
        assert_int_equal(canvas[i], 127);
    free(canvas);
    free(img.rgb);
}

static void test_no_vision(void **state)
{
    (void)state;
    model_config c = vision_config(14, 1024, 295936);
    c.vision_n_layers = 0;
    vision_plan p;
    assert_int_equal(vision_plan_for(&c, 100, 100, &p), -1);
    assert_non_null(strstr(dsk_err_msg(), "no vision tower"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_examples), cmocka_unit_test(test_plan_invariants),
        cmocka_unit_test(test_golden_images),   cmocka_unit_test(test_normalize),
        cmocka_unit_test(test_resize_basics), cmocka_unit_test(test_resize_order), cmocka_unit_test(test_empty_fit),   cmocka_unit_test(test_no_vision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
