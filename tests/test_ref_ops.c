/* CPU references of the kit's first families against hand-computed cases. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/ref/rmsnorm.h"
#include "runtime/ref/rope.h"
#include "runtime/ref/rowmm.h"
#include "runtime/ref/topk.h"
#include "tests/common/test_util.h"

#include <math.h>

static void test_rmsnorm(void **state)
{
    (void)state;
    /* x = (3, 4): mean(x^2) = 12.5, inv = 1/sqrt(12.5); w = (1, 2) */
    uint16_t x[2] = {f32_to_bf16(3.0f), f32_to_bf16(4.0f)};
    uint16_t w[2] = {f32_to_bf16(1.0f), f32_to_bf16(2.0f)};
    uint16_t y[2];
    ref_rmsnorm_bf16(x, w, y, 1, 2, 1e-20f);
    float inv = 1.0f / sqrtf(12.5f);
    assert_int_equal(y[0], f32_to_bf16(3.0f * inv));
    assert_int_equal(y[1], f32_to_bf16((4.0f * inv) * 2.0f));
    assert_true(fabsf(bf16_to_f32(y[0]) - 0.8485281f) < 4e-3f);
    /* eps dominates a zero row: output zeros, never NaN */
    uint16_t z[2] = {0, 0}, yz[2];
    ref_rmsnorm_bf16(z, w, yz, 1, 2, 1e-6f);
    assert_int_equal(yz[0], 0);
}

static void test_yarn_range(void **state)
{
    (void)state;
    /* model.md 3.5: base 160000, R 64 -> low 15, high 25; 7.1: base 160000, R 32 -> 7, 13 */
    rope_params p = {64, 160000.0, 16.0, 32.0, 1.0, 65536};
    int lo, hi;
    ref_rope_yarn_range(&p, &lo, &hi);
    assert_int_equal(lo, 15);
    assert_int_equal(hi, 25);
    p.rope_dim = 32;
    ref_rope_yarn_range(&p, &lo, &hi);
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 13);
}

static void test_rope_freqs(void **state)
{
    (void)state;
    rope_params p = {64, 160000.0, 16.0, 32.0, 1.0, 65536};
    float f[32];
    ref_rope_freqs(&p, f);
    /* pairs up to low keep base^(-2j/64); pairs from high on are divided by 16 */
    assert_true(f[0] == 1.0f);
    assert_true(fabsf(f[15] - (float)pow(160000.0, -30.0 / 64.0)) <= 1e-7f * f[15]);
    assert_true(fabsf(f[31] - (float)pow(160000.0, -62.0 / 64.0) / 16.0f) <= 1e-6f * f[31]);
    /* j = 20 sits in the ramp: ramp = 0.5, so theta' = theta * (1/16 * 0.5 + 0.5) */
    float t20 = (float)pow(160000.0, -40.0 / 64.0);
    assert_true(fabsf(f[20] - t20 * (0.5f / 16.0f + 0.5f)) <= 1e-6f * t20);
    /* no YaRN: plain frequencies */
    rope_params q = {64, 10000.0, 0, 0, 0, 0};
    ref_rope_freqs(&q, f);
    assert_true(fabsf(f[1] - (float)pow(10000.0, -2.0 / 64.0)) <= 1e-7f);
}

static void test_rope_apply(void **state)
{
    (void)state;
    /* head_dim 4, R 2: only dims 2, 3 rotate; position 1 with base 1 -> angle 1 rad */
    rope_params p = {2, 10000.0, 0, 0, 0, 0};
    float table[4];
    ref_rope_table(&p, 0, 2, table);
    assert_true(table[0] == 1.0f && table[1] == 0.0f); /* position 0: identity */
    assert_true(fabsf(table[2] - (float)cos(1.0)) < 1e-7f && fabsf(table[3] - (float)sin(1.0)) < 1e-7f);
    uint16_t x[4] = {f32_to_bf16(5.0f), f32_to_bf16(6.0f), f32_to_bf16(1.0f), f32_to_bf16(0.0f)};
    int32_t pos = 1;
    ref_rope_apply_bf16(x, 1, 1, 4, 2, &pos, table, 0);
    assert_true(bf16_to_f32(x[0]) == 5.0f && bf16_to_f32(x[1]) == 6.0f);
    assert_int_equal(x[2], f32_to_bf16((float)cos(1.0)));
    assert_int_equal(x[3], f32_to_bf16((float)sin(1.0)));
    ref_rope_apply_bf16(x, 1, 1, 4, 2, &pos, table, 1); /* inverse brings it back near (1, 0) */
    assert_true(fabsf(bf16_to_f32(x[2]) - 1.0f) < 1e-2f && fabsf(bf16_to_f32(x[3])) < 1e-2f);
}

static void test_rowmm(void **state)
{
    (void)state;
    /* x [2,3], w [2,3] */
    const float xf[6] = {1, 2, 3, -1, 0.5f, 2}, wf[6] = {1, 0, -1, 2, 2, 2};
    uint16_t x[6], w[6];
    for (int i = 0; i < 6; i++) {
        x[i] = f32_to_bf16(xf[i]);
        w[i] = f32_to_bf16(wf[i]);
    }
    float y[4];
    ref_rowmm_bf16(x, w, y, 2, 3, 2);
    assert_true(y[0] == -2.0f && y[1] == 12.0f && y[2] == -3.0f && y[3] == 3.0f);
}

static void test_topk(void **state)
{
    (void)state;
    const float s[6] = {0.5f, 2.0f, 2.0f, -1.0f, 2.0f, NAN};
    int32_t idx[6];
    float val[6];
    /* three-way tie at 2.0 with k = 2: the two lower indices win; output ascending by index */
    ref_topk(s, NULL, 6, 2, idx, val);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 2);
    /* bias changes the selection but the values stay unbiased */
    const float b[6] = {3.0f, 0, 0, 0, 0.5f, 0};
    ref_topk(s, b, 6, 2, idx, val);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 4);
    assert_true(val[0] == 0.5f && val[1] == 2.0f);
    /* NaN ranks below -1 */
    ref_topk(s, NULL, 6, 5, idx, val);
    for (int i = 0; i < 5; i++)
        assert_int_not_equal(idx[i], 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),    cmocka_unit_test(test_yarn_range), cmocka_unit_test(test_rope_freqs),
        cmocka_unit_test(test_rope_apply), cmocka_unit_test(test_rowmm),      cmocka_unit_test(test_topk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
