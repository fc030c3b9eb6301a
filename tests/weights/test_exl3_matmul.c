/* EXL3 Hadamard, reconstruction and matmul against float64 models on fresh random trellis, suh, svh,
 * bias and x at small shapes, plus the exact properties: the documented accumulation order reproduced
 * bit for bit, row invariance, and the cached path equal to the uncached one. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/ref/exl3.h"
#include "tests/weights/weights_test_util.h"

#include <math.h>
#include <stdlib.h>

static dsk_rng rng;

typedef struct {
    exl3_linear L;
    uint16_t *trellis, *suh, *svh, *bias16;
    float *bias32;
} layer;

/* A random layer: any trellis bits are a valid encoding (exl3.md §2.3); suh/svh are general fp16
 * scales (svh has some exact zeros, as for all-zero padding columns). bias: 0 none, 1 F16, 2 F32. */
static layer make_layer(int64_t k, int64_t n, int K, int cb, int bias)
{
    layer l = {0};
    size_t words = (size_t)(k / 16) * (size_t)(n / 16) * 16 * (size_t)K;
    l.trellis = malloc(words * 2);
    for (size_t i = 0; i < words; i++)
        l.trellis[i] = (uint16_t)dsk_rng_u64(&rng);
    l.suh = malloc((size_t)k * 2);
    l.svh = malloc((size_t)n * 2);
    for (int64_t i = 0; i < k; i++)
        l.suh[i] = f32_to_f16(0.05f * dsk_rng_normal(&rng));
    for (int64_t i = 0; i < n; i++)
        l.svh[i] = i % 37 == 5 ? 0 : f32_to_f16(dsk_rng_normal(&rng));
    l.L = (exl3_linear){.name = "test.trellis", .k = k, .n = n, .K = K, .codebook = cb,
                        .trellis = l.trellis, .suh = l.suh, .svh = l.svh};
    if (bias == 1) {
        l.bias16 = malloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++)
            l.bias16[i] = f32_to_f16(dsk_rng_normal(&rng));
        l.L.bias = l.bias16;
    } else if (bias == 2) {
        l.bias32 = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            l.bias32[i] = dsk_rng_normal(&rng);
        l.L.bias = l.bias32;
        l.L.bias_is_f32 = 1;
    }
    return l;
}

static void free_layer(layer *l)
{
    free(l->trellis);
    free(l->suh);
    free(l->svh);
    free(l->bias16);
    free(l->bias32);
}

/* Activations as the GPU would see them: bf16 values (so x·suh is exact in fp32). */
static float *make_x(int m, int64_t k, int bf16)
{
    float *x = malloc((size_t)m * (size_t)k * sizeof *x);
    for (size_t i = 0; i < (size_t)m * (size_t)k; i++) {
        float v = 3.0f * dsk_rng_normal(&rng);
        x[i] = bf16 ? bf16_round(v) : v;
    }
    return x;
}

/* Float64 Hadamard over consecutive 128-blocks of v[0], v[stride], ... (len elements). */
static void had64(double *v, size_t len, size_t stride)
{
    double t[128];
    for (size_t b = 0; b < len; b += 128) {
        for (int a = 0; a < 128; a++) {
            double s = 0;
            for (int u = 0; u < 128; u++)
                s += (__builtin_popcount(a & u) & 1 ? -1.0 : 1.0) * v[(b + (size_t)u) * stride];
            t[a] = s / sqrt(128.0);
        }
        for (int a = 0; a < 128; a++)
            v[(b + (size_t)a) * stride] = t[a];
    }
}

static double bias_at(const exl3_linear *L, int64_t b)
{
    if (!L->bias)
        return 0;
    return L->bias_is_f32 ? ((const float *)L->bias)[b] : f16_to_f32(((const uint16_t *)L->bias)[b]);
}

/* W = diag(suh)·H_k·W_hat·H_n·diag(svh) in float64. */
static double *model_w(const exl3_linear *L)
{
    size_t k = (size_t)L->k, n = (size_t)L->n;
    uint16_t *hat = malloc(k * n * 2);
    exl3_reconstruct_hat(L, hat);
    double *w = malloc(k * n * sizeof *w);
    for (size_t i = 0; i < k * n; i++)
        w[i] = f16_to_f32(hat[i]);
    free(hat);
    for (size_t a = 0; a < k; a++)
        had64(w + a * n, n, 1);
    for (size_t b = 0; b < n; b++)
        had64(w + b, k, n);
    for (size_t a = 0; a < k; a++)
        for (size_t b = 0; b < n; b++)
            w[a * n + b] *= (double)f16_to_f32(L->suh[a]) * f16_to_f32(L->svh[b]);
    return w;
}

static double rms(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s / (double)n);
}

static void test_hadamard(void **state)
{
    (void)state;
    const float c = 0.088388347648f;
    assert_true(c == (float)(1.0 / sqrt(128.0)));
    float v[128];
    /* columns of H: exact signs times the constant */
    for (int b = 0; b < 128; b++) {
        memset(v, 0, sizeof v);
        v[b] = 1.0f;
        exl3_hadamard128(v);
        for (int a = 0; a < 128; a++)
            assert_true(v[a] == (__builtin_popcount(a & b) & 1 ? -c : c));
    }
    /* random vectors against float64, and the transform is its own inverse */
    double worst = 0, worst_inv = 0;
    for (int t = 0; t < 50; t++) {
        double d[128];
        float orig[128];
        for (int a = 0; a < 128; a++)
            d[a] = orig[a] = v[a] = dsk_rng_normal(&rng);
        exl3_hadamard128(v);
        had64(d, 128, 1);
        for (int a = 0; a < 128; a++)
            worst = fmax(worst, fabs(v[a] - d[a]));
        exl3_hadamard128(v);
        for (int a = 0; a < 128; a++)
            worst_inv = fmax(worst_inv, fabs(v[a] - orig[a]));
    }
    assert_true(worst < 2e-6);     /* inputs ~N(0,1): fp32 rounding of 7 butterfly stages */
    assert_true(worst_inv < 4e-6);
}

/* W_hat places each tile's decode at rows 16i.., cols 16j..; the fp32 version has the same values. */
static void test_reconstruct_hat(void **state)
{
    (void)state;
    layer l = make_layer(256, 384, 5, EXL3_CB_MUL1, 0);
    size_t k = 256, n = 384;
    uint16_t *hat = malloc(k * n * 2), t[256];
    float *hatf = malloc(k * n * 4);
    exl3_reconstruct_hat(&l.L, hat);
    exl3_reconstruct_hat_f32(&l.L, hatf);
    for (size_t i = 0; i < k / 16; i++)
        for (size_t j = 0; j < n / 16; j++) {
            exl3_decode_tile(l.trellis + (i * (n / 16) + j) * 16 * 5, 5, EXL3_CB_MUL1, t);
            for (int r = 0; r < 16; r++)
                for (int cc = 0; cc < 16; cc++)
                    assert_int_equal(hat[(16 * i + (size_t)r) * n + 16 * j + (size_t)cc], t[r * 16 + cc]);
        }
    for (size_t i = 0; i < k * n; i++)
        assert_true(hatf[i] == f16_to_f32(hat[i]));
    free(hat);
    free(hatf);
    free_layer(&l);
}

static const struct {
    int64_t k, n;
    int K, cb, bias, m;
} shapes[] = {
    {128, 128, 1, EXL3_CB_3INST, 0, 1}, {384, 128, 2, EXL3_CB_MCG, 1, 3}, {128, 640, 3, EXL3_CB_MUL1, 2, 5},
    {256, 384, 4, EXL3_CB_3INST, 2, 3}, {384, 256, 5, EXL3_CB_MCG, 0, 1}, {128, 384, 6, EXL3_CB_MUL1, 1, 7},
    {640, 128, 7, EXL3_CB_MUL1, 0, 2},  {256, 256, 8, EXL3_CB_MCG, 2, 5},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* W in the original basis against float64: error relative to W's RMS. */
static void test_reconstruct(void **state)
{
    (void)state;
    double worst_rel = 0;
    for (int s = 0; s < N_SHAPES; s++) {
        layer l = make_layer(shapes[s].k, shapes[s].n, shapes[s].K, shapes[s].cb, 0);
        size_t kn = (size_t)shapes[s].k * (size_t)shapes[s].n;
        float *w = malloc(kn * 4);
        exl3_reconstruct(&l.L, w);
        double *w64 = model_w(&l.L), worst = 0;
        for (size_t i = 0; i < kn; i++)
            worst = fmax(worst, fabs(w[i] - w64[i]));
        double rel = worst / rms(w64, kn);
        if (rel > 1e-5)
            fail_msg("shape %d: max |W - W64| / rms(W64) = %.3g > 1e-5", s, rel);
        worst_rel = fmax(worst_rel, rel);
        free(w);
        free(w64);
        free_layer(&l);
    }
    print_message("reconstruct vs float64: max |W - W64| / rms(W64) = %.3g\n", worst_rel);
}

/* exl3_matmul equals its documented definition bit for bit: input transform, then for every output
 * an fp32 sum over u = 0..k-1 in ascending order starting from 0, then the output transform. The
 * cached path gives the same bits. */
static void test_matmul_definition(void **state)
{
    (void)state;
    for (int s = 0; s < N_SHAPES; s++) {
        const exl3_linear *L;
        layer l = make_layer(shapes[s].k, shapes[s].n, shapes[s].K, shapes[s].cb, shapes[s].bias);
        L = &l.L;
        size_t k = (size_t)L->k, n = (size_t)L->n;
        int m = shapes[s].m;
        float *x = make_x(m, L->k, 0), *xh = malloc((size_t)m * k * 4), *hat = malloc(k * n * 4);
        float *want = malloc((size_t)m * n * 4), *y = malloc((size_t)m * n * 4), *yc = malloc((size_t)m * n * 4);
        exl3_input_transform(L, x, m, xh);
        for (size_t i = 0; i < (size_t)m * k; i++)
            assert_true(xh[i] == f16_round(xh[i]));
        exl3_reconstruct_hat_f32(L, hat);
        for (int r = 0; r < m; r++)
            for (size_t b = 0; b < n; b++) {
                float acc = 0.0f;
                for (size_t u = 0; u < k; u++)
                    acc += xh[(size_t)r * k + u] * hat[u * n + b];
                want[(size_t)r * n + b] = acc;
            }
        exl3_output_transform(L, want, m);
        assert_ok(exl3_matmul(L, x, m, y));
        assert_ok(exl3_matmul_cached(L, hat, x, m, yc));
        if (memcmp(y, want, (size_t)m * n * 4) || memcmp(yc, want, (size_t)m * n * 4))
            fail_msg("shape %d: matmul differs from its sequential definition", s);
        free(x);
        free(xh);
        free(hat);
        free(want);
        free(y);
        free(yc);
        free_layer(&l);
    }
}

/* A row's result does not depend on how many rows are computed with it. */
static void test_row_invariance(void **state)
{
    (void)state;
    layer l = make_layer(384, 256, 4, EXL3_CB_MUL1, 1);
    int m = 9;
    float *x = make_x(m, 384, 1), *y = malloc((size_t)m * 256 * 4), y1[256];
    assert_ok(exl3_matmul(&l.L, x, m, y));
    for (int r = 0; r < m; r++) {
        assert_ok(exl3_matmul(&l.L, x + (size_t)r * 384, 1, y1));
        assert_memory_equal(y1, y + (size_t)r * 256, sizeof y1);
    }
    assert_ok(exl3_matmul(&l.L, x + 384, 4, y));
    assert_ok(exl3_matmul(&l.L, x + 3 * 384, 1, y1));
    assert_memory_equal(y1, y + 2 * 256, sizeof y1);
    assert_ok(exl3_matmul(&l.L, x, 0, y));
    free(x);
    free(y);
    free_layer(&l);
}

/* Against float64 models, errors relative to rms(y):
 * (A1) the input stage: x_had within one fp16 ulp of fp16(H·fp16(x·suh)) with H applied in float64
 *      (the fp32 butterflies can move a value across a rounding boundary), nearly always equal;
 * (A2) everything after it in float64 from the same x_had: the fp32 accumulation error only;
 * (B)  the exact product x·W + bias with no rounding at all: the fp16 rounding points' cost. */
static void test_matmul_vs_f64(void **state)
{
    (void)state;
    double worst_a2 = 0, worst_b = 0, worst_b_rms = 0;
    size_t x_total = 0, x_moved = 0;
    for (int s = 0; s < N_SHAPES; s++) {
        layer l = make_layer(shapes[s].k, shapes[s].n, shapes[s].K, shapes[s].cb, shapes[s].bias);
        const exl3_linear *L = &l.L;
        size_t k = (size_t)L->k, n = (size_t)L->n;
        int m = shapes[s].m;
        float *x = make_x(m, L->k, 1), *y = malloc((size_t)m * n * 4), *xh = malloc((size_t)m * k * 4);
        assert_ok(exl3_matmul(L, x, m, y));
        exl3_input_transform(L, x, m, xh);
        double *w64 = model_w(L), *ya = malloc((size_t)m * n * 8), *yb = malloc((size_t)m * n * 8);
        uint16_t *hat = malloc(k * n * 2);
        exl3_reconstruct_hat(L, hat);
        double *xs = malloc(k * 8);
        for (int r = 0; r < m; r++) {
            const float *xr = x + (size_t)r * k, *xhr = xh + (size_t)r * k;
            for (size_t u = 0; u < k; u++)
                xs[u] = f16_round((float)((double)xr[u] * f16_to_f32(L->suh[u])));
            had64(xs, k, 1);
            for (size_t u = 0; u < k; u++) {
                float want = f16_round((float)xs[u]);
                float ulp = fmaxf(fabsf(want), fabsf(xhr[u])) * 0x1p-10f;
                assert_true(fabsf(xhr[u] - want) <= fmaxf(ulp, 0x1p-24f));
                x_moved += xhr[u] != want;
                x_total++;
            }
            double *yar = ya + (size_t)r * n, *ybr = yb + (size_t)r * n;
            for (size_t b = 0; b < n; b++) {
                double sa = 0, sb = 0;
                for (size_t u = 0; u < k; u++) {
                    sa += (double)xhr[u] * f16_to_f32(hat[u * n + b]);
                    sb += (double)xr[u] * w64[u * n + b];
                }
                yar[b] = sa;
                ybr[b] = sb + bias_at(L, (int64_t)b);
            }
            had64(yar, n, 1);
            for (size_t b = 0; b < n; b++)
                yar[b] = yar[b] * f16_to_f32(L->svh[b]) + bias_at(L, (int64_t)b);
        }
        double ea = 0, eb = 0, sq = 0, scale = rms(yb, (size_t)m * n);
        for (size_t i = 0; i < (size_t)m * n; i++) {
            ea = fmax(ea, fabs(y[i] - ya[i]));
            eb = fmax(eb, fabs(y[i] - yb[i]));
            sq += (y[i] - yb[i]) * (y[i] - yb[i]);
        }
        worst_a2 = fmax(worst_a2, ea / scale);
        worst_b = fmax(worst_b, eb / scale);
        worst_b_rms = fmax(worst_b_rms, sqrt(sq / (double)((size_t)m * n)) / scale);
        free(x);
        free(xh);
        free(y);
        free(w64);
        free(ya);
        free(yb);
        free(hat);
        free(xs);
        free_layer(&l);
    }
    print_message("matmul vs float64: x_had off by one ulp in %zu of %zu; after x_had: max %.3g; "
                  "exact math: max %.3g, rms %.3g (errors / rms y)\n",
                  x_moved, x_total, worst_a2, worst_b, worst_b_rms);
    assert_true(x_moved * 50 < x_total);
    assert_true(worst_a2 < 1e-5);
    assert_true(worst_b < 1e-2);
    assert_true(worst_b_rms < 1e-3);
}

/* Through a checkpoint: written, recognized, and multiplied the same as the in-memory layer. */
static void test_through_checkpoint(void **state)
{
    (void)state;
    layer l = make_layer(256, 128, 3, EXL3_CB_MCG, 2);
    const char *dir = scratch_dir("exl3-matmul", 0);
    st_writer *w;
    assert_ok(st_writer_open(dir, 0, &w));
    int64_t ts[3] = {16, 8, 48}, ks[1] = {256}, ns[1] = {128};
    uint32_t mcg = EXL3_MCG_MULT;
    assert_ok(st_writer_add(w, "blk.0.wq.trellis", ST_I16, 3, ts, l.trellis, 16 * 8 * 48 * 2));
    assert_ok(st_writer_add(w, "blk.0.wq.suh", ST_F16, 1, ks, l.suh, 512));
    assert_ok(st_writer_add(w, "blk.0.wq.svh", ST_F16, 1, ns, l.svh, 256));
    assert_ok(st_writer_add(w, "blk.0.wq.mcg", ST_I32, 0, NULL, &mcg, 4));
    assert_ok(st_writer_add(w, "blk.0.wq.bias", ST_F32, 1, ns, l.bias32, 512));
    assert_ok(st_writer_close(w));
    st_set *s;
    assert_ok(st_open(dir, &s));
    exl3_linear L;
    assert_ok(exl3_linear_get(s, "blk.0.wq", &L));
    float *x = make_x(2, 256, 1), y[256], y2[256];
    assert_ok(exl3_matmul(&L, x, 2, y));
    assert_ok(exl3_matmul(&l.L, x, 2, y2));
    assert_memory_equal(y, y2, sizeof y);
    st_close(s);
    free(x);
    free_layer(&l);
    scratch_cleanup();
}

int main(void)
{
    dsk_rng_seed(&rng, 0x3a7);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hadamard),          cmocka_unit_test(test_reconstruct_hat),
        cmocka_unit_test(test_reconstruct),       cmocka_unit_test(test_matmul_definition),
        cmocka_unit_test(test_row_invariance),    cmocka_unit_test(test_matmul_vs_f64),
        cmocka_unit_test(test_through_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
