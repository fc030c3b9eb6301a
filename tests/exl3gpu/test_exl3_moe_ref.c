/* The CPU MoE reference (runtime/weights/exl3_moe_ref.h) against the same composition written out row by
 * row and slot by slot from single-row exl3_matmul calls (row-invariant, so the same bits): every
 * rounding point, the ascending-expert-id order of the sum, skipped non-local ids, accumulate, the
 * shared-expert form without routing. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/ref/exl3.h"
#include "runtime/ref/exl3_moe.h"
#include "tests/common/test_util.h"

#include <math.h>
#include <string.h>
#include <time.h>

#define NE 6
#define KD 256
#define ND 128

static uint16_t tr1[NE][KD / 16 * ND / 16 * 16 * 3], tr3[NE][KD / 16 * ND / 16 * 16 * 3],
    tr2[NE][ND / 16 * KD / 16 * 16 * 4];
static uint16_t su[NE][3][KD], sv[NE][3][KD];
static exl3_linear w1[NE], w3[NE], w2[NE];

static void make(dsk_rng *r)
{
    for (int e = 0; e < NE; e++) {
        for (size_t i = 0; i < sizeof tr1[e] / 2; i++)
            tr1[e][i] = (uint16_t)dsk_rng_u64(r), tr3[e][i] = (uint16_t)dsk_rng_u64(r);
        for (size_t i = 0; i < sizeof tr2[e] / 2; i++)
            tr2[e][i] = (uint16_t)dsk_rng_u64(r);
        for (int m = 0; m < 3; m++)
            for (int i = 0; i < KD; i++) {
                su[e][m][i] = f32_to_f16((dsk_rng_u64(r) & 1 ? -0.1f : 0.1f) * (0.5f + dsk_rng_f32(r)));
                sv[e][m][i] = f32_to_f16((dsk_rng_u64(r) & 1 ? -1.0f : 1.0f) * (0.5f + dsk_rng_f32(r)));
            }
        w1[e] = (exl3_linear){"w1", KD, ND, 3, 2, tr1[e], su[e][0], sv[e][0], NULL, 0};
        w3[e] = (exl3_linear){"w3", KD, ND, 3, 2, tr3[e], su[e][1], sv[e][1], NULL, 0};
        w2[e] = (exl3_linear){"w2", ND, KD, 4, 2, tr2[e], su[e][2], sv[e][2], NULL, 0};
    }
}

/* bf16(W2 bf16(w·silu(min(g,10))·clamp(u))) for one row and expert e. */
static void one(int e, const float *x, float w, float *o)
{
    float g[ND], u[ND], h[ND];
    assert_int_equal(exl3_matmul(&w1[e], x, 1, g), 0);
    assert_int_equal(exl3_matmul(&w3[e], x, 1, u), 0);
    for (int c = 0; c < ND; c++) {
        float gv = fminf(bf16_round(g[c]), 10.0f), uv = fminf(fmaxf(bf16_round(u[c]), -10.0f), 10.0f);
        h[c] = bf16_round(w * ((gv / (1.0f + expf(-gv))) * uv));
    }
    assert_int_equal(exl3_matmul(&w2[e], h, 1, o), 0);
    for (int c = 0; c < KD; c++)
        o[c] = bf16_round(o[c]);
}

static void test_routed(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, (uint64_t)time(NULL));
    make(&r);
    enum { ROWS = 5, TOPK = 3, LO = 2 };
    float x[ROWS][KD], y[ROWS][KD], want[ROWS][KD], w[ROWS * TOPK], o[KD];
    int32_t route[ROWS * TOPK];
    for (int i = 0; i < ROWS; i++)
        for (int c = 0; c < KD; c++)
            x[i][c] = bf16_round(dsk_rng_normal(&r));
    /* ids 0..9: 2..7 are local (table entries 0..5); slots in descending id order, so the sum must sort;
     * row 4 has no local expert */
    const int32_t ids[ROWS][TOPK] = {{7, 4, 2}, {9, 5, 3}, {6, 2, 0}, {3, 7, 5}, {9, 1, 8}};
    for (int i = 0; i < ROWS * TOPK; i++)
        route[i] = ids[i / TOPK][i % TOPK], w[i] = 0.1f + dsk_rng_f32(&r);
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < ROWS; i++)
            for (int c = 0; c < KD; c++)
                want[i][c] = y[i][c] = acc ? dsk_rng_normal(&r) : NAN;
        assert_int_equal(exl3_moe_ref(w1, w3, w2, NE, &x[0][0], ROWS, route, w, TOPK, LO, acc, &y[0][0]), 0);
        for (int i = 0; i < ROWS; i++) {
            if (!acc)
                memset(want[i], 0, sizeof want[i]);
            for (int id = LO; id < LO + NE; id++)
                for (int s = 0; s < TOPK; s++)
                    if (route[i * TOPK + s] == id) {
                        one(id - LO, x[i], w[i * TOPK + s], o);
                        for (int c = 0; c < KD; c++)
                            want[i][c] += o[c];
                    }
        }
        assert_memory_equal(y, want, sizeof y);
    }
    for (int c = 0; c < KD; c++)
        assert_true(want[4][c] == y[4][c]);
}

static void test_shared(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, (uint64_t)time(NULL) + 1);
    make(&r);
    float x[3][KD], y[3][KD], o[KD];
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < KD; c++)
            x[i][c] = bf16_round(dsk_rng_normal(&r)), y[i][c] = dsk_rng_normal(&r);
    float y0[3][KD];
    memcpy(y0, y, sizeof y);
    assert_int_equal(exl3_moe_ref(w1, w3, w2, 1, &x[0][0], 3, NULL, NULL, 1, 0, 1, &y[0][0]), 0);
    for (int i = 0; i < 3; i++) {
        one(0, x[i], 1.0f, o);
        for (int c = 0; c < KD; c++)
            assert_true(f32_bits(y[i][c]) == f32_bits(y0[i][c] + o[c]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routed),
        cmocka_unit_test(test_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
