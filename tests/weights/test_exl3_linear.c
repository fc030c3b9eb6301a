/* Recognition of EXL3 linears: well-formed layers of every codebook and bias kind, and each malformed
 * variant rejected with a message naming the tensor and what is wrong. */
#include "runtime/common/rng.h"
#include "runtime/ref/exl3.h"
#include "tests/weights/weights_test_util.h"

#include <stdlib.h>

static dsk_rng rng;

static void add_random(st_writer *w, const char *prefix, const char *part, st_dtype dt, int ndim,
                       const int64_t *shape)
{
    char name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, part);
    size_t n = st_dtype_size(dt);
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    unsigned char *buf = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)dsk_rng_u64(&rng);
    assert_ok(st_writer_add(w, name, dt, ndim, shape, buf, n));
    free(buf);
}

static void add_scalar(st_writer *w, const char *prefix, const char *part, st_dtype dt, int ndim, uint32_t v)
{
    char name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, part);
    int64_t one[1] = {1};
    uint64_t v64 = v;
    assert_ok(st_writer_add(w, name, dt, ndim, one, &v64, st_dtype_size(dt)));
}

/* trellis [kt, nt, 16K] I16, suh F16 [k_len], svh F16 [n_len]; a zero length omits the tensor. */
static void add_layer(st_writer *w, const char *prefix, int64_t kt, int64_t nt, int64_t last, int64_t k_len,
                      int64_t n_len)
{
    int64_t tshape[3] = {kt, nt, last};
    add_random(w, prefix, "trellis", ST_I16, 3, tshape);
    if (k_len)
        add_random(w, prefix, "suh", ST_F16, 1, &k_len);
    if (n_len)
        add_random(w, prefix, "svh", ST_F16, 1, &n_len);
}

static st_set *set;

static int setup(void **state)
{
    (void)state;
    dsk_rng_seed(&rng, 0x1e3);
    const char *dir = scratch_dir("exl3-linear", 0);
    st_writer *w;
    assert_ok(st_writer_open(dir, 1 << 20, &w));
    int64_t n256[1] = {256};

    add_layer(w, "ok.cb0", 16, 24, 16 * 3, 256, 384);
    add_layer(w, "ok.cb1", 8, 16, 16 * 8, 128, 256);
    add_scalar(w, "ok.cb1", "mcg", ST_I32, 0, EXL3_MCG_MULT);
    add_random(w, "ok.cb1", "bias", ST_F16, 1, n256);
    add_layer(w, "ok.cb2", 24, 8, 16 * 1, 384, 128);
    add_scalar(w, "ok.cb2", "mul1", ST_I32, 0, EXL3_MUL1_MULT);
    add_random(w, "ok.cb2", "bias", ST_F32, 1, (int64_t[]){128});

    add_random(w, "bad.notrellis", "suh", ST_F16, 1, n256);
    int64_t f16shape[3] = {8, 8, 64};
    add_random(w, "bad.dtype", "trellis", ST_F16, 3, f16shape);
    add_random(w, "bad.ndim", "trellis", ST_I16, 2, (int64_t[]){8, 512});
    add_layer(w, "bad.last", 8, 8, 40, 128, 128);
    add_layer(w, "bad.k9", 8, 8, 144, 128, 128);
    add_layer(w, "bad.k0", 8, 8, 0, 128, 128);
    add_layer(w, "bad.kpad", 4, 8, 64, 64, 128);
    add_layer(w, "bad.npad", 8, 12, 64, 128, 192);
    add_layer(w, "bad.suhlen", 16, 8, 64, 384, 128);
    add_layer(w, "bad.svhlen", 8, 16, 64, 128, 384);
    add_layer(w, "bad.nosuh", 8, 8, 64, 0, 128);
    add_layer(w, "bad.svhdt", 8, 8, 64, 128, 0);
    add_random(w, "bad.svhdt", "svh", ST_F32, 1, (int64_t[]){128});
    add_layer(w, "bad.both", 8, 8, 64, 128, 128);
    add_scalar(w, "bad.both", "mcg", ST_I32, 0, EXL3_MCG_MULT);
    add_scalar(w, "bad.both", "mul1", ST_I32, 0, EXL3_MUL1_MULT);
    add_layer(w, "bad.mcgval", 8, 8, 64, 128, 128);
    add_scalar(w, "bad.mcgval", "mcg", ST_I32, 0, 0xCBAC1FEF);
    add_layer(w, "bad.mul1val", 8, 8, 64, 128, 128);
    add_scalar(w, "bad.mul1val", "mul1", ST_I32, 0, 1);
    add_layer(w, "bad.mcgshape", 8, 8, 64, 128, 128);
    add_scalar(w, "bad.mcgshape", "mcg", ST_I32, 1, EXL3_MCG_MULT);
    add_layer(w, "bad.mcgdt", 8, 8, 64, 128, 128);
    add_scalar(w, "bad.mcgdt", "mcg", ST_I64, 0, EXL3_MCG_MULT);
    add_layer(w, "bad.biaslen", 8, 24, 64, 128, 384);
    add_random(w, "bad.biaslen", "bias", ST_F16, 1, n256);
    add_layer(w, "bad.biasdt", 8, 8, 64, 128, 128);
    add_random(w, "bad.biasdt", "bias", ST_BF16, 1, (int64_t[]){128});
    add_layer(w, "bad.legacy", 8, 8, 64, 0, 0);
    add_random(w, "bad.legacy", "su", ST_I16, 1, (int64_t[]){8});
    add_random(w, "bad.legacy", "sv", ST_I16, 1, (int64_t[]){8});
    add_layer(w, "bad.scale", 8, 8, 64, 128, 128);
    add_random(w, "bad.scale", "scale", ST_F16, 0, NULL);
    /* an empty trellis with a huge first extent: 16 x 2^62 must not be formed */
    add_layer(w, "bad.huge", INT64_C(1) << 62, 0, 16, 128, 128);
    /* last: one odd-sized tensor shifts every later tensor to an odd address */
    add_random(w, "pad", "byte", ST_U8, 1, (int64_t[]){1});
    add_layer(w, "bad.align", 8, 8, 64, 128, 128);
    assert_ok(st_writer_close(w));
    assert_ok(st_open(dir, &set));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    st_close(set);
    scratch_cleanup();
    return 0;
}

static void check_ok(const char *prefix, int64_t k, int64_t n, int K, int cb, int bias)
{
    exl3_linear L;
    assert_ok(exl3_linear_get(set, prefix, &L));
    char name[256];
    snprintf(name, sizeof name, "%s.trellis", prefix);
    assert_string_equal(L.name, name);
    assert_int_equal(L.k, k);
    assert_int_equal(L.n, n);
    assert_int_equal(L.K, K);
    assert_int_equal(L.codebook, cb);
    assert_ptr_equal(L.trellis, st_get(set, name)->data);
    snprintf(name, sizeof name, "%s.suh", prefix);
    assert_ptr_equal(L.suh, st_get(set, name)->data);
    snprintf(name, sizeof name, "%s.svh", prefix);
    assert_ptr_equal(L.svh, st_get(set, name)->data);
    snprintf(name, sizeof name, "%s.bias", prefix);
    assert_ptr_equal(L.bias, bias ? st_get(set, name)->data : NULL);
    assert_int_equal(L.bias_is_f32, bias == 2);
    assert_int_equal(exl3_linear_is_present(set, prefix), 1);
}

static void test_well_formed(void **state)
{
    (void)state;
    check_ok("ok.cb0", 256, 384, 3, EXL3_CB_3INST, 0);
    check_ok("ok.cb1", 128, 256, 8, EXL3_CB_MCG, 1);
    check_ok("ok.cb2", 384, 128, 1, EXL3_CB_MUL1, 2);
    assert_int_equal(exl3_linear_is_present(set, "ok"), 0);
    assert_int_equal(exl3_linear_is_present(set, "ok.cb3"), 0);
    assert_int_equal(exl3_linear_is_present(set, "pad"), 0);
}

#define REJECT(prefix, ...)                                                                        \
    do {                                                                                           \
        exl3_linear L_;                                                                            \
        assert_int_equal(exl3_linear_is_present(set, prefix), 1);                                  \
        assert_fails_with(exl3_linear_get(set, prefix, &L_), "EXL3 linear '" prefix "'", __VA_ARGS__); \
        assert_null(L_.trellis);                                                                   \
    } while (0)

static void test_malformed(void **state)
{
    (void)state;
    REJECT("bad.notrellis", "'bad.notrellis.trellis' is missing");
    REJECT("bad.dtype", "'bad.dtype.trellis'", "expected I16", "found F16 [8, 8, 64]");
    REJECT("bad.ndim", "'bad.ndim.trellis'", "found I16 [8, 512]");
    REJECT("bad.last", "'bad.last.trellis'", "last dimension 40");
    REJECT("bad.k9", "'bad.k9.trellis'", "last dimension 144", "K in 1..8");
    REJECT("bad.k0", "'bad.k0.trellis'", "last dimension 0");
    REJECT("bad.kpad", "'bad.kpad.trellis'", "k = 64", "multiples of 128");
    REJECT("bad.npad", "'bad.npad.trellis'", "n = 192", "multiples of 128");
    REJECT("bad.suhlen", "'bad.suhlen.suh'", "shape [384], expected [256]", "implies k = 256");
    REJECT("bad.svhlen", "'bad.svhlen.svh'", "shape [384], expected [256]", "implies n = 256");
    REJECT("bad.nosuh", "'bad.nosuh.suh' is missing");
    REJECT("bad.svhdt", "'bad.svhdt.svh'", "dtype F32, expected F16");
    REJECT("bad.both", "'bad.both.mcg'", "'bad.both.mul1'", "both present");
    REJECT("bad.mcgval", "'bad.mcgval.mcg'", "0xCBAC1FEF", "locked multiplier 0xCBAC1FED");
    REJECT("bad.mul1val", "'bad.mul1val.mul1'", "0x00000001", "locked multiplier 0x83DCD12D");
    REJECT("bad.mcgshape", "'bad.mcgshape.mcg'", "I32 scalar", "found I32 [1]");
    REJECT("bad.mcgdt", "'bad.mcgdt.mcg'", "I32 scalar", "found I64 []");
    REJECT("bad.biaslen", "'bad.biaslen.bias'", "expected F16 or F32 [384]", "found F16 [256]");
    REJECT("bad.biasdt", "'bad.biasdt.bias'", "found BF16 [128]");
    REJECT("bad.legacy", ".su/.sv", "not supported");
    REJECT("bad.scale", "'bad.scale.scale'", "no longer used");
    REJECT("bad.huge", "'bad.huge.trellis'", "k = 16 x 4611686018427387904", "at most 2147483648");
    REJECT("bad.align", "'bad.align.trellis'", "not 2-byte aligned");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
