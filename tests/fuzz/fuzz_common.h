/* Shared by the libFuzzer targets: the real tokenizer, loaded once. */
#ifndef DSK_FUZZ_COMMON_H
#define DSK_FUZZ_COMMON_H

#include "runtime/common/error.h"
#include "runtime/tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

/* The committed tokenizer under the source tree (DSKIT_SOURCE_DIR is set by CMake at build time). */
static inline dsk_tokenizer *fuzz_tokenizer(void)
{
    static dsk_tokenizer *tok;
    if (!tok && tok_load(DSKIT_SOURCE_DIR "/data/tokenizer/deepseek-v3-tokenizer.json", &tok)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        abort();
    }
    return tok;
}

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
