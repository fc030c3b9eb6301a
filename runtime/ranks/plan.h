/* The plan messages rank 0 sends its followers (docs/ranks.md "The plan"): one engine call each, as bytes.
 * Rank 0 encodes every call with plan_encode; a follower decodes what it receives with plan_decode, a pure
 * function that checks every size, count and index against the limits both ranks share before the call
 * reaches its backend. A message that does not decode is a broken or hostile peer: the follower stops
 * the group. Internal to runtime/ranks (and its tests and fuzzer).
 *
 * Every field has a fixed place (host byte order: both ranks run the same build); padding is zero. The
 * one encoding of a call is the only one accepted: what decodes re-encodes to the same bytes. */
#ifndef DSK_RANKS_PLAN_H
#define DSK_RANKS_PLAN_H

#include "runtime/engine/engine.h"

#include <stddef.h>
#include <stdint.h>

enum { PLAN_SHUTDOWN = 0, PLAN_SEQ_OPEN, PLAN_SEQ_CLOSE, PLAN_STEP, PLAN_COMMIT, PLAN_DRAFT, PLAN_IMAGE };

enum { PLAN_FRAME_BYTES = 16 }; /* u32 type, u32 zero, u64 payload bytes */

/* What both ranks know from the model and the engine's options. */
typedef struct {
    int vocab;            /* ids; a mask is (vocab + 31) / 32 words */
    int max_rows;         /* rows one step carries */
    int max_seqs;         /* sequence ids 0..max_seqs-1; a draft carries at most max_seqs requests */
    int64_t context;      /* positions one sequence holds */
    int draft_block;      /* tokens one draft proposes; 0: no drafter, drafts are refused */
    int patch_values;     /* 3·patch² of the vision tower; 0: no tower, images are refused */
    int vision_ratio;     /* r: an aligner cell is r × r patches */
    int max_positions;    /* positions one image's span may take (vision_max_n_token) */
    size_t max_bytes;     /* the largest payload the limits above allow (plan_limits_init) */
} plan_limits;

/* The limits of a model and an engine's options (defaults applied: max_seqs, max_rows, the context the
 * backend took). An image's span must fit the model's position budget (vision_span.h), so its patches
 * are fewer than r²·vision_max_n_token. */
void plan_limits_init(plan_limits *lim, const model_config *cfg, int max_rows, int max_seqs, int64_t context,
                      int draft_block);

/* One call. Which fields a type uses: SEQ_OPEN seq, flags, reserve; SEQ_CLOSE seq; STEP n, want (taps),
 * rows; COMMIT seq, old_len, len; DRAFT n, want (confidences), drafts; IMAGE seq, pos, image;
 * SHUTDOWN none. */
typedef struct {
    uint32_t type;
    int seq;
    unsigned flags;
    int64_t reserve;
    int64_t old_len, len;
    int64_t pos;
    int n;
    int want;
    const engine_row *rows;          /* [n]; each allow NULL or (vocab + 31) / 32 words */
    const engine_draft_req *drafts;  /* [n] */
    engine_image image;
    void *owned;                     /* decoded: the rows, requests or patches (plan_msg_free) */
} plan_msg;

/* m as one payload (malloc'd into *out, *bytes long). */
int plan_encode(const plan_msg *m, const plan_limits *lim, unsigned char **out, size_t *bytes);
/* A payload of a type into *m. Refused (-1, naming the type and what is wrong) unless it is a call's
 * encoding within the limits: sizes exact, counts and ids in range, a step's rows as engine_step takes
 * them (sequences in range, each in one run of consecutive positions, sampling keys in range), each mask
 * used by the next row that has one, padding zero. A step's rows point into payload for their masks: it
 * must outlive *m. */
int plan_decode(uint32_t type, const void *payload, size_t bytes, const plan_limits *lim, plan_msg *m);
void plan_msg_free(plan_msg *m);

/* The frame before every payload. */
void plan_frame_encode(uint32_t type, size_t bytes, unsigned char out[PLAN_FRAME_BYTES]);
/* Refused when its padding is not zero or it announces more than max_bytes (checked before anything is
 * allocated for the payload). */
int plan_frame_decode(const unsigned char in[PLAN_FRAME_BYTES], size_t max_bytes, uint32_t *type, size_t *bytes);

/* The name of a type, for messages ("type 9" names none). */
const char *plan_type_name(uint32_t type, char buf[16]);

#endif
