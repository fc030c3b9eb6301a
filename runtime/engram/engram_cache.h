/* The store's hot-row cache: a fixed number of record slots, keyed by (layer slot, row), evicted by CLOCK
 * (one reference bit per slot, set by a hit; an insert into a full cache sweeps the hand, clearing bits, to the
 * first unreferenced slot). New rows come in unreferenced, so rows read once (most of a uniform hash's
 * rows) are evicted before rows that were hit. CLOCK rather than LRU: a hit only sets a bit, so the hot
 * path does no list surgery. The key index is an
 * open-addressing table (linear probing, backward-shift deletion) twice the slot count. */
#ifndef DSK_ENGRAM_CACHE_H
#define DSK_ENGRAM_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t cap;          /* record slots */
    size_t rec_bytes;    /* bytes per slot */
    uint8_t *data;       /* [cap][rec_bytes] */
    uint64_t *key;       /* [cap] key + 1; 0: free */
    uint8_t *ref;        /* [cap] CLOCK bits */
    uint32_t *index;     /* [mask + 1] slot + 1; 0: empty */
    size_t mask, used, hand;
} row_cache;

/* Room for bytes / rec_bytes records (0 records: every lookup misses, inserts do nothing). */
int row_cache_init(row_cache *c, size_t bytes, size_t rec_bytes);
void row_cache_free(row_cache *c);
void row_cache_clear(row_cache *c);

static inline uint64_t row_cache_key(int slot, int64_t row)
{
    return ((uint64_t)slot << 56) | (uint64_t)row;
}

/* The cached record of key (and its reference bit set), or NULL. */
const uint8_t *row_cache_get(row_cache *c, uint64_t key);
/* Copy rec in under key (replacing an entry of the same key; evicting by CLOCK when full). */
void row_cache_put(row_cache *c, uint64_t key, const uint8_t *rec);

#endif
