/* Host launcher of the engram_gate family (kit/src/engram_gate.cu; reference runtime/ref/engram_gate.h):
 * after the Engram projection, every stream's gate and its in-place update by the shared value. The
 * variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_ENGRAM_GATE_H
#define DSK_LAUNCH_ENGRAM_GATE_H

#include "runtime/driver/kit.h"

/* In place on X bf16 [rows][hc][d] with kv bf16 [rows][(hc+1)·d] (a key per stream, then the value) and
 * w fp32 [hc][d] (q_weight ⊙ k_weight): X_c += g_c · value (ref_engram_gate). d a positive multiple of 8,
 * every pointer 16-byte aligned. */
int op_engram_gate(const kit *k, CUstream s, CUdeviceptr X, CUdeviceptr kv, CUdeviceptr w, int rows, int hc, int d,
                   float eps);

#endif
