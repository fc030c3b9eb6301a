/* Configurations: the set of pushdown stacks a parse may be in, stepped one byte symbol at a time
 * (calls push, accepting states return). The matcher and the mask computation both step them. */
#include "runtime/common/error.h"
#include "runtime/grammar/grammar_internal.h"

#include <string.h>

void config_copy(gr_config *dst, const gr_config *src)
{
    dst->n = src->n;
    for (uint32_t i = 0; i < src->n; i++) {
        dst->depth[i] = src->depth[i];
        memcpy(dst->f[i], src->f[i], src->depth[i] * sizeof src->f[i][0]);
    }
}

static int config_add(gr_config *c, const uint32_t *st, uint32_t d)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->depth[i] == d && !memcmp(c->f[i], st, d * sizeof *st))
            return 0;
    if (c->n == GR_MAX_STACKS)
        return dsk_err("the grammar is too ambiguous here: more than %d parses at once", GR_MAX_STACKS);
    c->depth[c->n] = (uint8_t)d;
    memcpy(c->f[c->n++], st, d * sizeof *st);
    return 0;
}

int config_step_stack(const grammar *g, uint32_t *st, uint32_t d, unsigned sym, gr_config *out)
{
    uint32_t q = st[d - 1];
    uint32_t t = gr_step(g, q, sym);
    if (t) {
        st[d - 1] = t;
        int rc = config_add(out, st, d);
        st[d - 1] = q;
        if (rc)
            return -1;
    }
    uint8_t f = g->flags[q];
    if ((f & GR_CALLS) && d < GR_MAX_DEPTH) {
        for (uint32_t i = g->call_off[q]; i < g->call_off[q + 1]; i++) {
            st[d - 1] = g->calls[i].ret;
            st[d] = g->calls[i].start;
            int rc = config_step_stack(g, st, d + 1, sym, out);
            st[d - 1] = q;
            if (rc)
                return -1;
        }
    }
    if ((f & GR_ACCEPT) && !(f & GR_ROOT) && d > 1) { /* return to the caller, then take sym there */
        int rc = config_step_stack(g, st, d - 1, sym, out);
        st[d - 1] = q;
        if (rc)
            return -1;
    }
    return 0;
}

/* Add the returns each stack could make right away, and drop stacks that can do nothing else. */
static int config_normalize(const grammar *g, gr_config *c)
{
    uint32_t keep = 0;
    for (uint32_t i = 0; i < c->n; i++) { /* c->n grows as returned stacks are appended */
        uint32_t d = c->depth[i];
        uint8_t f = g->flags[c->f[i][d - 1]];
        if (d > 1 && (f & GR_ACCEPT) && !(f & GR_ROOT) && config_add(c, c->f[i], d - 1))
            return -1;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        uint32_t d = c->depth[i];
        uint8_t f = g->flags[c->f[i][d - 1]];
        if (d > 1 && (f & GR_FINAL))
            continue;
        if (keep != i) {
            c->depth[keep] = c->depth[i];
            memcpy(c->f[keep], c->f[i], d * sizeof c->f[i][0]);
        }
        keep++;
    }
    c->n = keep;
    return 0;
}

int config_step(const grammar *g, const gr_config *in, unsigned sym, gr_config *out)
{
    uint32_t st[GR_MAX_DEPTH];
    out->n = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        memcpy(st, in->f[i], in->depth[i] * sizeof *st);
        if (config_step_stack(g, st, in->depth[i], sym, out))
            return -1;
    }
    return config_normalize(g, out);
}

int config_step_bytes(const grammar *g, const gr_config *in, const uint8_t *s, size_t n, gr_config *out,
                      gr_config *tmp)
{
    if (!n) {
        config_copy(out, in);
        return 0;
    }
    /* alternate between out and tmp so that the last step lands in out */
    gr_config *dst = n % 2 ? out : tmp, *other = n % 2 ? tmp : out;
    const gr_config *src = in;
    for (size_t i = 0; i < n; i++) {
        if (config_step(g, src, s[i], dst))
            return -1;
        if (!dst->n) {
            out->n = 0;
            return 0;
        }
        src = dst;
        gr_config *x = dst;
        dst = other;
        other = x;
    }
    return 0;
}

int config_complete(const grammar *g, const uint32_t *st, uint32_t d)
{
    for (uint32_t i = 0; i < d; i++)
        if (!(g->flags[st[i]] & GR_ACCEPT))
            return 0;
    return 1;
}
