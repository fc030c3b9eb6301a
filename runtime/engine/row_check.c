/* One row's checks that need no sequence state (engine.h), in a file of their own: engine_step and a
 * follower rank's plan decoding (runtime/ranks/plan.c) both call them, and engine.c calls into the ranks. */
#include "runtime/common/error.h"
#include "runtime/engine/engine.h"

int engine_row_check(const engine_row *r, int vocab, int i)
{
    if (r->token < 0 || r->token >= vocab)
        return dsk_err("row %d: token id %d is outside the vocabulary (%d)", i, r->token, vocab);
    if (r->top_logprobs < -1 || r->top_logprobs > SAMPLE_MAX_TOP_LOGPROBS)
        return dsk_err("row %d: top_logprobs %d is not in -1..%d", i, r->top_logprobs, SAMPLE_MAX_TOP_LOGPROBS);
    const sample_params *p = &r->sp;
    if (r->sample && (!(p->temperature >= 0.0f) || !(p->top_p > 0.0f && p->top_p <= 1.0f) || p->top_k < 0 ||
                      p->top_k > SAMPLE_TOP_P_CANDIDATES))
        return dsk_err("row %d: sampling needs temperature >= 0, top_p in (0, 1], top_k in 0..%d", i,
                       SAMPLE_TOP_P_CANDIDATES);
    return 0;
}
