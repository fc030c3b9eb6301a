/* CLOCK row cache (engram_cache.h). */
#include "runtime/engram/engram_cache.h"
#include "runtime/common/error.h"

#include <stdlib.h>
#include <string.h>

static size_t home(const row_cache *c, uint64_t key)
{
    key ^= key >> 33; /* murmur3 finaliser: rows of one block are consecutive keys */
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return (size_t)key & c->mask;
}

int row_cache_init(row_cache *c, size_t bytes, size_t rec_bytes)
{
    memset(c, 0, sizeof *c);
    c->rec_bytes = rec_bytes;
    c->cap = rec_bytes ? bytes / rec_bytes : 0;
    if (c->cap > UINT32_MAX - 1)
        c->cap = UINT32_MAX - 1;
    if (!c->cap)
        return 0;
    size_t n = 2;
    while (n < 2 * c->cap)
        n <<= 1;
    c->mask = n - 1;
    c->data = dsk_malloc(c->cap * rec_bytes);
    c->key = dsk_calloc(c->cap, sizeof *c->key);
    c->ref = dsk_calloc(c->cap, 1);
    c->index = dsk_calloc(n, sizeof *c->index);
    if (!c->data || !c->key || !c->ref || !c->index) {
        row_cache_free(c);
        return dsk_err_ctx("hot-row cache of %zu records", c->cap);
    }
    return 0;
}

void row_cache_free(row_cache *c)
{
    free(c->data);
    free(c->key);
    free(c->ref);
    free(c->index);
    memset(c, 0, sizeof *c);
}

void row_cache_clear(row_cache *c)
{
    if (!c->cap)
        return;
    memset(c->key, 0, c->cap * sizeof *c->key);
    memset(c->ref, 0, c->cap);
    memset(c->index, 0, (c->mask + 1) * sizeof *c->index);
    c->used = c->hand = 0;
}

/* Index position holding key, or the empty position where it would go. */
static size_t probe(const row_cache *c, uint64_t key, int *found)
{
    size_t i = home(c, key);
    for (;;) {
        uint32_t e = c->index[i];
        if (!e) {
            *found = 0;
            return i;
        }
        if (c->key[e - 1] == key + 1) {
            *found = 1;
            return i;
        }
        i = (i + 1) & c->mask;
    }
}

const uint8_t *row_cache_get(row_cache *c, uint64_t key)
{
    if (!c->cap)
        return NULL;
    int found;
    size_t i = probe(c, key, &found);
    if (!found)
        return NULL;
    size_t s = c->index[i] - 1;
    c->ref[s] = 1;
    return c->data + s * c->rec_bytes;
}

/* Remove index position i, shifting later entries of the probe run back so lookups still find them. */
static void unindex(row_cache *c, size_t i)
{
    size_t j = i;
    c->index[i] = 0;
    for (;;) {
        j = (j + 1) & c->mask;
        uint32_t e = c->index[j];
        if (!e)
            return;
        size_t h = home(c, c->key[e - 1] - 1);
        /* e may move to i unless its home lies cyclically in (i, j]. */
        int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!stays) {
            c->index[i] = e;
            c->index[j] = 0;
            i = j;
        }
    }
}

void row_cache_put(row_cache *c, uint64_t key, const uint8_t *rec)
{
    if (!c->cap)
        return;
    int found;
    size_t i = probe(c, key, &found);
    size_t s;
    if (found) {
        s = c->index[i] - 1;
    } else {
        if (c->used < c->cap) {
            s = c->used++;
        } else {
            while (c->ref[c->hand]) {
                c->ref[c->hand] = 0;
                c->hand = (c->hand + 1) % c->cap;
            }
            s = c->hand;
            c->hand = (c->hand + 1) % c->cap;
            int f;
            size_t old = probe(c, c->key[s] - 1, &f);
            unindex(c, old);
            i = probe(c, key, &f); /* the shift may have moved the empty position */
        }
        c->key[s] = key + 1;
        c->index[i] = (uint32_t)(s + 1);
        c->ref[s] = 0; /* a row must be asked for again to earn its place: one-off rows go first */
    }
    memcpy(c->data + s * c->rec_bytes, rec, c->rec_bytes);
}
