/* The glue families without a GPU: the CPU references of vec_glue, rows_copy, compress_pool, engram_rows
 * and engram_gate (the KV QDQ codes, ties, saturation, -0 and tiny blocks; the composition, strides and
 * heads; the pooling, the dequantisation and the gate on values worked out by hand), their variant rules,
 * and every launcher's refusals (which come before any kit or device is touched). */
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/compress_pool.h"
#include "runtime/launch/engram_gate.h"
#include "runtime/launch/engram_rows.h"
#include "runtime/launch/rows_copy.h"
#include "runtime/launch/vec_glue.h"
#include "runtime/ref/compress_pool.h"
#include "runtime/ref/engram_gate.h"
#include "runtime/ref/engram_rows.h"
#include "runtime/ref/kvquant.h"
#include "runtime/ref/rmsnorm.h"
#include "runtime/ref/rope.h"
#include "runtime/ref/rows_copy.h"
#include "runtime/ref/vec_glue.h"
#include "tests/common/test_util.h"

#include <math.h>
#include <string.h>

/* FP8 with scale 1 (a block whose amax is 448): every e4m3 value is kept, every midpoint goes to the even
 * code, and values below the smallest subnormal's half go to ±0. */
static void test_fp8_codes_and_ties(void **state)
{
    (void)state;
    int kept = 0, ties = 0;
    for (int code = 0; code < 0x7f; code++) {
        for (int sign = 0; sign < 2; sign++) {
            uint16_t v[32];
            float x = e4m3_to_f32((uint8_t)code) * (sign ? -1.0f : 1.0f);
            for (int i = 0; i < 32; i++)
                v[i] = f32_to_bf16(x);
            v[0] = f32_to_bf16(448.0f);
            kvq_fp8_e4m3(v, 32);
            assert_int_equal(v[1], f32_to_bf16(x)); /* -0 stays -0 */
            kept++;
        }
        if (code + 1 < 0x7f) {
            /* the midpoint to the next code: 5 significant bits, exact in bf16 */
            float lo = e4m3_to_f32((uint8_t)code), hi = e4m3_to_f32((uint8_t)(code + 1)), mid = 0.5f * (lo + hi);
            uint16_t v[32];
            for (int i = 0; i < 32; i++)
                v[i] = f32_to_bf16(mid);
            v[0] = f32_to_bf16(448.0f);
            assert_true(bf16_to_f32(v[1]) == mid);
            kvq_fp8_e4m3(v, 32);
            assert_true(bf16_to_f32(v[1]) == (code & 1 ? hi : lo));
            ties++;
        }
    }
    assert_int_equal(kept, 254);
    assert_int_equal(ties, 126);
    /* a block below the amax floor 1e-4: scale pow2_ceil(1e-4/448) = 2^-22 */
    uint16_t t[32];
    for (int i = 0; i < 32; i++)
        t[i] = f32_to_bf16(ldexpf((float)(i - 16), -26));
    kvq_fp8_e4m3(t, 32);
    for (int i = 0; i < 32; i++) /* |i − 16|·2^-26 = (|i − 16|/16)·2^-22: on the e4m3 grid times 2^-22 */
        assert_true(bf16_to_f32(t[i]) == ldexpf((float)(i - 16), -26));
}

/* FP4 e2m1: the ties of model.md §3.6 (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4) with the
 * e8m0 scale 1, and saturation at 6 when the e4m3 scale rounds below amax/6. */
static void test_fp4_ties_and_saturation(void **state)
{
    (void)state;
    const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f, -5.0f, 0.0f, -0.0f, 6.0f};
    const float out[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, -0.0f, -4.0f, 0.0f, -0.0f, 6.0f};
    uint16_t v[32];
    for (int i = 0; i < 32; i++)
        v[i] = f32_to_bf16(i < 12 ? in[i] : 0.5f);
    kvq_fp4_e8m0(v, 32);
    for (int i = 0; i < 12; i++)
        assert_int_equal(v[i], f32_to_bf16(out[i]));
    /* amax 6.375: amax/6 = 1.0625 is a tie between the e4m3 values 1 and 1.125 and rounds to the even code,
     * 1, so 6.375/1 saturates to 6 */
    uint16_t w[16];
    for (int i = 0; i < 16; i++)
        w[i] = f32_to_bf16(i == 0 ? 6.375f : 1.0f);
    kvq_fp4_e4m3(w, 16);
    assert_true(bf16_to_f32(w[0]) == 6.0f);
    assert_true(bf16_to_f32(w[1]) == 1.0f);
}

/* ref_vec_glue is its three steps in order, per (row, head) vector, with strides, table rows and heads. */
static void test_vec_glue_composition(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, 91);
    const int rows = 5, heads = 3, width = 128, R = 32, xs = heads * width + 8, ys = heads * width + 24;
    uint16_t *x = malloc(sizeof(uint16_t) * rows * xs), *y = malloc(sizeof(uint16_t) * rows * ys);
    uint16_t *e = malloc(sizeof(uint16_t) * width), w[128];
    float table[7 * 32];
    rope_params rp = {R, 160000.0, 16.0, 32, 1, 65536};
    ref_rope_table(&rp, 1000, 7, table);
    const int32_t trow[] = {6, 0, 3, 3, 1};
    for (int i = 0; i < rows * xs; i++)
        x[i] = f32_to_bf16(dsk_rng_normal(&r));
    for (int i = 0; i < width; i++)
        w[i] = f32_to_bf16(1.0f + 0.2f * dsk_rng_normal(&r));
    for (int i = 0; i < rows * ys; i++)
        y[i] = 0xabab;
    const kvq_kind kinds[] = {KVQ_NONE, KVQ_FP8_E4M3, KVQ_FP4_E4M3, KVQ_FP4_E8M0};
    for (int k = 0; k < 4; k++) {
        ref_vec_glue_op op = {w, 1e-6f, R, table, trow, k & 1, kinds[k]};
        ref_vec_glue(x, xs, y, ys, rows, heads, width, &op);
        for (int i = 0; i < rows; i++) {
            for (int h = 0; h < heads; h++) {
                memcpy(e, x + i * xs + h * width, sizeof(uint16_t) * width);
                ref_rmsnorm_bf16(e, w, e, 1, width, 1e-6f);
                ref_rope_apply_bf16(e, 1, 1, width, R, &trow[i], table, k & 1);
                if (kinds[k] == KVQ_FP8_E4M3)
                    kvq_fp8_e4m3(e, width);
                else if (kinds[k] == KVQ_FP4_E4M3)
                    kvq_fp4_e4m3(e, width);
                else if (kinds[k] == KVQ_FP4_E8M0)
                    kvq_fp4_e8m0(e, width);
                assert_memory_equal(e, y + i * ys + h * width, sizeof(uint16_t) * width);
            }
            for (int j = heads * width; j < ys; j++)
                assert_int_equal(y[i * ys + j], 0xabab); /* the padding is never written */
        }
    }
    /* in place equals out of place */
    uint16_t *z = malloc(sizeof(uint16_t) * rows * xs);
    memcpy(z, x, sizeof(uint16_t) * rows * xs);
    ref_vec_glue_op op = {NULL, 0, R, table, trow, 0, KVQ_FP8_E4M3};
    ref_vec_glue(z, xs, z, xs, rows, heads, width, &op);
    ref_vec_glue(x, xs, y, ys, rows, heads, width, &op);
    for (int i = 0; i < rows; i++)
        assert_memory_equal(z + i * xs, y + i * ys, sizeof(uint16_t) * heads * width);
    free(x);
    free(y);
    free(z);
    free(e);
}

static void test_rules(void **state)
{
    (void)state;
    for (int width = 8; width <= 2048; width += 8) {
        int C = rule_vec_glue_chunks(width);
        assert_true(C == 1 || C == 2 || C == 5 || C == 8);
        assert_true(256 * C >= width);
    }
    assert_int_equal(rule_vec_glue_chunks(4096), 0);
    rule_variant v;
    rule_vec_glue_pick(512, KVQ_FP8_E4M3, &v);
    assert_string_equal(v.family, "vec_glue");
    assert_string_equal(v.params, "C=2,Q=1");
    rule_vec_glue_pick(1280, KVQ_NONE, &v);
    assert_string_equal(v.params, "C=5,Q=0");
    rule_vec_glue_pick(128, KVQ_FP4_E8M0, &v);
    assert_string_equal(v.params, "C=1,Q=3");
    rule_engram_rows_pick(1, &v);
    assert_string_equal(v.params, "SRC=1");
    assert_int_equal(rule_engram_gate_threads(5120), 256);
    assert_int_equal(rule_engram_gate_threads(128), 32);
}

static void test_rows_copy_ref(void **state)
{
    (void)state;
    uint8_t src[4][32], dst[6][48];
    for (int i = 0; i < 4; i++)
        memset(src[i], 0x10 + i, sizeof src[i]);
    memset(dst, 0xee, sizeof dst);
    const int32_t si[] = {3, 0, 3}, di[] = {5, -1, 1};
    ref_rows_copy(src, 32, si, dst, 48, di, 3, 32);
    for (int j = 0; j < 32; j++) {
        assert_int_equal(dst[5][j], 0x13);
        assert_int_equal(dst[1][j], 0x13); /* a gather may read a row twice */
        assert_int_equal(dst[0][j], 0xee); /* the skipped row's slot and everything else are untouched */
    }
    for (int j = 32; j < 48; j++)
        assert_int_equal(dst[5][j], 0xee);
}

static void test_compress_pool_ref(void **state)
{
    (void)state;
    enum { HD = 8 };
    float a[3][2 * HD], st[2][2 * HD];
    for (int d = 0; d < HD; d++) {
        for (int t = 0; t < 3; t++) {
            a[t][d] = (float)(t + 1) * (d + 1);
            a[t][HD + d] = t == 2 ? 100.0f : 0.5f; /* row 2's gate dominates every other token's */
        }
        st[1][d] = -3.0f;
        st[1][HD + d] = 0.5f;
    }
    const int32_t e[] = {0, 1, -2, 2};
    uint16_t out[2][HD];
    ref_compress_pool(&a[0][0], &a[0][HD], 2 * HD, &st[0][0], &st[0][HD], 2 * HD, e, &out[0][0], HD, 2, HD);
    for (int d = 0; d < HD; d++) {
        /* equal gates: the mean of the two values, 1.5·(d+1), exact */
        assert_int_equal(out[0][d], f32_to_bf16(1.5f * (d + 1)));
        /* state row 1 (entry −2) against a gate 99.5 larger: the round's value, to fp32's resolution */
        assert_int_equal(out[1][d], f32_to_bf16(3.0f * (d + 1)));
    }
}

static void test_engram_rows_ref(void **state)
{
    (void)state;
    /* 1.0 (e4m3 0x38) at scale 2^0 (e8m0 127), -0 at scale 2^-127, the smallest subnormal at 2^3, NaN */
    uint8_t vals[64], sc[2] = {127, 0};
    for (int i = 0; i < 64; i++)
        vals[i] = 0x38;
    vals[1] = 0x80;
    vals[2] = 0x01;
    vals[3] = 0x7f;
    vals[32] = 0x38;
    uint16_t out[64];
    ref_engram_row(vals, sc, 64, out);
    assert_int_equal(out[0], 0x3f80);
    assert_int_equal(out[1], 0x8000);
    assert_int_equal(out[2], f32_to_bf16(0x1p-9f));
    assert_true(isnan(bf16_to_f32(out[3])));
    assert_int_equal(out[32], f32_to_bf16(0x1p-127f)); /* 1.0 · 2^-127: a subnormal fp32, rounded to bf16 */
    /* records built from a table give the table's rows */
    dsk_rng r;
    dsk_rng_seed(&r, 5);
    enum { ROWS = 9, W = 64, COLS = 3, N = 2 };
    uint8_t tv[ROWS][W], ts[ROWS][W / 32], rec[N * COLS][W + W / 32];
    int64_t idx[N * COLS];
    for (int i = 0; i < ROWS; i++) {
        for (int j = 0; j < W; j++)
            tv[i][j] = (uint8_t)dsk_rng_u64(&r);
        for (int j = 0; j < W / 32; j++)
            ts[i][j] = (uint8_t)(120 + dsk_rng_below(&r, 10));
    }
    for (int i = 0; i < N * COLS; i++) {
        idx[i] = (int64_t)dsk_rng_below(&r, ROWS);
        memcpy(rec[i], tv[idx[i]], W);
        memcpy(rec[i] + W, ts[idx[i]], W / 32);
    }
    uint16_t a[N][COLS * W + 8], b[N][COLS * W + 8];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    ref_engram_records(&rec[0][0], N, COLS, W, &a[0][0], COLS * W + 8);
    ref_engram_table_rows(&tv[0][0], &ts[0][0], idx, N, COLS, W, &b[0][0], COLS * W + 8);
    assert_memory_equal(a, b, sizeof a);
}

static void test_engram_gate_ref(void **state)
{
    (void)state;
    enum { D = 16, HC = 2 };
    uint16_t X[HC * D], kv[(HC + 1) * D], X0[HC * D];
    float w[HC * D];
    for (int j = 0; j < D; j++) {
        X[j] = f32_to_bf16(1.0f + 0.125f * j);
        X[D + j] = f32_to_bf16(-2.0f + 0.25f * j);
        kv[j] = 0;                                  /* stream 0: a zero key, d_c = +0 */
        kv[D + j] = f32_to_bf16(-2.0f + 0.25f * j); /* stream 1: key = X_1, w = 1: d_c = sqrt(d)·… > 0 */
        kv[2 * D + j] = f32_to_bf16(0.5f * (j - 8));
        w[j] = w[D + j] = 1.0f;
    }
    memcpy(X0, X, sizeof X);
    ref_engram_gate(X, kv, w, 1, HC, D, 1e-20f);
    /* d_0 = +0: g = σ(+sqrt(1e-6)), not σ(0) */
    float g0 = 1.0f / (1.0f + expf(-sqrtf(1e-6f)));
    for (int j = 0; j < D; j++)
        assert_int_equal(X[j], f32_to_bf16(bf16_to_f32(X0[j]) + g0 * bf16_to_f32(kv[2 * D + j])));
    /* d_1 = Σx²·r_x² · d^-1/2 = d · d^-1/2 = sqrt(16) = 4 (up to rounding): g = σ(2) */
    float g1 = 1.0f / (1.0f + expf(-2.0f));
    for (int j = 0; j < D; j++)
        assert_true(fabsf(bf16_to_f32(X[D + j]) - (bf16_to_f32(X0[D + j]) + g1 * bf16_to_f32(kv[2 * D + j]))) <=
                    1e-2f * (1.0f + fabsf(bf16_to_f32(X0[D + j]))));
    assert_true(ref_engram_gate_scale(5120) == (float)(1.0 / sqrt(5120.0)));
}

/* Every launcher refuses bad arguments with a message naming its family, before touching the kit. */
static void test_launcher_refusals(void **state)
{
    (void)state;
    const CUdeviceptr p = 0x10000;
#define REFUSED(call, family)                                                                                       \
    do {                                                                                                            \
        dsk_err_clear();                                                                                            \
        assert_int_equal((call), -1);                                                                               \
        assert_non_null(strstr(dsk_err_msg(), family));                                                            \
    } while (0)
    vec_glue_op fp8 = {.qdq = KVQ_FP8_E4M3}, rope = {.rope_dim = 64, .freqs = p, .pos = p};
    vec_glue_op no_pos = {.rope_dim = 64, .freqs = p}, inv = {.inverse = 1}, bad = {.qdq = KVQ_KINDS};
    REFUSED(op_vec_glue(NULL, NULL, &fp8, p, 528, p, 528, 1, 1, 520), "vec_glue");  /* width % 32 */
    REFUSED(op_vec_glue(NULL, NULL, &rope, p, 512, p, 512, 1, 1, 4), "vec_glue");   /* width < 8 */
    REFUSED(op_vec_glue(NULL, NULL, &rope, p, 2056, p, 2056, 1, 1, 2056), "vec_glue"); /* width > 2048 */
    REFUSED(op_vec_glue(NULL, NULL, &no_pos, p, 512, p, 512, 1, 1, 512), "vec_glue"); /* RoPE without pos */
    REFUSED(op_vec_glue(NULL, NULL, &inv, p, 512, p, 512, 1, 1, 512), "vec_glue");  /* inverse without RoPE */
    REFUSED(op_vec_glue(NULL, NULL, &bad, p, 512, p, 512, 1, 1, 512), "vec_glue");  /* unknown QDQ */
    REFUSED(op_vec_glue(NULL, NULL, &fp8, p + 8, 512, p, 512, 1, 1, 512), "vec_glue"); /* misaligned */
    REFUSED(op_vec_glue(NULL, NULL, &fp8, p, 512, p, 1024, 1, 1, 512), "vec_glue");  /* in place, two strides */
    REFUSED(op_vec_glue(NULL, NULL, &fp8, p, 1000, p + 4096, 1024, 1, 2, 512), "vec_glue"); /* stride < heads·w */
    REFUSED(op_vec_glue(NULL, NULL, &fp8, p, 512, p, 512, -1, 1, 512), "vec_glue");  /* rows < 0 */
    vec_glue_op r12 = {.rope_dim = 12, .freqs = p, .pos = p};
    REFUSED(op_vec_glue(NULL, NULL, &r12, p, 512, p, 512, 1, 1, 512), "vec_glue");  /* rope_dim % 8 */
    REFUSED(op_rows_copy(NULL, NULL, p, 64, 0, p, 64, 0, 1, 40), "rows_copy");
    REFUSED(op_rows_copy(NULL, NULL, p, 32, 0, p, 64, 0, 1, 64), "rows_copy");
    REFUSED(op_rows_copy(NULL, NULL, p, 64, p + 4, p, 64, 0, 1, 64), "rows_copy");
    REFUSED(op_rows_copy(NULL, NULL, 0, 64, 0, p, 64, 0, 1, 64), "rows_copy");
    compress_pool_src cs = {p, p + 2048, 1024, 0, 0, 1024}, mis = cs;
    mis.a += 4;
    REFUSED(op_compress_pool(NULL, NULL, &cs, p, p, 512, 1, 500), "compress_pool");
    REFUSED(op_compress_pool(NULL, NULL, &mis, p, p, 512, 1, 512), "compress_pool");
    REFUSED(op_compress_pool(NULL, NULL, &cs, p, p, 500, 1, 512), "compress_pool");
    REFUSED(op_compress_pool(NULL, NULL, &cs, 0, p, 512, 1, 512), "compress_pool");
    REFUSED(op_engram_records(NULL, NULL, p, 1, 24, 250, p, 6000), "engram_rows");
    REFUSED(op_engram_records(NULL, NULL, p + 8, 1, 24, 256, p, 6144), "engram_rows");
    REFUSED(op_engram_records(NULL, NULL, p, 1, 24, 256, p, 6000), "engram_rows");
    REFUSED(op_engram_table_rows(NULL, NULL, p, p, 0, 1, 24, 256, p, 6144), "engram_rows");
    REFUSED(op_engram_gate(NULL, NULL, p, p, p, 1, 4, 100, 1e-20f), "engram_gate");
    REFUSED(op_engram_gate(NULL, NULL, p, p + 4, p, 1, 4, 128, 1e-20f), "engram_gate");
    REFUSED(op_engram_gate(NULL, NULL, p, p, 0, 1, 4, 128, 1e-20f), "engram_gate");
#undef REFUSED
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_codes_and_ties),   cmocka_unit_test(test_fp4_ties_and_saturation),
        cmocka_unit_test(test_vec_glue_composition), cmocka_unit_test(test_rules),
        cmocka_unit_test(test_rows_copy_ref),        cmocka_unit_test(test_compress_pool_ref),
        cmocka_unit_test(test_engram_rows_ref),      cmocka_unit_test(test_engram_gate_ref),
        cmocka_unit_test(test_launcher_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
