/* The schema compiler's arena: paths, context chains and queued alternatives live here until the
 * compile ends. */
#include "runtime/common/error.h"
#include "runtime/grammar/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gs_block {
    gs_block *next;
    size_t used, cap;
    _Alignas(16) uint8_t data[];
};

void *gs_alloc(gs_ctx *s, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!s->arena || s->arena->used + n > s->arena->cap) {
        size_t cap = n > 65536 ? n : 65536;
        gs_block *b = dsk_malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = s->arena;
        b->used = 0;
        b->cap = cap;
        s->arena = b;
    }
    void *p = s->arena->data + s->arena->used;
    s->arena->used += n;
    return p;
}

const char *gs_path(gs_ctx *s, const char *path, const char *key)
{
    size_t n = strlen(path), extra = 0;
    for (const char *k = key; *k; k++)
        extra += *k == '~' || *k == '/';
    char *p = gs_alloc(s, n + strlen(key) + extra + 2);
    if (!p)
        return "(out of memory)";
    memcpy(p, path, n);
    p[n++] = '/';
    for (const char *k = key; *k; k++) {
        if (*k == '~' || *k == '/') {
            p[n++] = '~';
            p[n++] = *k == '~' ? '0' : '1';
        } else {
            p[n++] = *k;
        }
    }
    p[n] = 0;
    return p;
}

const char *gs_path_index(gs_ctx *s, const char *path, const char *key, size_t i)
{
    char idx[32];
    snprintf(idx, sizeof idx, "%zu", i);
    return gs_path(s, gs_path(s, path, key), idx);
}

void gs_arena_free(gs_ctx *s)
{
    while (s->arena) {
        gs_block *n = s->arena->next;
        free(s->arena);
        s->arena = n;
    }
}
