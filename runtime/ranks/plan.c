/* The plan messages' encoding (plan.h). The layouts (byte offsets):
 *   SEQ_OPEN  16: seq i32 @0, flags u32 @4, reserve i64 @8
 *   SEQ_CLOSE  4: seq i32 @0
 *   COMMIT    24: seq i32 @0, zero @4, old_len i64 @8, len i64 @16
 *   STEP      16 + 56·n + 4·words·masks: n, want_taps, masks, zero (i32 each); n rows of
 *             seq, token, sample, top_logprobs (i32) @0, pos i64 @16, sampling @24, allow i32 @48, zero @52;
 *             the masks, words u32 each
 *   DRAFT     8 + 32·n: n, want_conf (i32); n requests of seq, t0 (i32) @0, sampling @8
 *   IMAGE     32 + 2·h·w·patch_values: seq, h, w, patch_values (i32), pos i64 @16, key u64 @24; the patches
 *   SHUTDOWN   0
 * sampling (24): temperature f32 @0, top_p f32 @4, top_k i32 @8, zero @12, seed u64 @16. */
#include "runtime/ranks/plan.h"
#include "runtime/common/error.h"
#include "runtime/model/vision_span.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SEQ_OPEN_BYTES = 16, SEQ_CLOSE_BYTES = 4, COMMIT_BYTES = 24, STEP_HEAD = 16, ROW_BYTES = 56,
       DRAFT_HEAD = 8, DRAFT_BYTES = 32, IMAGE_HEAD = 32, SAMPLING_BYTES = 24 };

static size_t mask_words(const plan_limits *lim)
{
    return (size_t)(lim->vocab + 31) / 32;
}

static void put32(unsigned char *p, size_t at, uint32_t v)
{
    memcpy(p + at, &v, 4);
}

static void put64(unsigned char *p, size_t at, uint64_t v)
{
    memcpy(p + at, &v, 8);
}

static uint32_t get32(const unsigned char *p, size_t at)
{
    uint32_t v;
    memcpy(&v, p + at, 4);
    return v;
}

static int32_t geti32(const unsigned char *p, size_t at)
{
    int32_t v;
    memcpy(&v, p + at, 4);
    return v;
}

static int64_t geti64(const unsigned char *p, size_t at)
{
    int64_t v;
    memcpy(&v, p + at, 8);
    return v;
}

static void put_sampling(unsigned char *p, const sample_params *sp)
{
    memcpy(p, &sp->temperature, 4);
    memcpy(p + 4, &sp->top_p, 4);
    put32(p, 8, (uint32_t)sp->top_k);
    put32(p, 12, 0);
    put64(p, 16, sp->seed);
}

static sample_params get_sampling(const unsigned char *p)
{
    sample_params sp;
    memcpy(&sp.temperature, p, 4);
    memcpy(&sp.top_p, p + 4, 4);
    sp.top_k = geti32(p, 8);
    memcpy(&sp.seed, p + 16, 8);
    return sp;
}

void plan_limits_init(plan_limits *lim, const model_config *cfg, int max_rows, int max_seqs, int64_t context,
                      int draft_block)
{
    *lim = (plan_limits){.vocab = cfg->vocab_size, .max_rows = max_rows, .max_seqs = max_seqs, .context = context,
                         .draft_block = draft_block};
    int r = cfg->vision_downsample_ratio;
    if (cfg->vision_n_layers > 0 && cfg->vision_patch_size > 0 && r > 0 && cfg->vision_max_n_token > 0) {
        lim->patch_values = 3 * cfg->vision_patch_size * cfg->vision_patch_size;
        lim->vision_ratio = r;
        lim->max_positions = cfg->vision_max_n_token;
    }
    size_t patches = (size_t)lim->vision_ratio * (size_t)lim->vision_ratio * (size_t)lim->max_positions;
    size_t step = STEP_HEAD + (size_t)max_rows * (ROW_BYTES + 4 * mask_words(lim));
    size_t draft = DRAFT_HEAD + (size_t)max_seqs * DRAFT_BYTES;
    size_t image = IMAGE_HEAD + 2 * patches * (size_t)lim->patch_values;
    size_t most = COMMIT_BYTES;
    most = step > most ? step : most;
    most = draft > most ? draft : most;
    lim->max_bytes = image > most ? image : most;
}

const char *plan_type_name(uint32_t type, char buf[16])
{
    static const char *const names[] = {"shutdown", "sequence open", "sequence close", "step", "commit", "draft",
                                        "image"};
    if (type < sizeof names / sizeof names[0])
        return names[type];
    snprintf(buf, 16, "type %u", type);
    return buf;
}

/* ---- encoding (rank 0) ---- */

static size_t step_masks(const plan_msg *m)
{
    size_t k = 0;
    for (int i = 0; i < m->n; i++)
        k += m->rows[i].allow != NULL;
    return k;
}

int plan_encode(const plan_msg *m, const plan_limits *lim, unsigned char **out, size_t *bytes)
{
    size_t words = mask_words(lim), n = m->n > 0 ? (size_t)m->n : 0, size;
    switch (m->type) {
    case PLAN_SHUTDOWN: size = 0; break;
    case PLAN_SEQ_OPEN: size = SEQ_OPEN_BYTES; break;
    case PLAN_SEQ_CLOSE: size = SEQ_CLOSE_BYTES; break;
    case PLAN_COMMIT: size = COMMIT_BYTES; break;
    case PLAN_STEP: size = STEP_HEAD + n * ROW_BYTES + step_masks(m) * words * 4; break;
    case PLAN_DRAFT: size = DRAFT_HEAD + n * DRAFT_BYTES; break;
    case PLAN_IMAGE:
        size = IMAGE_HEAD + 2 * (size_t)m->image.n_vit_h * (size_t)m->image.n_vit_w * (size_t)lim->patch_values;
        break;
    default: return dsk_err("plan: no encoding for message type %u", m->type);
    }
    unsigned char *p = dsk_calloc(1, size ? size : 1);
    if (!p)
        return -1;
    switch (m->type) {
    case PLAN_SEQ_OPEN:
        put32(p, 0, (uint32_t)m->seq);
        put32(p, 4, m->flags);
        put64(p, 8, (uint64_t)m->reserve);
        break;
    case PLAN_SEQ_CLOSE: put32(p, 0, (uint32_t)m->seq); break;
    case PLAN_COMMIT:
        put32(p, 0, (uint32_t)m->seq);
        put64(p, 8, (uint64_t)m->old_len);
        put64(p, 16, (uint64_t)m->len);
        break;
    case PLAN_STEP: {
        put32(p, 0, (uint32_t)m->n);
        put32(p, 4, (uint32_t)m->want);
        put32(p, 8, (uint32_t)step_masks(m));
        unsigned char *mk = p + STEP_HEAD + n * ROW_BYTES;
        int32_t k = 0;
        for (size_t i = 0; i < n; i++) {
            const engine_row *r = &m->rows[i];
            unsigned char *w = p + STEP_HEAD + i * ROW_BYTES;
            put32(w, 0, (uint32_t)r->seq);
            put32(w, 4, (uint32_t)r->token);
            put32(w, 8, (uint32_t)r->sample);
            put32(w, 12, (uint32_t)r->top_logprobs);
            put64(w, 16, (uint64_t)r->pos);
            put_sampling(w + 24, &r->sp);
            put32(w, 48, (uint32_t)(r->allow ? k : -1));
            if (r->allow)
                memcpy(mk + (size_t)k++ * words * 4, r->allow, words * 4);
        }
        break;
    }
    case PLAN_DRAFT:
        put32(p, 0, (uint32_t)m->n);
        put32(p, 4, (uint32_t)m->want);
        for (size_t i = 0; i < n; i++) {
            unsigned char *w = p + DRAFT_HEAD + i * DRAFT_BYTES;
            put32(w, 0, (uint32_t)m->drafts[i].seq);
            put32(w, 4, (uint32_t)m->drafts[i].t0);
            put_sampling(w + 8, &m->drafts[i].sp);
        }
        break;
    case PLAN_IMAGE:
        put32(p, 0, (uint32_t)m->seq);
        put32(p, 4, (uint32_t)m->image.n_vit_h);
        put32(p, 8, (uint32_t)m->image.n_vit_w);
        put32(p, 12, (uint32_t)lim->patch_values);
        put64(p, 16, (uint64_t)m->pos);
        put64(p, 24, m->image.key);
        memcpy(p + IMAGE_HEAD, m->image.patches, size - IMAGE_HEAD);
        break;
    }
    *out = p;
    *bytes = size;
    return 0;
}

/* ---- decoding (a follower) ---- */

/* The message's error: "plan: a step message of 12 bytes: ..." */
static int refuse(uint32_t type, size_t bytes)
{
    char name[16];
    return dsk_err_ctx("plan: a %s message of %zu bytes", plan_type_name(type, name), bytes);
}

static int seq_ok(const plan_limits *lim, int64_t seq)
{
    return seq >= 0 && seq < lim->max_seqs;
}

/* A row of a plan within the limits: its sequence and position here, the rest as engine_step checks it. */
static int row_error(const plan_limits *lim, const engine_row *r, int i)
{
    if (!seq_ok(lim, r->seq))
        return dsk_err("row %d: sequence %d is not one of 0..%d", i, r->seq, lim->max_seqs - 1);
    if (r->pos < 0 || r->pos >= lim->context)
        return dsk_err("row %d: position %lld is outside the context (%lld)", i, (long long)r->pos,
                       (long long)lim->context);
    return engine_row_check(r, lim->vocab, i); /* the token, top_logprobs and sampling, as engine_step checks them */
}

static int decode_step(const unsigned char *p, size_t bytes, const plan_limits *lim, plan_msg *m)
{
    if (bytes < STEP_HEAD)
        return dsk_err("its %d-byte header is cut", STEP_HEAD);
    int32_t n = geti32(p, 0), want = geti32(p, 4), masks = geti32(p, 8);
    if (n < 1 || n > lim->max_rows)
        return dsk_err("%d rows, a step carries 1..%d", n, lim->max_rows);
    if (masks < 0 || masks > n)
        return dsk_err("%d masks for %d rows", masks, n);
    if (want != 0 && want != 1)
        return dsk_err("want_taps is %d, not 0 or 1", want);
    if (get32(p, 12))
        return dsk_err("its header's padding is not zero");
    size_t words = mask_words(lim);
    if (bytes != STEP_HEAD + (size_t)n * ROW_BYTES + (size_t)masks * words * 4)
        return dsk_err("it does not hold %d rows and %d masks of %zu words", n, masks, words);
    engine_row *rows = dsk_calloc((size_t)n, sizeof *rows);
    unsigned char *seen = dsk_calloc((size_t)lim->max_seqs, 1);
    if (!rows || !seen) {
        free(rows);
        free(seen);
        return -1;
    }
    m->owned = rows;
    m->rows = rows;
    m->n = n;
    m->want = want;
    const uint32_t *mk = (const uint32_t *)(p + STEP_HEAD + (size_t)n * ROW_BYTES);
    int32_t next = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const unsigned char *w = p + STEP_HEAD + (size_t)i * ROW_BYTES;
        int32_t allow = geti32(w, 48);
        rows[i] = (engine_row){.seq = geti32(w, 0), .token = geti32(w, 4), .sample = geti32(w, 8),
                               .top_logprobs = geti32(w, 12), .pos = geti64(w, 16), .sp = get_sampling(w + 24)};
        if ((rc = row_error(lim, &rows[i], i)))
            break;
        if (get32(w, 36) || get32(w, 52))
            rc = dsk_err("row %d: its padding is not zero", i);
        else if (allow != -1 && (allow < 0 || allow >= masks))
            rc = dsk_err("row %d: mask %d, but the message holds %d masks", i, allow, masks);
        else if (allow != -1 && allow != next)
            rc = dsk_err("row %d: mask %d, but the next unused mask is %d", i, allow, next);
        else if (i > 0 && rows[i].seq == rows[i - 1].seq && rows[i].pos != rows[i - 1].pos + 1)
            rc = dsk_err("row %d: position %lld does not follow row %d's %lld in sequence %d", i,
                         (long long)rows[i].pos, i - 1, (long long)rows[i - 1].pos, rows[i].seq);
        else if ((i == 0 || rows[i].seq != rows[i - 1].seq) && seen[rows[i].seq])
            rc = dsk_err("row %d: sequence %d appears twice in one step (its rows must be consecutive)", i,
                         rows[i].seq);
        seen[rows[i].seq] = 1;
        if (!rc && allow >= 0)
            rows[i].allow = mk + (size_t)next++ * words;
    }
    free(seen);
    if (!rc && next != masks)
        rc = dsk_err("%d masks, but its rows use %d", masks, next);
    return rc;
}

static int decode_draft(const unsigned char *p, size_t bytes, const plan_limits *lim, plan_msg *m)
{
    if (bytes < DRAFT_HEAD)
        return dsk_err("its %d-byte header is cut", DRAFT_HEAD);
    int32_t n = geti32(p, 0), want = geti32(p, 4);
    if (lim->draft_block <= 0)
        return dsk_err("this model has no drafter");
    if (n < 0 || n > lim->max_seqs)
        return dsk_err("%d requests, a draft carries 0..%d", n, lim->max_seqs);
    if (want != 0 && want != 1)
        return dsk_err("want_conf is %d, not 0 or 1", want);
    if (bytes != DRAFT_HEAD + (size_t)n * DRAFT_BYTES)
        return dsk_err("it does not hold %d requests", n);
    engine_draft_req *d = dsk_calloc(n ? (size_t)n : 1, sizeof *d);
    if (!d)
        return -1;
    m->owned = d;
    m->drafts = d;
    m->n = n;
    m->want = want;
    for (int i = 0; i < n; i++) {
        const unsigned char *w = p + DRAFT_HEAD + (size_t)i * DRAFT_BYTES;
        d[i] = (engine_draft_req){geti32(w, 0), geti32(w, 4), get_sampling(w + 8)};
        if (!seq_ok(lim, d[i].seq))
            return dsk_err("request %d: sequence %d is not one of 0..%d", i, d[i].seq, lim->max_seqs - 1);
        if (d[i].t0 < 0 || d[i].t0 >= lim->vocab)
            return dsk_err("request %d: token id %d is outside the vocabulary (%d)", i, d[i].t0, lim->vocab);
        if (d[i].sp.top_k < 0 || d[i].sp.top_k > SAMPLE_TOP_P_CANDIDATES)
            return dsk_err("request %d: top_k %d is not in 0..%d", i, d[i].sp.top_k, SAMPLE_TOP_P_CANDIDATES);
        if (get32(w, 20))
            return dsk_err("request %d: its padding is not zero", i);
    }
    return 0;
}

static int decode_image(const unsigned char *p, size_t bytes, const plan_limits *lim, plan_msg *m)
{
    if (lim->patch_values <= 0)
        return dsk_err("this model has no vision tower");
    if (bytes < IMAGE_HEAD)
        return dsk_err("its %d-byte header is cut", IMAGE_HEAD);
    int32_t h = geti32(p, 4), w = geti32(p, 8), values = geti32(p, 12);
    m->seq = geti32(p, 0);
    m->pos = geti64(p, 16);
    if (!seq_ok(lim, m->seq))
        return dsk_err("sequence %d is not one of 0..%d", m->seq, lim->max_seqs - 1);
    if (m->pos < 0 || m->pos >= lim->context)
        return dsk_err("position %lld is outside the context (%lld)", (long long)m->pos, (long long)lim->context);
    if (values != lim->patch_values)
        return dsk_err("patches of %d values, the tower takes %d", values, lim->patch_values);
    int64_t side = (int64_t)lim->vision_ratio * lim->max_positions; /* bounds either side: no overflow below */
    if (h < 1 || w < 1 || h > side || w > side ||
        vision_span_positions(lim->vision_ratio, h, w) > lim->max_positions)
        return dsk_err("a %d x %d patch grid, more positions than the %d an image may take", h, w,
                       lim->max_positions);
    size_t pb = 2 * (size_t)h * (size_t)w * (size_t)values;
    if (bytes != IMAGE_HEAD + pb)
        return dsk_err("it does not hold a %d x %d patch grid", h, w);
    uint16_t *patches = dsk_malloc(pb); /* aligned for the tower's reads */
    if (!patches)
        return -1;
    memcpy(patches, p + IMAGE_HEAD, pb);
    m->owned = patches;
    m->image = (engine_image){patches, h, w, 0};
    memcpy(&m->image.key, p + 24, 8);
    return 0;
}

static int decode_fixed(uint32_t type, const unsigned char *p, size_t bytes, const plan_limits *lim, plan_msg *m)
{
    size_t want = type == PLAN_SHUTDOWN    ? 0
                  : type == PLAN_SEQ_OPEN  ? SEQ_OPEN_BYTES
                  : type == PLAN_SEQ_CLOSE ? SEQ_CLOSE_BYTES
                                           : COMMIT_BYTES;
    if (bytes != want)
        return dsk_err("it holds %zu bytes, not %zu", bytes, want);
    if (type == PLAN_SHUTDOWN)
        return 0;
    m->seq = geti32(p, 0);
    if (!seq_ok(lim, m->seq))
        return dsk_err("sequence %d is not one of 0..%d", m->seq, lim->max_seqs - 1);
    if (type == PLAN_SEQ_OPEN) {
        m->flags = get32(p, 4);
        m->reserve = geti64(p, 8);
        if (m->flags & ~(unsigned)ENGINE_SEQ_DRAFT)
            return dsk_err("flags %#x, only %#x is known", m->flags, (unsigned)ENGINE_SEQ_DRAFT);
        if ((m->flags & ENGINE_SEQ_DRAFT) && lim->draft_block <= 0)
            return dsk_err("drafting asked, but this model has no drafter");
        if (m->reserve < 1 || m->reserve > lim->context)
            return dsk_err("a reserve of %lld positions, the context holds %lld", (long long)m->reserve,
                           (long long)lim->context);
    } else if (type == PLAN_COMMIT) {
        m->old_len = geti64(p, 8);
        m->len = geti64(p, 16);
        if (get32(p, 4))
            return dsk_err("its padding is not zero");
        if (m->old_len < 0 || m->old_len > lim->context || m->len < 0 || m->len > lim->context)
            return dsk_err("lengths %lld and %lld, the context holds %lld", (long long)m->old_len, (long long)m->len,
                           (long long)lim->context);
    }
    return 0;
}

int plan_decode(uint32_t type, const void *payload, size_t bytes, const plan_limits *lim, plan_msg *m)
{
    const unsigned char *p = payload;
    *m = (plan_msg){.type = type};
    if (bytes > lim->max_bytes) {
        dsk_err("more than the %zu bytes a message may hold", lim->max_bytes);
        return refuse(type, bytes);
    }
    int rc;
    switch (type) {
    case PLAN_SHUTDOWN:
    case PLAN_SEQ_OPEN:
    case PLAN_SEQ_CLOSE:
    case PLAN_COMMIT: rc = decode_fixed(type, p, bytes, lim, m); break;
    case PLAN_STEP: rc = decode_step(p, bytes, lim, m); break;
    case PLAN_DRAFT: rc = decode_draft(p, bytes, lim, m); break;
    case PLAN_IMAGE: rc = decode_image(p, bytes, lim, m); break;
    default: rc = dsk_err("not a type rank 0 sends"); break;
    }
    if (rc) {
        plan_msg_free(m);
        return refuse(type, bytes);
    }
    return 0;
}

void plan_msg_free(plan_msg *m)
{
    free(m->owned);
    *m = (plan_msg){.type = m->type};
}

void plan_frame_encode(uint32_t type, size_t bytes, unsigned char out[PLAN_FRAME_BYTES])
{
    put32(out, 0, type);
    put32(out, 4, 0);
    put64(out, 8, (uint64_t)bytes);
}

int plan_frame_decode(const unsigned char in[PLAN_FRAME_BYTES], size_t max_bytes, uint32_t *type, size_t *bytes)
{
    uint64_t b;
    memcpy(&b, in + 8, 8);
    char name[16];
    if (get32(in, 4))
        return dsk_err("plan: a frame whose padding is not zero (the plan stream is out of step)");
    if (b > max_bytes)
        return dsk_err("plan: a %s message of %llu bytes announced, more than the %zu bytes a message may hold",
                       plan_type_name(get32(in, 0), name), (unsigned long long)b, max_bytes);
    *type = get32(in, 0);
    *bytes = (size_t)b;
    return 0;
}
