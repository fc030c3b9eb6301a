#include "builder/expr.h"
#include "runtime/common/error.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define DSK_STR_(x) #x
#define DSK_STR(x) DSK_STR_(x)

/* Nesting deeper than this ("((((...", "!!!!...", "- - - ...") is an error, not a stack overflow. */
#define EXPR_MAX_DEPTH 64

typedef struct {
    const char *text, *p;
    const expr_env *env;
    int failed;
    int depth;
} parser;

static int64_t fail(parser *ps, const char *what)
{
    if (!ps->failed) /* a long expression is shown by its first 80 characters */
        dsk_err("expression \"%.80s%s\": %s at offset %d", ps->text, strlen(ps->text) > 80 ? "..." : "", what,
                (int)(ps->p - ps->text));
    ps->failed = 1;
    return 0;
}

static void skip(parser *ps)
{
    while (isspace((unsigned char)*ps->p))
        ps->p++;
}

static int accept(parser *ps, const char *tok)
{
    skip(ps);
    size_t n = strlen(tok);
    if (strncmp(ps->p, tok, n))
        return 0;
    /* "<" must not match the start of "<=", "=" never stands alone */
    if (n == 1 && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!') && ps->p[1] == '=')
        return 0;
    ps->p += n;
    return 1;
}

static int64_t parse_or(parser *ps);

/* parse_or one level deeper; every recursion of the grammar goes through here or parse_unary. */
static int64_t parse_nested(parser *ps)
{
    if (ps->failed)
        return 0;
    if (++ps->depth > EXPR_MAX_DEPTH)
        return fail(ps, "nested more than " DSK_STR(EXPR_MAX_DEPTH) " deep");
    int64_t v = parse_or(ps);
    ps->depth--;
    return v;
}

static int64_t parse_primary(parser *ps)
{
    skip(ps);
    if (accept(ps, "(")) {
        int64_t v = parse_nested(ps);
        if (!accept(ps, ")"))
            return fail(ps, "expected ')'");
        return v;
    }
    if (isdigit((unsigned char)*ps->p)) {
        int64_t v = 0;
        while (isdigit((unsigned char)*ps->p)) {
            if (v > (INT64_MAX - (*ps->p - '0')) / 10)
                return fail(ps, "number too large");
            v = v * 10 + (*ps->p++ - '0');
        }
        return v;
    }
    if (isalpha((unsigned char)*ps->p) || *ps->p == '_') {
        const char *s = ps->p;
        while (isalnum((unsigned char)*ps->p) || *ps->p == '_')
            ps->p++;
        size_t n = (size_t)(ps->p - s);
        if ((n == 3 && (!strncmp(s, "min", 3) || !strncmp(s, "max", 3))) && accept(ps, "(")) {
            int64_t a = parse_nested(ps);
            if (!accept(ps, ","))
                return fail(ps, "expected ','");
            int64_t b = parse_nested(ps);
            if (!accept(ps, ")"))
                return fail(ps, "expected ')'");
            return s[1] == 'i' ? (a < b ? a : b) : (a > b ? a : b);
        }
        for (int i = 0; i < ps->env->n; i++)
            if (strlen(ps->env->names[i]) == n && !strncmp(ps->env->names[i], s, n))
                return ps->env->values[i];
        ps->p = s;
        return fail(ps, "unknown name");
    }
    return fail(ps, "expected a number, a name or '('");
}

static int64_t parse_unary(parser *ps)
{
    if (ps->failed)
        return 0;
    int neg = accept(ps, "-"), lnot = !neg && accept(ps, "!");
    if (!neg && !lnot)
        return parse_primary(ps);
    if (++ps->depth > EXPR_MAX_DEPTH)
        return fail(ps, "nested more than " DSK_STR(EXPR_MAX_DEPTH) " deep");
    int64_t v = parse_unary(ps);
    ps->depth--;
    if (lnot)
        return !v;
    if (v == INT64_MIN)
        return fail(ps, "-(-2^63) overflows 64 bits");
    return -v;
}

/* a op b in 64 bits, or an error naming the operation: the spec's values are any 64-bit integers */
static int64_t arith(parser *ps, char op, int64_t a, int64_t b)
{
    int64_t r = 0;
    int over = 0;
    switch (op) {
    case '+':
        over = __builtin_add_overflow(a, b, &r);
        break;
    case '-':
        over = __builtin_sub_overflow(a, b, &r);
        break;
    case '*':
        over = __builtin_mul_overflow(a, b, &r);
        break;
    default: /* '/' and '%' */
        if (b == 0)
            return fail(ps, "division by zero");
        if (a == INT64_MIN && b == -1)
            over = 1;
        else
            r = op == '/' ? a / b : a % b;
    }
    if (over) {
        char what[96];
        snprintf(what, sizeof what, "%lld %c %lld overflows 64 bits", (long long)a, op, (long long)b);
        return fail(ps, what);
    }
    return r;
}

static int64_t parse_mul(parser *ps)
{
    int64_t v = parse_unary(ps);
    for (;;) {
        if (ps->failed)
            return 0;
        if (accept(ps, "*") || accept(ps, "/") || accept(ps, "%")) {
            char op = ps->p[-1];
            int64_t d = parse_unary(ps);
            v = arith(ps, op, v, d);
        } else
            return v;
    }
}

static int64_t parse_add(parser *ps)
{
    int64_t v = parse_mul(ps);
    for (;;) {
        if (ps->failed)
            return 0;
        if (accept(ps, "+") || accept(ps, "-")) {
            char op = ps->p[-1];
            int64_t w = parse_mul(ps);
            v = arith(ps, op, v, w);
        } else
            return v;
    }
}

static int64_t parse_cmp(parser *ps)
{
    int64_t a = parse_add(ps);
    if (accept(ps, "=="))
        return a == parse_add(ps);
    if (accept(ps, "!="))
        return a != parse_add(ps);
    if (accept(ps, "<="))
        return a <= parse_add(ps);
    if (accept(ps, ">="))
        return a >= parse_add(ps);
    if (accept(ps, "<"))
        return a < parse_add(ps);
    if (accept(ps, ">"))
        return a > parse_add(ps);
    return a;
}

static int64_t parse_and(parser *ps)
{
    int64_t v = parse_cmp(ps);
    while (accept(ps, "&&")) {
        int64_t w = parse_cmp(ps);
        v = v && w;
    }
    return v;
}

static int64_t parse_or(parser *ps)
{
    int64_t v = parse_and(ps);
    while (accept(ps, "||")) {
        int64_t w = parse_and(ps);
        v = v || w;
    }
    return v;
}

int expr_eval(const char *text, const expr_env *env, int64_t *out)
{
    parser ps = {text, text, env, 0, 0};
    int64_t v = parse_or(&ps);
    skip(&ps);
    if (!ps.failed && *ps.p)
        fail(&ps, "unexpected text");
    if (ps.failed)
        return -1;
    *out = v;
    return 0;
}
