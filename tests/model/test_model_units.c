/* Units of the CPU model with hand-derived expectations: KV quantise-dequantise (ties to even,
 * saturation, tiny values), pow2 scales, YaRN ranges, Sinkhorn, sqrtsoftplus routing, sampling keys,
 * and the model's linear against the EXL3 reference matmul. */
#include "tests/common/test_util.h"

#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/ref/kvquant.h"
#include "runtime/cpu/layers.h"
#include "runtime/ref/sampling.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>




static dsk_rng R;

static uint16_t bf(float f)
{
    return f32_to_bf16(f);
}

/* Fill v[0..n) with fresh random values of magnitude below lim (bf16). */
static void fill(uint16_t *v, int n, float lim)
{
    for (int i = 0; i < n; i++)
        v[i] = bf((dsk_rng_f32(&R) * 2.0f - 1.0f) * lim);
}

static void test_pow2_ceil(void **state)
{
    (void)state;
    assert_true(kvq_pow2_ceil(1.0f) == 1.0f);
    assert_true(kvq_pow2_ceil(nextafterf(1.0f, 2.0f)) == 2.0f);
    assert_true(kvq_pow2_ceil(0.75f) == 1.0f);
    assert_true(kvq_pow2_ceil(0x1p-126f) == 0x1p-126f);
    assert_true(kvq_pow2_ceil(3.0f) == 4.0f);
    /* amax 7: 7 · fp32(1/448) rounds to exactly 2^-6, which stays put */
    assert_true(kvq_pow2_ceil(7.0f * (1.0f / 448.0f)) == 0x1p-6f);
}

/* FP8 window KV: amax 7 gives scale 2^-6, so x/s = 64x lands on chosen e4m3 grid points. */
static void test_fp8_qdq(void **state)
{
    (void)state;
    uint16_t v[64];
    fill(v, 64, 6.9f);
    v[0] = bf(7.0f);              /* amax: 448 exactly */
    v[1] = bf(1.0625f / 64);      /* tie between 1 and 1.125: even mantissa -> 1 */
    v[2] = bf(1.1875f / 64);      /* tie between 1.125 and 1.25 -> 1.25 */
    v[3] = bf(-1.0625f / 64);     /* sign kept */
    v[4] = bf(0x1.8p-9f / 64);    /* subnormal tie 1.5·2^-9 -> 2·2^-9 */
    v[5] = bf(0x1p-10f / 64);     /* half the smallest subnormal -> 0 (even) */
    v[32] = bf(1e-6f);            /* block 2: tiny, amax floored at 1e-4, scale 2^-22 */
    for (int i = 33; i < 64; i++)
        v[i] = bf((float)(i - 48) * 1e-7f);
    uint16_t w[64];
    memcpy(w, v, sizeof v);
    kvq_fp8_e4m3(w, 64);
    assert_true(bf16_to_f32(w[0]) == 7.0f);
    assert_true(bf16_to_f32(w[1]) == 1.0f / 64);
    assert_true(bf16_to_f32(w[2]) == 1.25f / 64);
    assert_true(bf16_to_f32(w[3]) == -1.0f / 64);
    assert_true(bf16_to_f32(w[4]) == 0x1p-8f / 64);
    assert_true(bf16_to_f32(w[5]) == 0.0f);
    /* 1e-6 / 2^-22 = 4.19 -> 4 (e4m3 step 0.5 in [4, 8)) */
    assert_true(bf16_to_f32(w[32]) == 4.0f * 0x1p-22f);
    /* every value is on the grid: quantising again changes nothing */
    uint16_t again[64];
    memcpy(again, w, sizeof w);
    kvq_fp8_e4m3(again, 64);
    assert_memory_equal(again, w, sizeof w);
}

/* FP4 with e4m3 scales (compressed KV, blocks of 16) and e8m0 scales (indexer, blocks of 32). */
static void test_fp4_qdq(void **state)
{
    (void)state;
    static const float in[16] = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f,
                                 -2.5f, -0.25f, 0.5f, 3.0f, 4.0f, 1.5f, 2.0f, 1.0f};
    static const float want[16] = {6.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f,
                                   -2.0f, -0.0f, 0.5f, 3.0f, 4.0f, 1.5f, 2.0f, 1.0f};
    uint16_t v[32];
    for (int i = 0; i < 16; i++)
        v[i] = v[16 + i] = bf(in[i]);
    kvq_fp4_e4m3(v, 32); /* amax 6: scale e4m3(1) = 1 */
    for (int i = 0; i < 32; i++)
        assert_true(bf16_to_f32(v[i]) == want[i % 16]);
    assert_true(signbit(bf16_to_f32(v[9])));
    for (int i = 0; i < 16; i++)
        v[i] = v[16 + i] = bf(in[i]);
    kvq_fp4_e8m0(v, 32); /* amax 6: 6 · fp32(1/6) rounds to 1, scale 1 */
    for (int i = 0; i < 32; i++)
        assert_true(bf16_to_f32(v[i]) == want[i % 16]);
    /* scale rounding and saturation: amax bf16(6.6) = 6.59375 -> scale e4m3(1.0990) = 1.125,
     * 6.59375 / 1.125 = 5.86 -> 6 -> 6.75 */
    fill(v, 16, 6.0f);
    v[3] = bf(6.6f);
    kvq_fp4_e4m3(v, 16);
    assert_true(bf16_to_f32(v[3]) == 6.75f);
    /* e8m0: amax 7 -> scale 2; 7 / 2 = 3.5 ties to the even code (4) -> 8 */
    fill(v, 32, 6.0f);
    v[7] = bf(7.0f);
    kvq_fp4_e8m0(v, 32);
    assert_true(bf16_to_f32(v[7]) == 8.0f);
    /* tiny: amax floored at 6·2^-9, scale 2^-9; 0.001 / 2^-9 = 0.512 -> 0.5 */
    for (int i = 0; i < 16; i++)
        v[i] = bf(0.0001f * (float)(i % 5));
    v[2] = bf(0.001f);
    kvq_fp4_e4m3(v, 16);
    assert_true(bf16_to_f32(v[2]) == 0x1p-10f);
}

/* YaRN ranges of both configs' compressed-layer tables, through the model's own rope parameters. */
static void test_yarn_tables(void **state)
{
    (void)state;
    model_config c;
    memset(&c, 0, sizeof c);
    c.rope_theta = 10000;
    c.compress_rope_theta = 160000;
    c.rope_factor = 16;
    c.beta_fast = 32;
    c.beta_slow = 1;
    c.original_seq_len = 65536;
    int lo, hi;
    c.rope_head_dim = 64;
    rope_params p = model_rope(&c, 1);
    assert_true(p.base == 160000.0 && p.factor == 16.0);
    ref_rope_yarn_range(&p, &lo, &hi);
    assert_int_equal(lo, 15);
    assert_int_equal(hi, 25);
    c.rope_head_dim = 32;
    p = model_rope(&c, 2);
    ref_rope_yarn_range(&p, &lo, &hi);
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 13);
    p = model_rope(&c, 0); /* ratio 0 and DSpark: base 10000, no YaRN */
    assert_true(p.base == 10000.0 && p.original_seq_len == 0);
    float f[16];
    ref_rope_freqs(&p, f);
    assert_true(f[0] == 1.0f);
}

/* Sinkhorn against a double-precision run of the same passes; columns end normalised. */
static void test_sinkhorn(void **state)
{
    (void)state;
    for (int trial = 0; trial < 20; trial++) {
        float c[16];
        double d[16];
        for (int i = 0; i < 16; i++)
            d[i] = c[i] = (dsk_rng_f32(&R) * 2.0f - 1.0f) * 4.0f;
        hc_sinkhorn(c, 4, 20, 1e-6f);
        for (int i = 0; i < 4; i++) {
            double mx = d[i * 4], s = 0;
            for (int j = 1; j < 4; j++)
                mx = d[i * 4 + j] > mx ? d[i * 4 + j] : mx;
            for (int j = 0; j < 4; j++)
                s += d[i * 4 + j] = exp(d[i * 4 + j] - mx);
            for (int j = 0; j < 4; j++)
                d[i * 4 + j] = d[i * 4 + j] / s + 1e-6;
        }
        for (int it = 0; it < 20; it++) {
            for (int i = 0; it > 0 && i < 4; i++) {
                double s = 0;
                for (int j = 0; j < 4; j++)
                    s += d[i * 4 + j];
                for (int j = 0; j < 4; j++)
                    d[i * 4 + j] /= s + 1e-6;
            }
            for (int j = 0; j < 4; j++) {
                double s = 0;
                for (int i = 0; i < 4; i++)
                    s += d[i * 4 + j];
                for (int i = 0; i < 4; i++)
                    d[i * 4 + j] /= s + 1e-6;
            }
        }
        for (int j = 0; j < 4; j++) {
            float s = 0;
            for (int i = 0; i < 4; i++) {
                assert_true(fabs(c[i * 4 + j] - d[i * 4 + j]) < 1e-6);
                s += c[i * 4 + j];
            }
            assert_true(fabsf(s - 1.0f) < 1e-5f);
        }
    }
}

/* sqrtsoftplus and routing: biased selection, unbiased weights x route_scale, ascending ids. */
static void test_routing(void **state)
{
    (void)state;
    assert_true(fabsf(moe_sqrtsoftplus(0.0f) - 0.83255461f) < 1e-7f);
    assert_true(moe_sqrtsoftplus(25.0f) == 5.0f); /* the linear branch above 20 */
    assert_true(fabsf(moe_sqrtsoftplus(-30.0f) - 3.0590232e-7f) < 1e-12f);
    model_config c;
    memset(&c, 0, sizeof c);
    c.route_scale = 1.5f;
    float bias[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    block_weights b;
    memset(&b, 0, sizeof b);
    b.n_experts = 8;
    b.n_active = 3;
    b.gate_bias = bias;
    float logits[8] = {0.1f, 2.0f, -1.0f, 1.5f, 1.5f, 3.0f, -4.0f, 0.0f};
    int32_t ids[3];
    float w[3];
    assert_int_equal(moe_route(c.route_scale, b.n_experts, b.n_active, b.gate_bias, logits, ids, w), 3);
    /* unbiased: 5, 1, and the tie 3/4 goes to 3 */
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 5);
    float s1 = moe_sqrtsoftplus(2.0f), s3 = moe_sqrtsoftplus(1.5f), s5 = moe_sqrtsoftplus(3.0f);
    float den = s5 + s1 + s3 + 1e-20f; /* rank order */
    assert_true(w[0] == s1 / den * 1.5f);
    assert_true(w[2] == s5 / den * 1.5f);
    assert_true(fabsf(w[0] + w[1] + w[2] - 1.5f) < 1e-6f);
    /* a bias changes the selection, not the weights' source */
    bias[6] = 10.0f;
    assert_int_equal(moe_route(c.route_scale, b.n_experts, b.n_active, b.gate_bias, logits, ids, w), 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 5);
    assert_int_equal(ids[2], 6);
    float s6 = moe_sqrtsoftplus(-4.0f);
    assert_true(w[2] == s6 / (s6 + s5 + s1 + 1e-20f) * 1.5f);
}

/* Sampling: keyed noise is a pure function of (seed, position, id); argmax ties go low; Gumbel-max
 * frequencies follow the softmax. */
static void test_sampling(void **state)
{
    (void)state;
    for (int i = 0; i < 1000; i++) {
        float u = sample_uniform(7, i, i * 31);
        assert_true(u > 0.0f && u < 1.0f);
        assert_true(u == sample_uniform(7, i, i * 31));
    }
    assert_true(sample_uniform(7, 5, 3) != sample_uniform(8, 5, 3));
    assert_true(sample_uniform(7, 5, 3) != sample_uniform(7, 6, 3));
    assert_true(sample_uniform(7, 5, 3) != sample_uniform(7, 5, 4));
    float lg[4] = {1.0f, 3.0f, 3.0f, -2.0f};
    assert_int_equal(sample_row(lg, 4, &SAMPLE_GREEDY, 0, NULL), 1);
    float p3[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    int count[3] = {0, 0, 0};
    for (int pos = 0; pos < 20000; pos++)
        count[sample_row(p3, 3, &(sample_params){1.0f, 1.0f, 0, 99}, pos, NULL)]++;
    assert_true(fabs(count[0] / 20000.0 - 0.5) < 0.02);
    assert_true(fabs(count[1] / 20000.0 - 0.3) < 0.02);
    assert_true(fabs(count[2] / 20000.0 - 0.2) < 0.02);
    /* the same (seed, position) draws the same token, whatever was drawn before */
    sample_params sp = {1.0f, 1.0f, 0, 99};
    assert_int_equal(sample_row(p3, 3, &sp, 1234, NULL), sample_row(p3, 3, &sp, 1234, NULL));
}

/* The model's linear (cached or not, any column range, any thread count) equals exl3_matmul. */
static void test_linear_vs_exl3(void **state)
{
    (void)state;
    int k = 256, n = 384, K = 3, m = 5;
    uint16_t *trellis = malloc(sizeof(uint16_t) * (size_t)(k / 16) * (n / 16) * 16 * K);
    uint16_t suh[256], svh[384], x[5 * 256];
    for (int i = 0; i < (k / 16) * (n / 16) * 16 * K; i++)
        trellis[i] = (uint16_t)dsk_rng_u64(&R);
    for (int i = 0; i < k; i++)
        suh[i] = f32_to_f16((dsk_rng_f32(&R) * 2 - 1) * 0.05f);
    for (int i = 0; i < n; i++)
        svh[i] = f32_to_f16((dsk_rng_f32(&R) * 2 - 1) * 2.0f);
    fill(x, m * k, 3.0f);
    cpu_linear l;
    memset(&l, 0, sizeof l);
    l.q = (exl3_linear){"test.trellis", k, n, K, EXL3_CB_MUL1, trellis, suh, svh, NULL, 0};
    float xf[5 * 256], want[5 * 384], got[5 * 384], part[5 * 128];
    for (int i = 0; i < m * k; i++)
        xf[i] = bf16_to_f32(x[i]);
    assert_ok(exl3_matmul(&l.q, xf, m, want));
    assert_ok(linear_f32(&l, x, m, got));
    assert_memory_equal(got, want, sizeof want);
    size_t budget = 1 << 20;
    assert_ok(linear_cache(&l, &budget));
    assert_non_null(l.hat);
    linear_set_threads(2);
    assert_ok(linear_f32(&l, x, m, got));
    linear_set_threads(1);
    assert_memory_equal(got, want, sizeof want);
    linear_use_portable(1);
    assert_ok(linear_f32(&l, x, m, got));
    linear_use_portable(0);
    assert_memory_equal(got, want, sizeof want);
    assert_ok(linear_apply_cols(&l, x, m, 128, 256, part));
    for (int r = 0; r < m; r++)
        assert_memory_equal(part + r * 128, want + r * n + 128, sizeof(float) * 128);
    linear_free(&l);
    free(trellis);
}

int main(void)
{
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 12);
    printf("model units: seed %llu\n", (unsigned long long)seed);
    dsk_rng_seed(&R, seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pow2_ceil),  cmocka_unit_test(test_fp8_qdq),  cmocka_unit_test(test_fp4_qdq),
        cmocka_unit_test(test_yarn_tables), cmocka_unit_test(test_sinkhorn), cmocka_unit_test(test_routing),
        cmocka_unit_test(test_sampling),   cmocka_unit_test(test_linear_vs_exl3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
