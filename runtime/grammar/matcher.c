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
