/* Engram bucket layout (primes, offsets, rows), stored multipliers and the n-gram hash (model.md §3.3,
 * §7.1) against the config's numbers, hand-computed cases and an independent implementation. */
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/model/engram_layout.h"
#include "tests/common/test_util.h"

#include <string.h>
#include <time.h>

static void test_real_layout(void **state)
{
    (void)state;
    engram_layout lay;
    int ids[2] = {1, 14};
    assert_ok(engram_layout_init(&lay, ids, 2, 4, 8, 16000000));
    assert_int_equal(lay.n_cols, 24);
    /* model.md §3.3: layer 1's 24 primes and layer 14's order 2 ends and order 4 */
    static const int64_t l1[24] = {16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183,
                                   16000189, 16000207, 16000211, 16000253, 16000277, 16000289, 16000307, 16000321,
                                   16000339, 16000381, 16000393, 16000399, 16000403, 16000409, 16000447, 16000463};
    static const int64_t l14_o4[8] = {16000781, 16000799, 16000813, 16000819,
                                      16000841, 16000877, 16000879, 16000889};
    for (int c = 0; c < 24; c++)
        assert_int_equal(lay.primes[0][c], l1[c]);
    assert_int_equal(lay.primes[1][0], 16000477);
    assert_int_equal(lay.primes[1][7], 16000627);
    assert_int_equal(lay.primes[1][8], 16000667);
    assert_int_equal(lay.primes[1][15], 16000769);
    for (int h = 0; h < 8; h++)
        assert_int_equal(lay.primes[1][16 + h], l14_o4[h]);
    /* config engram_num_embeddings */
    assert_int_equal(lay.rows[0], 384006168);
    assert_int_equal(lay.rows[1], 384016682);
    int64_t cfg[2] = {384006168, 384016682};
    assert_ok(engram_layout_check_rows(&lay, cfg));
    cfg[1]++;
    assert_int_equal(engram_layout_check_rows(&lay, cfg), -1);
    assert_non_null(strstr(dsk_err_msg(), "384016683"));
    /* offsets: exclusive prefix sums, the last column ends at the row count */
    for (int l = 0; l < 2; l++) {
        assert_int_equal(lay.offsets[l][0], 0);
        for (int c = 1; c < 24; c++)
            assert_int_equal(lay.offsets[l][c], lay.offsets[l][c - 1] + lay.primes[l][c - 1]);
        assert_int_equal(lay.offsets[l][23] + lay.primes[l][23], lay.rows[l]);
    }
}

static void test_tiny_layout(void **state)
{
    (void)state;
    engram_layout lay;
    int ids[2] = {1, 2};
    assert_ok(engram_layout_init(&lay, ids, 2, 4, 4, 32));
    /* model.md §7.1 */
    static const int64_t want[2][12] = {{37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83},
                                        {89, 97, 101, 103, 107, 109, 113, 127, 131, 137, 139, 149}};
    for (int l = 0; l < 2; l++)
        for (int c = 0; c < 12; c++)
            assert_int_equal(lay.primes[l][c], want[l][c]);
    assert_int_equal(lay.rows[0], 714);
    assert_int_equal(lay.rows[1], 1402);
    assert_int_equal(lay.offsets[0][4], 37 + 41 + 43 + 47);
    assert_int_equal(lay.offsets[1][11], 1402 - 149);
    /* a prime engram_vocab_size is itself the first candidate (REF starts at vocab − 1) */
    int one = 0;
    assert_ok(engram_layout_init(&lay, &one, 1, 3, 2, 11));
    assert_int_equal(lay.primes[0][0], 11);
    assert_int_equal(lay.primes[0][1], 13);
    assert_int_equal(lay.primes[0][2], 17);
    assert_int_equal(lay.rows[0], 11 + 13 + 17 + 19);
    /* limits are reported, not overrun */
    assert_int_equal(engram_layout_init(&lay, &one, 1, 5, 8, 100), -1);
    assert_non_null(strstr(dsk_err_msg(), "engram_max_ngram_size 5"));
    assert_int_equal(engram_layout_init(&lay, &one, 1, 4, 17, 100), -1);
}

static void test_multipliers(void **state)
{
    (void)state;
    int64_t m[4];
    /* model.md §3.3 (release) and §7.1 (tiny) */
    static const int64_t real1[4] = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
    static const int64_t real14[4] = {67716810739261, 51510806800915, 30921347202721, 82619226485591};
    static const int64_t tiny1[4] = {7593627661414631, 479593001838623, 3563315849468963, 7331553243427023};
    static const int64_t tiny2[4] = {7581278190532785, 3676095719277115, 2244174728982399, 7077601700902431};
    assert_ok(engram_stored_multipliers(1, 99092, 4, m));
    assert_memory_equal(m, real1, sizeof m);
    assert_ok(engram_stored_multipliers(14, 99092, 4, m));
    assert_memory_equal(m, real14, sizeof m);
    assert_ok(engram_stored_multipliers(1, 1000, 4, m));
    assert_memory_equal(m, tiny1, sizeof m);
    assert_ok(engram_stored_multipliers(2, 1000, 4, m));
    assert_memory_equal(m, tiny2, sizeof m);
    /* B of the draw: the real bound is quoted in §3.3; every stored value is 2x+1 with x < B */
    assert_int_equal(engram_multiplier_bound(99092), 46539438283891);
    assert_int_equal(engram_multiplier_bound(1000), 4611686018427387);
    static const struct {
        int layer;
        int64_t cv;
    } keys[] = {{1, 99092}, {14, 99092}, {1, 1000}, {2, 1000}, {0, 99092}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        assert_ok(engram_stored_multipliers(keys[i].layer, keys[i].cv, 4, m));
        for (int k = 0; k < 4; k++) {
            assert_true(m[k] & 1);
            assert_true(m[k] > 0 && (m[k] - 1) / 2 < engram_multiplier_bound(keys[i].cv));
        }
    }
    assert_int_equal(engram_stored_multipliers(3, 1000, 4, m), -1);
    assert_non_null(strstr(dsk_err_msg(), "layer 3"));
}

/* Layout {0}, orders 2..4, one head, vocab 5: primes 5, 7, 11, offsets 0, 5, 12. Multipliers 1, 2, 4, 8
 * and pad 0 make every hash checkable by hand. */
static void hand_layout(engram_layout *lay)
{
    int id0 = 0;
    assert_ok(engram_layout_init(lay, &id0, 1, 4, 1, 5));
    static const int64_t m[4] = {1, 2, 4, 8};
    memcpy(lay->mult[0], m, sizeof m);
    lay->pad = 0;
}

static void test_hash_by_hand(void **state)
{
    (void)state;
    engram_layout lay;
    hand_layout(&lay);
    assert_int_equal(lay.rows[0], 23);
    int32_t ids[5] = {3, 1, ENGRAM_DEAD, 2, 4};
    int64_t rows[5][3];
    engram_hash(&lay, 0, ids, 0, 5, &rows[0][0]);
    /* t0: s = 3,pad,pad,pad -> R = 3 every order: 3%5, 3%7+5, 3%11+12 */
    static const int64_t want[5][3] = {
        {3, 8, 15},
        {2, 5, 19},  /* s = 1,3,pad,pad: R = 1^6 = 7: 7%5 = 2, 7%7+5 = 5, 7%11+12 = 19 */
        {0, 5, 12},  /* DEAD current position: four pads, R = 0 */
        {2, 7, 14},  /* s = 2, then DEAD at t-1 blocks every shift: R = 2 */
        {0, 5, 12},  /* s = 4, 2, pad, pad: 4 ^ 4 = 0 */
    };
    assert_memory_equal(rows, want, sizeof want);
    /* a chunk starting at position 3 sees its look-back through the pointer */
    int64_t tail[2][3];
    engram_hash(&lay, 0, ids + 3, 3, 2, &tail[0][0]);
    assert_memory_equal(tail, want[3], sizeof tail);
}

/* model.md §7.1 tiny config (ids of several kinds: pad id itself, DEAD, repeats), expected rows from an
 * independent Python implementation of §3.3 (primes by trial division, Python big ints). */
static void test_hash_tiny_vectors(void **state)
{
    (void)state;
    engram_layout lay;
    int ids[2] = {1, 2};
    assert_ok(engram_layout_init(&lay, ids, 2, 4, 4, 32));
    assert_ok(engram_stored_multipliers(1, 1000, 4, lay.mult[0]));
    assert_ok(engram_stored_multipliers(2, 1000, 4, lay.mult[1]));
    lay.pad = 2;
    int32_t cid[8] = {17, 999, 2, ENGRAM_DEAD, 523, 40, 40, 7};
    static const int64_t want0[8][12] = {
        {2, 74, 82, 131, 209, 246, 315, 370, 427, 540, 607, 682},
        {17, 52, 113, 142, 203, 252, 339, 353, 435, 486, 554, 697},
        {26, 68, 101, 135, 197, 270, 314, 344, 424, 498, 582, 708},
        {12, 74, 88, 151, 169, 265, 328, 390, 478, 526, 557, 701},
        {25, 66, 120, 139, 197, 245, 297, 376, 428, 543, 593, 676},
        {28, 76, 97, 122, 173, 270, 304, 384, 475, 515, 569, 642},
        {12, 49, 95, 159, 219, 252, 338, 386, 478, 485, 574, 703},
        {15, 55, 87, 160, 173, 249, 312, 350, 437, 511, 557, 711},
    };
    static const int64_t want1[8][12] = {
        {70, 164, 248, 335, 417, 589, 622, 834, 848, 1046, 1142, 1260},
        {17, 185, 237, 359, 424, 534, 659, 737, 970, 1089, 1213, 1284},
        {14, 151, 250, 385, 481, 523, 625, 745, 934, 1095, 1150, 1356},
        {65, 93, 226, 378, 447, 559, 710, 790, 904, 1045, 1177, 1388},
        {65, 120, 276, 346, 412, 525, 612, 833, 874, 1003, 1217, 1376},
        {22, 174, 265, 388, 424, 532, 716, 729, 910, 1006, 1204, 1381},
        {58, 137, 262, 316, 493, 589, 661, 784, 861, 1024, 1162, 1335},
        {62, 148, 193, 329, 400, 505, 717, 843, 896, 1022, 1213, 1369},
    };
    int64_t got[8][12];
    engram_hash(&lay, 0, cid, 0, 8, &got[0][0]);
    assert_memory_equal(got, want0, sizeof got);
    engram_hash(&lay, 1, cid, 0, 8, &got[0][0]);
    assert_memory_equal(got, want1, sizeof got);
}

/* Random sequences on the release layout: rows stay inside their column's range, chunked hashing equals
 * one pass, and a position's rows depend on its last max_ngram ids only. */
static void test_hash_properties(void **state)
{
    (void)state;
    engram_layout lay;
    int ids[2] = {1, 14};
    assert_ok(engram_layout_init(&lay, ids, 2, 4, 8, 16000000));
    assert_ok(engram_stored_multipliers(1, 99092, 4, lay.mult[0]));
    assert_ok(engram_stored_multipliers(14, 99092, 4, lay.mult[1]));
    lay.pad = 2;
    enum { N = 300 };
    static int32_t cid[N];
    static int64_t whole[N][24], part[N][24], changed[N][24];
    dsk_rng rng;
    dsk_rng_seed(&rng, 0x5eedULL + (uint64_t)time(NULL));
    for (int i = 0; i < N; i++)
        cid[i] = dsk_rng_below(&rng, 20) == 0 ? ENGRAM_DEAD : (int32_t)dsk_rng_below(&rng, 99092);
    for (int l = 0; l < 2; l++) {
        engram_hash(&lay, l, cid, 0, N, &whole[0][0]);
        for (int t = 0; t < N; t++)
            for (int c = 0; c < 24; c++) {
                assert_true(whole[t][c] >= lay.offsets[l][c]);
                assert_true(whole[t][c] < lay.offsets[l][c] + lay.primes[l][c]);
            }
        int cut = 1 + (int)dsk_rng_below(&rng, N - 2);
        engram_hash(&lay, l, cid, 0, cut, &part[0][0]);
        engram_hash(&lay, l, cid + cut, cut, N - cut, &part[cut][0]);
        assert_memory_equal(part, whole, sizeof whole);
        int t0 = (int)dsk_rng_below(&rng, N - 8);
        int32_t keep = cid[t0];
        cid[t0] = (keep + 1) % 99092;
        engram_hash(&lay, l, cid, 0, N, &changed[0][0]);
        cid[t0] = keep;
        assert_memory_equal(changed, whole, (size_t)t0 * sizeof whole[0]);
        assert_memory_equal(changed[t0 + 4], whole[t0 + 4], (size_t)(N - t0 - 4) * sizeof whole[0]);
        /* order-2 columns of t0 see the new id unless it was DEAD */
        if (keep != ENGRAM_DEAD)
            assert_memory_not_equal(changed[t0], whole[t0], sizeof whole[0]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_layout),       cmocka_unit_test(test_tiny_layout),
        cmocka_unit_test(test_multipliers),       cmocka_unit_test(test_hash_by_hand),
        cmocka_unit_test(test_hash_tiny_vectors), cmocka_unit_test(test_hash_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
