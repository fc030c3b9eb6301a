/* Host launchers of the dspark_conf family (kit/src/dspark_conf.cu; reference runtime/ref/dspark_conf.h):
 * the drafter's confidence logits and its Markov bigram bias (model.md §3.9). The bias itself is a
 * rowmm_bf16: bias[r][v] = Σ_k e[r][k] · markov_head[v][k], x = the rows' E_m[d_i] (gathered, [rows][R]),
 * W = markov_head.head [V][R] as the checkpoint stores it, K = R; the same terms in the same order as the
 * CPU's loop over the transposed head, within rowmm's tolerance (its warps split K). dspark_conf then adds
 * it to the logits with the CPU's one fp32 add. */
#ifndef DSK_LAUNCH_DSPARK_CONF_H
#define DSK_LAUNCH_DSPARK_CONF_H

#include "runtime/driver/kit.h"

#include <stdint.h>

/* Every device pointer 16-byte aligned; d and R multiples of 8. */
typedef struct {
    CUdeviceptr u;      /* bf16 [rows][ldu]: the draft rows' un-normed u_i (d wide) */
    int64_t ldu;
    int d;
    CUdeviceptr e;      /* bf16 [rows][lde]: each row's Markov embedding E_m[d_i] (R wide) */
    int64_t lde;
    int R;
    CUdeviceptr w;      /* bf16 [d + R]: confidence_head.proj */
    CUdeviceptr conf;   /* fp32 [rows] out */
    CUdeviceptr bias;   /* fp32 [rows][ldb]: the Markov bias (op_dspark_markov_bias), or 0: confidence only */
    int64_t ldb;
    CUdeviceptr logits; /* fp32 [rows][ldl]: += bias (with bias) */
    int64_t ldl;
    int V, rows;
} dspark_conf_args;

int op_dspark_conf(const kit *k, CUstream s, const dspark_conf_args *a);
/* bias fp32 [rows][V] = e [rows][R] (packed) · head [V][R]ᵀ: rowmm_bf16 (R % 32 == 0). */
int op_dspark_markov_bias(const kit *k, CUstream s, CUdeviceptr e, int rows, int R, CUdeviceptr head, int V,
                          CUdeviceptr bias);

#endif
