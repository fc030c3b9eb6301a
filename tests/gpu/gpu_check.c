/* The check records shared by the GPU test program and the EXL3 emulator (tests/gpu/gpu_check.h). */
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

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
