/* Host launchers of the EXL3 kernel families (docs/exl3-kernels.md): the decode/grouped/prompt matmul,
 * the fused MoE, and reconstruction. Every device pointer is 16-byte aligned (MoE routing arrays: 4-byte);
 * row strides are in
 * elements and multiples of 8. Inputs are bf16 activation rows; the matmul writes fp32 (partials for
 * tensor-parallel sums) or bf16 (where the model rounds). A launch never depends on which rows share it:
 * each row's output bits are the same for every row count and every form (row invariance). */
#ifndef DSK_LAUNCH_EXL3_H
#define DSK_LAUNCH_EXL3_H

#include "kit/src/exl3_abi.cuh"
#include "runtime/driver/kit.h"
#include "manifest/rules/rules.h"

#include <stddef.h>

enum { EXL3_OUT_F32 = 0, EXL3_OUT_BF16 = 1 };

/* One EXL3 linear on the device. */
typedef struct {
    int k, n;                       /* in and out features, multiples of 128 */
    int K, codebook;                /* 1..8 bits per weight; 0 3INST, 1 MCG, 2 MUL1 */
    int qb, groups;                 /* the canonical k split (rule_exl3_split) */
    CUdeviceptr trellis;            /* u16 [k/16][n/16][16·K] */
    CUdeviceptr suh, svh;           /* fp16 [k], fp16 [n] */
    CUdeviceptr bias;               /* fp32 [n] or 0 */
    CUdeviceptr desc;               /* its exl3_desc (64 bytes) in device memory */
} exl3_dev_linear;

/* Check and fill *L; then, when desc != 0, write its descriptor there (64 bytes of device memory,
 * 16-byte aligned) and wait for the copy (cuCtxSynchronize: setup time only). Errors name the field and
 * what is wrong. */
int exl3_dev_linear_init(exl3_dev_linear *L, int k, int n, int K, int codebook, CUdeviceptr trellis, CUdeviceptr suh,
                         CUdeviceptr svh, CUdeviceptr bias, CUdeviceptr desc);
void exl3_desc_fill(const exl3_dev_linear *L, exl3_desc *d);

/* The experts of one MoE layer (or one shared expert): a device table exl3_desc [nexp][3] = W1, W3, W2.
 * W1, W3: k -> n (the intermediate width); W2: n -> k. All experts share shapes, K per role and codebook. */
typedef struct {
    int nexp;
    int k, n;
    int K_up, K_down, codebook;
    int groups_up, groups_down;
    CUdeviceptr table;
} exl3_moe_experts;

/* Check the experts (w1[e], w3[e], w2[e] for e < nexp) and upload their descriptors to table
 * (nexp·192 bytes of device memory). */
int exl3_moe_experts_init(exl3_moe_experts *E, const exl3_dev_linear *w1, const exl3_dev_linear *w3,
                          const exl3_dev_linear *w2, int nexp, CUdeviceptr table);

/* Scratch of the launchers: arrival counters (zero at rest; each launch leaves them zero) followed by
 * partial sums, transformed inputs and MoE intermediates. One workspace per stream. */
typedef struct {
    CUdeviceptr ptr;
    size_t bytes; /* counters included */
    int sms;      /* the GPU's multiprocessors (the launchers' split rule) */
} exl3_workspace;

#define EXL3_WS_COUNTER_BYTES ((size_t)4 << 20)

int exl3_workspace_alloc(exl3_workspace *ws, const dsk_gpu *g, size_t bytes);
void exl3_workspace_free(exl3_workspace *ws);

/* How a matmul launch runs (the needs rule). bucket: rows per tile (8, 16, 32, 64); xf: x' computed
 * by exl3_had first (else inside the matmul); fold: every CTA covers all k groups (else one group per
 * CTA plus a fold by the last one). */
typedef struct {
    int bucket, xf, fold;
} exl3_mm_plan;

/* The plan the launchers use (bucket and pre-transform from variant_rules.h): rows <= 64 split over k
 * groups; more rows fold unless that leaves too few CTAs for `sms` multiprocessors. */
exl3_mm_plan exl3_plan_matmul(const exl3_dev_linear *const *L, int nmat, int rows, int sms);
/* Options that force a plan (tests and benchmarks; results are the same bits either way). -1 = auto. */
typedef struct {
    int bucket, xf, fold;
} exl3_force;
#define EXL3_AUTO ((exl3_force){-1, -1, -1})

/* Workspace bytes (counters included) a grouped matmul of `rows` rows and a MoE call need. */
size_t exl3_ws_bytes_matmul(const exl3_dev_linear *const *L, int nmat, int rows);
size_t exl3_ws_bytes_moe(const exl3_moe_experts *E, int rows, int topk);

/* y[rows, n] = x[rows, k]·W (+ bias): x bf16, y fp32 or bf16 (out_kind). */
int op_exl3_matmul(const kit *k, CUstream s, const exl3_dev_linear *L, CUdeviceptr x, int ldx, int rows,
                   CUdeviceptr y, int ldy, int out_kind, const exl3_workspace *ws);
/* 1..4 matrices sharing x (same k, K and codebook) in one launch; matrix m writes columns
 * [Σ_{j<m} n_j, Σ_{j<=m} n_j) of y. The same bits as one op_exl3_matmul per matrix. */
int op_exl3_grouped(const kit *k, CUstream s, const exl3_dev_linear *const *L, int nmat, CUdeviceptr x, int ldx,
                    int rows, CUdeviceptr y, int ldy, int out_kind, const exl3_workspace *ws, exl3_force force);

/* Block-diagonal (grouped wo_a): 1..EXL3_MAX_BLOCKS matrices of one shape (k, n, K, codebook), matrix m
 * on x's columns [m·k, (m+1)·k) writing y's columns [m·n, (m+1)·n); their descriptors one array in device
 * memory (L[m]->desc == L[0]->desc + m·64). The same bits as one op_exl3_matmul per matrix. */
int op_exl3_blockdiag(const kit *k, CUstream s, const exl3_dev_linear *const *L, int nmat, CUdeviceptr x, int ldx,
                      int rows, CUdeviceptr y, int ldy, int out_kind, const exl3_workspace *ws, exl3_force force);

/* MoE (model.md §3.7) for `rows` rows of x (bf16, row stride ldx, width E->k):
 *   route != 0: route[r·topk + s] (int32) is the expert id of row r's slot s, weights[r·topk + s] (fp32)
 *     its routing weight; ids in [e_lo, e_lo + nexp) are this table's experts, others are skipped;
 *   route == 0: every row uses expert 0 with weight 1 (the shared expert).
 * Per row and expert: g = bf16(W1 x), u = bf16(W3 x), h = bf16(w·(silu(min(g,10))·clamp(u,-10,10))),
 * o = bf16(W2 h); y[r] (fp32, row stride ldy, width k) = Σ o over the row's experts in ascending id,
 * or y[r] + that sum with accumulate. Rows with no local expert get 0 (or stay with accumulate). */
int op_exl3_moe(const kit *k, CUstream s, const exl3_moe_experts *E, CUdeviceptr x, int ldx, int rows,
                CUdeviceptr route, CUdeviceptr weights, int topk, int e_lo, CUdeviceptr y, int ldy, int accumulate,
                const exl3_workspace *ws, exl3_force force);

/* The router op_exl3_moe_route runs in the plan's launch: gate logits fp32 [rows] with row stride ld
 * (n_experts of them), bias fp32 [n_experts], route_scale: moe_route's rule (runtime/launch/moe_route.h). */
typedef struct {
    CUdeviceptr logits;
    int64_t ld;
    CUdeviceptr bias;
    int n_experts;
    float route_scale;
} exl3_router;

/* op_exl3_moe with the rows routed inside the plan's launch (1..RULE_ROUTE_PLAN_ROWS rows): route and
 * weights (int32 / fp32 [rows][topk]) are written there, the bits op_moe_route writes, then used as
 * op_exl3_moe uses them; one launch fewer. */
int op_exl3_moe_route(const kit *k, CUstream s, const exl3_moe_experts *E, CUdeviceptr x, int ldx, int rows,
                      const exl3_router *rt, CUdeviceptr route, CUdeviceptr weights, int topk, int e_lo, CUdeviceptr y,
                      int ldy, int accumulate, const exl3_workspace *ws, exl3_force force);

/* One launch of op_exl3_moe for a dense expert (no routing: every row through E's one expert), so
 * that the two may go on different streams: EXL3_MOE_UP (gate and up into ws), then EXL3_MOE_DOWN
 * (down from ws into y), both with the same arguments and ws, the down after the up. The bits of
 * op_exl3_moe with route 0; ws is the pair's alone from the up until the down has run. */
enum { EXL3_MOE_UP = 1, EXL3_MOE_DOWN = 2 };
int op_exl3_moe_phase(const kit *k, CUstream s, const exl3_moe_experts *E, CUdeviceptr x, int ldx, int rows,
                      CUdeviceptr y, int ldy, int accumulate, const exl3_workspace *ws, exl3_force force, int phase);

/* W_hat (k × n fp16, bit-exact decode) or, with original_basis, W = diag(suh)·H·W_hat·H·diag(svh) as
 * k × n fp32, row-major (in, out). */
int op_exl3_reconstruct(const kit *k, CUstream s, const exl3_dev_linear *L, CUdeviceptr out, int original_basis);

#endif
