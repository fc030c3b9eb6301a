/* Bit-exact checks of the number-format conversions against hand-computed cases. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "tests/common/test_util.h"

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(f32_to_bf16(-2.5f), 0xc020);
    /* 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0) */
    assert_int_equal(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up */
    assert_int_equal(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(f32_to_bf16(INFINITY), 0x7f80);
    assert_true((f32_to_bf16(NAN) & 0x7fc0) == 0x7fc0);
    assert_true(bf16_to_f32(0x3f80) == 1.0f);
    /* largest finite fp32 rounds to infinity in bf16 */
    assert_int_equal(f32_to_bf16(3.4028235e38f), 0x7f80);
}

static void test_f16(void **state)
{
    (void)state;
    assert_int_equal(f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(f32_to_f16(0x1p-24f), 0x0001);   /* smallest subnormal */
    assert_int_equal(f32_to_f16(0x1p-25f), 0x0000);   /* tie between 0 and 2^-24: even */
    assert_int_equal(f32_to_f16(0x1.8p-24f), 0x0002); /* 1.5 units: tie, rounds to even 2 */
    assert_int_equal(f32_to_f16(0x1p-14f), 0x0400);   /* smallest normal */
    assert_int_equal(f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    assert_int_equal(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    /* every fp16 bit pattern survives f16 -> f32 -> f16 */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaN payloads are not preserved */
        assert_int_equal(f32_to_f16(f16_to_f32((uint16_t)h)), h);
    }
}

static void test_e4m3(void **state)
{
    (void)state;
    assert_true(e4m3_to_f32(0x7e) == 448.0f);
    assert_true(e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(e4m3_to_f32(0x08) == 0x1p-6f);
    assert_true(isnan(e4m3_to_f32(0x7f)));
    assert_int_equal(f32_to_e4m3(448.0f), 0x7e);
    assert_int_equal(f32_to_e4m3(1000.0f), 0x7e); /* saturates */
    assert_int_equal(f32_to_e4m3(-1000.0f), 0xfe);
    assert_int_equal(f32_to_e4m3(0x1p-10f), 0x00); /* half the smallest subnormal: tie to even 0 */
    assert_int_equal(f32_to_e4m3(0x1.8p-9f), 0x02); /* 1.5 subnormal units: tie to even 2 */
    assert_int_equal(f32_to_e4m3(1.0625f), 0x38);   /* 1 + 1/16: tie between 1.0 and 1.125 -> 1.0 */
    assert_int_equal(f32_to_e4m3(1.1875f), 0x3a);   /* tie between 1.125 and 1.25 -> 1.25 (even) */
    assert_int_equal(f32_to_e4m3(-0.0f), 0x80);
    /* every finite code survives decode -> encode */
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f)
            continue;
        assert_int_equal(f32_to_e4m3(e4m3_to_f32((uint8_t)b)), b);
    }
}

static void test_e2m1_and_e8m0(void **state)
{
    (void)state;
    /* the ties of model.md 3.6 */
    const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f, -0.1f};
    const float want[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, -0.0f};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        uint8_t c = f32_to_e2m1(in[i]);
        assert_true(e2m1_to_f32(c) == want[i]);
    }
    assert_int_equal(f32_to_e2m1(-0.1f), 8); /* -0 keeps its sign */
    assert_true(e8m0_to_f32(127) == 1.0f);
    assert_true(e8m0_to_f32(0) == 0x1p-127f);
    assert_true(isnan(e8m0_to_f32(255)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_e4m3),
        cmocka_unit_test(test_e2m1_and_e8m0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
