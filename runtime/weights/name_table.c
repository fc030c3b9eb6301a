#include "runtime/weights/name_table.h"
#include "runtime/common/error.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct name_slot {
    const char *name;
    uint64_t hash;
    int idx;
};

static uint64_t hash_name(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

static struct name_slot *probe(struct name_slot *slots, uint32_t mask, const char *name, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        struct name_slot *s = &slots[i];
        if (!s->name || (s->hash == h && !strcmp(s->name, name)))
            return s;
    }
}

int name_table_find(const name_table *t, const char *name)
{
    if (!t->slots)
        return -1;
    struct name_slot *s = probe(t->slots, t->mask, name, hash_name(name));
    return s->name ? s->idx : -1;
}

/* Double the table (or create it), keeping the load at most one half. */
static int grow(name_table *t)
{
    uint32_t cap = t->slots ? 2 * (t->mask + 1) : 64;
    struct name_slot *slots = dsk_calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    if (t->slots) {
        for (uint32_t i = 0; i <= t->mask; i++)
            if (t->slots[i].name)
                *probe(slots, cap - 1, t->slots[i].name, t->slots[i].hash) = t->slots[i];
        free(t->slots);
    }
    t->slots = slots;
    t->mask = cap - 1;
    return 0;
}

int name_table_insert(name_table *t, const char *name, int idx, int *prior)
{
    if ((!t->slots || 2 * (t->used + 1) > t->mask + 1) && grow(t) != 0)
        return -1;
    uint64_t h = hash_name(name);
    struct name_slot *s = probe(t->slots, t->mask, name, h);
    if (s->name) {
        *prior = s->idx;
        return 0;
    }
    *s = (struct name_slot){name, h, idx};
    t->used++;
    *prior = -1;
    return 0;
}

void name_table_free(name_table *t)
{
    free(t->slots);
    *t = (name_table){0};
}
