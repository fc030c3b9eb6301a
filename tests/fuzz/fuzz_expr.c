/* The variant spec's integer expressions on any text, over names holding the extremes of int64: an
 * error (overflow, division by zero, nesting, syntax) or a value, never a crash, a stack overflow or
 * undefined behaviour (UBSan). */
#include "builder/expr.h"
#include "tests/fuzz/fuzz_common.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"T", "K", "M", "LO", "HI", "Z"};
    static const int64_t values[] = {128, 4, -3, INT64_MIN, INT64_MAX, 0};
    expr_env env = {names, values, 6};
    char *text = malloc(size + 1);
    FUZZ_CHECK(text);
    memcpy(text, data, size);
    text[size] = 0;
    int64_t v;
    expr_eval(text, &env, &v);
    free(text);
    return 0;
}
