/* The GPU backend's insides (docs/engine.md): device state of every sequence, the round's plan, the
 * scratch buffers of a round, and the launches of one round. Internal to runtime/gpu. */
#ifndef DSK_GPU_ENGINE_H
#define DSK_GPU_ENGINE_H

#include "runtime/driver/kit.h"
#include "runtime/engine/backend.h"
#include "runtime/engram/engram_store.h"
#include "runtime/gpu/gpu_weights.h"
#include "runtime/gpu/gpu_xchg.h"
#include "runtime/launch/exl3.h"
#include "runtime/launch/xchg.h"
#include "runtime/model/rope.h"

#include <stddef.h>
#include <stdint.h>

/* One sequence's host-side state; its device state is at fixed places (its slot) and its range of the
 * compressed-row pools [base, base + reserve) (positions; a ratio-r source's rows are positions / r). */
typedef struct {
    int open;
    unsigned flags;
    int64_t reserve, base;
    int64_t len;          /* committed (the engine's) */
    int32_t *tokens;      /* [reserve] token ids (Engram's history) */
    int32_t *cids;        /* [reserve] their Engram compressed ids */
    /* DSpark (a sequence opened with ENGINE_SEQ_DRAFT): positions [0, draft_len) are in its main-KV rings;
     * the last round's rows of the sequence (round rows row0.., positions pos0..) hold its taps, fed to
     * the rings when the sequence commits them */
    int64_t draft_len, taps_pos0;
    int taps_row0, taps_n;
    /* image spans (engine_seq_image): positions [pos, pos + n) take the device rows [n][dim] bf16 as input */
    struct gpu_span {
        int64_t pos, n;
        CUdeviceptr rows;
    } *spans;
    int n_spans;
} gpu_seq;

/* A round's plan: everything a round's kernels read per row, in one host buffer copied in one go into a
 * device buffer of the same layout. Offsets in bytes from the start of either. */
typedef struct {
    size_t tokens, pos, rope_pos;            /* i32 [R]: token, position, position for RoPE */
    size_t attn[3];                          /* sparse_attn_row [R] per ratio 0, 1, 2 */
    size_t key_base[3], reach[3];            /* i32 [R] per ratio: index-key pool row of the sequence, reach */
    size_t ring_dst;                         /* i32 [R]: ring row of the row's key, or -1 */
    size_t state_dst;                        /* i32 [R]: ratio-2 state row of the row's a_t, s_t, or -1 */
    size_t emit_src[3], emit_dst[3], emit_pos[3]; /* i32 [R] per ratio: the round row a latent comes from (r1),
                                              * its pool row (-1: none), its position j·r */
    size_t pool2;                            /* i32 [R][2]: ratio-2 pooling entries */
    size_t sample_src;                       /* i32 [R]: round rows of the sampling rows */
    size_t engram;                           /* the Engram records (or table rows) of every Engram layer */
    size_t bytes;
} gpu_plan_layout;

typedef struct gpu_backend gpu_backend;

enum { GPU_MAX_GRAPHS = 64, GPU_GRAPH_MAX_ROWS = 64, GPU_MAX_DRAFT_GRAPHS = 32, GPU_SIDE_MAX_ROWS = 64 };

struct gpu_backend {
    dsk_gpu g;
    kit *k;
    CUstream s;
    gpu_weights w;
    const model_config *cfg;
    const uint32_t *valid;         /* host: the tokenizer's ids */
    CUdeviceptr valid_dev;
    rank_xchg *xchg;
    engram_store *eg;
    engram_source eg_src;
    int eg_timeout_ms;             /* a round waits at most this long for a layer's rows */
    /* the round's Engram fetch, open from the plan until its last layer's rows are in (gpu_round.c) */
    engram_fetch *fetch;
    int64_t *eg_idx;               /* its row indices, [slot][max_rows][cols] */
    st_set *st;                    /* the checkpoint (kept open: Engram host rows, and the tensors' identity) */
    char device[256];

    int max_seqs, max_rows, ring, spare;
    int64_t context, pool;
    gpu_seq *seqs;
    /* the pool's allocator: sequences' ranges, first fit (sorted by base) */
    int64_t *range_base, *range_len;
    int nranges;

    /* device state */
    CUdeviceptr rings;             /* bf16 [layers][seqs][ring][hd] */
    CUdeviceptr dring;             /* bf16 [stages][seqs][ring][hd] DSpark main KV */
    CUdeviceptr state_a, state_s;  /* fp32 [ratio-2 sources][seqs][ring][hd] */
    CUdeviceptr ckv[64], ikv[64];  /* per kv source layer: bf16 [pool rows][hd], [pool rows][ihd] */
    int state_index[64];           /* ratio-2 source layer -> its index in state_a/s */

    /* per-kind RoPE frequencies θ′_j: [0] ratio 0 / DSpark, [1] ratio > 0 */
    CUdeviceptr freqs[2];

    /* the round's plan */
    gpu_plan_layout plan;
    void *plan_host;               /* pinned */
    CUdeviceptr plan_dev;

    /* a round's scratch, sized for max_rows */
    CUdeviceptr X, X2, coef, coef2, pi0;     /* streams, coefficients, one-hot π */
    CUdeviceptr xn, qkv, q, qi, kv, o, z, y32, y16, wix, score, lat, lat2, a32, s32, ik, bs, cand;
    CUdeviceptr logits_part;       /* tp > 1: the head's logits of this rank's vocabulary rows [R][V/tp] */
    int xready, xkind;             /* tp > 1: set up (by the first round), GPU_XCHG_PEER, _NCCL or _HOST */
    xchg_mem xm;                   /* peer memory: this rank's region, descriptor and counters (NCCL: the
                                      region receives the all-gather) */
    struct ncclComm *ncomm;        /* NCCL's communicator */
    CUdeviceptr xpeer[8];          /* the other ranks' regions opened through CUDA IPC */
    void *xs_host;                 /* the host transport's pinned memory */
    size_t xs_bytes, xs_all_bytes;
    CUdeviceptr logits, head_in, tokens_out, logprob_out, top_ids_out, top_lp_out, sample_params;
    CUdeviceptr moe_ids, moe_w, gate_logits, eg_rows, eg_kv, taps;
    CUdeviceptr sel[64];           /* per index source layer: i32 [R][sel_ld] its top-k (Reuse layers read it) */
    int sel_ld[64];                /* the round's top-k count of that source (min(widest reach, index_topk)) */
    CUdeviceptr ws_misc;
    size_t ws_misc_bytes;
    CUdeviceptr mix_cnt; /* mhc_mix's arrival counters (u32 [MHC_MIX_COUNTERS]), zero at rest */
    int64_t score_cap;             /* floats per row of score */
    exl3_workspace ws;
    /* the side stream: in rounds of up to side_rows rows, launches that the chain after them does not read
     * right away (the indexer's queries and wq_b beside the compressor, the shared expert's gate and up
     * beside the router and routed experts) run there, between a fork and a join event (gpu_round.c;
     * side_mid: the indexer's queries done), with their own EXL3 workspace (0 rows: none,
     * DSKIT_GPU_SIDE=0) */
    CUstream side;
    CUevent side_fork, side_join, side_mid;
    exl3_workspace ws_side;
    int side_rows;
    int qkv_ld;                    /* the grouped wq_a/wkv/(compressor r1) output's row width */
    uint8_t *eg_host;              /* pinned host memory of the round's Engram records */
    size_t eg_host_bytes;
    CUdeviceptr topk_val;          /* fp32 [64][index_topk]: the indexer top-k's values (unused) */
    /* pinned host memory of the draw: the rows' parameters and allow masks (read by the round's copies),
     * and what comes back (tokens, log-probabilities) */
    void *io_host;
    size_t io_sp, io_allow, io_tok, io_lp, io_tid, io_tlp, io_feed, io_bytes;
    /* decode and verify rounds replay CUDA graphs captured per shape (gpu_round.c) */
    int use_graphs;
    int check_counters;            /* DSKIT_CHECK_COUNTERS=1: every round proves the EXL3 counters zero */
    int bench_no_layers;           /* benchmarks: rounds run everything but their layers (what a round costs
                                    * outside them: the plan's upload, the embedding, the head, the draw) */
    struct gpu_graph {
        int R, S, N1, N2, masks, trunc, no_layers;
        /* the round up to the head's logits, in segments split before each Engram layer (the host waits for
         * that layer's rows between them); the masks' upload and the draw (NULL: no sampling row) */
        CUgraphExec forward[ENGRAM_MAX_LAYERS + 1], draw;
    } graphs[GPU_MAX_GRAPHS];
    int ngraphs;
    long long graph_replays, graph_captures;
    /* draft calls replay a graph per (requests, top-k/top-p candidates): from the embedding to the last
     * draw (gpu_draft.c) */
    struct gpu_draft_graph {
        int n, trunc;
        CUgraphExec g;
    } draft_graphs[GPU_MAX_DRAFT_GRAPHS];
    int n_draft_graphs, draft_no_graphs; /* draft_no_graphs: a capture failed, drafts run eagerly */
    long long draft_replays;
    int outside_launches;
    /* the drafter's buffers: a draft call's previous tokens, drafts and confidences ([B][max_draft]), the
     * rows' Markov embeddings and biases, and a feed's positions and ring rows */
    int max_draft, draft_ld;       /* requests per draft call; the row stride of the per-draft arrays (x4: aligned) */
    CUdeviceptr draft_prev, draft_tok, draft_conf, draft_e, draft_bias, feed_pos, feed_dst;          /* launches of the last eager round outside its layers (benchmarks) */
    CUdeviceptr arena;             /* the state and scratch buffers above, one allocation */
    /* the round's rows at image positions (eager rounds only: a round with any runs without graphs), in
     * runs of consecutive rows of one span; their span rows are staged in img_stage [max_rows][dim], copied
     * into every stream (img_idx: i32 source and destination lists), routed with bias_vl, and their streams
     * saved across each Engram layer (img_save [max_rows][hc][dim]: their gate is 0) */
    int img_n, img_nruns;
    struct gpu_img_run {
        int row0, n, at;           /* rows row0.., at img_stage row `at` */
        CUdeviceptr src;           /* their span rows */
    } *img_runs;
    int32_t *img_idx_host;         /* [max_rows][2·hc + 1] */
    CUdeviceptr img_stage, img_idx, img_save;
    /* the vision tower's scratch, kept from one image to the next and grown to the largest so far
     * (gpu_vision.c: 208 MiB at the release's 9189-patch limit) */
    CUdeviceptr vis_scratch;
    size_t vis_scratch_bytes;
    /* Tests only (teacher forcing, layer-by-layer comparisons with the CPU, tests/gpu/test_engine_gpu.c):
     * called in every block, after the stream has finished, with the device streams [n][hc][d] bf16 and
     * π (fp32 rows of pi_stride; 0 after attention), which it may read or overwrite. */
    void (*hook)(void *ctx, int layer, int stage, CUdeviceptr X, CUdeviceptr pi, int pi_stride, int n);
    void *hook_ctx;
};

/* GPU_HOOK_ROUTE: a layer's MoE selection, X = the selected ids (int32 [n][n_active]), pi = the router logits
 * (fp32 [n][pi_stride = n_experts]). GPU_HOOK_INDEX: an index source's top-k, X = int32 [n][pi_stride] (a row's
 * min(reach, index_topk) first entries, ascending); GPU_HOOK_CAND: the candidate source's kept blocks, X = the
 * bitmap rows (u32 [n][pi_stride]). */
enum { GPU_HOOK_BLOCK_IN, GPU_HOOK_ATTN_OUT, GPU_HOOK_BLOCK_OUT, GPU_HOOK_ROUTE, GPU_HOOK_INDEX, GPU_HOOK_CAND };

/* The round's host plan and its device copy by field (gpu_plan_layout), and the draw's pinned memory. */
#define P32(b, f) ((int32_t *)((char *)(b)->plan_host + (b)->plan.f))
#define DEV(b, f) ((b)->plan_dev + (b)->plan.f)
#define IO(b, f) ((void *)((char *)(b)->io_host + (b)->f))
/* A launch that failed has set its message: return it. */
#define TRY(call)                                                                                                \
    do {                                                                                                         \
        if (call)                                                                                                \
            return -1;                                                                                           \
    } while (0)

/* Run one round on the device: the plan is in plan_host; returns after the drawn tokens (and logprobs)
 * are back on the host. fill (may be NULL) writes the rows' allow masks while the forward runs: it is
 * called once the forward is queued, and the masks go up with the draw, queued after it returns. */
int gpu_round(gpu_backend *b, const engine_row *rows, int n, engine_out *out, const engine_fill *fill);
/* DSpark on the device (gpu_draft.c): feed the committed positions [draft_len, len) of a sequence from the
 * last round's taps; propose draft_block tokens for each request. */
int gpu_draft_feed(gpu_backend *b, int seq, int64_t len);
int gpu_draft_run(gpu_backend *b, const engine_draft_req *req, int n, int32_t *drafts, float *conf);
/* The vision tower (gpu_vision.c): the span rows [*n_out][dim] bf16 of one image's patches [nh·nw][3p²]
 * bf16, in a new device allocation (*rows_out, the caller frees it), run eagerly on the stream. taps (may be
 * NULL; each field may be NULL) receive bf16 host copies of the patch embedding and the final norm
 * [nh·nw][vision_dim] and the aligner's rows [cells][dim] (tests: CPU == GPU per stage). */
typedef struct {
    uint16_t *embed, *vit, *features;
} gpu_vision_taps;
int gpu_vision_run(gpu_backend *b, const uint16_t *patches, int nh, int nw, CUdeviceptr *rows_out, int64_t *n_out,
                   gpu_vision_taps *taps);

/* One round's shape (gpu_round.c builds it with the plan). */
typedef struct {
    int R, S;                /* rows, sampling rows */
    int ne[3];               /* latents emitted per ratio (a graph's round: every row, the others skipped) */
    int reach_max[3];        /* the widest reach per ratio */
    int N[3];                /* the indexer's scores per row: the widest reach, or its bucket in a graph */
    int graph;               /* replayed from a captured graph: every count a function of the graph's key */
    int any_allow, masks, trunc; /* rows with allow masks; the draw's masks uploaded; top-k/top-p candidates */
    size_t allow_bytes, sample_ws;
} round_shape;

/* Capture what fn queues on b's stream as one graph (gpu_round.c): -1 with a message when fn or the
 * capture fails. */
int gpu_capture(gpu_backend *b, const round_shape *sh, int (*fn)(gpu_backend *, const round_shape *, void *),
                void *arg, CUgraphExec *out);

/* A layer's context within a round: the shape, this layer's π, the candidate bitmap rows. */
typedef struct {
    gpu_backend *b;
    const round_shape *sh;
    CUdeviceptr pi;   /* this layer's π: fp32 rows with stride pi_stride */
    int pi_stride;
    CUdeviceptr cand; /* the candidate source's bitmap rows (valid after layer candidate_source) */
    int cand_ldw;
} layer_ctx;

/* Exchanges between ranks (gpu_xchg.c; tp = 1: nothing to do). sum: buf (fp32 [n], this rank's partial)
 * becomes Σ over ranks of their partials in rank order; gather_cols: every rank's part [rows][cols]
 * into full [rows][tp·cols] (rank r's at columns r·cols), part and full apart. Queued on the stream
 * (peer memory: a graph captures them), or done when they return (the host). */
/* The transport, agreed by every rank (collective: called by the first round or draft on every rank, once
 * all have opened; a no-op after). */
int gpu_xchg_init(gpu_backend *b);
/* After a round: an exchange that waited past its bound (peer memory) or that NCCL failed fails it,
 * naming the rank. */
int gpu_xchg_check(gpu_backend *b);
void gpu_xchg_free(gpu_backend *b);
int gpu_xchg_sum(gpu_backend *b, CUdeviceptr buf, int64_t n);
int gpu_xchg_gather_cols(gpu_backend *b, CUdeviceptr part, CUdeviceptr full, int rows, int cols);
/* The head's logits (fp32 [R][V]) of R rows of normed input x (bf16 [R][d]): this rank's vocabulary rows,
 * gathered from every rank when tp > 1 (gpu_round.c). */
int gpu_head_logits(gpu_backend *b, CUdeviceptr x, int R);

/* The EXL3 arrival counters: cleared after a failed round; checked zero after every round with
 * DSKIT_CHECK_COUNTERS=1 (check_counters), an error naming the first that is not (gpu_round.c). */
void gpu_counters_reset(gpu_backend *b);
int gpu_counters_check(gpu_backend *b);

/* Grouped wo_a of R rows: this rank's groups, each on its heads' outputs (b->o) into its columns of b->z,
 * in one block-diagonal launch. */
int gpu_wo_a(gpu_backend *b, const gpu_block *g, int R);

/* One layer's launches (a backbone layer or a DSpark stage), in the CPU forward's order. */
int gpu_layer(layer_ctx *L, int l);

#endif
