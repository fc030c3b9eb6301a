/* The model's linears: EXL3 weights applied with exl3.md §3's rounding points, and where REF's GEMM
 * output is bf16, rounded to bf16. This is the one place that says how a linear is evaluated on the CPU
 * (docs/model.md "Linears"): REF's FP8 activation quantisation is not reproduced for EXL3 weights. */
#ifndef DSK_CPU_LINEAR_H
#define DSK_CPU_LINEAR_H

#include "runtime/ref/exl3.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    exl3_linear q;   /* the weight as stored (pointers into the mapping) */
    uint16_t *hat;   /* W_hat decoded once (k × n fp16: the codebook values, exact), or NULL: per call */
} cpu_linear;

/* Decode W_hat into l->hat if its size fits what is left of *budget_bytes (which is reduced). */
int linear_cache(cpu_linear *l, size_t *budget_bytes);
void linear_free(cpu_linear *l);

/* y[r][c - c0] = (x_r · W)[c] for columns c in [c0, c1) (multiples of 128), m rows of bf16 x (m × k),
 * fp32 out (row stride c1 - c0). Bit-identical to exl3_matmul on the same columns, for any m, any
 * column range and any thread count. */
int linear_apply_cols(const cpu_linear *l, const uint16_t *x, int m, int c0, int c1, float *y);
/* The partial over inputs [k0, k1) (multiples of 128; x is m × (k1 - k0)) of columns [c0, c1): a
 * tensor-parallel rank's share of a row-split linear (the bias only with k0 = 0). The ranks' partials
 * summed give the whole product up to the order of that sum. */
int linear_apply_range(const cpu_linear *l, const uint16_t *x, int m, int k0, int k1, int c0, int c1, float *y);
/* All columns, fp32 result (REF's fp32 GEMMs: ratio-2 compressor, head). */
int linear_f32(const cpu_linear *l, const uint16_t *x, int m, float *y);
/* All columns, rounded to bf16 (REF's bf16 GEMM outputs). */
int linear_bf16(const cpu_linear *l, const uint16_t *x, int m, uint16_t *y);

/* Worker threads used by the wide linears (1 = none); results never depend on it. */
void linear_set_threads(int n);
int linear_threads(void);
/* Use the portable inner loop even where AVX2/F16C exist (tests check both give the same bits). */
void linear_use_portable(int on);

#endif
