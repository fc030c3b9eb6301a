/* What can be checked of the EXL3 GPU path without a GPU: every kernel variant the launchers can ask for
 * is in a freshly built kit, the plan rule only asks for what rule_exl3_variants lists, the canonical k split is
 * sound, and the launchers refuse bad shapes with named errors before launching anything. */
#include "runtime/common/error.h"
#include "runtime/driver/kit.h"
#include "runtime/launch/exl3.h"
#include "runtime/launch/topk.h"
#include "manifest/rules/rules.h"
#include "tests/common/test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256], kitpath[512];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dskit-test-exl3-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    const char *kits = getenv("DSKIT_TEST_KITS");
    if (!kits) {
        fprintf(stderr, "DSKIT_TEST_KITS is not set: run through ctest (the kit_build fixture builds the kits)\n");
        return -1;
    }
    snprintf(kitpath, sizeof kitpath, "%s/dskit-sm_90.tar.zst", kits);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_every_needed_variant_exists(void **state)
{
    (void)state;
    kit *k;
    assert_ok(kit_open(kitpath, NULL, &k));
    rule_variant need[32];
    int total = 0;
    for (int K = 1; K <= 8; K++)
        for (int cb = 0; cb < 3; cb++) {
            int n = rule_exl3_variants(K, cb, 1 << 20, 1, need, 32);
            assert_in_range(n, 1, 32);
            for (int i = 0; i < n; i++) {
                if (!kit_find(k, need[i].family, need[i].params))
                    fail_msg("%s", dsk_err_msg());
                total++;
            }
        }
    assert_true(total >= 24 * 5);
    kit_close(k);
}

/* The plan rule's bucket for any row count is one rule_exl3_variants lists for that many rows. */
static void test_plan_within_needs(void **state)
{
    (void)state;
    exl3_dev_linear L = {.k = 5120, .n = 2304, .K = 2, .codebook = 2, .qb = 1, .groups = 40, .desc = 16};
    const exl3_dev_linear *one[1] = {&L};
    for (int rows = 1; rows <= 2000; rows += rows < 70 ? 1 : 37) {
        exl3_mm_plan p = exl3_plan_matmul(one, 1, rows, 132);
        rule_variant need[16];
        int n = rule_exl3_variants(2, 2, rows, 0, need, 16), found = 0, had = 0;
        char want[32];
        snprintf(want, sizeof want, "K=2,CB=2,M=%d", p.bucket);
        for (int i = 0; i < n; i++) {
            found |= !strcmp(need[i].family, "exl3_mm") && !strcmp(need[i].params, want);
            had |= !strcmp(need[i].family, "exl3_had");
        }
        if (!found || (p.xf && !had))
            fail_msg("rows %d: plan M%d xf %d is not in rule_exl3_variants", rows, p.bucket, p.xf);
        assert_true(p.bucket >= (rows < 64 ? rows : 64));
    }
}

/* Groups cover k exactly, none empty, about 512 (column block, group) pairs at most, two or more
 * 128-blocks each where k has two. */
static void test_split(void **state)
{
    (void)state;
    const int shapes[][2] = {{5120, 2304}, {5120, 1152}, {2304, 5120}, {1152, 5120}, {1280, 32768},
                             {8192, 5120}, {5120, 64640}, {6144, 25600}, {128, 128},  {128, 131072}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int k = shapes[i][0], n = shapes[i][1], qb, g;
        rule_exl3_split(k, n, &qb, &g);
        assert_true(qb >= 1 && g >= 1);
        assert_true((g - 1) * qb < k / 128 && g * qb >= k / 128);
        assert_true(g == 1 || (n / 128) * g <= 512 + n / 128);
        assert_true(qb >= 2 || k / 128 < 2);
    }
    int qb, g;
    rule_exl3_split(5120, 2304, &qb, &g);
    assert_int_equal(qb, 2); /* 18 column blocks: two 128-blocks of k per group, 20 groups */
    assert_int_equal(g, 20);
    rule_exl3_split(5120, 64640, &qb, &g);
    assert_int_equal(g, 1); /* 505 column blocks fill the GPU alone */
    rule_exl3_split(5120, 1152, &qb, &g);
    assert_int_equal(qb, 2); /* 9 column blocks would take 40 one-block groups: two blocks per group */
    assert_int_equal(g, 20);
    rule_exl3_split(128, 256, &qb, &g);
    assert_int_equal(qb, 1); /* one 128-block of k: one group */
    assert_int_equal(g, 1);
}

#define FAKE ((CUdeviceptr)0x100000)

static exl3_dev_linear fake_linear(int k, int n, int K, int cb)
{
    exl3_dev_linear L;
    assert_ok(exl3_dev_linear_init(&L, k, n, K, cb, FAKE, FAKE, FAKE, 0, 0));
    L.desc = FAKE; /* as if uploaded: the launchers check before they touch the GPU */
    return L;
}

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

static void test_bad_shapes_refused(void **state)
{
    (void)state;
    kit *k;
    assert_ok(kit_open(kitpath, NULL, &k));
    exl3_dev_linear L;
    assert_fails_with(exl3_dev_linear_init(&L, 100, 256, 4, 2, FAKE, FAKE, FAKE, 0, 0), "k = 100", "128");
    assert_fails_with(exl3_dev_linear_init(&L, 256, 200, 4, 2, FAKE, FAKE, FAKE, 0, 0), "n = 200");
    assert_fails_with(exl3_dev_linear_init(&L, 256, 256, 9, 2, FAKE, FAKE, FAKE, 0, 0), "K = 9");
    assert_fails_with(exl3_dev_linear_init(&L, 256, 256, 4, 3, FAKE, FAKE, FAKE, 0, 0), "codebook 3");
    assert_fails_with(exl3_dev_linear_init(&L, 256, 256, 4, 2, FAKE + 8, FAKE, FAKE, 0, 0), "16-byte aligned");
    assert_fails_with(exl3_dev_linear_init(&L, 256, 256, 4, 2, 0, FAKE, FAKE, 0, 0), "device pointers");

    exl3_dev_linear a = fake_linear(5120, 2304, 4, 2), b = fake_linear(5120, 512, 3, 2), c = fake_linear(4096, 512, 4, 2);
    exl3_workspace ws = {FAKE, (size_t)1 << 30, 132}, tiny = {FAKE, 1024, 132};
    const exl3_dev_linear *ab[2] = {&a, &b}, *ac[2] = {&a, &c}, *aa[5] = {&a, &a, &a, &a, &a};
    assert_fails_with(op_exl3_grouped(k, 0, ab, 2, FAKE, 5120, 1, FAKE, 4096, EXL3_OUT_F32, &ws, EXL3_AUTO),
                      "matrix 1", "K 3", "share k, K and codebook");
    assert_fails_with(op_exl3_grouped(k, 0, ac, 2, FAKE, 5120, 1, FAKE, 4096, EXL3_OUT_F32, &ws, EXL3_AUTO), "k 4096");
    assert_fails_with(op_exl3_grouped(k, 0, aa, 5, FAKE, 5120, 1, FAKE, 4096, EXL3_OUT_F32, &ws, EXL3_AUTO),
                      "5 matrices");
    assert_fails_with(op_exl3_matmul(k, 0, &a, FAKE, 5000, 1, FAKE, 2304, EXL3_OUT_F32, &ws), "ldx 5000");
    assert_fails_with(op_exl3_matmul(k, 0, &a, FAKE, 5124, 1, FAKE, 2304, EXL3_OUT_F32, &ws), "multiples of 8");
    assert_fails_with(op_exl3_matmul(k, 0, &a, FAKE, 5120, 1, FAKE, 2000, EXL3_OUT_F32, &ws), "ldy 2000");
    assert_fails_with(op_exl3_matmul(k, 0, &a, FAKE + 4, 5120, 1, FAKE, 2304, EXL3_OUT_F32, &ws), "16-byte aligned");
    assert_fails_with(op_exl3_matmul(k, 0, &a, FAKE, 5120, 1, FAKE, 2304, 7, &ws), "out_kind 7");
    assert_fails_with(op_exl3_matmul(k, 0, &a, FAKE, 5120, 3, FAKE, 2304, EXL3_OUT_F32, &tiny), "workspace", "1024");
    exl3_force f = {12, -1, -1};
    assert_fails_with(op_exl3_grouped(k, 0, ab, 1, FAKE, 5120, 1, FAKE, 2304, EXL3_OUT_F32, &ws, f), "bucket 12");
    /* block-diagonal: one shape, descriptors one array, x wide enough for every block */
    exl3_dev_linear bd[3] = {fake_linear(4096, 1024, 4, 2), fake_linear(4096, 1024, 4, 2), fake_linear(4096, 1024, 4, 2)};
    for (int m = 0; m < 3; m++)
        bd[m].desc = FAKE + (CUdeviceptr)m * 64;
    const exl3_dev_linear *bdp[3] = {&bd[0], &bd[1], &bd[2]}, *bdc[2] = {&bd[0], &c};
    assert_fails_with(op_exl3_blockdiag(k, 0, bdp, 3, FAKE, 8192, 1, FAKE, 3072, EXL3_OUT_BF16, &ws, EXL3_AUTO),
                      "ldx 8192", "12288");
    assert_fails_with(op_exl3_blockdiag(k, 0, bdc, 2, FAKE, 8192, 1, FAKE, 2048, EXL3_OUT_BF16, &ws, EXL3_AUTO),
                      "matrix 1 has 512 outputs", "share their shape");
    bd[2].desc = FAKE + 4096;
    assert_fails_with(op_exl3_blockdiag(k, 0, bdp, 3, FAKE, 12288, 1, FAKE, 3072, EXL3_OUT_BF16, &ws, EXL3_AUTO),
                      "matrix 2's descriptor", "one array");
    bd[2].desc = FAKE + 128;
    assert_fails_with(op_exl3_blockdiag(k, 0, bdp, 17, FAKE, 12288, 1, FAKE, 3072, EXL3_OUT_BF16, &ws, EXL3_AUTO),
                      "17 matrices", "1..16");
    assert_fails_with(op_exl3_blockdiag(k, 0, bdp, 3, FAKE, 12288, 1, FAKE, 3072, EXL3_OUT_BF16, &ws, EXL3_AUTO),
                      "exl3_mm__K4_CB2_M8", "not loaded");
    exl3_dev_linear nodesc = a;
    nodesc.desc = 0;
    assert_fails_with(op_exl3_matmul(k, 0, &nodesc, FAKE, 5120, 1, FAKE, 2304, EXL3_OUT_F32, &ws), "no device descriptor");
    /* a good call gets as far as the launch */
    assert_fails_with(op_exl3_matmul(k, 0, &a, FAKE, 5120, 1, FAKE, 2304, EXL3_OUT_F32, &ws), "exl3_mm__K4_CB2_M8",
                      "not loaded");
    assert_fails_with(op_exl3_matmul(k, 0, &a, FAKE, 5120, 40, FAKE, 2304, EXL3_OUT_BF16, &ws), "exl3_had",
                      "not loaded");
    assert_fails_with(op_exl3_reconstruct(k, 0, &a, FAKE + 2, 0), "16-byte aligned");
    assert_fails_with(op_exl3_reconstruct(k, 0, &a, FAKE, 1), "exl3_recon__K4_CB2", "not loaded");

    exl3_moe_experts E = {.nexp = 16, .k = 5120, .n = 2304, .K_up = 2, .K_down = 3, .codebook = 2, .groups_up = 40,
                          .groups_down = 18, .table = FAKE};
    assert_fails_with(op_exl3_moe(k, 0, &E, FAKE, 5120, 4, FAKE, FAKE, 0, 0, FAKE, 5120, 0, &ws, EXL3_AUTO), "topk (0)");
    assert_fails_with(op_exl3_moe(k, 0, &E, FAKE, 5120, 4, FAKE, 0, 6, 0, FAKE, 5120, 0, &ws, EXL3_AUTO),
                      "routing weights");
    assert_fails_with(op_exl3_moe(k, 0, &E, FAKE, 4096, 4, FAKE, FAKE, 6, 0, FAKE, 5120, 0, &ws, EXL3_AUTO), "ldx 4096");
    assert_fails_with(op_exl3_moe(k, 0, &E, FAKE, 5120, 4, FAKE, FAKE, 6, 0, FAKE, 5120, 0, &tiny, EXL3_AUTO),
                      "workspace");
    assert_fails_with(op_exl3_moe(k, 0, &E, FAKE, 5120, 4, FAKE, FAKE, 6, 0, FAKE, 5120, 0, &ws, EXL3_AUTO),
                      "exl3_moe_plan", "not loaded");
    E.K_down = 9;
    assert_fails_with(op_exl3_moe(k, 0, &E, FAKE, 5120, 4, 0, 0, 1, 0, FAKE, 5120, 1, &ws, EXL3_AUTO), "K=9");
    kit_close(k);
}

/* The top-k launcher's choice of one or several blocks per row, its workspace size and its refusals
 * (all before anything touches a GPU). */
static void test_topk_refused(void **state)
{
    (void)state;
    assert_int_equal(rule_topk_blocks(RULE_TOPK_MB_MIN_N - 1), 1);
    assert_int_equal(rule_topk_blocks(RULE_TOPK_MB_MIN_N), RULE_TOPK_MB_MIN_N / 4096);
    assert_int_equal(rule_topk_blocks(1 << 20), 256);
    assert_int_equal(rule_topk_blocks(1 << 30), 1024);
    assert_int_equal(op_topk_ws_bytes(4, 16384, 512), 0);
    assert_int_equal(op_topk_ws_bytes(1, 1 << 20, 512), (1040 + 2 * 256) * 4);
    assert_int_equal(op_topk_ws_bytes(3, 1 << 20, 512), 3 * (1040 + 2 * 256) * 4);
    /* where the one-launch form fits: 512 of 32K-64K keys (16 blocks of 4096 hold 8192 candidates); not
     * 2048 of 64K, nor 512 of 128K (too many candidates), nor rows short enough for one block. Its
     * workspace: the rows' counters (4 ints for 3 rows), then 16·512 indices and scores a row */
    assert_true(rule_topk_tl_fits(1 << 15, 512) && rule_topk_tl_fits(1 << 16, 512));
    assert_false(rule_topk_tl_fits(1 << 16, 2048) || rule_topk_tl_fits(1 << 17, 512) ||
                 rule_topk_tl_fits(RULE_TOPK_MB_MIN_N - 1, 16));
    assert_int_equal(op_topk_tl_ws_bytes(3, 16, 512), (4 + 3 * 2 * 16 * 512) * 4);
    kit *k;
    assert_ok(kit_open(kitpath, NULL, &k));
    assert_fails_with(op_topk(k, 0, FAKE, 0, 1, 1 << 20, 512, 1 << 20, FAKE, FAKE, 0, 0), "workspace of 6208 bytes",
                      "got 0");
    assert_fails_with(op_topk(k, 0, FAKE, 0, 2, 1 << 20, 512, 1 << 20, FAKE, FAKE, FAKE, 6208), "12416 bytes");
    assert_fails_with(op_topk(k, 0, FAKE, 0, 70000, 1 << 20, 512, 1 << 20, FAKE, FAKE, FAKE, 1ull << 40),
                      "65535 rows");
    assert_fails_with(op_topk(k, 0, FAKE, 0, 1, 100, 101, 100, FAKE, FAKE, 0, 0), "k (101) <= N (100)");
    assert_fails_with(op_topk(k, 0, FAKE, 0, 1, 100, 5, 99, FAKE, FAKE, 0, 0), "<= ld (99)");
    assert_fails_with(op_topk_blocks(k, 0, FAKE, 0, 1, 100, 5, 100, FAKE, FAKE, FAKE, 1 << 20, 101),
                      "101 blocks per row for 100 entries");
    assert_fails_with(op_topk_tl(k, 0, FAKE, 0, 1, 1 << 16, 512, 1 << 16, FAKE, FAKE, FAKE, 100, 16),
                      "in one launch need a workspace of 65552 bytes");
    assert_fails_with(op_topk_tl(k, 0, FAKE, 0, 1, 1000, 512, 1000, FAKE, FAKE, FAKE, 1 << 20, 2),
                      "slices of 500 entries, fewer than the k (512)");
    /* a good call gets as far as its launch, which an unloaded kit refuses */
    assert_fails_with(op_topk_blocks(k, 0, FAKE, 0, 1, 100, 5, 100, FAKE, FAKE, 0, 0, 1), "topk", "not loaded");
    kit_close(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_needed_variant_exists),
        cmocka_unit_test(test_plan_within_needs),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_bad_shapes_refused),
        cmocka_unit_test(test_topk_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
