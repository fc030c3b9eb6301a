/* The GPU kernels' lane decode (kit/src/exl3_dq.cuh) run on the CPU with host versions of its CUDA
 * primitives, against the CPU decoder (runtime/weights/exl3.h): for every K x codebook and random
 * tiles, every lane's four A-fragment registers must hold exactly the W_hat values that the PTX
 * m16n8k16 A layout puts there (A = transposed tile). The layout is written out here from the PTX ISA,
 * independently of the kernel header. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/ref/exl3.h"
#include "tests/common/test_util.h"

#include <stdint.h>
#include <time.h>

#include "tests/exl3gpu/exl3_host_prims.h"

#include "kit/src/exl3_dq.cuh"

/* PTX ISA, mma.m16n8k16 .f16 A fragment: register j of lane l holds A[row][col], A[row][col+1] with
 * row = l/4 + 8*(j&1), col = 2*(l%4) + 8*(j>>1). A = W_hat^T: A[i][k] = tile[k*16 + i]. */
static void check_tile(const uint16_t *words, int K, int cb, int *bad)
{
    uint16_t ref[256];
    exl3_decode_tile(words, K, cb, ref);
    exl3_u32 u[64];
    for (int w = 0; w < 8 * K; w++)
        u[w] = (exl3_u32)words[2 * w] | (exl3_u32)words[2 * w + 1] << 16;
    for (int l = 0; l < 32; l++) {
        exl3_lane L = exl3_lane_setup(K, l);
        exl3_u32 W[3] = {0, 0, 0}, a[4];
        for (int j = 0; j < EXL3_NW(K); j++)
            W[j] = u[L.word[j]];
        exl3_decode_frag(K, cb, W, (exl3_u32)L.shift, a);
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) {
                int row = l / 4 + 8 * (j & 1), col = 2 * (l % 4) + 8 * (j >> 1) + h;
                uint16_t got = (uint16_t)(a[j] >> (16 * h)), want = ref[col * 16 + row];
                if (got != want && (*bad)++ < 5)
                    print_message("K %d cb %d lane %d reg %d half %d: got %04x want %04x\n", K, cb, l, j, h, got,
                                  want);
            }
    }
}

static void test_every_k_and_codebook(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, (uint64_t)time(NULL));
    uint16_t words[128];
    for (int K = 1; K <= 8; K++)
        for (int cb = 0; cb < 3; cb++) {
            int bad = 0;
            for (int t = 0; t < 300; t++) {
                for (int i = 0; i < 16 * K; i++)
                    words[i] = (uint16_t)dsk_rng_u64(&r);
                if (t == 0) /* all ones and all zeros reach the codebook extremes and the wrap-around */
                    for (int i = 0; i < 16 * K; i++)
                        words[i] = 0xFFFF;
                if (t == 1)
                    for (int i = 0; i < 16 * K; i++)
                        words[i] = 0;
                check_tile(words, K, cb, &bad);
            }
            if (bad)
                fail_msg("K %d codebook %d: %d values differ from the CPU decoder", K, cb, bad);
        }
}

/* exl3.md §6.3: K = 4 with v_p = p mod 16 gives S_0 = def0, S_1 = ef01, S_3 = 0123, S_4 = 1234. */
static void test_spec_states(void **state)
{
    (void)state;
    uint16_t v[256], words[64];
    for (int p = 0; p < 256; p++)
        v[p] = (uint16_t)(p % 16);
    exl3_pack_tile(v, 4, words);
    exl3_u32 u[32];
    for (int w = 0; w < 32; w++)
        u[w] = (exl3_u32)words[2 * w] | (exl3_u32)words[2 * w + 1] << 16;
    exl3_lane L = exl3_lane_setup(4, 0);
    exl3_u32 W[3] = {u[L.word[0]], u[L.word[1]], 0}, s[8];
    exl3_states(4, W, (exl3_u32)L.shift, s);
    assert_int_equal(s[0], 0xdef0);
    assert_int_equal(s[1], 0xef01);
    assert_int_equal(s[3], 0x0123);
    assert_int_equal(s[4], 0x1234);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_states),
        cmocka_unit_test(test_every_k_and_codebook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
