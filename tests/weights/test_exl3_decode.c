/* EXL3 decoder against exl3.md §6 (codebook points, whole-LUT checksums, packing and state vectors)
 * and against an independent bit-by-bit model on fresh random tiles for K = 1..8 × 3 codebooks. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/ref/exl3.h"
#include "tests/weights/weights_test_util.h"

#include <stdlib.h>

static uint64_t fnv1a64(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* §6.1: state -> fp16 bits for 3INST, MCG, MUL1. */
static void test_codebook_points(void **state)
{
    (void)state;
    static const uint16_t v[][4] = {
        {0x0000, 0x3a25, 0x3f60, 0xc2e8}, {0x0001, 0xbb5b, 0x304e, 0x3921}, {0x0002, 0x3b74, 0xba13, 0xb72d},
        {0x0003, 0x34b6, 0x3ab8, 0x3239}, {0x00ff, 0x3cd1, 0xbd26, 0x3ab3}, {0x0100, 0x3c3f, 0xbaf0, 0xb3db},
        {0x1234, 0xc066, 0x3e0f, 0xb89e}, {0x5555, 0xc139, 0xbce6, 0x35b6}, {0x8000, 0xb7f8, 0xb915, 0xbaf2},
        {0xaaaa, 0xbb35, 0xbfba, 0x39b9}, {0xabcd, 0xb98e, 0x35e7, 0xbd42}, {0xfffe, 0x410a, 0xbca2, 0x3702},
        {0xffff, 0xb110, 0x3acd, 0xb936},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        for (int cb = 0; cb < 3; cb++) {
            uint16_t got = exl3_codebook_value(v[i][0], cb);
            if (got != v[i][cb + 1])
                fail_msg("state %04x cb%d: got %04x, expected %04x", v[i][0], cb, got, v[i][cb + 1]);
            assert_int_equal(exl3_codebook_lut(cb)[v[i][0]], got);
        }
    /* the table's decimals: exact where short, to its 10 printed digits elsewhere */
    assert_true(f16_to_f32(exl3_codebook_value(0x0000, 2)) == -3.453125f);
    assert_true(f16_to_f32(exl3_codebook_value(0x1234, 0)) == -2.19921875f);
    assert_true(fabs(f16_to_f32(exl3_codebook_value(0x0000, 0)) - 0.7680664062) < 1e-10);
}

/* §6.2: whole-LUT statistics. Sums in double are exact (fp16 values of a bounded range). */
static void test_lut_checksums(void **state)
{
    (void)state;
    static const struct {
        uint64_t sum_bits, fnv;
        double sum, sum_sq, min, max;
        int distinct, zeros;
    } want[3] = {
        {2031704593u, 0xfad431e7e9266898ull, 13.7915039062, 101372.189978, -3.95703125, 3.97265625, 10598, 9},
        {2032743859u, 0x7bb36b05a3b885a7ull, -2.4199218750, 101437.558163, -3.94921875, 3.94921875, 10746, 12},
        {2020738480u, 0x55e1c748ed9f0cd7ull, -126.5558700562, 65576.910064, -3.453125, 3.34765625, 913, 0},
    };
    for (int cb = 0; cb < 3; cb++) {
        const uint16_t *lut = exl3_codebook_lut(cb);
        const float *lutf = exl3_codebook_lut_f32(cb);
        uint64_t sum_bits = 0;
        double sum = 0, sum_sq = 0, mn = 1e9, mx = -1e9;
        int zeros = 0, distinct = 0;
        static unsigned char seen[65536];
        memset(seen, 0, sizeof seen);
        for (int s = 0; s < 65536; s++) {
            double x = f16_to_f32(lut[s]);
            assert_true((double)lutf[s] == x);
            sum_bits += lut[s];
            sum += x;
            sum_sq += x * x;
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
            zeros += x == 0.0;
            distinct += !seen[lut[s]];
            seen[lut[s]] = 1;
        }
        uint8_t bytes[131072];
        for (int s = 0; s < 65536; s++) {
            bytes[2 * s] = (uint8_t)(lut[s] & 0xff);
            bytes[2 * s + 1] = (uint8_t)(lut[s] >> 8);
        }
        assert_int_equal(sum_bits, want[cb].sum_bits);
        assert_int_equal(fnv1a64(bytes, sizeof bytes), want[cb].fnv);
        assert_true(fabs(sum - want[cb].sum) < 1e-9);
        assert_true(fabs(sum_sq - want[cb].sum_sq) < 1e-6);
        assert_true(mn == want[cb].min && mx == want[cb].max);
        assert_int_equal(distinct, want[cb].distinct);
        assert_int_equal(zeros, want[cb].zeros);
    }
}

/* §6.3: packing and state extraction. */
static void test_packing_vectors(void **state)
{
    (void)state;
    uint16_t v[256], w[128], s[256];
    for (int p = 0; p < 256; p++)
        v[p] = (uint16_t)(p % 16);
    exl3_pack_tile(v, 4, w);
    static const uint16_t w4[] = {0x4567, 0x0123, 0xcdef, 0x89ab, 0x4567, 0x0123};
    for (int i = 0; i < 6; i++)
        assert_int_equal(w[i], w4[i]);
    exl3_tile_states(w, 4, s);
    static const uint16_t s4[] = {0xdef0, 0xef01, 0xf012, 0x0123, 0x1234};
    for (int i = 0; i < 5; i++)
        assert_int_equal(s[i], s4[i]);

    for (int p = 0; p < 256; p++)
        v[p] = (uint16_t)(p % 8);
    exl3_pack_tile(v, 3, w);
    static const uint16_t w3[] = {0x7705, 0x0539, 0x0539, 0x3977, 0x3977, 0x7705};
    for (int i = 0; i < 6; i++)
        assert_int_equal(w[i], w3[i]);
    uint8_t bytes[96];
    for (int i = 0; i < 48; i++) {
        bytes[2 * i] = (uint8_t)(w[i] & 0xff);
        bytes[2 * i + 1] = (uint8_t)(w[i] >> 8);
    }
    assert_int_equal(fnv1a64(bytes, sizeof bytes), 0x496e97099e2f7c45ull);
}

/* §2.4: position -> (r, c) examples, and the map is a bijection. */
static void test_positions(void **state)
{
    (void)state;
    static const int ex[][3] = {{0, 0, 0}, {1, 1, 0}, {2, 8, 0}, {3, 9, 0}, {4, 0, 8},
                                {8, 2, 0}, {16, 4, 0}, {31, 15, 8}, {255, 15, 15}};
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++)
        assert_int_equal(exl3_tile_position(ex[i][1], ex[i][2]), ex[i][0]);
    int hit[256] = {0};
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            int p = exl3_tile_position(r, c);
            assert_true(p >= 0 && p < 256);
            hit[p]++;
            /* p = 8l + e: r = 2(l%4) + [0,1,8,9][e%4], c = l/4 + 8(e/4) */
            int l = p / 8, e = p % 8;
            static const int dr[4] = {0, 1, 8, 9};
            assert_int_equal(r, 2 * (l % 4) + dr[e % 4]);
            assert_int_equal(c, l / 4 + 8 * (e / 4));
        }
    for (int p = 0; p < 256; p++)
        assert_int_equal(hit[p], 1);
}

/* Independent model of §2.2-§2.4, one bit at a time. */
static void model_states(const uint16_t *t, int K, uint16_t *states)
{
    int nbits = 256 * K;
    unsigned char bits[2048];
    for (int q = 0; q < nbits; q++) {
        int w = q / 32;
        uint32_t u = (uint32_t)t[2 * w] + 65536u * (uint32_t)t[2 * w + 1];
        bits[q] = (u >> (31 - q % 32)) & 1;
    }
    for (int p = 0; p < 256; p++) {
        uint32_t s = 0;
        for (int i = (p + 1) * K - 16; i < (p + 1) * K; i++)
            s = s << 1 | bits[((i % nbits) + nbits) % nbits];
        states[p] = (uint16_t)s;
    }
}

static void model_decode(const uint16_t *t, int K, int cb, uint16_t out[256])
{
    uint16_t st[256];
    model_states(t, K, st);
    for (int p = 0; p < 256; p++) {
        int l = p / 8, e = p % 8;
        static const int dr[8] = {0, 1, 8, 9, 0, 1, 8, 9}, dc[8] = {0, 0, 0, 0, 8, 8, 8, 8};
        int r = 2 * (l % 4) + dr[e], c = l / 4 + dc[e];
        out[r * 16 + c] = exl3_codebook_value(st[p], cb);
    }
}

static void test_random_tiles(void **state)
{
    (void)state;
    dsk_rng rng;
    dsk_rng_seed(&rng, 0xe13);
    uint16_t t[128], got[256], want[256], st[256], st_model[256];
    float gotf[256];
    long checked = 0;
    for (int K = 1; K <= 8; K++)
        for (int cb = 0; cb < 3; cb++)
            for (int n = 0; n < 64; n++) {
                for (int i = 0; i < 16 * K; i++)
                    t[i] = (uint16_t)dsk_rng_u64(&rng);
                exl3_tile_states(t, K, st);
                model_states(t, K, st_model);
                assert_memory_equal(st, st_model, sizeof st);
                exl3_decode_tile(t, K, cb, got);
                model_decode(t, K, cb, want);
                if (memcmp(got, want, sizeof got))
                    fail_msg("K=%d cb=%d tile %d: decode differs from the bit-level model", K, cb, n);
                exl3_decode_tile_f32(t, K, exl3_codebook_lut_f32(cb), gotf);
                for (int i = 0; i < 256; i++)
                    assert_true(gotf[i] == f16_to_f32(got[i]));
                checked += 256;
            }
    assert_int_equal(checked, 8 * 3 * 64 * 256);
}

/* Pack is the inverse of state extraction: S_p's low K bits are v_p, S_p = S_{p-1}·2^K + v_p mod
 * 2^16 (cyclically), and any word pattern re-packs from its own values. */
static void test_pack_roundtrip(void **state)
{
    (void)state;
    dsk_rng rng;
    dsk_rng_seed(&rng, 0x9ac);
    uint16_t v[256], w[128], w2[128], s[256];
    for (int K = 1; K <= 8; K++)
        for (int n = 0; n < 32; n++) {
            for (int p = 0; p < 256; p++)
                v[p] = (uint16_t)dsk_rng_below(&rng, 1u << K);
            exl3_pack_tile(v, K, w);
            exl3_tile_states(w, K, s);
            for (int p = 0; p < 256; p++) {
                assert_int_equal(s[p] & ((1u << K) - 1), v[p]);
                uint16_t prev = s[(p + 255) % 256];
                assert_int_equal(s[p], (uint16_t)((prev << K) | v[p]));
            }
            for (int i = 0; i < 16 * K; i++)
                w[i] = (uint16_t)dsk_rng_u64(&rng);
            exl3_tile_states(w, K, s);
            for (int p = 0; p < 256; p++)
                v[p] = s[p] & ((1u << K) - 1);
            exl3_pack_tile(v, K, w2);
            assert_memory_equal(w, w2, 32 * (size_t)K);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codebook_points), cmocka_unit_test(test_lut_checksums),
        cmocka_unit_test(test_packing_vectors), cmocka_unit_test(test_positions),
        cmocka_unit_test(test_random_tiles),    cmocka_unit_test(test_pack_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
