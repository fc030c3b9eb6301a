/* The GPU backend's weights: every tensor of the checkpoint's schema uploaded once, as stored (EXL3 as it
 * is on disk; norms stored as f32 rounded to bf16, as REF holds them), into one device arena sized and
 * checked against the free memory before anything is uploaded. A rank uploads only its part (model.md
 * §6, docs/ranks.md: gpu_split; tp = 1: the whole model). Internal to runtime/gpu. */
#ifndef DSK_GPU_WEIGHTS_H
#define DSK_GPU_WEIGHTS_H

#include "runtime/driver/cuda_api.h"
#include "runtime/launch/exl3.h"
#include "runtime/model/config.h"
#include "runtime/model/engram_layout.h"
#include "runtime/weights/safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* One block's device weights (a backbone layer or a DSpark stage). Widths as in runtime/cpu/cpu_model.h. */
typedef struct {
    CUdeviceptr attn_norm, ffn_norm, q_norm, kv_norm;   /* bf16 */
    exl3_dev_linear wq_a, wq_b, wkv, wo_b;
    exl3_dev_linear wo_a[EXL3_MAX_BLOCKS];               /* one linear per group: its columns of wo_a; their
                                                          * descriptors one array (op_exl3_blockdiag) */
    CUdeviceptr attn_sink;                               /* fp32 [H] */
    CUdeviceptr hc_fn[2], hc_base[2], hc_scale[2];       /* fp32: attn, ffn */
    int n_experts, n_active;     /* the model's (every rank routes over all of them) */
    int e0;                      /* the rank's routed experts: [e0, e0 + experts.nexp) */
    CUdeviceptr gate;                                    /* bf16 [E][d] */
    CUdeviceptr gate_bias;                               /* fp32 [E] */
    exl3_moe_experts experts;                            /* routed: W1, W3, W2 per expert */
    exl3_moe_experts shared;                             /* the shared expert (one) */
    /* kv source */
    exl3_dev_linear c_wkv, c_wgate, ix_wk;
    CUdeviceptr c_norm, ix_k_norm;
    /* index source */
    exl3_dev_linear ix_wq_b;
    CUdeviceptr ix_wproj;                                /* bf16 [index_n_heads][d] */
    /* Engram before this layer */
    exl3_dev_linear eg_wkv;
    CUdeviceptr eg_w;                                    /* fp32 [hc][d] q_weight ⊙ k_weight */
    CUdeviceptr eg_values, eg_scales;                    /* the table on the device (placement "device"), or 0 */
    CUdeviceptr gate_bias_vl;                            /* fp32 [E]: image positions' bias (backbone, with a tower) */
} gpu_block;

/* The vision tower (vision.md §4), as op_vision_mm takes it: bf16 as stored, the norms widened to fp32
 * exactly, the patch embedding's columns padded with zeros to K0 (a multiple of 32: the sums are unchanged)
 * and mlp.w1's gate and up rows interleaved (vision_mm_interleave). */
typedef struct {
    CUdeviceptr norm1, norm2;          /* fp32 [D] */
    CUdeviceptr wqkv, bqkv, wo, bo, w1, w2;
} gpu_vision_block;

typedef struct {
    int K0;                            /* the patch embedding's padded K (3p² rounded up to 32) */
    CUdeviceptr patch_w, patch_b, norm, al_w1, al_b1, al_w2, al_b2;
    CUdeviceptr delims;                /* bf16 [3][dim]: image_start, image_end, image_newline */
    gpu_vision_block *blocks;          /* [vision_n_layers]; NULL: a text-only model */
} gpu_vision_weights;

/* A rank's part of the model (docs/ranks.md): attention heads [h0, h1) with their wq_b columns and sinks,
 * wo_a groups [g0, g1) and their rows of wo_b, the head's vocabulary rows [v0, v1), and per block its
 * routed experts (gpu_block.e0). Everything else is replicated. tp = 1: all of it. */
typedef struct {
    int tp, rank;
    int h0, h1, g0, g1, v0, v1;
} gpu_split;

/* Rank `rank` of tp's part of cfg; an error names what does not split evenly (or not in 128s). */
int gpu_split_init(const model_config *cfg, int tp, int rank, gpu_split *out);

typedef struct {
    model_config cfg;
    gpu_split split;
    CUdeviceptr arena;
    size_t arena_bytes, used;
    CUdeviceptr embed;                 /* bf16 [V][d] */
    exl3_dev_linear head;              /* d -> V */
    CUdeviceptr norm;                  /* bf16 [d] */
    gpu_block *blocks;                 /* [n_all_layers] */
    /* host copies the round's host work needs (hashing): */
    engram_layout engram;
    int32_t *token_map;                /* [V] (owned) */
    /* DSpark extras */
    exl3_dev_linear main_proj;
    CUdeviceptr main_norm, mtp_norm, markov_embed, markov_head, confidence; /* bf16 */
    gpu_vision_weights vision;
} gpu_weights;

typedef struct {
    int engram_on_device;   /* upload the Engram tables (placement "device") */
    int progress;           /* a progress line on stderr (per GiB, and GiB/s at the end) */
    int tp, rank;           /* this rank's part (gpu_split); 0, 0: one rank */
} gpu_weights_opts;

/* The bytes the arena needs for cfg's schema in ckpt (what gpu_weights_load will allocate). */
int gpu_weights_bytes(const model_config *cfg, const st_set *ckpt, const gpu_weights_opts *o, size_t *bytes);
/* Upload every tensor and bind the blocks. Checks the free device memory first: a GPU that lacks it is a
 * refusal naming what is needed and what is free, before anything is allocated. The context must be
 * current. */
int gpu_weights_load(const model_config *cfg, const st_set *ckpt, const gpu_weights_opts *o, gpu_weights *w);
void gpu_weights_free(gpu_weights *w);

#endif
