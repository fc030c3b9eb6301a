/* Host launcher of the sparse_attn family (kit/src/sparse_attn.cu; reference runtime/ref/sparse_attn.h):
 * per query row and head, attention with sink over the row's canonical list, described per row by a
 * sparse_attn_row (kit/src/sparse_attn_abi.cuh). The variant comes from the family's rule
 * (manifest/rules/rules.h), the kernel from the kit by family and parameters, never by file. */
#ifndef DSK_LAUNCH_SPARSE_ATTN_H
#define DSK_LAUNCH_SPARSE_ATTN_H

#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* One launch. Every pointer is a device address, 16-byte aligned; bf16 is stored as u16. */
typedef struct {
    CUdeviceptr q;       /* bf16 [rows][heads][head_dim]: the queries (RoPE'd, or not with q_rope) */
    CUdeviceptr kv_call; /* bf16 [.][head_dim]: this round's window keys (row = sparse_attn_row.call_row0 + ...) */
    CUdeviceptr kv_ring; /* bf16 [.][head_dim]: the window rings (row = ring_base + p % ring); 0 when no row reads it */
    CUdeviceptr kv2;     /* bf16 [.][head_dim]: the second segment's rows (compressed pool, or this round's keys) */
    CUdeviceptr sel;     /* i32 [rows][sel_ld]: each row's selection (indices from base2), or 0: rows base2 + j */
    CUdeviceptr rows_desc; /* sparse_attn_row [rows] */
    CUdeviceptr sink;    /* fp32 [heads] */
    CUdeviceptr freqs;   /* fp32 [rope_dim / 2]: θ′_j of the fused inverse RoPE (ref_rope_freqs), 0 when rope_dim 0 */
    CUdeviceptr out;     /* bf16 [rows][heads][head_dim] */
    CUdeviceptr ws;      /* workspace of the split form, op_sparse_attn_ws_bytes; may be 0 when it does not split */
    size_t ws_bytes;
    int rows, heads, head_dim; /* head_dim 128 or 512 (the kit's variants) */
    int ring;            /* ring slots */
    int sel_ld;          /* i32 per selection row (>= every row's nsel) */
    int rope_dim;        /* 0, or the even count of trailing dims the inverse RoPE rotates at the row's pos (<= 128) */
    int max_list;        /* the longest list any row may have (window + selected); the split form's grid */
    int q_rope;          /* q comes unrotated: its RoPE (the last rope_dim dims, a multiple of 8, at the row's pos,
                          * vec_glue's arithmetic) is applied as it is loaded; 0: q is RoPE'd already */
} sparse_attn_args;

/* Launch with the rule's form (split for few rows, manifest/rules/sparse_attn.c). */
int op_sparse_attn(const kit *k, CUstream s, const sparse_attn_args *a);
/* Workspace bytes the launch needs (0 when the rule does not split it). */
size_t op_sparse_attn_ws_bytes(const sparse_attn_args *a);
/* The form forced, for tests and benchmarks: split 0 walks each list in one CTA, 1 splits it per block
 * (two launches), -1 the rule's choice. The bits of every row are the same in both forms. */
int op_sparse_attn_form(const kit *k, CUstream s, const sparse_attn_args *a, int split);
size_t op_sparse_attn_ws_bytes_form(const sparse_attn_args *a, int split);

#endif
