/* Host launchers of the mhc family: mhc_mix, mhc_pre, mhc_post (kit/src/mhc_*.cu; reference
 * runtime/ref/mhc.h; the device layouts of docs/engine.md). Streams X are bf16 [rows][hc][d], sublayer
 * rows bf16 [rows][d], coefficient rows fp32 [rows][2·hc + hc·hc] (pre, post, comb; comb row i = source
 * stream). Every device pointer is 16-byte aligned, d is a multiple of 8. The variant comes from the
 * family's rule (manifest/rules/rules.h), the kernel from the kit by family and parameters. Each row's
 * bits are the same whatever other rows share the launch. */
#ifndef DSK_LAUNCH_MHC_H
#define DSK_LAUNCH_MHC_H

#include "kit/src/mhc_abi.cuh"
#include "runtime/driver/kit.h"
#include "runtime/launch/rows_copy.h"

#include <stddef.h>

/* The model's mHC constants (config: hc_mult, dim, hc_sinkhorn_iters, norm_eps, hc_eps). */
typedef struct {
    int hc;             /* streams, 1..4 */
    int d;              /* residual width, a multiple of 8 */
    int sinkhorn_iters; /* >= 1 */
    float norm_eps;     /* the mixes' RMS epsilon */
    float hc_eps;       /* pre's +eps and the Sinkhorn's epsilon */
} mhc_dims;

/* Workspace bytes op_mhc_mix needs for `rows` rows (it runs slabs of MHC_MIX_SLAB rows through it). */
size_t op_mhc_mix_ws_bytes(int rows, int hc, int d);
/* coef [rows][2hc + hc²] = hc_mixes of each row of x with the sublayer's fn fp32 [M][hc·d], base fp32 [M],
 * scale fp32 [3] (M = (2 + hc)·hc). One launch per slab of up to MHC_MIX_SLAB rows: chunk partials into
 * ws, folded (+ Sinkhorn) by the last CTA of each row block to arrive. counters: u32 [MHC_MIX_COUNTERS] of
 * device memory of its own, zero at rest (each launch leaves them zero; one stream at a time). */
int op_mhc_mix(const kit *k, CUstream s, const mhc_dims *m, CUdeviceptr x, CUdeviceptr fn, CUdeviceptr base,
               CUdeviceptr scale, CUdeviceptr coef, int rows, CUdeviceptr ws, size_t ws_bytes, CUdeviceptr counters);
/* One hc_pre's arguments (op_mhc_pre's, but the shape). */
typedef struct {
    CUdeviceptr x, w;
    int w_stride;
    CUdeviceptr norm_w;
    float eps;
    CUdeviceptr out, y_raw;
} mhc_pre_call;

/* op_mhc_mix and op_mhc_pre (same rows, hc and d) in one launch where the pre's rows take the mix's
 * MHC_MIX_THREADS threads (rule_mhc_pre_threads(d): the release's width), else as the two launches; the
 * same bits either way. The pre may not read the coefficients this mix writes (a sublayer's pre reads the
 * block's π or the attention's coefficients, never its own) nor write what the mix reads. */
int op_mhc_mix_pre(const kit *k, CUstream s, const mhc_dims *m, CUdeviceptr x, CUdeviceptr fn, CUdeviceptr base,
                   CUdeviceptr scale, CUdeviceptr coef, int rows, CUdeviceptr ws, size_t ws_bytes, CUdeviceptr counters,
                   const mhc_pre_call *pre);
/* y[r] = bf16(Σ_i w[r·w_stride + i]·x[r][i]) (w fp32: π with stride hc, or coefficient rows with stride
 * 2hc + hc²). norm_w == 0: out = y. Else out = RMSNorm(y, eps)·norm_w (bf16 [d] weight; d <= MHC_PRE_MAX_D)
 * and y_raw (when not 0) = y. out and y_raw [rows][d] must not overlap x or each other. */
int op_mhc_pre(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, int w_stride, CUdeviceptr norm_w, float eps,
               CUdeviceptr out, CUdeviceptr y_raw, int rows, int hc, int d);
/* xout[r][j] = bf16(post_j·y[r] + Σ_i comb_ij·x[r][i]) with post and comb from coef's rows; xout must not
 * overlap x, y or coef. */
int op_mhc_post(const kit *k, CUstream s, CUdeviceptr y, CUdeviceptr x, CUdeviceptr coef, CUdeviceptr xout, int rows,
                int hc, int d);
/* The same with y fp32 [rows][d] (a summed partial), each value rounded to bf16 first: the bits of
 * op_cast_bf16 into a bf16 y followed by op_mhc_post, in one launch. */
int op_mhc_post_f32(const kit *k, CUstream s, CUdeviceptr y, CUdeviceptr x, CUdeviceptr coef, CUdeviceptr xout,
                    int rows, int hc, int d);
/* Either of the two (y_f32) with a rows copy in the same launch, as extra CTAs: the bits of the post
 * followed by op_rows_copy_jobs(copy, 1). The copy must neither read what the post writes (xout) nor
 * write what it reads or writes (the launcher checks the copy's source rows against xout; its
 * destination rows, behind an index list, are the caller's to keep apart). copy NULL or of 0 rows: none. */
int op_mhc_post_copy(const kit *k, CUstream s, CUdeviceptr y, int y_f32, CUdeviceptr x, CUdeviceptr coef,
                     CUdeviceptr xout, int rows, int hc, int d, const rows_copy_job *copy);

#endif
