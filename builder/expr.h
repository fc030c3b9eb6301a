/* Integer expressions of the variant spec ("where", "block", "smem"): numbers, axis names, + - * / %,
 * comparisons, && || !, parentheses, min(a,b), max(a,b). */
#ifndef DSK_EXPR_H
#define DSK_EXPR_H

#include <stdint.h>

typedef struct {
    const char *const *names;
    const int64_t *values;
    int n;
} expr_env;

/* Evaluate text under env. Errors name the expression and the position. */
int expr_eval(const char *text, const expr_env *env, int64_t *out);

#endif
