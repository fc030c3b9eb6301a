/* A step's fill for the engine tests (CPU and GPU): copies given masks into the rows' allow words, or
 * fails on request, counting its calls. */
#ifndef DSK_TESTS_ENGINE_TEST_FILL_H
#define DSK_TESTS_ENGINE_TEST_FILL_H

#include "runtime/common/error.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    uint32_t *dst;
    const uint32_t *src;
    size_t words;
    int calls, fail;
} fill_ctx;

static inline int fill_copy(void *ctx)
{
    fill_ctx *f = ctx;
    f->calls++;
    if (f->fail)
        return dsk_err("the test's fill failed");
    memcpy(f->dst, f->src, sizeof(uint32_t) * f->words);
    return 0;
}

#endif
