/* Matchers: the set of parses (stacks) a sequence is in, advanced symbol by symbol, and the mask
 * of the next tokens (each stack's cached token set, plus its uncertain tokens checked against
 * the stack, plus control tokens and EOS). */
#include "runtime/common/error.h"
#include "runtime/grammar/grammar_internal.h"

#include <stdlib.h>
#include <string.h>

struct grammar_matcher {
    const grammar *g;
    int finished;
    gr_config cur, t1, t2, t3; /* t*: scratch */
};

static void config_copy(gr_config *dst, const gr_config *src)
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

static int config_step(const grammar *g, const gr_config *in, unsigned sym, gr_config *out)
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

/* ---- the public matcher ---- */

int grammar_matcher_new(const grammar *g, grammar_matcher **out)
{
    grammar_matcher *m = dsk_malloc(sizeof *m);
    *out = m;
    if (!m)
        return -1;
    m->g = g;
    m->finished = 0;
    m->cur.n = 1;
    m->cur.depth[0] = 1;
    m->cur.f[0][0] = g->start;
    return 0;
}

int grammar_matcher_clone(const grammar_matcher *m, grammar_matcher **out)
{
    if (grammar_matcher_new(m->g, out))
        return -1;
    return grammar_matcher_copy(*out, m);
}

int grammar_matcher_copy(grammar_matcher *dst, const grammar_matcher *src)
{
    if (dst->g != src->g)
        return dsk_err("grammar_matcher_copy: the matchers follow different grammars");
    dst->finished = src->finished;
    config_copy(&dst->cur, &src->cur);
    return 0;
}

void grammar_matcher_free(grammar_matcher *m)
{
    free(m);
}

int grammar_is_accepting(const grammar_matcher *m)
{
    if (m->finished)
        return 0;
    for (uint32_t i = 0; i < m->cur.n; i++)
        if (config_complete(m->g, m->cur.f[i], m->cur.depth[i]))
            return 1;
    return 0;
}

int grammar_is_finished(const grammar_matcher *m)
{
    return m->finished;
}

uint32_t grammar_remaining(const grammar_matcher *m)
{
    if (m->finished)
        return 0;
    uint64_t best = UINT32_MAX;
    for (uint32_t i = 0; i < m->cur.n; i++) {
        uint64_t s = 0;
        for (uint32_t k = 0; k < m->cur.depth[i]; k++)
            s += m->g->dist[m->cur.f[i][k]];
        best = s < best ? s : best;
    }
    return (uint32_t)best;
}

int grammar_accept_token(grammar_matcher *m, int32_t id)
{
    const grammar *g = m->g;
    const grammar_vocab *v = g->v;
    if (m->finished)
        return dsk_err("token %d after the end of the grammar's output (EOS was accepted)", id);
    if (id < 0 || id >= v->size)
        return dsk_err("token %d is outside the vocabulary", id);
    if (id == v->eos) {
        if (!grammar_is_accepting(m))
            return dsk_err("EOS is not allowed here: the output is not complete");
        m->finished = 1;
        return 0;
    }
    if (v->kind[id] == GR_TOK_CONTROL) {
        if (!(g->uses_dsml && id == v->dsml))
            return dsk_err("control token %d is not allowed by the grammar", id);
        if (config_step(g, &m->cur, GR_SYM_DSML, &m->t1))
            return -1;
    } else if (v->kind[id] == GR_TOK_NONE) {
        return dsk_err("token %d is not in the tokenizer's vocabulary", id);
    } else {
        uint32_t len;
        const uint8_t *s = vocab_bytes(v, id, &len);
        if (config_step_bytes(g, &m->cur, s, len, &m->t1, &m->t2))
            return -1;
    }
    if (!m->t1.n)
        return dsk_err("token %d is not allowed here by the grammar", id);
    config_copy(&m->cur, &m->t1);
    return 0;
}

int grammar_allowed(grammar_matcher *m, uint32_t *mask)
{
    const grammar *g = m->g;
    const grammar_vocab *v = g->v;
    memset(mask, 0, v->words * sizeof *mask);
    if (m->finished)
        return 0;
    for (uint32_t i = 0; i < m->cur.n; i++)
        if (mask_stack(g, m->cur.f[i], m->cur.depth[i], mask, &m->t1, &m->t2))
            return -1;
    if (g->uses_dsml && v->dsml >= 0) {
        m->t3.n = 0;
        if (config_step(g, &m->cur, GR_SYM_DSML, &m->t3) == 0 && m->t3.n)
            mask[v->dsml / 32] |= 1u << (v->dsml & 31);
    }
    if (grammar_is_accepting(m))
        mask[v->eos / 32] |= 1u << (v->eos & 31);
    return 0;
}
