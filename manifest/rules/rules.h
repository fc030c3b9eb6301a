/* Which variant of a family a problem shape launches: one file per family in manifest/rules/. The
 * launchers (runtime/launch/) and the needs list (manifest/needs.c) both call these, so the kit a model
 * needs is exactly the kit its launches use (tests/kit/test_needs.c sweeps every shape to prove it). */
#ifndef DSK_RULES_H
#define DSK_RULES_H

/* A variant as the kit names it: family and its parameters. */
typedef struct {
    const char *family;
    char params[32]; /* "K=4,CB=2,M=8" */
} rule_variant;

/* rope: the variant rotating the last rope_dim dims (the kit has 32 and 64). */
void rule_rope_pick(int rope_dim, rule_variant *v);
/* stream_read: the one variant the roofline benchmark launches. */
void rule_stream_read_pick(rule_variant *v);
/* cast: the variant of a cast (0: fp32 -> bf16; 1: fp32 bf16(bf16(x) · scale)). */
void rule_cast_pick(int mode, rule_variant *v);
/* rmsnorm: threads per row for a width. */
int rule_rmsnorm_threads(int width);
/* topk: threads per row of the radix kernel for N entries. */
int rule_topk_threads(int N);
/* topk_small: elements per lane of the warp-per-row kernel (k <= 16, N <= 1024), 0 when the radix
 * kernel runs instead. */
int rule_topk_small_npl(int N, int k);
/* topk_mb, topk_tl: blocks per row for N entries; 1 when one block per row (topk or topk_small) runs instead,
 * i.e. for N < RULE_TOPK_MB_MIN_N. */
enum { RULE_TOPK_MB_MIN_N = 32768 };
int rule_topk_blocks(int N);
/* Where topk_tl (one launch, two levels) could replace topk_mb's six: the rule_topk_blocks slices each hold
 * k or more and their candidates (blocks·k) are at most RULE_TOPK_TL_MAX_CAND, so that its last block's
 * pass over them takes about what one block takes over a row that long (docs/kernels.md): 512 of up to
 * 64K keys. rule_topk_pick does not take it until it is measured on a GPU (docs/kernels.md). */
enum { RULE_TOPK_TL_MAX_CAND = 8192 };
int rule_topk_tl_fits(int N, int k);
/* The kernel a top-k of k entries out of rows of N launches (topk_small, topk or topk_mb): what op_topk
 * runs when the blocks per row are left to the rule. Returns the blocks per row. */
int rule_topk_pick(int N, int k, rule_variant *v);
/* rowmm_bf16: the row bucket (1, 2, 4, 8, 16) of a launch of `rows` rows (<= 16 per launch). */
int rule_rowmm_bucket(int rows);

/* exl3_mm: rows per tile (8, 16, 32, 64) of a launch of `rows` rows; more rows run in tiles of 64. */
int rule_exl3_bucket(int rows);
/* exl3_had: whether a matmul of `rows` rows transforms its input in a launch of its own first (else the
 * matmul transforms it inside). */
int rule_exl3_pretransform(int rows);
/* The canonical k split of a k × n EXL3 matrix: groups of qb 128-row blocks, summed left to right. A
 * function of the shape only, so every form and row count adds a row's terms in the same order. */
void rule_exl3_split(int k, int n, int *qb, int *groups);
/* Every (family, parameters) the EXL3 launchers may ask for to run linears of K bits and codebook
 * `codebook` at up to max_rows rows per launch (moe: the routed MoE too). Writes up to cap entries,
 * returns how many there are. */
int rule_exl3_variants(int K, int codebook, int max_rows, int moe, rule_variant *out, int cap);

/* index_score: the variant scoring rows of nh heads of ihd dims (the kit has NH 4 and 32, ihd 128); -1
 * with a message naming the shape when there is none. */
int rule_index_score_pick(int nh, int ihd, rule_variant *v);
/* index_score: slices of the keys (grid y) for a launch of blocks_x row groups over N keys on a GPU of
 * sms multiprocessors (0: the H200's 132). Speed only: a score never depends on which block computes it. */
enum { RULE_INDEX_SCORE_WARPS = 4, RULE_INDEX_SCORE_GROUP = 4 }; /* warps per block; rows per block at most */
int rule_index_score_slices(int blocks_x, int N, int sms);

/* cand_blocks: the block-score kernel and the kept-set kernel (cand_mask); the top-k between them runs
 * only when a launch has more blocks per row than the cap (else every finite block is kept). */
void rule_cand_blocks_pick(rule_variant *scores, rule_variant *mask);
int rule_cand_blocks_need_topk(long long NB, int cap);
/* moe_route: the variant routing top k of E experts (k <= 16, E <= 384); -1 with a message otherwise. */
int rule_moe_route_pick(int E, int k, rule_variant *v);
/* The MoE's routing inside its plan launch (exl3_moe_plan with R = moe_route's NPL): for rounds of at
 * most RULE_ROUTE_PLAN_ROWS rows (all threads score, a warp selects each row), else moe_route then the
 * plan with the ids given (RULE_MOE_PLAN_GIVEN: no routing in its launch). */
enum { RULE_ROUTE_PLAN_ROWS = 64 };
#define RULE_MOE_PLAN_GIVEN "T=1024,R=0"
int rule_moe_route_plan_pick(int E, int k, rule_variant *v);
/* sample: the one variant; slices of the vocabulary per row (a function of V: the order of its sums);
 * the top-k candidates top_k / top_p look at (1024, or V when smaller). */
enum { RULE_SAMPLE_THREADS = 256, RULE_SAMPLE_PER_THREAD = 16, RULE_SAMPLE_CANDIDATES = 1024 };
void rule_sample_pick(rule_variant *v);
int rule_sample_slices(int V);
int rule_sample_candidates(int V);
/* dspark_conf: the one variant, and the blocks per row that add the Markov bias to V logits. */
void rule_dspark_conf_pick(rule_variant *v);
int rule_dspark_conf_bias_blocks(int V);
/* embed: the variant for hc streams. */
void rule_embed_pick(int hc, rule_variant *v);
/* mhc_mix: the variant for hc streams (hc <= 4), and the rows one CTA of its partial step takes: 16 for
 * launches of up to 64 rows (more CTAs on the weight), else 64 (the weight re-read from L2 less often).
 * Neither changes a row's bits: the sum order depends on hc·d only. */
void rule_mhc_mix_pick(int hc, rule_variant *v);
int rule_mhc_mix_rows_per_cta(int rows);
/* mhc_pre: threads per row are rmsnorm's for the width, so the fused RMSNorm equals op_rmsnorm's bits. */
int rule_mhc_pre_threads(int d);
void rule_mhc_pre_pick(int hc, int d, rule_variant *v);
/* mhc_post: the variant for hc streams. */
void rule_mhc_post_pick(int hc, rule_variant *v);
/* tap_mean: the variant for hc streams. */
void rule_tap_mean_pick(int hc, rule_variant *v);
/* xchg: the sum (mode 0) or the gather (mode 1) of the ranks' parts through peer memory, the same of parts
 * NCCL gathered (modes 2 and 3); the blocks of an exchange of n floats (modes 0 and 1: always
 * RULE_XCHG_BLOCKS, each with its own count of exchanges, a pair of floats a thread and a stride). 128:
 * fewer than the H200's SMs, so ranks that share one GPU's context (threads: the tests, bench decode --tp 2)
 * leave room for the other rank's kernels while one spins; at 256 the TP2 bench starved the other rank
 * until the 30 s bound, and a 1-row exchange took 2.73 us against 2.40 at 128 (H200, measured). */
#define RULE_XCHG_BLOCKS 128
void rule_xchg_pick(int mode, rule_variant *v);
int rule_xchg_blocks(int mode, long long n);
/* vec_glue: 16-byte chunks per lane (1, 2, 5, 8) of a vector of `width` (at most 2048; 0 beyond), and
 * the variant for that width and QDQ kind (runtime/common/kv_quant.h). */
int rule_vec_glue_chunks(int width);
void rule_vec_glue_pick(int width, int qdq, rule_variant *v);
/* the qdq of the variants that take ops of different QDQ kinds in one launch (each op's own, at run time) */
#define RULE_VEC_GLUE_MIXED 4
/* rows_copy: the one variant. */
void rule_rows_copy_pick(rule_variant *v);
/* compress_pool: the one variant. */
void rule_compress_pool_pick(rule_variant *v);
/* engram_rows: from records uploaded by the host (0) or from a device-resident table (1). */
void rule_engram_rows_pick(int from_table, rule_variant *v);
/* engram_gate: threads per (row, stream) block for the residual width d, and the variant. */
int rule_engram_gate_threads(int d);
void rule_engram_gate_pick(int d, rule_variant *v);
/* sparse_attn: the variant for head_dim (128 or 512) in a mode: 0 the whole list per CTA, 1-3 the steps
 * of the list split per 64-entry block (scores, values, merge); both give a row the same bits. */
void rule_sparse_attn_pick(int head_dim, int mode, rule_variant *v);
/* Whether a launch of `rows` rows of `heads` heads with lists of at most max_list entries splits them
 * (flash-decoding: few rows) or walks each list in one CTA. */
int rule_sparse_attn_split(int rows, int heads, int max_list);
/* vision_attn: the variant for the vision tower's head_dim (16 or 64); -1 with a message otherwise. */
int rule_vision_attn_pick(int head_dim, rule_variant *v);

/* vision_mm: the tile T of an M x N product of the vision tower on a kit for SM number sm, its shape
 * (BM x BN) and the variant. sm 90 (Hopper): family vision_mm_wgmma (wgmma, sm_90a), T 0 128 x 256, T 1
 * 64 x 128; other archs: family vision_mm (mma.sync), T 0 128 x 128, T 1 64 x 64. */
int rule_vision_mm_tile(int sm, int M, int N);
void rule_vision_mm_shape(int sm, int tile, int *bm, int *bn);
void rule_vision_mm_pick(int sm, int M, int N, rule_variant *v);
/* vision_glue: the variant of an operation (0 the vision RMSNorm, 1 2-D RoPE, 2 space-to-depth). */
void rule_vision_glue_pick(int op, rule_variant *v);

#endif
