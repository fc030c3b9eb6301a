/* A GPU rank's part of the model (gpu_split_init, runtime/gpu/gpu_weights.h; docs/ranks.md): the heads, wo_a
 * groups and vocabulary rows of rank r of tp at the release's widths and the tiny preset's, the parts
 * adjoining and covering the whole, and each shape that does not split refused with what does not. Pure
 * host code: no GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runtime/common/error.h"
#include "runtime/gpu/gpu_weights.h"

#include <string.h>

static model_config shape(int heads, int groups, int head_dim, int o_lora, int vocab)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.n_heads = heads;
    c.o_groups = groups;
    c.head_dim = head_dim;
    c.o_lora_rank = o_lora;
    c.vocab_size = vocab;
    return c;
}

static void test_parts_cover(void **state)
{
    (void)state;
    const model_config cs[] = {shape(64, 8, 512, 1024, 129280), shape(8, 4, 128, 128, 129280)};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int tp = 1; tp <= 2; tp++) {
            int h = 0, g = 0, v = 0;
            for (int r = 0; r < tp; r++) {
                gpu_split s;
                assert_int_equal(gpu_split_init(&cs[i], tp, r, &s), 0);
                assert_int_equal(s.tp, tp);
                assert_int_equal(s.rank, r);
                /* each rank's part starts where the previous one ended and they are equal */
                assert_int_equal(s.h0, h);
                assert_int_equal(s.g0, g);
                assert_int_equal(s.v0, v);
                assert_int_equal(s.h1 - s.h0, cs[i].n_heads / tp);
                assert_int_equal(s.g1 - s.g0, cs[i].o_groups / tp);
                assert_int_equal(s.v1 - s.v0, cs[i].vocab_size / tp);
                h = s.h1, g = s.g1, v = s.v1;
            }
            assert_int_equal(h, cs[i].n_heads);
            assert_int_equal(g, cs[i].o_groups);
            assert_int_equal(v, cs[i].vocab_size);
        }
    /* the release at tp 2, rank 1: heads 32..63, groups 4..7, vocabulary rows 64640.. */
    gpu_split s;
    assert_int_equal(gpu_split_init(&cs[0], 2, 1, &s), 0);
    assert_int_equal(s.h0, 32);
    assert_int_equal(s.g0, 4);
    assert_int_equal(s.v0, 64640);
}

static void refused(const model_config *c, int tp, int rank, const char *what)
{
    gpu_split s;
    assert_int_not_equal(gpu_split_init(c, tp, rank, &s), 0);
    if (!strstr(dsk_err_msg(), what))
        fail_msg("tp %d rank %d: '%s' does not say '%s'", tp, rank, dsk_err_msg(), what);
}

static void test_refusals(void **state)
{
    (void)state;
    model_config c = shape(64, 8, 512, 1024, 129280);
    refused(&c, 3, 0, "heads");                /* 64 heads over 3 */
    refused(&c, 4, 0, "vocabulary");           /* 129280 / 4 = 32320, not a multiple of 128 */
    refused(&c, 2, 2, "rank 2 of 2");
    model_config odd = shape(8, 4, 128, 32, 129280);
    refused(&odd, 2, 0, "multiple of 128");    /* wo_b rows of 2 groups of 32 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parts_cover), cmocka_unit_test(test_refusals)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
