#include "runtime/cpu/linear.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"

#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int n_threads = 1;

void linear_set_threads(int n)
{
    n_threads = n < 1 ? 1 : n > 64 ? 64 : n;
}

int linear_threads(void)
{
    return n_threads;
}

int linear_cache(cpu_linear *l, size_t *budget_bytes)
{
    size_t bytes = (size_t)l->q.k * (size_t)l->q.n * sizeof(uint16_t);
    if (l->hat || bytes > *budget_bytes)
        return 0;
    l->hat = dsk_malloc(bytes);
    if (!l->hat)
        return dsk_err_ctx("caching the decoded weight %s", l->q.name);
    exl3_reconstruct_hat(&l->q, l->hat);
    *budget_bytes -= bytes;
    return 0;
}

void linear_free(cpu_linear *l)
{
    free(l->hat);
    l->hat = NULL;
}

/* x' = fp16(Hadamard128(fp16(x · suh))) for m rows of the inputs [k0, k0 + k) (exl3.md §3 steps 1-2; the
 * Hadamard works per 128 inputs, so a 128-aligned input range transforms on its own). */
static void prepare_input(const exl3_linear *q, const uint16_t *x, int m, int64_t k0, int64_t k, float *xh)
{
    for (int r = 0; r < m; r++) {
        float *o = xh + r * k;
        for (int64_t u = 0; u < k; u++)
            o[u] = f16_round(bf16_to_f32(x[r * k + u]) * f16_to_f32(q->suh[k0 + u]));
        for (int64_t b = 0; b < k; b += 128) {
            exl3_hadamard128(o + b);
            for (int i = 0; i < 128; i++)
                o[b + i] = f16_round(o[b + i]);
        }
    }
}

/* Decode the tiles of columns [c0, c1) into hat (k × (c1 - c0)). */
static void decode_cols(const exl3_linear *q, int c0, int c1, uint16_t *hat)
{
    int64_t w = c1 - c0, tiles_n = q->n / 16;
    uint16_t tile[256];
    for (int64_t i = 0; i < q->k / 16; i++)
        for (int j = c0 / 16; j < c1 / 16; j++) {
            const uint16_t *words = q->trellis + (i * tiles_n + j) * 16 * q->K;
            exl3_decode_tile(words, q->K, q->codebook, tile);
            for (int r = 0; r < 16; r++)
                memcpy(hat + (i * 16 + r) * w + (j * 16 - c0), tile + r * 16, 16 * sizeof(uint16_t));
        }
}

/* acc[i] += x · w[i] for 128 fp16 weights: a multiply then an add, each rounded (no FMA), so the AVX2
 * and portable forms give the same bits. */
__attribute__((target("avx2,f16c"))) static void axpy128_f16c(float *acc, float x, const uint16_t *w)
{
    __m256 xv = _mm256_set1_ps(x);
    for (int i = 0; i < 128; i += 8) {
        __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(xv, wv)));
    }
}

static void axpy128_portable(float *acc, float x, const uint16_t *w)
{
    for (int i = 0; i < 128; i++)
        acc[i] += x * f16_to_f32(w[i]);
}

static void (*axpy128)(float *, float, const uint16_t *);
static pthread_once_t axpy_once = PTHREAD_ONCE_INIT;

/* F16C is CPUID leaf 1, ECX bit 29 (read directly: clang's __builtin_cpu_supports has no "f16c"). */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

static void pick_axpy(void)
{
    __builtin_cpu_init();
    axpy128 = __builtin_cpu_supports("avx2") && cpu_has_f16c() ? axpy128_f16c : axpy128_portable;
}

void linear_use_portable(int on)
{
    pthread_once(&axpy_once, pick_axpy);
    if (on)
        axpy128 = axpy128_portable;
    else
        pick_axpy();
}

typedef struct {
    const exl3_linear *q;
    const float *xh;     /* [m][k1 - k0] prepared input */
    int64_t k0, k1;      /* the input range: y' sums over u in [k0, k1) */
    const uint16_t *hat; /* W_hat columns (the codebook's exact fp16 values), row stride hat_stride, col 0 = hat_c0 */
    int64_t hat_stride;
    int hat_c0;
    int m, c0, c1;       /* columns this worker computes */
    int out_c0;          /* first column of y */
    int64_t y_stride;
    float *y;
} cols_job;

/* y' = x'·W_hat summed over u ascending, then Hadamard128 per block · svh (exl3.md §3 steps 3-5). Rows go
 * in groups of 8 so each weight row is loaded once per group; every output keeps its own u order. */
static void *cols_run(void *arg)
{
    const cols_job *j = arg;
    int64_t k = j->k1 - j->k0;
    int with_bias = j->q->bias && j->k0 == 0; /* a partial over a later input range carries no bias */
    float acc[8][128];
    for (int r0 = 0; r0 < j->m; r0 += 8) {
        int mr = j->m - r0 < 8 ? j->m - r0 : 8;
        for (int b = j->c0; b < j->c1; b += 128) {
            memset(acc, 0, sizeof acc);
            const uint16_t *w = j->hat + (b - j->hat_c0) + j->k0 * j->hat_stride;
            for (int64_t u = 0; u < k; u++) {
                const uint16_t *wu = w + u * j->hat_stride;
                for (int r = 0; r < mr; r++)
                    axpy128(acc[r], j->xh[(r0 + r) * k + u], wu);
            }
            for (int r = 0; r < mr; r++) {
                exl3_hadamard128(acc[r]);
                float *yr = j->y + (r0 + r) * j->y_stride + (b - j->out_c0);
                for (int i = 0; i < 128; i++) {
                    float v = acc[r][i] * f16_to_f32(j->q->svh[b + i]);
                    if (with_bias)
                        v += j->q->bias_is_f32 ? ((const float *)j->q->bias)[b + i]
                                               : f16_to_f32(((const uint16_t *)j->q->bias)[b + i]);
                    yr[i] = v;
                }
            }
        }
    }
    return NULL;
}

int linear_apply_range(const cpu_linear *l, const uint16_t *x, int m, int k0, int k1, int c0, int c1, float *y)
{
    const exl3_linear *q = &l->q;
    if (m <= 0 || c1 <= c0 || k1 <= k0)
        return 0;
    pthread_once(&axpy_once, pick_axpy);
    int64_t k = k1 - k0;
    float *xh = dsk_malloc(sizeof(float) * (size_t)m * (size_t)k);
    if (!xh)
        return dsk_err_ctx("applying %s", q->name);
    uint16_t *tmp = NULL;
    const uint16_t *hat = l->hat;
    int64_t stride = q->n;
    int hat_c0 = 0;
    if (!hat) {
        tmp = dsk_malloc(sizeof(uint16_t) * (size_t)q->k * (size_t)(c1 - c0));
        if (!tmp) {
            free(xh);
            return dsk_err_ctx("applying %s", q->name);
        }
        decode_cols(q, c0, c1, tmp);
        hat = tmp;
        stride = c1 - c0;
        hat_c0 = c0;
    }
    prepare_input(q, x, m, k0, k, xh);
    /* split the 128-column blocks between threads; every output is computed by one thread */
    int blocks = (c1 - c0) / 128;
    int nt = n_threads;
    if ((int64_t)m * k * (c1 - c0) < (1 << 20))
        nt = 1;
    if (nt > blocks)
        nt = blocks;
    cols_job jobs[64];
    pthread_t tids[64];
    int started[64] = {0};
    for (int t = 0; t < nt; t++) {
        jobs[t] = (cols_job){q, xh, k0, k1, hat, stride, hat_c0, m, c0 + (int)((int64_t)blocks * t / nt) * 128,
                             c0 + (int)((int64_t)blocks * (t + 1) / nt) * 128, c0, c1 - c0, y};
        if (t > 0)
            started[t] = pthread_create(&tids[t], NULL, cols_run, &jobs[t]) == 0;
    }
    cols_run(&jobs[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tids[t], NULL);
        else
            cols_run(&jobs[t]); /* no thread to be had: same work, same bits, on this one */
    }
    free(tmp);
    free(xh);
    return 0;
}

int linear_apply_cols(const cpu_linear *l, const uint16_t *x, int m, int c0, int c1, float *y)
{
    return linear_apply_range(l, x, m, 0, (int)l->q.k, c0, c1, y);
}

int linear_f32(const cpu_linear *l, const uint16_t *x, int m, float *y)
{
    return linear_apply_cols(l, x, m, 0, (int)l->q.n, y);
}

int linear_bf16(const cpu_linear *l, const uint16_t *x, int m, uint16_t *y)
{
    size_t n = (size_t)m * (size_t)l->q.n;
    float *t = dsk_malloc(sizeof(float) * (n ? n : 1));
    if (!t)
        return -1;
    int rc = linear_f32(l, x, m, t);
    for (size_t i = 0; rc == 0 && i < n; i++)
        y[i] = f32_to_bf16(t[i]);
    free(t);
    return rc;
}
