/* Shared by the grammar tests, the sample tool and the benchmark: the model's tokenizer built the
 * way mkmodel builds it (the committed DeepSeek-V3 tokenizer.json plus the V4.1 control tokens),
 * and random walks that pick uniformly among the allowed tokens. */
#ifndef DSK_GRAMMAR_TEST_UTIL_H
#define DSK_GRAMMAR_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/grammar/grammar.h"
#include "runtime/model/mkmodel.h"

#define GT_VOCAB 129280

/* Write <dir>/tokenizer.json as mkmodel does and load it. */
static inline int gt_load_tokenizer(const char *source_dir, const char *dir, dsk_tokenizer **tok)
{
    char src[4200], path[4200];
    if (strlen(source_dir) > 4096 || strlen(dir) > 4096)
        return dsk_err("path too long");
    snprintf(src, sizeof src, "%s/data/tokenizer/deepseek-v3-tokenizer.json", source_dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    int n_added;
    if (dsk_mkdirs(dir) || mkmodel_tokenizer(src, dir, GT_VOCAB, 4096, &n_added))
        return -1;
    return tok_load(path, tok);
}

/* The ids of a mask, in order. */
static inline size_t gt_mask_ids(const uint32_t *mask, size_t words, int32_t *ids)
{
    size_t n = 0;
    for (size_t w = 0; w < words; w++)
        for (uint32_t m = mask[w]; m; m &= m - 1)
            ids[n++] = (int32_t)(w * 32 + (uint32_t)__builtin_ctz(m));
    return n;
}

typedef struct {
    const dsk_tokenizer *tok;
    const grammar_vocab *v;
    int32_t eos, dsml;
    int32_t short_ids[512]; /* single-byte tokens and control tokens: steering candidates */
    int n_short;
} gt_env;

static inline void gt_env_init(gt_env *e, const dsk_tokenizer *tok, const grammar_vocab *v)
{
    e->tok = tok;
    e->v = v;
    e->eos = tok_eos(tok);
    e->dsml = tok_id(tok, "｜DSML｜");
    e->n_short = 0;
    for (int32_t id = 0; id < tok_vocab_size(tok) && e->n_short < 511; id++) {
        size_t len;
        if (tok_bytes(tok, id, &len) && len == 1 && !tok_is_added(tok, id))
            e->short_ids[e->n_short++] = id;
    }
    if (e->dsml >= 0)
        e->short_ids[e->n_short++] = e->dsml;
}

typedef struct {
    dsk_buf text;    /* bytes of the text tokens, and the control tokens' strings */
    size_t tokens;   /* accepted, EOS included */
    int finished;    /* ended with EOS */
    double *mask_us; /* per step (when times is set) */
    size_t n_times, cap_times;
} gt_walk;

static inline int gt_bit(const uint32_t *mask, int32_t id)
{
    return id >= 0 && (mask[id / 32] >> (id & 31) & 1);
}

/* Walk from m: at each step pick uniformly among the allowed tokens, and EOS with probability 0.3
 * once allowed. After max_tokens steps, steer instead: take the allowed single-byte (or control)
 * token that leaves the fewest bytes to the end, which always makes progress. Returns -1 on a
 * grammar error, or when a mask is empty before the end. */
static inline int gt_random_walk(const gt_env *e, grammar_matcher *m, dsk_rng *r, size_t max_tokens,
                                 int times, gt_walk *out)
{
    size_t words = grammar_mask_words(e->v);
    uint32_t *mask = malloc(words * sizeof *mask);
    int32_t *ids = malloc(words * 32 * sizeof *ids);
    grammar_matcher *probe = NULL;
    int rc = -1;
    if (!mask || !ids || grammar_matcher_clone(m, &probe))
        goto done;
    for (;;) {
        double t0 = dsk_now();
        if (grammar_allowed(m, mask))
            goto done;
        double us = (dsk_now() - t0) * 1e6;
        if (times) {
            if (out->n_times == out->cap_times) {
                out->cap_times = out->cap_times ? 2 * out->cap_times : 256;
                double *t = realloc(out->mask_us, out->cap_times * sizeof *t);
                if (!t)
                    goto done;
                out->mask_us = t;
            }
            out->mask_us[out->n_times++] = us;
        }
        size_t n = gt_mask_ids(mask, words, ids);
        if (!n) {
            dsk_err("empty mask after %zu tokens", out->tokens);
            goto done;
        }
        int32_t pick = ids[dsk_rng_below(r, n)];
        if (gt_bit(mask, e->eos) && (dsk_rng_f32(r) < 0.3f || out->tokens >= max_tokens)) {
            pick = e->eos;
        } else if (out->tokens >= max_tokens) {
            uint32_t best = UINT32_MAX;
            for (int k = 0; k < e->n_short; k++) {
                int32_t c = e->short_ids[k];
                if (!gt_bit(mask, c))
                    continue;
                if (grammar_matcher_copy(probe, m) || grammar_accept_token(probe, c))
                    goto done;
                uint32_t left = grammar_remaining(probe);
                if (left < best || (left == best && dsk_rng_below(r, 2))) {
                    best = left;
                    pick = c;
                }
            }
        }
        if (grammar_accept_token(m, pick))
            goto done;
        out->tokens++;
        if (pick == e->eos) {
            out->finished = 1;
            break;
        }
        size_t len;
        const uint8_t *b = tok_bytes(e->tok, pick, &len);
        if (b && dsk_buf_append(&out->text, b, len))
            goto done;
    }
    rc = 0;
done:
    grammar_matcher_free(probe);
    free(mask);
    free(ids);
    return rc;
}

#endif
