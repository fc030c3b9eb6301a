#include "runtime/engine/generate.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    engine *e;
    const gen_opts *o;
    int seq;
    int32_t *out;
    gen_stats *st;
    engine_row *rows;
    engine_out eo;
    int err;
} gen;

/* Record one chosen token; returns 1 when generation must stop after it. */
static int emit(gen *g, int32_t tok, int row)
{
    const engine_info *in = engine_get_info(g->e);
    g->out[g->st->n_out++] = tok;
    if (g->o->dump_logits &&
        fwrite(g->eo.logits + (int64_t)row * in->vocab, sizeof(float), (size_t)in->vocab, g->o->dump_logits) !=
            (size_t)in->vocab)
        g->err = dsk_err_errno("writing the logits dump");
    if (g->o->on_token && g->o->on_token(tok, g->o->ctx))
        g->err = -1;
    return g->err || g->st->n_out >= g->o->max_tokens || (g->o->stop_at_eos && tok == in->cfg->eos_token_id);
}

static engine_row row_at(const gen *g, int32_t token, int64_t pos, int sample)
{
    return (engine_row){.seq = g->seq, .token = token, .pos = pos, .sample = sample, .sp = g->o->sp,
                        .top_logprobs = -1};
}

/* Prefill in chunks; the last prompt row draws the first token. */
static int prefill(gen *g, const int32_t *prompt, int n_prompt, int32_t *tok)
{
    const engine_info *in = engine_get_info(g->e);
    int chunk = g->o->prefill_chunk > 0 && g->o->prefill_chunk < in->max_rows ? g->o->prefill_chunk : in->max_rows;
    for (int p0 = 0; p0 < n_prompt; p0 += chunk) {
        int n = n_prompt - p0 < chunk ? n_prompt - p0 : chunk;
        for (int i = 0; i < n; i++)
            g->rows[i] = row_at(g, prompt[p0 + i], p0 + i, p0 + i == n_prompt - 1);
        if (engine_step(g->e, g->rows, n, &g->eo) || engine_commit(g->e, g->seq, p0 + n))
            return -1;
        if (p0 + n == n_prompt) {
            *tok = g->eo.tokens[n - 1];
            /* the dump and the emitted row are the step's last row: shift it to row 0 */
            if (g->eo.logits && n > 1)
                memmove(g->eo.logits, g->eo.logits + (int64_t)(n - 1) * in->vocab, sizeof(float) * (size_t)in->vocab);
        }
    }
    return 0;
}

int engine_generate(engine *e, const int32_t *prompt, int n_prompt, const gen_opts *o, int32_t *out, gen_stats *st)
{
    const engine_info *in = engine_get_info(e);
    int B = in->draft_block, V = in->vocab;
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    if (n_prompt < 1)
        return dsk_err("generate: the prompt is empty");
    if (o->draft && B == 0)
        return dsk_err(in->cfg && in->cfg->n_mtp_layers > 0 ? "--draft: the %s backend does not draft yet"
                                                            : "--draft: this model has no DSpark stages (%s backend)",
                       in->backend);
    if (o->max_tokens < 1)
        return 0;
    int win = o->draft ? B + 1 : 1;
    int rows_cap = n_prompt < in->max_rows ? n_prompt : in->max_rows;
    rows_cap = rows_cap > win ? rows_cap : win;
    gen g = {.e = e, .o = o, .seq = -1, .out = out, .st = st};
    int32_t *drafts = dsk_malloc(sizeof(int32_t) * (size_t)(B > 0 ? B : 1));
    g.rows = dsk_malloc(sizeof(engine_row) * (size_t)rows_cap);
    g.eo.tokens = dsk_malloc(sizeof(int32_t) * (size_t)rows_cap);
    if (o->dump_logits)
        g.eo.logits = dsk_malloc(sizeof(float) * (size_t)rows_cap * V);
    int64_t reserve = (int64_t)n_prompt + o->max_tokens + win;
    int rc = -1;
    if (!drafts || !g.rows || !g.eo.tokens || (o->dump_logits && !g.eo.logits))
        goto done;
    if (reserve > in->context)
        reserve = in->context;
    if (n_prompt >= reserve) {
        dsk_err("context limit: a prompt of %d tokens leaves no room in a context of %lld", n_prompt,
                (long long)in->context);
        goto done;
    }
    if (engine_seq_open(e, reserve, o->draft ? ENGINE_SEQ_DRAFT : 0, &g.seq))
        goto done;
    double t0 = dsk_now();
    int32_t tok = -1;
    if (prefill(&g, prompt, n_prompt, &tok))
        goto done;
    st->prefill_s = dsk_now() - t0;
    t0 = dsk_now();
    int done = emit(&g, tok, 0);
    while (!done) {
        int64_t len = engine_seq_len(e, g.seq);
        int n = 1;
        g.rows[0] = row_at(&g, tok, len, 1);
        if (o->draft && o->max_tokens - st->n_out > 1) {
            engine_draft_req rq = {g.seq, tok, o->sp};
            if (engine_draft(e, &rq, 1, drafts, NULL))
                goto done;
            n = 1 + B;
            if (n > o->max_tokens - st->n_out)
                n = o->max_tokens - st->n_out; /* row j chooses one token: no use running more */
            for (int j = 1; j < n; j++)
                g.rows[j] = row_at(&g, drafts[j - 1], len + j, 1);
            st->rounds++;
        }
        if (len + n > reserve)
            n = (int)(reserve - len);
        if (n <= 0) {
            dsk_err("context limit: the sequence holds %lld positions, the most it may", (long long)reserve);
            goto done;
        }
        if (engine_step(e, g.rows, n, &g.eo))
            goto done;
        /* row j's own draw is the token at position len + j + 1; a draft survives only if it equals it */
        int j = 0;
        for (;; j++) {
            tok = g.eo.tokens[j];
            done = emit(&g, tok, j);
            if (done || j + 1 >= n || g.rows[j + 1].token != tok)
                break;
            st->accepted++;
        }
        if (engine_commit(e, g.seq, len + j + 1))
            goto done;
    }
    st->decode_s = dsk_now() - t0;
    rc = g.err;
done:
    if (g.seq >= 0)
        engine_seq_close(e, g.seq);
    free(drafts);
    free(g.rows);
    free(g.eo.tokens);
    free(g.eo.logits);
    return rc;
}
