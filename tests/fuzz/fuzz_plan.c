/* The plan messages a follower rank decodes (runtime/ranks/plan.h, docs/ranks.md "The plan"): byte 0 picks
 * the limits (a small model with a drafter and a vision tower, or a smaller one with neither), bytes 1-4
 * the message type (u32), the rest is the payload as it came off the wire. A message is either refused
 * with a "plan: ..." message, or decodes to a call within the limits (checked here again, field by
 * field) that plan_encode turns back into exactly the payload. The payload's first 16 bytes are also read
 * as a frame header: refused, or a type and a size within the limit that encode to the same bytes. */
#include "runtime/ranks/plan.h"
#include "runtime/model/vision_span.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static plan_limits limits(int which)
{
    model_config c;
    memset(&c, 0, sizeof c);
    plan_limits lim;
    if (which == 0) {
        c.vocab_size = 100; /* 4 mask words */
        c.vision_n_layers = 1;
        c.vision_patch_size = 2; /* 12 values a patch */
        c.vision_downsample_ratio = 2;
        c.vision_max_n_token = 16;
        plan_limits_init(&lim, &c, 8, 4, 64, 3);
    } else {
        c.vocab_size = 33; /* 2 words, the last holding one id */
        plan_limits_init(&lim, &c, 3, 2, 5, 0);
    }
    return lim;
}

static void check_frame(const uint8_t *p, const plan_limits *lim)
{
    uint32_t type;
    size_t bytes;
    if (plan_frame_decode(p, lim->max_bytes, &type, &bytes))
        return;
    FUZZ_CHECK(bytes <= lim->max_bytes);
    unsigned char again[PLAN_FRAME_BYTES];
    plan_frame_encode(type, bytes, again);
    FUZZ_CHECK(!memcmp(again, p, PLAN_FRAME_BYTES));
}

static int seq_in(const plan_limits *lim, int seq)
{
    return seq >= 0 && seq < lim->max_seqs;
}

/* What a decoded call holds, against the limits, independently of plan.c's own checks. */
static void check_values(const plan_msg *m, const plan_limits *lim, const uint8_t *p, size_t bytes)
{
    size_t words = (size_t)(lim->vocab + 31) / 32;
    switch (m->type) {
    case PLAN_SHUTDOWN: FUZZ_CHECK(bytes == 0); break;
    case PLAN_SEQ_OPEN:
        FUZZ_CHECK(seq_in(lim, m->seq) && m->reserve >= 1 && m->reserve <= lim->context);
        FUZZ_CHECK((m->flags & ~(unsigned)ENGINE_SEQ_DRAFT) == 0 && (!m->flags || lim->draft_block > 0));
        break;
    case PLAN_SEQ_CLOSE: FUZZ_CHECK(seq_in(lim, m->seq)); break;
    case PLAN_COMMIT:
        FUZZ_CHECK(seq_in(lim, m->seq) && m->old_len >= 0 && m->old_len <= lim->context && m->len >= 0 &&
                   m->len <= lim->context);
        break;
    case PLAN_STEP: {
        FUZZ_CHECK(m->n >= 1 && m->n <= lim->max_rows && (m->want == 0 || m->want == 1));
        const uint32_t *masks = (const uint32_t *)(p + 16 + 56 * (size_t)m->n), *end = (const uint32_t *)(p + bytes);
        for (int i = 0; i < m->n; i++) {
            const engine_row *r = &m->rows[i];
            FUZZ_CHECK(seq_in(lim, r->seq) && r->token >= 0 && r->token < lim->vocab);
            FUZZ_CHECK(r->pos >= 0 && r->pos < lim->context);
            FUZZ_CHECK(r->top_logprobs >= -1 && r->top_logprobs <= SAMPLE_MAX_TOP_LOGPROBS);
            FUZZ_CHECK(!r->sample || (r->sp.top_k >= 0 && r->sp.top_k <= SAMPLE_TOP_P_CANDIDATES));
            /* a mask lies whole among the payload's masks */
            FUZZ_CHECK(!r->allow || (r->allow >= masks && r->allow + words <= end && (r->allow - masks) % words == 0));
            if (i > 0 && r->seq == m->rows[i - 1].seq)
                FUZZ_CHECK(r->pos == m->rows[i - 1].pos + 1);
        }
        break;
    }
    case PLAN_DRAFT:
        FUZZ_CHECK(lim->draft_block > 0 && m->n >= 0 && m->n <= lim->max_seqs && (m->want == 0 || m->want == 1));
        for (int i = 0; i < m->n; i++)
            FUZZ_CHECK(seq_in(lim, m->drafts[i].seq) && m->drafts[i].t0 >= 0 && m->drafts[i].t0 < lim->vocab);
        break;
    case PLAN_IMAGE:
        FUZZ_CHECK(lim->patch_values > 0 && seq_in(lim, m->seq) && m->pos >= 0 && m->pos < lim->context);
        FUZZ_CHECK(m->image.n_vit_h >= 1 && m->image.n_vit_w >= 1 && m->image.patches);
        FUZZ_CHECK(vision_span_positions(lim->vision_ratio, m->image.n_vit_h, m->image.n_vit_w) <= lim->max_positions);
        break;
    default: FUZZ_CHECK(!"a type rank 0 never sends was accepted");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    plan_limits lim = limits(data[0] & 1);
    uint32_t type;
    memcpy(&type, data + 1, 4);
    size_t bytes = size - 5;
    /* the payload in a buffer of its own size: ASan sees a read past it; malloc's alignment, as the
     * follower's */
    uint8_t *p = malloc(bytes ? bytes : 1);
    FUZZ_CHECK(p);
    memcpy(p, data + 5, bytes);
    if (bytes >= PLAN_FRAME_BYTES)
        check_frame(p, &lim);
    plan_msg m;
    if (plan_decode(type, p, bytes, &lim, &m)) {
        FUZZ_CHECK(!strncmp(dsk_err_msg(), "plan: ", 6));
        free(p);
        return 0;
    }
    FUZZ_CHECK(m.type == type);
    check_values(&m, &lim, p, bytes);
    unsigned char *again;
    size_t n;
    FUZZ_CHECK(plan_encode(&m, &lim, &again, &n) == 0);
    FUZZ_CHECK(n == bytes && !memcmp(again, p, n));
    free(again);
    plan_msg_free(&m);
    free(p);
    return 0;
}
