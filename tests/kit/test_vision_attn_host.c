/* What can be checked of vision_attn without a GPU: the reference on a hand-computed case in both
 * precisions, its query-row range (what the GPU check's row sample relies on), the rule, and the
 * launcher's refusals of bad arguments (before it touches a kit or the GPU). */
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/vision_attn.h"
#include "runtime/ref/vision_attn.h"
#include "tests/common/test_util.h"

#include <math.h>
#include <string.h>

static void test_two_keys(void **state)
{
    (void)state;
    /* one head of 4 dims, two patches: q0 = (2, 0, 0, 0); k0 = (1, 3, 0, 0), k1 = (0, 0, -2, 0); so row 0's
     * scores are (2, 0) · fp32(4^-1/2) = (1, 0) and its max 1; v0 = (1, 3, 0, 0), v1 = (0, 0, -2, 0.5) */
    const float qkv[2][12] = {{2, 0, 0, 0, 1, 3, 0, 0, 1, 3, 0, 0}, {0, 1, 0, 0, 0, 0, -2, 0, 0, 0, -2, 0.5f}};
    float out[2][4];
    float p1 = expf(0.0f - 1.0f), sum = 1.0f + p1, pb = bf16_round(p1);
    assert_ok(ref_vision_attn(&qkv[0][0], 2, 1, 4, 0, 2, 0, &out[0][0]));
    assert_true(out[0][0] == 1.0f / sum && out[0][1] == 3.0f / sum);
    assert_true(out[0][2] == (p1 * -2.0f) / sum && out[0][3] == (p1 * 0.5f) / sum);
    /* bf16: the numerator takes the rounded probability, the denominator the unrounded one, then a rounding */
    assert_ok(ref_vision_attn(&qkv[0][0], 2, 1, 4, 0, 2, 1, &out[0][0]));
    assert_true(out[0][0] == bf16_round(1.0f / sum) && out[0][1] == bf16_round(3.0f / sum));
    assert_true(out[0][2] == bf16_round((pb * -2.0f) / sum) && out[0][3] == bf16_round((pb * 0.5f) / sum));
}

/* A row range writes exactly its rows, with the bits of the whole run. */
static void test_row_range(void **state)
{
    (void)state;
    enum { N = 37, H = 3, HD = 8, D = H * HD };
    static float qkv[N * 3 * D], all[N * D], part[N * D];
    dsk_rng r;
    dsk_rng_seed(&r, 5);
    for (int i = 0; i < N * 3 * D; i++)
        qkv[i] = bf16_round(dsk_rng_normal(&r));
    assert_ok(ref_vision_attn(qkv, N, H, HD, 0, N, 1, all));
    for (int i = 0; i < N * D; i++)
        part[i] = -1234.5f;
    assert_ok(ref_vision_attn(qkv, N, H, HD, 10, 13, 1, part));
    for (int i = 0; i < N; i++)
        for (int d = 0; d < D; d++)
            if (i >= 10 && i < 13)
                assert_memory_equal(&part[i * D + d], &all[i * D + d], sizeof(float));
            else
                assert_true(part[i * D + d] == -1234.5f);
}

static void test_rule(void **state)
{
    (void)state;
    rule_variant v;
    assert_ok(rule_vision_attn_pick(64, &v));
    assert_string_equal(v.family, "vision_attn");
    assert_string_equal(v.params, "HD=64");
    assert_ok(rule_vision_attn_pick(16, &v));
    assert_string_equal(v.params, "HD=16");
    assert_int_equal(rule_vision_attn_pick(80, &v), -1);
    assert_non_null(strstr(dsk_err_msg(), "head_dim 80"));
}

#define FAKE ((CUdeviceptr)0x100000)

#define assert_fails_with(call, ...)                                                               \
    do {                                                                                           \
        dsk_err_clear();                                                                           \
        if ((call) == 0)                                                                           \
            fail_msg("%s succeeded, expected an error", #call);                                    \
        const char *frags_[] = {__VA_ARGS__};                                                      \
        for (size_t i_ = 0; i_ < sizeof frags_ / sizeof frags_[0]; i_++)                           \
            if (!strstr(dsk_err_msg(), frags_[i_]))                                                \
                fail_msg("%s: message \"%s\" lacks \"%s\"", #call, dsk_err_msg(), frags_[i_]);     \
    } while (0)

static void test_launcher_refusals(void **state)
{
    (void)state;
    /* 100 patches of 16 x 64: qkv is 100 x 3072 x 2 bytes */
    const CUdeviceptr out = FAKE + 100 * 3072 * 2;
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, out, 100, 16, 32), "vision_attn", "head_dim 32");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, out, 0, 16, 64), "vision_attn", "0 patches");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, out, -1, 16, 64), "-1 patches");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, out, (1 << 24) + 1, 16, 64), "patches");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, out, 100, 0, 64), "0 heads");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, out, 100, 70000, 64), "70000 heads");
    assert_fails_with(op_vision_attn(NULL, 0, 0, out, 100, 16, 64), "qkv is missing");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, 0, 100, 16, 64), "out is missing");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE + 8, out, 100, 16, 64), "qkv", "16-byte aligned");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, out - 16, 100, 16, 64), "overlaps");
    assert_fails_with(op_vision_attn(NULL, 0, FAKE, FAKE - 16, 100, 16, 64), "overlaps");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_keys),
        cmocka_unit_test(test_row_range),
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_launcher_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
