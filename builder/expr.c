#include "builder/expr.h"
#include "runtime/common/error.h"

#include <ctype.h>
#include <string.h>

typedef struct {
    const char *text, *p;
    const expr_env *env;
    int failed;
} parser;

static int64_t fail(parser *ps, const char *what)
{
    if (!ps->failed)
        dsk_err("expression \"%s\": %s at offset %d", ps->text, what, (int)(ps->p - ps->text));
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

static int64_t parse_primary(parser *ps)
{
    skip(ps);
    if (accept(ps, "(")) {
        int64_t v = parse_or(ps);
        if (!accept(ps, ")"))
            return fail(ps, "expected ')'");
        return v;
    }
    if (isdigit((unsigned char)*ps->p)) {
        int64_t v = 0;
        while (isdigit((unsigned char)*ps->p)) {
            if (v > (INT64_MAX - 9) / 10)
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
            int64_t a = parse_or(ps);
            if (!accept(ps, ","))
                return fail(ps, "expected ','");
            int64_t b = parse_or(ps);
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
    if (accept(ps, "!"))
        return !parse_unary(ps);
    if (accept(ps, "-"))
        return -parse_unary(ps);
    return parse_primary(ps);
}

static int64_t parse_mul(parser *ps)
{
    int64_t v = parse_unary(ps);
    for (;;) {
        if (accept(ps, "*"))
            v *= parse_unary(ps);
        else if (accept(ps, "/") || accept(ps, "%")) {
            char op = ps->p[-1];
            int64_t d = parse_unary(ps);
            if (d == 0)
                return fail(ps, "division by zero");
            v = op == '/' ? v / d : v % d;
        } else
            return v;
    }
}

static int64_t parse_add(parser *ps)
{
    int64_t v = parse_mul(ps);
    for (;;) {
        if (accept(ps, "+"))
            v += parse_mul(ps);
        else if (accept(ps, "-"))
            v -= parse_mul(ps);
        else
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
    parser ps = {text, text, env, 0};
    int64_t v = parse_or(&ps);
    skip(&ps);
    if (!ps.failed && *ps.p)
        fail(&ps, "unexpected text");
    if (ps.failed)
        return -1;
    *out = v;
    return 0;
}
