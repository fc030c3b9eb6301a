/* The prompt cache's bookkeeping (docs/serving.md "Prompt cache"): the sequences of finished requests,
 * kept open and idle with what they hold (the committed token ids and the image spans), and which one a
 * new request may reuse and from which position. No engine calls here: the scheduler opens, rolls back
 * and closes the sequences (sched_cache.c). Scheduler thread only. */
#ifndef DSK_SERVER_PROMPT_CACHE_H
#define DSK_SERVER_PROMPT_CACHE_H

#include <stdint.h>

/* An image span: positions [pos, pos + len), key = xxh64 of the image's bytes (engine_image.key). Two
 * images' spans hold the same token ids; only the key tells them apart. */
typedef struct {
    int64_t pos, len;
    uint64_t key;
} pc_span;

typedef struct {
    int seq;
    int64_t reserve;  /* the sequence's reservation (positions) */
    int64_t hi;       /* one past the highest position that ever ran: the rollback window counts from it */
    int32_t *tokens;  /* [n_tokens] the committed ids */
    int64_t n_tokens;
    pc_span *spans;   /* [n_spans] its images, all within the committed positions */
    int n_spans;
    uint64_t used;    /* when it was kept: the least recent is evicted first */
} pc_entry;

typedef struct {
    pc_entry *e;      /* [cap] */
    int n, cap;       /* cap 0: the cache is off */
    uint64_t clock;
} prompt_cache;

/* A new request's prompt as the cache sees it. */
typedef struct {
    const int32_t *tokens;
    int64_t n;
    const pc_span *spans;
    int n_spans;
    int64_t reserve;  /* positions its sequence must be able to hold */
} pc_query;

int pc_init(prompt_cache *pc, int cap);
/* The entries' memory; their sequences are the caller's to close first. */
void pc_free(prompt_cache *pc);

/* The longest prefix of q's first `limit` positions that c holds exactly: the same ids, and every image
 * span that starts inside it present in both with the same position, length and key; a prefix that would
 * end inside a span is cut to the span's start. */
int64_t pc_common_prefix(const pc_entry *c, const pc_query *q, int64_t limit);

/* The entry q should reuse, or -1. *keep gets the committed length to extend from or roll back to: the
 * common prefix, at most q->n - 1 (the last prompt token must run to give the first draw) and at least 1;
 * hi - keep <= max_rollback (the engine cannot roll back further); the entry's reservation covers
 * q->reserve. Of several, the one keeping the most positions, then the most recent. */
int pc_find(const prompt_cache *pc, const pc_query *q, int max_rollback, int64_t *keep);

/* Keep a sequence (pc->n < pc->cap): its committed ids are prompt[0, n_prompt) then out[0, n_out). Copies
 * everything; -1 when out of memory (nothing kept). */
int pc_add(prompt_cache *pc, int seq, int64_t reserve, int64_t hi, const int32_t *prompt, int64_t n_prompt,
           const int32_t *out, int64_t n_out, const pc_span *spans, int n_spans);

/* The least recently kept entry (pc->n > 0). */
int pc_lru(const prompt_cache *pc);

/* Drop entry i (its memory; the sequence is the caller's). Entries after it move down by one. */
void pc_remove(prompt_cache *pc, int i);

#endif
