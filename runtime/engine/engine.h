/* The engine: a loaded model on one backend (cpu now, gpu when it lands), the only interface commands,
 * the server and the ranks use. An engine holds sequences (one mutable timeline each) and runs steps:
 * one forward over rows from several sequences at once, each row at the next position of its sequence,
 * drawing tokens on the backend with each row's own sampling keys. A sequence's rows become part of it
 * only when committed; uncommitted rows are rolled back by the next commit or step.
 *
 * Exactness (docs/model.md "Exactness"): a row's result is a function of its sequence's tokens up to its
 * position only, never of the other rows of a step, their count, or whether the step was drafted,
 * chunked or graph-replayed. One thread drives an engine; the calls are not thread-safe. */
#ifndef DSK_ENGINE_H
#define DSK_ENGINE_H

#include "runtime/model/config.h"
#include "runtime/model/sampling.h"

#include <stddef.h>
#include <stdint.h>

typedef struct engine engine;
struct dsk_tokenizer;

typedef struct {
    const char *backend;     /* "cpu" (default) or "gpu" */
    const char *model_dir;   /* config.json + safetensors (+ tokenizer.json) */
    const char *kit;         /* gpu: the kit archive */
    int device;              /* gpu: the CUDA device (default 0) */
    const char *devices;     /* gpu, tp > 1: "D0,D1": rank r's device (default: rank r on device r) */
    /* the ids the tokenizer has (others are never drawn); NULL: read model_dir/tokenizer.json when there
     * is one, else every id of the vocabulary */
    const struct dsk_tokenizer *tokenizer;
    int max_seqs;            /* sequences open at once (default 16) */
    int64_t context;         /* positions one sequence may hold (default: the model's limit) */
    int64_t pool;            /* positions all open sequences may hold together (default: unbounded on the
                                cpu; max_seqs × context on the gpu) */
    int max_rows;            /* rows one step may carry (default 4096) */
    const char *engram;      /* where Engram rows come from: "host" (default on the cpu: the mapped checkpoint),
                                "nvme:DIR" (packed files, docs/engram.md), "device" (gpu: the tables in GPU
                                memory; the gpu's default when they take at most 1/8 of its free memory) */
    size_t engram_cache;     /* nvme: hot-row cache bytes (default 256 MiB) */
    int engram_timeout_ms;   /* a step waits at most this long for a layer's rows (default 10000) */
    int threads;             /* cpu: worker threads (default 2; results never depend on it) */
    int tp;                  /* tensor-parallel ranks (default 1); rank 0 starts the others itself (docs/ranks.md) */
    const char *peer;        /* across hosts (tp 2): "HOST:PORT" rank 0 listens on and rank 1 connects to */
    int rank;                /* with peer: this process's rank (a rank > 0 then only follows: engine_follow) */
    int rank_timeout_ms;     /* ranks: how long to wait for the others to start or connect (default 30000) */
    void *rank_group;        /* internal: a follower's group (runtime/ranks) */
    size_t cache_bytes;      /* cpu: decoded EXL3 weights to keep (default 4 GiB) */
} engine_opts;

typedef struct {
    const model_config *cfg;
    const char *backend;     /* "cpu", "gpu" */
    const char *device;      /* what it runs on, for messages */
    int vocab;               /* cfg->vocab_size */
    int n_valid;             /* ids that may be drawn (the tokenizer's) */
    int max_seqs, max_rows;
    int64_t context, pool;
    int max_rollback;        /* uncommitted rows a sequence may roll back (the window rings' spare slots) */
    int draft_block;         /* tokens one draft proposes; 0 when the model has no drafter */
    int takes_images;        /* the model has a vision tower and the backend runs it (engine_seq_image) */
} engine_info;

int engine_open(const engine_opts *o, engine **out);
void engine_close(engine *e);
/* A follower rank (opened with rank_group): run rank 0's calls until it stops; 0 on a clean stop. */
int engine_follow(engine *e);
const engine_info *engine_get_info(const engine *e);

enum { ENGINE_SEQ_DRAFT = 1 }; /* keep the drafter's state: engine_draft may be called */

/* Open a sequence (empty) that will hold at most `reserve` positions (<= context; 0 = context), taken
 * from the pool; refused with a named error when the pool or the sequence table is full. */
int engine_seq_open(engine *e, int64_t reserve, unsigned flags, int *seq);
void engine_seq_close(engine *e, int seq);
/* Committed positions. */
int64_t engine_seq_len(const engine *e, int seq);

/* One image for a sequence (vision.md §1.3, §3.8): runtime/vision's preprocessed patches. The server and
 * `dskit run` make one from a data URL or a file with vision_data_url / vision_decode / vision_preprocess. */
typedef struct {
    const uint16_t *patches; /* [n_vit_h·n_vit_w][3·vision_patch_size²] bf16 */
    int n_vit_h, n_vit_w;    /* the patch grid of its plan */
    uint64_t key;            /* xxh64 of the image file's bytes: the span's identity for prompt reuse (two images
                                share every token id of their spans, never their key) */
} engine_image;

/* Place an image's span at positions [pos, pos + span) of a sequence, span = n_llm_h·(n_llm_w + 1) + 2
 * (*span_out, may be NULL). The backend runs the tower now. pos must be at or past the committed length
 * (rows run there earlier can no longer be accepted), the span must fit the reservation and overlap no
 * other span, and the model must have a vision tower. Rows at the span's positions must carry
 * image_token_id (engine_step refuses others); the backend gives them the span's rows as their input,
 * bias_vl in expert selection, and no Engram. A commit that rolls back below a span's first position
 * drops the span. */
int engine_seq_image(engine *e, int seq, int64_t pos, const engine_image *img, int64_t *span_out);

/* One row of a step. Rows of one sequence are consecutive in the array, at consecutive positions from
 * the sequence's committed length; a sequence appears once per step. */
typedef struct {
    int seq;
    int32_t token;          /* the token at pos */
    int64_t pos;            /* its absolute position */
    int sample;             /* draw the token for pos + 1 (keyed by pos + 1) */
    sample_params sp;
    const uint32_t *allow;  /* optional ((vocab + 31) / 32 words): ids this draw may take, on top of the
                               tokenizer's; NULL: every valid id */
    int top_logprobs;       /* -1: no logprobs; 0..SAMPLE_MAX_TOP_LOGPROBS: the drawn token's log-probability
                               and that many alternatives */
} engine_row;

/* What a step returns, per row (arrays of the step's row count; each may be NULL). */
typedef struct {
    int32_t *tokens;    /* drawn tokens; -1 for rows that do not sample */
    float *logits;      /* [n][vocab] fp32 logits of the sampling rows (others untouched): for dumps and tests */
    float *logprob;     /* the drawn token's log-probability (rows with top_logprobs >= 0) */
    int32_t *top_ids;   /* [n][SAMPLE_MAX_TOP_LOGPROBS] */
    float *top_lp;      /* [n][SAMPLE_MAX_TOP_LOGPROBS] */
    uint16_t *taps;     /* [n][n_dspark_targets · dim] bf16 DSpark hidden inputs of every row */
} engine_out;

/* Run rows [0, n). The rows' KV enters their sequences uncommitted. Refused, without touching any state,
 * past the context or the pool, beyond max_rows, or when a sequence's earlier uncommitted rows are more
 * than max_rollback (commit them first). A step that fails while running (an Engram read error, a device
 * fault) leaves its rows uncommitted; a sequence whose rows then exceed the rollback window can only be
 * closed (further steps and commits on it are refused, naming it); the other sequences go on. */
int engine_step(engine *e, const engine_row *rows, int n, engine_out *out);

/* The checks of one row that need no sequence state (its token within vocab, top_logprobs, the sampling
 * parameters): engine_step's, and a follower rank's on rank 0's plan. i names the row in the message. */
int engine_row_check(const engine_row *r, int vocab, int i);

/* A step whose allow masks are written while it runs (structured output: the host works out the masks
 * while the device runs the forward). The rows' allow pointers are fixed when the step is called; their
 * words are read only after fill->fn returns. fn is called once, after the rows are checked and the
 * forward has started (gpu: the forward is queued on the device; cpu: on a thread beside the forward;
 * tp: before the plan goes to the other ranks, which need the masks too), and before any draw. fn returns
 * 0, or -1 to fail the step (its rows then stay uncommitted, as for any failed step). fill NULL: as
 * engine_step. */
typedef struct {
    int (*fn)(void *ctx);
    void *ctx;
} engine_fill;
int engine_step_fill(engine *e, const engine_row *rows, int n, engine_out *out, const engine_fill *fill);

/* Set a sequence's committed length to len: up to its committed length plus the rows of the last step
 * that carried it (accepting them), or lower (rolling back). A roll back of more than max_rollback rows
 * past the highest position the sequence ever ran is refused (the window rings would have lost what the
 * sequence needs again), and so is a length past what has run. */
int engine_commit(engine *e, int seq, int64_t len);

/* DSpark: propose draft_block tokens after t0, the token the sequence's next position will hold (its
 * committed length), each drawn with sp keyed by its own position. The sequence must have been opened
 * with ENGINE_SEQ_DRAFT. drafts[n][draft_block]; conf (may be NULL) gets the confidence logits. */
typedef struct {
    int seq;
    int32_t t0;
    sample_params sp;
} engine_draft_req;
int engine_draft(engine *e, const engine_draft_req *req, int n, int32_t *drafts, float *conf);

/* Engram rows through a store (the host or nvme placement; all zero for the device table or a model
 * without Engram), counted since open: for /metrics and the logs. A read slower than the store's bound
 * (50 ms) is also said on stderr as it happens (docs/engram.md "Faults"). */
typedef struct {
    uint64_t rows, reads, read_bytes, cache_hits, cache_misses, slow_reads, errors, timeouts;
} engine_engram_stats;
void engine_engram_counters(engine *e, engine_engram_stats *out);

#endif
