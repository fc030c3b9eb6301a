/* Shared by the grammar tests and the sample tool: the model's tokenizer built the way mkmodel
 * builds it (the committed DeepSeek-V3 tokenizer.json plus the V4.1 control tokens). The random
 * walks themselves are runtime/grammar/walk.h, shared with the benchmark. */
#ifndef DSK_GRAMMAR_TEST_UTIL_H
#define DSK_GRAMMAR_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/grammar/grammar.h"
#include "runtime/grammar/walk.h"
#include "runtime/mkmodel/mkmodel.h"

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

#endif
