/* What the engine's indexer, routing, sampling and drafter families (index_score, cand_blocks, moe_route,
 * sample, dspark_conf) can show without a GPU: their CPU references against hand-computed cases, their
 * variant rules, and their launchers refusing bad arguments before anything reaches a device. */
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/cand_blocks.h"
#include "runtime/launch/dspark_conf.h"
#include "runtime/launch/index_score.h"
#include "runtime/launch/moe_route.h"
#include "runtime/launch/sample.h"
#include "runtime/ref/cand_blocks.h"
#include "runtime/ref/dspark_conf.h"
#include "runtime/ref/index_score.h"
#include "runtime/ref/moe_route.h"
#include "runtime/ref/rowmm.h"
#include "tests/common/test_util.h"

#include <math.h>
#include <string.h>

static uint16_t bf(float f)
{
    return f32_to_bf16(f);
}

static void test_index_score_ref(void **state)
{
    (void)state;
    /* 2 heads of 4 dims, 2 keys. Head 0 · key 0 = 1 + 2 + 3 + 1.0078125 = 7.0078125 -> bf16 7.0 (ulp 2^-5);
     * head 1 is negative (relu -> 0). w0 = 0.5: bf16(7 · 0.5) = 3.5; the head sum 3.5. */
    uint16_t q[8] = {bf(1), bf(1), bf(1), bf(1), bf(-1), bf(-1), bf(-1), bf(-1)};
    uint16_t k[8] = {bf(1), bf(2), bf(3), bf(1.0078125f), bf(0.25f), bf(0), bf(0), bf(0)};
    float w[2] = {0.5f, 3.0f}, s[2];
    ref_index_score(q, w, 2, 4, k, 2, s);
    assert_true(s[0] == 3.5f);
    assert_true(s[1] == 0.125f); /* head 0: 0.25 · 0.5; head 1: relu(-0.25) = 0 */
    /* the product relu(dot) · w is rounded to bf16: 1.0078125² = 1.0156860... -> 1.015625 */
    uint16_t q2[4] = {bf(1), 0, 0, 0}, k2[4] = {bf(1.0078125f), 0, 0, 0};
    float w2[1] = {1.0078125f};
    ref_index_score(q2, w2, 1, 4, k2, 1, s);
    assert_true(s[0] == bf16_round(1.0078125f * 1.0078125f));
    /* the candidate mask: blocks of 2, block 1 kept of 3 */
    float m[6] = {1, 2, 3, 4, 5, 6};
    uint32_t bm = 1u << 1;
    ref_index_score_mask(m, 5, 2, &bm);
    assert_true(isinf(m[0]) && isinf(m[1]) && m[2] == 3 && m[3] == 4 && isinf(m[4]) && m[5] == 6);
}

static void test_cand_blocks_ref(void **state)
{
    (void)state;
    float bs[8], val[8];
    int32_t kept[8];
    /* reach 0: no blocks, nothing pinned */
    assert_int_equal(ref_cand_block_scores(NULL, 0, 8, bs), 0);
    /* blocks of 2 over reach 7: NaN never taken, the newest block (3) pinned, an all -inf block stays -inf */
    const float s[7] = {NAN, 1.0f, -INFINITY, -INFINITY, 2.0f, -0.0f, 9.0f};
    assert_int_equal(ref_cand_block_scores(s, 7, 2, bs), 4);
    assert_true(bs[0] == 1.0f && isinf(bs[1]) && bs[1] < 0 && bs[2] == 2.0f && isinf(bs[3]) && bs[3] > 0);
    /* cap 2 of 4: the pinned block and block 2; cap 4: every finite one, ascending */
    assert_int_equal(ref_cand_blocks(s, 7, 2, 2, kept, bs, val), 2);
    assert_int_equal(kept[0], 2);
    assert_int_equal(kept[1], 3);
    assert_int_equal(ref_cand_blocks(s, 7, 2, 4, kept, bs, val), 3);
    assert_int_equal(kept[0], 0);
    assert_int_equal(kept[1], 2);
    assert_int_equal(kept[2], 3);
    /* ties go to the lower block */
    const float t[6] = {1, 1, 1, 1, 1, 0};
    assert_int_equal(ref_cand_blocks(t, 5, 2, 2, kept, bs, val), 2);
    assert_int_equal(kept[0], 0);
    assert_int_equal(kept[1], 2);
    uint32_t words[2] = {0xffffffffu, 0xffffffffu};
    int32_t ids[3] = {0, 33, 63};
    ref_cand_bitmap(ids, 3, words, 2);
    assert_true(words[0] == 1u && words[1] == (1u << 1 | 1u << 31));
}

static void test_moe_route_scores(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, 3);
    float lg[384], bias[384], s[384], w1[6], w2[6];
    int32_t i1[6], i2[6];
    for (int e = 0; e < 384; e++) {
        lg[e] = 3.0f * dsk_rng_normal(&r);
        bias[e] = 0.1f * dsk_rng_normal(&r);
        s[e] = moe_sqrtsoftplus(lg[e]);
    }
    /* moe_route is moe_route_scores of the sqrtsoftplus scores, bit for bit */
    moe_route(1.5f, 384, 6, bias, lg, i1, w1);
    moe_route_scores(1.5f, 384, 6, bias, s, i2, w2);
    assert_memory_equal(i1, i2, sizeof i1);
    assert_memory_equal(w1, w2, sizeof w1);
    for (int t = 1; t < 6; t++)
        assert_true(i1[t - 1] < i1[t]);
    /* equal scores, no bias: the lower ids, equal weights summing to route_scale */
    float eq[8] = {1, 1, 1, 1, 1, 1, 1, 1}, zero[8] = {0};
    moe_route_scores(1.5f, 8, 3, zero, eq, i2, w2);
    assert_true(i2[0] == 0 && i2[1] == 1 && i2[2] == 2);
    assert_true(w2[0] == w2[1] && w2[1] == w2[2] && fabsf(w2[0] - 0.5f) < 1e-6f);
}

static void test_dspark_refs(void **state)
{
    (void)state;
    /* confidence: the u terms, then the E_m terms, one accumulator */
    uint16_t w[4] = {bf(2), bf(-1), bf(0.5f), bf(4)}, u[2] = {bf(3), bf(1)}, e[2] = {bf(2), bf(0.25f)};
    assert_true(ref_dspark_conf(w, u, 2, e, 2) == 2 * 3 - 1 + 0.5f * 2 + 4 * 0.25f);
    /* the Markov bias is rowmm_bf16 of the E_m row by markov_head [V][R]: the same terms in the same order */
    dsk_rng r;
    dsk_rng_seed(&r, 5);
    enum { R = 64, V = 300 };
    static uint16_t head[V * R], head_t[R * V], em[R];
    float b1[V], b2[V];
    for (int i = 0; i < V * R; i++)
        head[i] = bf(0.05f * dsk_rng_normal(&r));
    for (int v = 0; v < V; v++)
        for (int k = 0; k < R; k++)
            head_t[k * V + v] = head[v * R + k];
    for (int k = 0; k < R; k++)
        em[k] = bf(dsk_rng_normal(&r));
    ref_markov_bias(em, head_t, R, V, b1);
    ref_rowmm_bf16(em, head, b2, 1, R, V);
    assert_memory_equal(b1, b2, sizeof b1);
}

static void test_rules(void **state)
{
    (void)state;
    rule_variant v;
    assert_int_equal(rule_index_score_pick(32, 128, &v), 0);
    assert_string_equal(v.params, "NH=32");
    assert_int_equal(rule_index_score_pick(4, 128, &v), 0);
    assert_int_equal(rule_index_score_pick(8, 128, &v), -1);
    assert_non_null(strstr(dsk_err_msg(), "index_score"));
    assert_int_equal(rule_index_score_pick(32, 64, &v), -1);
    /* slices: at least one, at most one tile of 32 keys per warp, within grid y */
    assert_int_equal(rule_index_score_slices(1, 1, 132), 1);
    assert_int_equal(rule_index_score_slices(4096, 1 << 20, 132), 1);
    assert_int_equal(rule_index_score_slices(1, 1 << 20, 0), rule_index_score_slices(1, 1 << 20, 132));
    int sl = rule_index_score_slices(1, 1 << 20, 132);
    assert_true(sl >= 1 && sl <= 65535 && sl * RULE_INDEX_SCORE_WARPS * 32 <= (1 << 20) + 32 * RULE_INDEX_SCORE_WARPS);
    assert_int_equal(rule_moe_route_pick(384, 6, &v), 0);
    assert_string_equal(v.params, "NPL=12");
    assert_int_equal(rule_moe_route_pick(128, 3, &v), 0);
    assert_string_equal(v.params, "NPL=4");
    assert_int_equal(rule_moe_route_pick(4, 2, &v), 0);
    assert_int_equal(rule_moe_route_pick(385, 6, &v), -1);
    assert_int_equal(rule_moe_route_pick(384, 17, &v), -1);
    /* the vocabulary's slices: their top log-probabilities fit one 1024-key sort */
    assert_int_equal(rule_sample_slices(129280), 32);
    assert_true(rule_sample_slices(129280) * SAMPLE_TOP_LOGPROBS <= SAMPLE_CANDIDATES);
    assert_int_equal(rule_sample_candidates(129280), 1024);
    assert_int_equal(rule_sample_candidates(100), 100);
    assert_true(!rule_cand_blocks_need_topk(2048, 2048) && rule_cand_blocks_need_topk(2049, 2048));
}

/* Every refusal happens before the launchers touch the kit or a device: no GPU needed. */
static void test_launchers_refuse(void **state)
{
    (void)state;
    const CUdeviceptr d = 0x10000;
    index_score_args is = {.q = d, .w = d, .keys = d, .key_base = d, .reach = d, .rows = 1, .nh = 32, .ihd = 128,
                           .N = 64, .out = d, .lds = 64};
    is.nh = 16;
    assert_int_equal(op_index_score(NULL, NULL, &is), -1);
    is.nh = 32, is.group = 5;
    assert_int_equal(op_index_score(NULL, NULL, &is), -1);
    is.group = 0, is.out = d + 4;
    assert_int_equal(op_index_score(NULL, NULL, &is), -1);
    assert_non_null(strstr(dsk_err_msg(), "out"));
    is.out = d, is.lds = 10;
    assert_int_equal(op_index_score(NULL, NULL, &is), -1);
    cand_blocks_args cb = {.scores = d, .lds = 64, .N = 64, .reach = d, .rows = 1, .block = 8, .cap = 2048,
                           .bitmap = d, .ldw = 1, .ws = d, .ws_bytes = 16};
    assert_int_equal(op_cand_blocks(NULL, NULL, &cb), -1); /* workspace too small */
    assert_non_null(strstr(dsk_err_msg(), "workspace"));
    cb.ws_bytes = op_cand_blocks_ws_bytes(1, 64, 8, 2048), cb.ldw = 0;
    assert_int_equal(op_cand_blocks(NULL, NULL, &cb), -1);
    assert_int_equal(op_moe_route(NULL, NULL, d, 384, 0, 1, 384, 6, 1.5f, d, d, 0), -1); /* no bias */
    assert_int_equal(op_moe_route(NULL, NULL, d, 300, d, 1, 384, 6, 1.5f, d, d, 0), -1);
    sample_args sa = {.logits = d, .ldl = 129280, .V = 129280, .rows = 1, .params = d, .candidates = 1, .tokens = d,
                      .logprob = d, .top_ids = d, .top_lp = d, .ws = d, .ws_bytes = 100};
    assert_int_equal(op_sample(NULL, NULL, &sa), -1);
    assert_non_null(strstr(dsk_err_msg(), "workspace"));
    sa.ws_bytes = op_sample_ws_bytes(1, 129280, 1), sa.tokens = 0;
    assert_int_equal(op_sample(NULL, NULL, &sa), -1);
    /* a workspace without candidates is smaller than one with them */
    assert_true(op_sample_ws_bytes(4, 129280, 0) < op_sample_ws_bytes(4, 129280, 1));
    dspark_conf_args dc = {.u = d, .ldu = 5120, .d = 5120, .e = d, .lde = 256, .R = 256, .w = d, .conf = d, .rows = 1};
    dc.d = 5121;
    assert_int_equal(op_dspark_conf(NULL, NULL, &dc), -1);
    dc.d = 5120, dc.bias = d;
    assert_int_equal(op_dspark_conf(NULL, NULL, &dc), -1); /* bias without logits */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_score_ref), cmocka_unit_test(test_cand_blocks_ref),
        cmocka_unit_test(test_moe_route_scores), cmocka_unit_test(test_dspark_refs),
        cmocka_unit_test(test_rules),           cmocka_unit_test(test_launchers_refuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
