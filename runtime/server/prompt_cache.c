/* The prompt cache's bookkeeping (prompt_cache.h): prefix matching over token ids and image spans, the
 * choice of the entry to reuse, LRU order. */
#include "runtime/server/prompt_cache.h"
#include "runtime/common/error.h"

#include <stdlib.h>
#include <string.h>

int pc_init(prompt_cache *pc, int cap)
{
    *pc = (prompt_cache){0};
    if (cap <= 0)
        return 0;
    if (!(pc->e = dsk_calloc((size_t)cap, sizeof *pc->e)))
        return dsk_err_ctx("the prompt cache (%d sequences)", cap);
    pc->cap = cap;
    return 0;
}

static void entry_free(pc_entry *c)
{
    free(c->tokens);
    free(c->spans);
}

void pc_free(prompt_cache *pc)
{
    for (int i = 0; i < pc->n; i++)
        entry_free(&pc->e[i]);
    free(pc->e);
    *pc = (prompt_cache){0};
}

/* Whether spans (n of them) hold x exactly: the same position, length and key. */
static int has_span(const pc_span *spans, int n, const pc_span *x)
{
    for (int i = 0; i < n; i++)
        if (spans[i].pos == x->pos && spans[i].len == x->len && spans[i].key == x->key)
            return 1;
    return 0;
}

/* Cut l to the start of the first span of a (na) that starts before l and either runs past l or is not in
 * b; returns the new l. */
static int64_t cut_spans(const pc_span *a, int na, const pc_span *b, int nb, int64_t l)
{
    for (int i = 0; i < na; i++)
        if (a[i].pos < l && (a[i].pos + a[i].len > l || !has_span(b, nb, &a[i])))
            l = a[i].pos;
    return l;
}

int64_t pc_common_prefix(const pc_entry *c, const pc_query *q, int64_t limit)
{
    int64_t n = c->n_tokens < q->n ? c->n_tokens : q->n;
    if (limit < n)
        n = limit;
    int64_t l = 0;
    while (l < n && c->tokens[l] == q->tokens[l])
        l++;
    /* every cut lowers l to a span's start, which may put another span across the new end: repeat until
     * none cuts (at most one pass per span) */
    for (;;) {
        int64_t m = cut_spans(c->spans, c->n_spans, q->spans, q->n_spans, l);
        m = cut_spans(q->spans, q->n_spans, c->spans, c->n_spans, m);
        if (m == l)
            return l;
        l = m;
    }
}

int pc_find(const prompt_cache *pc, const pc_query *q, int max_rollback, int64_t *keep)
{
    int best = -1;
    int64_t best_keep = 0;
    for (int i = 0; i < pc->n; i++) {
        const pc_entry *c = &pc->e[i];
        if (c->reserve < q->reserve)
            continue;
        int64_t l = pc_common_prefix(c, q, q->n - 1);
        if (l < 1 || c->hi - l > max_rollback)
            continue;
        if (l > best_keep || (l == best_keep && c->used > pc->e[best].used)) {
            best = i;
            best_keep = l;
        }
    }
    *keep = best_keep;
    return best;
}

int pc_add(prompt_cache *pc, int seq, int64_t reserve, int64_t hi, const int32_t *prompt, int64_t n_prompt,
           const int32_t *out, int64_t n_out, const pc_span *spans, int n_spans)
{
    if (pc->n >= pc->cap)
        return dsk_err("the prompt cache holds %d sequences already", pc->cap);
    pc_entry c = {.seq = seq, .reserve = reserve, .hi = hi, .n_tokens = n_prompt + n_out, .n_spans = n_spans,
                  .used = ++pc->clock};
    c.tokens = dsk_malloc(sizeof(int32_t) * (size_t)(c.n_tokens ? c.n_tokens : 1));
    c.spans = n_spans ? dsk_malloc(sizeof(pc_span) * (size_t)n_spans) : NULL;
    if (!c.tokens || (n_spans && !c.spans)) {
        entry_free(&c);
        return dsk_err_ctx("keeping sequence %d in the prompt cache (%lld positions)", seq, (long long)c.n_tokens);
    }
    memcpy(c.tokens, prompt, sizeof(int32_t) * (size_t)n_prompt);
    if (n_out)
        memcpy(c.tokens + n_prompt, out, sizeof(int32_t) * (size_t)n_out);
    if (n_spans)
        memcpy(c.spans, spans, sizeof(pc_span) * (size_t)n_spans);
    pc->e[pc->n++] = c;
    return 0;
}

int pc_lru(const prompt_cache *pc)
{
    int lru = 0;
    for (int i = 1; i < pc->n; i++)
        if (pc->e[i].used < pc->e[lru].used)
            lru = i;
    return lru;
}

void pc_remove(prompt_cache *pc, int i)
{
    entry_free(&pc->e[i]);
    memmove(pc->e + i, pc->e + i + 1, sizeof *pc->e * (size_t)(pc->n - i - 1));
    pc->n--;
}
