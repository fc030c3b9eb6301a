/* CPU references of the small kernel families (model.md §2, §3.5): RMSNorm, RoPE with YaRN tables,
 * the bf16 row matmul and top-k. The GPU kernels of kit/src are tested against these, and the CPU
 * model calls them, so one definition serves both. */
#ifndef DSK_REF_OPS_H
#define DSK_REF_OPS_H

#include <stdint.h>

/* RMSNorm (model.md §2): y = bf16(w * (x * (mean(x^2) + eps)^-1/2)) per row; x, w, y bf16, fp32 math.
 * The sum of squares runs in index order. x and y may alias. */
void ref_rmsnorm_bf16(const uint16_t *x, const uint16_t *w, uint16_t *y, int rows, int width, float eps);

/* RoPE frequency parameters: base, rotated dims, and YaRN (factor 0 or original_seq_len 0 = no YaRN). */
typedef struct {
    int rope_dim;             /* R: rotated dims at the end of each vector (even) */
    double base;              /* rope_theta or compress_rope_theta */
    double factor;            /* YaRN rope_factor (16) */
    double beta_fast;         /* 32 */
    double beta_slow;         /* 1 */
    int64_t original_seq_len; /* 65536; 0 disables YaRN */
} rope_params;

/* YaRN correction range: low = max(floor(d(beta_fast)), 0), high = min(ceil(d(beta_slow)), R-1). */
void ref_rope_yarn_range(const rope_params *p, int *low, int *high);
/* Per-pair frequencies theta'_j (j < R/2) computed in fp32 in REF's order (model.md §3.5). */
void ref_rope_freqs(const rope_params *p, float *freqs);
/* Table of (cos, sin) for positions pos0 .. pos0+n_pos-1: entry [(p-pos0)*(R/2) + j] holds the pair for
 * the fp32 angle fp32(p) * theta'_j; cos and sin are taken in double of that fp32 angle and rounded. */
void ref_rope_table(const rope_params *p, int64_t pos0, int64_t n_pos, float *cos_sin);
/* Rotate the last R dims of every head vector in place: x [rows, heads, head_dim] bf16, interleaved
 * pairs (2j, 2j+1); row r uses table row pos[r] (relative to the table's pos0). inverse != 0 rotates by
 * the conjugate angle. Products and sums in fp32, result rounded to bf16. */
void ref_rope_apply_bf16(uint16_t *x, int rows, int heads, int head_dim, int rope_dim, const int32_t *pos,
                         const float *cos_sin, int inverse);

/* Row matmul: y[r][n] = sum_k x[r][k] * w[n][k] in fp32, k ascending; x [rows, K], w [N, K] bf16. */
void ref_rowmm_bf16(const uint16_t *x, const uint16_t *w, float *y, int rows, int K, int N);

/* Top-k of one row: the k entries with the largest key = score[i] (+ bias[i] when bias is not NULL),
 * ties going to the lower index, NaN keys below everything. Output: the chosen indices in ascending
 * index order and their unbiased scores. k <= N. */
void ref_topk(const float *score, const float *bias, int N, int k, int32_t *idx, float *val);

#endif
