/* EXL3 reference numerics (exl3.md §2.6, §3): the 128-point Hadamard, W_hat and W reconstruction, and
 * y = x·W with the GPU path's rounding points. Single-threaded; written so the compiler vectorizes
 * the inner loops without changing any element's order of operations. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/ref/exl3.h"

#include <stdlib.h>
#include <string.h>

/* 1/sqrt(128) as the kernels write it (0.088388347648); fp32 rounds it to the same value. */
static const float had_scale = 0.088388347648f;

void exl3_hadamard128(float *v)
{
    for (int h = 1; h < 128; h <<= 1)
        for (int b = 0; b < 128; b += 2 * h)
            for (int a = b; a < b + h; a++) {
                float x = v[a], y = v[a + h];
                v[a] = x + y;
                v[a + h] = x - y;
            }
    for (int a = 0; a < 128; a++)
        v[a] *= had_scale;
}

static const uint16_t *tile_words(const exl3_linear *L, int64_t i, int64_t j)
{
    return L->trellis + ((size_t)i * (size_t)(L->n / 16) + (size_t)j) * 16 * (size_t)L->K;
}

void exl3_reconstruct_hat(const exl3_linear *L, uint16_t *w_hat)
{
    uint16_t t[256];
    for (int64_t i = 0; i < L->k / 16; i++)
        for (int64_t j = 0; j < L->n / 16; j++) {
            exl3_decode_tile(tile_words(L, i, j), L->K, L->codebook, t);
            for (int r = 0; r < 16; r++)
                memcpy(w_hat + (size_t)(16 * i + r) * (size_t)L->n + 16 * j, t + 16 * r, 32);
        }
}

void exl3_reconstruct_hat_f32(const exl3_linear *L, float *w_hat)
{
    const float *lut = exl3_codebook_lut_f32(L->codebook);
    float t[256];
    for (int64_t i = 0; i < L->k / 16; i++)
        for (int64_t j = 0; j < L->n / 16; j++) {
            exl3_decode_tile_f32(tile_words(L, i, j), L->K, lut, t);
            for (int r = 0; r < 16; r++)
                memcpy(w_hat + (size_t)(16 * i + r) * (size_t)L->n + 16 * j, t + 16 * r, 64);
        }
}

/* Hadamard128 down the columns of a 128-row slab (row stride n): the same butterflies, in the same
 * order, as exl3_hadamard128 applied to each column, done a row pair at a time. */
static void hadamard128_columns(float *slab, size_t n)
{
    for (int h = 1; h < 128; h <<= 1)
        for (int b = 0; b < 128; b += 2 * h)
            for (int a = b; a < b + h; a++) {
                float *ra = slab + (size_t)a * n, *rb = slab + (size_t)(a + h) * n;
                for (size_t c = 0; c < n; c++) {
                    float x = ra[c], y = rb[c];
                    ra[c] = x + y;
                    rb[c] = x - y;
                }
            }
    for (size_t i = 0; i < 128 * n; i++)
        slab[i] *= had_scale;
}

void exl3_reconstruct(const exl3_linear *L, float *w)
{
    size_t k = (size_t)L->k, n = (size_t)L->n;
    exl3_reconstruct_hat_f32(L, w);
    for (size_t a = 0; a < k; a++)
        for (size_t b = 0; b < n; b += 128)
            exl3_hadamard128(w + a * n + b);
    for (size_t a = 0; a < k; a += 128)
        hadamard128_columns(w + a * n, n);
    for (size_t a = 0; a < k; a++) {
        float s = f16_to_f32(L->suh[a]);
        float *row = w + a * n;
        for (size_t b = 0; b < n; b++)
            row[b] = (row[b] * s) * f16_to_f32(L->svh[b]);
    }
}

void exl3_input_transform(const exl3_linear *L, const float *x, int m, float *x_had)
{
    size_t k = (size_t)L->k;
    for (int r = 0; r < m; r++) {
        const float *xr = x + (size_t)r * k;
        float *o = x_had + (size_t)r * k;
        for (size_t u = 0; u < k; u++)
            o[u] = f16_round(xr[u] * f16_to_f32(L->suh[u]));
        for (size_t u = 0; u < k; u += 128) {
            exl3_hadamard128(o + u);
            for (int i = 0; i < 128; i++)
                o[u + i] = f16_round(o[u + i]);
        }
    }
}

void exl3_output_transform(const exl3_linear *L, float *y, int m)
{
    size_t n = (size_t)L->n;
    for (int r = 0; r < m; r++) {
        float *yr = y + (size_t)r * n;
        for (size_t b = 0; b < n; b += 128)
            exl3_hadamard128(yr + b);
        for (size_t b = 0; b < n; b++) {
            float v = yr[b] * f16_to_f32(L->svh[b]);
            if (L->bias)
                v += L->bias_is_f32 ? ((const float *)L->bias)[b] : f16_to_f32(((const uint16_t *)L->bias)[b]);
            yr[b] = v;
        }
    }
}

/* acc[c] += x[r] · w[r][c] for the tile's 16 rows r in ascending order (products of two fp16 values
 * are exact in fp32, so only the sums round, one per term, in the documented order). */
static inline void tile_fma(const float *x, const float *w, size_t stride, float *y)
{
    float acc[16];
    memcpy(acc, y, sizeof acc);
    for (int r = 0; r < 16; r++) {
        float a = x[r];
        const float *wr = w + (size_t)r * stride;
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            acc[c] += a * wr[c];
    }
    memcpy(y, acc, sizeof acc);
}

/* y' = x_had · W_hat: output column block j (16 wide) at a time, every tile of it decoded once (or
 * read from w_hat when given) and applied to all m rows; per output, terms in ascending u. */
static void product(const exl3_linear *L, const float *w_hat, const float *x_had, int m, float *y)
{
    size_t k = (size_t)L->k, n = (size_t)L->n;
    const float *lut = exl3_codebook_lut_f32(L->codebook);
    float t[256];
    for (size_t j = 0; j < n / 16; j++) {
        for (int r = 0; r < m; r++)
            memset(y + (size_t)r * n + 16 * j, 0, 64);
        for (size_t i = 0; i < k / 16; i++) {
            const float *w = t;
            size_t stride = 16;
            if (w_hat) {
                w = w_hat + 16 * i * n + 16 * j;
                stride = n;
            } else {
                exl3_decode_tile_f32(tile_words(L, (int64_t)i, (int64_t)j), L->K, lut, t);
            }
            for (int r = 0; r < m; r++)
                tile_fma(x_had + (size_t)r * k + 16 * i, w, stride, y + (size_t)r * n + 16 * j);
        }
    }
}

static int matmul(const exl3_linear *L, const float *w_hat, const float *x, int m, float *y)
{
    if (m <= 0)
        return 0;
    float *x_had = dsk_malloc((size_t)m * (size_t)L->k * sizeof *x_had);
    if (!x_had)
        return dsk_err_ctx("EXL3 matmul %s, %d rows", L->name, m);
    exl3_input_transform(L, x, m, x_had);
    product(L, w_hat, x_had, m, y);
    exl3_output_transform(L, y, m);
    free(x_had);
    return 0;
}

int exl3_matmul(const exl3_linear *L, const float *x, int m, float *y)
{
    return matmul(L, NULL, x, m, y);
}

int exl3_matmul_cached(const exl3_linear *L, const float *w_hat, const float *x, int m, float *y)
{
    return matmul(L, w_hat, x, m, y);
}
