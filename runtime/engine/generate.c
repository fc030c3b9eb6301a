#include "runtime/engine/generate.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/ref/sampling.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    float temperature;
    uint64_t seed;
} sample_ctx;

/* Drafts are drawn with the same keyed noise the target uses at that position. */
static int32_t draft_sample(const float *logits, int vocab, int64_t pos, void *ctx)
{
    const sample_ctx *sc = ctx;
    return sample_token(logits, vocab, sc->temperature, sc->seed, pos);
}

/* Record one chosen token; returns 1 when generation must stop after it. */
static int emit(const cpu_model *m, const gen_opts *o, int32_t tok, const float *row, int32_t *out, gen_stats *st,
                int *err)
{
    out[st->n_out++] = tok;
    if (o->dump_logits &&
        fwrite(row, sizeof(float), (size_t)m->cfg.vocab_size, o->dump_logits) != (size_t)m->cfg.vocab_size)
        *err = dsk_err_errno("writing the logits dump");
    if (o->on_token && o->on_token(tok, o->ctx))
        *err = -1;
    return *err || st->n_out >= o->max_tokens || (o->stop_at_eos && tok == m->cfg.eos_token_id);
}

int model_generate(const cpu_model *m, const int32_t *prompt, int n_prompt, const gen_opts *o, int32_t *out,
                   gen_stats *st)
{
    const model_config *c = &m->cfg;
    int V = c->vocab_size, B = c->dspark_block_size, tw = c->n_dspark_targets * c->dim;
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    if (n_prompt < 1)
        return dsk_err("generate: the prompt is empty");
    if (o->draft && c->n_mtp_layers == 0)
        return dsk_err("--draft: this model has no DSpark stages");
    if (o->max_tokens < 1)
        return 0;
    int win = o->draft ? B + 1 : 1, taps_rows = n_prompt > win ? n_prompt : win;
    cpu_seq *s = NULL;
    float *logits = dsk_malloc(sizeof(float) * (size_t)win * V);
    uint16_t *taps = o->draft ? dsk_malloc(sizeof(uint16_t) * (size_t)taps_rows * tw) : NULL;
    int32_t *rows = dsk_malloc(sizeof(int32_t) * (size_t)win);
    int32_t *drafts = dsk_malloc(sizeof(int32_t) * (size_t)(B > 0 ? B : 1));
    sample_ctx sc = {o->temperature, o->seed};
    int err = 0;
    if (!logits || (o->draft && !taps) || !rows || !drafts ||
        cpu_seq_new(m, (int64_t)n_prompt + o->max_tokens + 8, &s))
        goto fail;
    double t0 = dsk_now();
    if (cpu_forward(m, s, prompt, n_prompt, n_prompt - 1, logits, taps))
        goto fail;
    s->len = n_prompt;
    if (o->draft && cpu_draft_feed(m, s, taps, n_prompt))
        goto fail;
    int32_t tok = sample_token(logits, V, o->temperature, o->seed, s->len);
    st->prefill_s = dsk_now() - t0;
    t0 = dsk_now();
    int done = emit(m, o, tok, logits, out, st, &err);
    while (!done) {
        int n = 1;
        rows[0] = tok;
        if (o->draft && o->max_tokens - st->n_out > 1) {
            if (cpu_draft(m, s, tok, draft_sample, &sc, drafts, NULL))
                goto fail;
            n = 1 + B;
            if (n > o->max_tokens - st->n_out)
                n = o->max_tokens - st->n_out; /* row j chooses one token: no use running more */
            memcpy(rows + 1, drafts, sizeof(int32_t) * (size_t)(n - 1));
            st->rounds++;
        }
        if (s->len + n > s->cap)
            n = (int)(s->cap - s->len);
        if (n <= 0) {
            dsk_err("context limit: the sequence holds %lld positions, the most this model takes", (long long)s->cap);
            goto fail;
        }
        if (cpu_forward(m, s, rows, n, 0, logits, taps))
            goto fail;
        /* row j's own draw is the token at position len + j + 1; a draft survives only if it equals it */
        int j = 0;
        for (;; j++) {
            tok = sample_token(logits + (int64_t)j * V, V, o->temperature, o->seed, s->len + j + 1);
            done = emit(m, o, tok, logits + (int64_t)j * V, out, st, &err);
            if (done || j + 1 >= n || rows[j + 1] != tok)
                break;
            st->accepted++;
        }
        s->len += j + 1;
        if (o->draft && cpu_draft_feed(m, s, taps, j + 1))
            goto fail;
    }
    st->decode_s = dsk_now() - t0;
    cpu_seq_free(s);
    free(logits);
    free(taps);
    free(rows);
    free(drafts);
    return err;
fail:
    cpu_seq_free(s);
    free(logits);
    free(taps);
    free(rows);
    free(drafts);
    return -1;
}
