/* Host launcher of the moe_route family (kit/src/moe_route.cu; reference runtime/ref/moe_route.h): the
 * routed experts of each row and their weights, laid out as op_exl3_moe reads them (runtime/launch/exl3.h).
 * The variant comes from the family's rule (manifest/rules/rules.h). */
#ifndef DSK_LAUNCH_MOE_ROUTE_H
#define DSK_LAUNCH_MOE_ROUTE_H

#include "runtime/driver/kit.h"

#include <stdint.h>

/* From the gate logits fp32 [rows][ld] (rowmm_bf16's router output) and the bias fp32 [E]: ids i32
 * [rows][topk] (ascending) and weights fp32 [rows][topk]; scores_out (fp32 [rows][E], or 0) receives the
 * sqrtsoftplus scores (tests: the selection equals the reference's given these). E <= 384, topk <= 16.
 * Every pointer 4-byte aligned (the kernel reads and writes single words: a launch may start at any row). */
int op_moe_route(const kit *k, CUstream s, CUdeviceptr logits, int64_t ld, CUdeviceptr bias, int rows, int E,
                 int topk, float route_scale, CUdeviceptr ids, CUdeviceptr weights, CUdeviceptr scores_out);

#endif
