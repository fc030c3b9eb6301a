/* Which variant of a family a problem shape launches. The launchers (ops.c) and the needs list
 * (manifest/needs.c) both call these, so the kit a model needs is exactly the kit its launches use. */
#ifndef DSK_VARIANT_RULES_H
#define DSK_VARIANT_RULES_H

/* rmsnorm: threads per row for a width. */
int rule_rmsnorm_threads(int width);
/* topk: threads per row of the radix kernel for N entries. */
int rule_topk_threads(int N);
/* topk_small: elements per lane of the warp-per-row kernel (k <= 16, N <= 1024), 0 when the radix
 * kernel runs instead. */
int rule_topk_small_npl(int N, int k);
/* rowmm_bf16: the row bucket (1, 2, 4, 8, 16) of a launch of `rows` rows (<= 16 per launch). */
int rule_rowmm_bucket(int rows);

#endif
