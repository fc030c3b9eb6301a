/* The GPU test program's check records (tests/gpu/gpu_check.h). */
#include "tests/gpu/gpu_check.h"

#include "runtime/common/numerics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double rel_l2_bf16(const uint16_t *a, const uint16_t *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

void check(gpu_ctx *c, int ok, const char *family, const char *shape, const char *fmt, ...)
{
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%-4s %-12s %-36s %s\n", ok ? "PASS" : "FAIL", family, shape, detail);
    fflush(stdout);
    c->checks++;
    c->failures += !ok;
}

dsk_rng fresh_rng(uint64_t salt)
{
    dsk_rng r;
    dsk_rng_seed(&r, (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32) ^ salt);
    return r;
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "gpu_tests: out of memory\n");
        exit(2);
    }
    return p;
}

void fill_bf16(dsk_rng *r, uint16_t *x, int rows, int cols, float scale)
{
    for (int i = 0; i < rows; i++) {
        float s = scale * powf(10.0f, 2.0f * dsk_rng_f32(r) - 1.0f);
        for (int j = 0; j < cols; j++)
            x[(size_t)i * cols + j] = f32_to_bf16(s * dsk_rng_normal(r));
    }
}
