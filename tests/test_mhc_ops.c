/* CPU checks of the embed, mhc and tap_mean families that need no GPU: the references against
 * hand-computed cases, the coefficient-row layout, the variant rules, and the launchers' argument checks
 * (they refuse before touching the kit, so a null kit is never reached). */
#include "kit/src/mhc_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/launch/embed.h"
#include "runtime/launch/mhc.h"
#include "runtime/launch/tap_mean.h"
#include "runtime/ref/embed.h"
#include "runtime/ref/mhc.h"
#include "runtime/ref/tap_mean.h"
#include "tests/common/test_util.h"

#include <string.h>

static void test_ref_embed(void **state)
{
    (void)state;
    /* vocab 3, d 2: ids 2, 0, then 3 and -1 (outside: zero streams), hc 2 */
    uint16_t table[6] = {1, 2, 3, 4, 5, 6}, x[4 * 2 * 2];
    float pi[4 * 2];
    int32_t ids[4] = {2, 0, 3, -1};
    memset(x, 0x55, sizeof x);
    ref_embed(table, 3, 2, ids, 4, 2, x, pi);
    const uint16_t want[16] = {5, 6, 5, 6, 1, 2, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(x, want, sizeof want);
    for (int r = 0; r < 4; r++) {
        assert_true(pi[2 * r] == 1.0f);
        assert_true(pi[2 * r + 1] == 0.0f);
    }
}

static void test_ref_tap_mean(void **state)
{
    (void)state;
    /* one row, hc 4, d 2: (1, 2, 3, 4) / 4 = 2.5; (1, 1, 1, 2^-8) / 4 rounds to bf16 (3 + 2^-8) / 4 */
    float v[2][4] = {{1, 2, 3, 4}, {1, 1, 1, 0.00390625f}};
    uint16_t x[8], taps[3 * 2];
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 2; k++)
            x[c * 2 + k] = f32_to_bf16(v[k][c]);
    for (int i = 0; i < 6; i++)
        taps[i] = 0x7777;
    ref_tap_mean(x, 1, 4, 2, taps, 3, 1);
    assert_int_equal(taps[2], f32_to_bf16(2.5f));
    assert_int_equal(taps[3], f32_to_bf16((3.0f + 0.00390625f) / 4.0f));
    /* the other targets' slots are untouched */
    assert_int_equal(taps[0], 0x7777);
    assert_int_equal(taps[5], 0x7777);
}

static void test_coeffs_layout(void **state)
{
    (void)state;
    hc_coeffs k, back;
    memset(&k, 0, sizeof k);
    memset(&back, 0, sizeof back);
    for (int i = 0; i < 4; i++) {
        k.pre[i] = 1.0f + (float)i;
        k.post[i] = 10.0f + (float)i;
    }
    for (int i = 0; i < 16; i++)
        k.comb[i] = 100.0f + (float)i;
    float row[24];
    hc_coeffs_pack(&k, 4, row);
    assert_true(row[0] == 1.0f && row[3] == 4.0f && row[4] == 10.0f && row[7] == 13.0f);
    assert_true(row[8] == 100.0f && row[8 + 1 * 4 + 2] == k.comb[1 * 4 + 2] && row[23] == 115.0f);
    hc_coeffs_unpack(row, 4, &back);
    assert_memory_equal(&back, &k, sizeof k);
}

static void test_rules(void **state)
{
    (void)state;
    /* the fused norm takes rmsnorm's threads at every width, so it has rmsnorm's reduction order */
    for (int d = 8; d <= MHC_PRE_MAX_D; d += 8)
        assert_int_equal(rule_mhc_pre_threads(d), rule_rmsnorm_threads(d));
    rule_variant v;
    rule_mhc_pre_pick(4, 5120, &v);
    assert_string_equal(v.family, "mhc_pre");
    assert_string_equal(v.params, "HC=4,T=256");
    rule_mhc_mix_pick(4, &v);
    assert_string_equal(v.params, "HC=4");
    for (int rows = 1; rows <= 4 * MHC_MIX_SLAB; rows++) {
        int rpc = rule_mhc_mix_rows_per_cta(rows);
        assert_true(rpc >= 1 && rpc <= MHC_MIX_MAX_ROWS_CTA);
    }
    /* the workspace holds one slab: 80 chunks of 32 slots per row at hc·d = 20480 */
    assert_int_equal(op_mhc_mix_ws_bytes(1, 4, 5120), 80 * 32 * 4);
    assert_int_equal(op_mhc_mix_ws_bytes(100000, 4, 5120), (size_t)MHC_MIX_SLAB * 80 * 32 * 4);
    assert_int_equal(op_mhc_mix_ws_bytes(0, 4, 5120), 0);
    assert_int_equal(MHC_MIX_NCHUNK(544), 3);
}

/* rc must be -1 with a message that names the family and contains `what` */
static void expect_refused(int rc, const char *family, const char *what)
{
    const char *msg = dsk_err_msg();
    if (rc == 0 || !strstr(msg, family) || !strstr(msg, what))
        fail_msg("expected %s to refuse (\"%s\"), got rc %d: %s", family, what, rc, msg);
}

static void test_launcher_checks(void **state)
{
    (void)state;
    const CUdeviceptr a = 0x10000, b = 0x200000, c = 0x400000, e = 0x800000, f = 0x1000000, ws = 0x2000000;
    mhc_dims md = {4, 5120, 20, 1e-20f, 1e-6f};
    size_t wsb = op_mhc_mix_ws_bytes(64, 4, 5120);
    expect_refused(op_mhc_mix(NULL, NULL, NULL, a, b, c, e, f, 1, ws, wsb, e + 65536), "mhc_mix", "dimensions");
    expect_refused(op_mhc_mix(NULL, NULL, &md, a, b, c, e, f, 64, ws, wsb - 1, e + 65536), "mhc_mix", "workspace");
    expect_refused(op_mhc_mix(NULL, NULL, &md, a, b, c, e, f, 1, 0, wsb, e + 65536), "mhc_mix", "workspace is missing");
    expect_refused(op_mhc_mix(NULL, NULL, &md, a, b, c, e, f, 1, ws, wsb, 0), "mhc_mix", "arrival counter array is missing");
    expect_refused(op_mhc_mix(NULL, NULL, &md, a, b, c, e, f, 1, ws, wsb, ws + 64), "mhc_mix", "counters overlap");
    expect_refused(op_mhc_mix(NULL, NULL, &md, a + 8, b, c, e, f, 1, ws, wsb, e + 65536), "mhc_mix", "not 16-byte aligned");
    expect_refused(op_mhc_mix(NULL, NULL, &md, a, b, c, e, ws, 1, ws, wsb, e + 65536), "mhc_mix", "overlaps");
    mhc_dims bad = md;
    bad.hc = 5;
    expect_refused(op_mhc_mix(NULL, NULL, &bad, a, b, c, e, f, 1, ws, wsb, e + 65536), "mhc_mix", "at most 4 streams");
    bad = md;
    bad.sinkhorn_iters = 0;
    expect_refused(op_mhc_mix(NULL, NULL, &bad, a, b, c, e, f, 1, ws, wsb, e + 65536), "mhc_mix", "Sinkhorn");
    bad = md;
    bad.d = 5124;
    expect_refused(op_mhc_mix(NULL, NULL, &bad, a, b, c, e, f, 1, ws, wsb, e + 65536), "mhc_mix", "multiple of 8");

    expect_refused(op_mhc_pre(NULL, NULL, a, b, 3, 0, 0, f, 0, 1, 4, 5120), "mhc_pre", "stride");
    expect_refused(op_mhc_pre(NULL, NULL, a, b, 4, 0, 0, f, e, 1, 4, 5120), "mhc_pre", "y_raw");
    expect_refused(op_mhc_pre(NULL, NULL, a, b, 4, c, 1e-6f, f, 0, 1, 4, MHC_PRE_MAX_D + 8), "mhc_pre", "at most");
    expect_refused(op_mhc_pre(NULL, NULL, a, b, 4, 0, 0, a + 4096, 0, 1, 4, 5120), "mhc_pre", "overlap");
    expect_refused(op_mhc_pre(NULL, NULL, a, b, 4, 0, 0, 0, 0, 1, 4, 5120), "mhc_pre", "out is missing");

    expect_refused(op_mhc_post(NULL, NULL, b, a, c, a, 1, 4, 5120), "mhc_post", "overlaps");
    expect_refused(op_mhc_post(NULL, NULL, b, a, c + 4, f, 1, 4, 5120), "mhc_post", "coef");
    expect_refused(op_mhc_post(NULL, NULL, b, a, c, f, 1, 4, 100), "mhc_post", "multiple of 8");
    /* an fp32 y is twice as long: xout 12 KB past y overlaps it (one row of 5120: 20 KB fp32, 10 KB in bf16) */
    expect_refused(op_mhc_post_f32(NULL, NULL, b, a, c, b + 12288, 1, 4, 5120), "mhc_post", "overlaps");

    expect_refused(op_embed(NULL, NULL, a, 0, b, c, e, 1, 4, 5120), "embed", "vocab");
    expect_refused(op_embed(NULL, NULL, a, 10, b, c + 2, e, 1, 4, 5120), "embed", "not 16-byte aligned");
    expect_refused(op_embed(NULL, NULL, a, 10, 0, c, e, 1, 4, 5120), "embed", "ids is missing");

    expect_refused(op_tap_mean(NULL, NULL, a, b, 1, 4, 5120, 3, 3), "tap_mean", "outside the 3 targets");
    expect_refused(op_tap_mean(NULL, NULL, a, a + 64, 1, 4, 5120, 3, 0), "tap_mean", "overlaps");
    expect_refused(op_tap_mean(NULL, NULL, a, b + 8, 1, 4, 5120, 3, 0), "tap_mean", "aligned");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_embed), cmocka_unit_test(test_ref_tap_mean),   cmocka_unit_test(test_coeffs_layout),
        cmocka_unit_test(test_rules),     cmocka_unit_test(test_launcher_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
