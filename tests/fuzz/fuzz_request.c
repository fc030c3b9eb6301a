/* A generation request as the server receives it (runtime/server/prepare.h: everything before
 * sched_submit), without the network or the engine. Byte 0 picks the route (bit 0: chat or completions)
 * and the server's settings (bits 1-2 the context, 3-4 the pool, 5-6 --default-max-tokens, 7 the decode
 * window); the rest is the body. The tokenizer is the real one; the grammar vocabulary is built once.
 *
 * A refusal has a status in 400..599, an error type, a non-empty printable message and a printable
 * param of at most 63 bytes, and its error body builds (what the client is sent). A prepared request has
 * a prompt of 1 to context - 1 ids in [0, vocab), 1 <= max_tokens <= context - n_prompt, a reserve that
 * holds them within the context (and the pool when set), sampling keys in range, stops of 1 to 256
 * bytes, and, when a grammar was compiled, a first mask that allows something. */
#include "runtime/common/escape.h"
#include "runtime/server/oai_reply.h"
#include "runtime/server/prepare.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

enum { VOCAB = 129280 }; /* the checkpoint's vocabulary, larger than the tokenizer's (docs/model.md) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const srv_genv *genv(void)
{
    static srv_genv env;
    static int ready;
    if (!ready) {
        if (srv_genv_init(&env, fuzz_tokenizer(), VOCAB)) {
            fprintf(stderr, "%s\n", dsk_err_msg());
            abort();
        }
        ready = 1;
    }
    return &env;
}

/* libFuzzer calls this once before any input: the vocabulary's build is not counted against the first
 * input's timeout (replay.c builds it on first use instead) */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    genv();
    return 0;
}

static void check_error(const oai_error *e)
{
    FUZZ_CHECK(e->status >= 400 && e->status <= 599 && e->type && *e->type);
    size_t n = strlen(e->message), np = strnlen(e->param, sizeof e->param);
    FUZZ_CHECK(n > 0 && dsk_is_printable(e->message, n, DSK_ESC_KEEP_NEWLINES));
    FUZZ_CHECK(np < sizeof e->param && dsk_is_printable(e->param, np, 0));
    char *body = oai_error_body(e->message, e->type, e->param, e->code);
    FUZZ_CHECK(body);
    free(body);
}

static void check_request(const srv_prepared *p, const srv_limits *lim)
{
    const srv_req *r = p->req;
    FUZZ_CHECK(r->n_prompt >= 1 && r->n_prompt < lim->context);
    for (int i = 0; i < r->n_prompt; i++)
        FUZZ_CHECK(r->prompt[i] >= 0 && r->prompt[i] < lim->vocab);
    const srv_gen *g = &r->gen;
    FUZZ_CHECK(g->max_tokens >= 1 && g->max_tokens <= lim->context - r->n_prompt);
    FUZZ_CHECK(r->reserve >= r->n_prompt + g->max_tokens && r->reserve <= lim->context);
    FUZZ_CHECK(lim->pool == 0 || r->reserve <= lim->pool);
    FUZZ_CHECK(g->sp.temperature >= 0 && g->sp.temperature <= 100 && g->sp.top_p > 0 && g->sp.top_p <= 1);
    FUZZ_CHECK(g->sp.top_k >= 0 && g->sp.top_k <= SAMPLE_TOP_P_CANDIDATES);
    FUZZ_CHECK(g->top_logprobs >= -1 && g->top_logprobs <= SAMPLE_MAX_TOP_LOGPROBS);
    FUZZ_CHECK(g->n_stops >= 0 && g->n_stops <= 16 && (g->n_stops == 0 || g->stops));
    for (int i = 0; i < g->n_stops; i++)
        FUZZ_CHECK(g->stops[i] && strlen(g->stops[i]) >= 1 && strlen(g->stops[i]) <= 256);
    if (g->grammar) {
        grammar_matcher *m;
        FUZZ_CHECK(grammar_matcher_new(g->grammar, &m) == 0);
        uint32_t *mask = calloc(lim->genv->words, sizeof *mask);
        FUZZ_CHECK(mask && grammar_allowed(m, mask) == 0);
        uint32_t any = 0;
        for (size_t i = 0; i < lim->genv->words; i++)
            any |= mask[i];
        FUZZ_CHECK(any);
        free(mask);
        grammar_matcher_free(m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const int64_t contexts[4] = {2, 16, 4096, 1 << 20};
    static const int max_tokens[4] = {1, 8, 32768, 1 << 30};
    unsigned b = data[0];
    int64_t context = contexts[(b >> 1) & 3];
    int64_t pools[4] = {0, context, context / 2 + 1, 3};
    srv_limits lim = {.tok = fuzz_tokenizer(), .genv = genv(), .served_name = "dskit", .vocab = VOCAB,
                      .window = b & 128 ? 4 : 1, .context = context, .pool = pools[(b >> 3) & 3],
                      .default_max_tokens = max_tokens[(b >> 5) & 3]};
    /* the body in a buffer of its own size: ASan sees a read past it */
    char *body = malloc(size - 1 ? size - 1 : 1);
    FUZZ_CHECK(body);
    memcpy(body, data + 1, size - 1);
    srv_prepared p;
    oai_error e = {0};
    if (srv_prepare(&lim, b & 1 ? OAI_COMPLETION : OAI_CHAT, body, size - 1, "chatcmpl-fuzz", &p, &e))
        check_error(&e);
    else {
        check_request(&p, &lim);
        srv_req_unref(p.req);
    }
    free(body);
    return 0;
}
