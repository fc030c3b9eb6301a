/* What can be checked of sparse_attn without a GPU: the reference's canonical list (window keys from the
 * call and the ring, then selected or block rows), the row attention on a hand-computed case, the form
 * rule, and the launcher's refusals of bad arguments (before it touches a kit or the GPU). */
#include "kit/src/sparse_attn_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/launch/sparse_attn.h"
#include "runtime/ref/sparse_attn.h"
#include "tests/common/test_util.h"

#include <math.h>
#include <string.h>

enum { HD = 4 };

static void test_list_window_and_selection(void **state)
{
    (void)state;
    static uint16_t call[4 * HD], ring[8 * HD], rows2[16 * HD];
    const uint16_t *keys[16];
    /* this call holds positions 100..103; the ring (8 slots) the earlier ones */
    ref_attn_keys src = {.call = call, .call_pos0 = 100, .ring = ring, .ring_slots = 8, .rows2 = rows2, .hd = HD};
    const int32_t sel[2] = {5, 9};
    int n = ref_attn_list(&src, 97, 102, sel, 2, keys);
    assert_int_equal(n, 8);
    assert_ptr_equal(keys[0], ring + 1 * HD); /* 97 % 8 */
    assert_ptr_equal(keys[1], ring + 2 * HD);
    assert_ptr_equal(keys[2], ring + 3 * HD);
    assert_ptr_equal(keys[3], call + 0 * HD); /* 100 is the call's row 0 */
    assert_ptr_equal(keys[5], call + 2 * HD);
    assert_ptr_equal(keys[6], rows2 + 5 * HD);
    assert_ptr_equal(keys[7], rows2 + 9 * HD);
    /* the ring wraps: positions 14, 15, 16 sit in slots 6, 7, 0 */
    src.call_pos0 = 1000;
    n = ref_attn_list(&src, 14, 16, NULL, 0, keys);
    assert_int_equal(n, 3);
    assert_ptr_equal(keys[0], ring + 6 * HD);
    assert_ptr_equal(keys[2], ring + 0 * HD);
    /* a DSpark block: the window all in the ring, then the block's rows without a selection */
    n = ref_attn_list(&src, 0, 1, NULL, 5, keys);
    assert_int_equal(n, 7);
    for (int j = 0; j < 5; j++)
        assert_ptr_equal(keys[2 + j], rows2 + j * HD);
    /* an empty window leaves the selection alone; an empty list is empty */
    assert_int_equal(ref_attn_list(&src, 5, 4, sel, 2, keys), 2);
    assert_ptr_equal(keys[0], rows2 + 5 * HD);
    assert_int_equal(ref_attn_list(&src, 5, 4, NULL, 0, keys), 0);
}

static void test_row_attention(void **state)
{
    (void)state;
    /* one head of 4 dims, two keys: s = (q.k) * fp32(4^-1/2) = (1, 0); max 1 */
    uint16_t q[HD] = {f32_to_bf16(2.0f), 0, 0, 0};
    uint16_t k0[HD] = {f32_to_bf16(1.0f), f32_to_bf16(3.0f), 0, 0}, k1[HD] = {0, 0, f32_to_bf16(-2.0f), 0};
    const uint16_t *keys[2] = {k0, k1};
    const float sink = 0.25f;
    uint16_t o[HD];
    sparse_attention_row(q, 1, HD, keys, 2, &sink, o);
    float p1 = expf(0.0f - 1.0f), den = (1.0f + p1) + expf(sink - 1.0f);
    float pb = bf16_round(p1); /* the numerator takes bf16 probabilities */
    assert_int_equal(o[0], f32_to_bf16(1.0f / den));
    assert_int_equal(o[1], f32_to_bf16(3.0f / den));
    assert_int_equal(o[2], f32_to_bf16((pb * -2.0f) / den));
    assert_int_equal(o[3], 0);
    /* an empty list gives zeros whatever the sink */
    memset(o, 0xff, sizeof o);
    sparse_attention_row(q, 1, HD, keys, 0, &sink, o);
    for (int d = 0; d < HD; d++)
        assert_int_equal(o[d], 0);
}

static void test_rule(void **state)
{
    (void)state;
    rule_variant v;
    rule_sparse_attn_pick(512, 2, &v);
    assert_string_equal(v.family, "sparse_attn");
    assert_string_equal(v.params, "HD=512,MODE=2");
    /* few rows of the release split their lists; a prompt chunk, one-block lists (the tiny preset's 8 + 4)
     * and rounds of 64 CTAs or more walk them whole */
    assert_true(rule_sparse_attn_split(1, 64, 640));
    assert_true(rule_sparse_attn_split(15, 64, 640));
    assert_false(rule_sparse_attn_split(16, 64, 640));
    assert_false(rule_sparse_attn_split(4096, 64, 640));
    assert_false(rule_sparse_attn_split(1, 64, 64));
    assert_false(rule_sparse_attn_split(1, 8, 12));
    assert_true(rule_sparse_attn_split(63, 8, 130));
    assert_false(rule_sparse_attn_split(64, 8, 130));
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
    sparse_attn_args g = {.q = FAKE, .kv_call = FAKE, .kv_ring = FAKE, .kv2 = FAKE, .sel = FAKE, .rows_desc = FAKE,
                          .sink = FAKE, .freqs = FAKE, .out = FAKE, .rows = 4, .heads = 64, .head_dim = 512,
                          .ring = 136, .sel_ld = 512, .rope_dim = 64, .max_list = 640};
    /* 4 rows of 64 heads split: 4 x 4 groups x 10 blocks of (1088 + 16 x 512) floats, then a u32 arrival
     * counter per (row, group) */
    size_t need = op_sparse_attn_ws_bytes(&g);
    assert_int_equal(need, (size_t)4 * 4 * 10 * SPARSE_ATTN_WS_BLOCK(512) * 4 + (size_t)4 * 4 * 4);
    assert_int_equal(op_sparse_attn_ws_bytes_form(&g, 0), 0);
    sparse_attn_args b;
    b = g, b.head_dim = 256;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "sparse_attn", "head_dim 256");
    b = g, b.rows = 70000;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "sparse_attn", "70000 rows");
    b = g, b.heads = 0;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "0 heads");
    b = g, b.ring = 0;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "ring of 0 slots");
    b = g, b.max_list = 0;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "max_list 0");
    b = g, b.rope_dim = 33;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "rope_dim 33");
    b = g, b.rope_dim = 256;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "rope_dim 256", "128");
    b = g, b.freqs = 0;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "without frequencies");
    b = g, b.rope_dim = 0;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "with frequencies");
    b = g, b.sel_ld = 0;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "sel_ld 0");
    b = g, b.out = 0;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "out is missing");
    b = g, b.kv2 = FAKE + 8;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "kv2", "16-byte aligned");
    b = g;
    assert_fails_with(op_sparse_attn(NULL, 0, &b), "workspace of", "0 given");
    b = g, b.ws = FAKE, b.ws_bytes = need - 1;
    assert_fails_with(op_sparse_attn_form(NULL, 0, &b, -1), "workspace");
    /* the whole-list form needs no workspace; with no rows nothing is launched (and no kit touched) */
    b = g, b.rows = 0;
    assert_int_equal(op_sparse_attn_form(NULL, 0, &b, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_window_and_selection),
        cmocka_unit_test(test_row_attention),
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_launcher_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
