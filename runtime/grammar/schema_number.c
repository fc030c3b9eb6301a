/* JSON Schema numbers: integer and number grammars, and their bounds as digit automata compared
 * exactly in decimal. */
#include "runtime/common/error.h"
#include "runtime/grammar/schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INT_DIGITS 18 /* fits int64, so every JSON parser reads it exactly */
#define MAX_DEC_DIGITS 15 /* bounded numbers: digits in all, so double rounding keeps comparisons */

static void digits_edge(gr_nfa *a, uint32_t from, uint32_t to, int lo, int hi)
{
    nfa_edge(a, from, to, (unsigned)('0' + lo), (unsigned)('0' + hi));
}

static void any_digits(gr_nfa *a, uint32_t from, uint32_t to, int n)
{
    uint32_t at = from;
    for (int i = 0; i < n; i++) {
        uint32_t nx = i + 1 == n ? to : nfa_state(a);
        digits_edge(a, at, nx, 0, 9);
        at = nx;
    }
    if (!n)
        nfa_eps(a, from, to);
}

static int all_of(const char *s, int n, char c)
{
    for (int i = 0; i < n; i++)
        if (s[i] != c)
            return 0;
    return 1;
}

/* Digit strings of n digits between x and y (x <= y, both n digits). */
static void same_len(gr_nfa *a, uint32_t from, uint32_t to, const char *x, const char *y, int n)
{
    if (!n) {
        nfa_eps(a, from, to);
        return;
    }
    int x0 = x[0] - '0', y0 = y[0] - '0';
    if (all_of(x + 1, n - 1, '0') && all_of(y + 1, n - 1, '9')) {
        uint32_t m = nfa_state(a);
        digits_edge(a, from, m, x0, y0);
        any_digits(a, m, to, n - 1);
        return;
    }
    static const char nines[] = "9999999999999999999", zeros[] = "0000000000000000000";
    uint32_t m = nfa_state(a);
    digits_edge(a, from, m, x0, x0);
    if (x0 == y0) {
        same_len(a, m, to, x + 1, y + 1, n - 1);
        return;
    }
    same_len(a, m, to, x + 1, nines, n - 1);
    if (x0 + 1 <= y0 - 1) {
        uint32_t mid = nfa_state(a);
        digits_edge(a, from, mid, x0 + 1, y0 - 1);
        any_digits(a, mid, to, n - 1);
    }
    uint32_t last = nfa_state(a);
    digits_edge(a, from, last, y0, y0);
    same_len(a, last, to, zeros, y + 1, n - 1);
}

/* Callback per digit count d: the integers lo..hi of d digits have been written from `from` to mid. */
typedef void (*after_int)(gs_ctx *s, void *ctx, int d, uint32_t mid, uint32_t to);

/* Non-negative integers lo..hi without leading zeros. */
static void uint_range(gs_ctx *s, uint32_t from, uint32_t to, uint64_t lo, uint64_t hi, after_int then, void *ctx)
{
    gr_nfa *a = s->a;
    uint64_t p = 1;
    for (int d = 1; d <= MAX_INT_DIGITS && lo <= hi; d++, p *= 10) {
        uint64_t first = d == 1 ? 0 : p, last = p * 10 - 1;
        if (hi < first)
            break;
        if (lo > last)
            continue;
        uint64_t x = lo > first ? lo : first, y = hi < last ? hi : last;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%0*llu", d, (unsigned long long)x);
        snprintf(ys, sizeof ys, "%0*llu", d, (unsigned long long)y);
        uint32_t mid = then ? nfa_state(a) : to;
        same_len(a, from, mid, xs, ys, d);
        if (then)
            then(s, ctx, d, mid, to);
    }
}

/* A decimal bound: sign, integer digits and fraction digits (no trailing zeros). */
typedef struct {
    int neg;
    char ip[400], fp[400];
    int excl, set;
} decimal;

static int to_decimal(const json_t *v, int excl, decimal *out)
{
    *out = (decimal){.excl = excl, .set = 1};
    char t[64];
    if (json_is_integer(v)) {
        snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v));
    } else {
        double d = json_real_value(v);
        if (!isfinite(d))
            return -1;
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*e", p - 1, d);
            if (strtod(t, NULL) == d)
                break;
        }
    }
    const char *c = t;
    if (*c == '-') {
        out->neg = 1;
        c++;
    }
    char digits[64];
    int nd = 0, exp = 0, point = -1;
    for (; *c && *c != 'e'; c++) {
        if (*c == '.')
            point = nd;
        else
            digits[nd++] = *c;
    }
    if (point < 0)
        point = nd;
    if (*c == 'e')
        exp = atoi(c + 1);
    point += exp; /* digits[0..point) is the integer part */
    int ni = 0, nf = 0;
    for (int i = 0; i < point && ni < 390; i++)
        out->ip[ni++] = i < nd ? digits[i] : '0';
    for (int i = point; i < nd && nf < 390; i++)
        out->fp[nf++] = i < 0 ? '0' : digits[i];
    int lead = 0; /* leading zeros of the integer part */
    while (lead + 1 < ni && out->ip[lead] == '0')
        lead++;
    memmove(out->ip, out->ip + lead, (size_t)(ni - lead));
    ni -= lead;
    if (!ni)
        out->ip[ni++] = '0';
    out->ip[ni] = 0;
    while (nf && out->fp[nf - 1] == '0')
        nf--;
    out->fp[nf] = 0;
    if (!strcmp(out->ip, "0") && !nf)
        out->neg = 0;
    return 0;
}

/* Compare magnitudes |a| and |b|. */
static int mag_cmp(const decimal *a, const decimal *b)
{
    size_t la = strlen(a->ip), lb = strlen(b->ip);
    if (la != lb)
        return la < lb ? -1 : 1;
    int c = strcmp(a->ip, b->ip);
    if (c)
        return c < 0 ? -1 : 1;
    c = strcmp(a->fp, b->fp); /* no trailing zeros: plain string order is numeric order */
    return c < 0 ? -1 : c > 0;
}

static int dec_cmp(const decimal *a, const decimal *b)
{
    if (a->neg != b->neg)
        return a->neg ? -1 : 1;
    int c = mag_cmp(a, b);
    return a->neg ? -c : c;
}

/* Fraction digit strings f (none, or "." then 1..max digits) with lo <= f (lo < f if lo->excl) and
 * f <= hi (f < hi), comparing as decimals; lo/hi may be NULL. */
enum { EQ, GT, LT };

typedef struct {
    const decimal *lo, *hi;
} frac_bounds;

static int frac_ok(const frac_bounds *fb, int k, int clo, int chi)
{
    if (fb->lo) {
        int rest = (size_t)k < strlen(fb->lo->fp); /* f is a prefix of lo's digits: f < lo */
        if (clo == LT || (clo == EQ && (rest || fb->lo->excl)))
            return 0;
    }
    if (fb->hi) {
        int rest = (size_t)k < strlen(fb->hi->fp);
        if (chi == GT || (chi == EQ && !rest && fb->hi->excl))
            return 0;
    }
    return 1;
}

static int cmp_digit(const decimal *b, int k, int c, int state)
{
    if (state != EQ)
        return state;
    int bd = (size_t)k < strlen(b->fp) ? b->fp[k] - '0' : 0;
    return c > bd ? GT : c < bd ? LT : EQ;
}

static void fraction(gs_ctx *s, const frac_bounds *fb, int max, uint32_t from, uint32_t to)
{
    gr_nfa *a = s->a;
    if (frac_ok(fb, 0, EQ, EQ))
        nfa_eps(a, from, to);
    if (max <= 0)
        return;
    uint32_t cur[9], nxt[9];
    for (int i = 0; i < 9; i++)
        cur[i] = GR_NONE;
    cur[EQ * 3 + EQ] = nfa_then(a, from, ".");
    for (int k = 0; k < max && !a->failed; k++) {
        for (int i = 0; i < 9; i++)
            nxt[i] = GR_NONE;
        for (int i = 0; i < 9; i++) {
            if (cur[i] == GR_NONE)
                continue;
            for (int c = 0; c <= 9; c++) {
                int lo = fb->lo ? cmp_digit(fb->lo, k, c, i / 3) : GT;
                int hi = fb->hi ? cmp_digit(fb->hi, k, c, i % 3) : LT;
                int j = lo * 3 + hi;
                if ((fb->lo && lo == LT) || (fb->hi && hi == GT))
                    continue; /* already out of bounds: no longer digits can fix it */
                if (nxt[j] == GR_NONE) {
                    nxt[j] = nfa_state(a);
                    if (frac_ok(fb, k + 1, lo, hi))
                        nfa_eps(a, nxt[j], to);
                }
                digits_edge(a, cur[i], nxt[j], c, c);
            }
        }
        memcpy(cur, nxt, sizeof cur);
    }
}

typedef struct {
    frac_bounds fb;
} frac_ctx;

static void any_fraction(gs_ctx *s, void *ctx, int d, uint32_t mid, uint32_t to)
{
    frac_bounds none = {NULL, NULL};
    fraction(s, ctx ? &((frac_ctx *)ctx)->fb : &none, MAX_DEC_DIGITS - d, mid, to);
}

static uint64_t ip_value(const decimal *d, int *big)
{
    *big = strlen(d->ip) > MAX_DEC_DIGITS;
    return *big ? 0 : strtoull(d->ip, NULL, 10);
}

/* Magnitudes m >= 0 (as I[.F]) with lo <= m <= hi (each optional, inclusive or not). */
static void magnitude(gs_ctx *s, const decimal *lo, const decimal *hi, uint32_t from, uint32_t to)
{
    const uint64_t top = 999999999999999ull; /* MAX_DEC_DIGITS nines */
    int lo_big = 0, hi_big = 0;
    uint64_t li = lo ? ip_value(lo, &lo_big) : 0, hi_i = hi ? ip_value(hi, &hi_big) : top;
    if (lo_big)
        return; /* above every number written here */
    if (hi_big)
        hi = NULL, hi_i = top;
    if (lo && hi && mag_cmp(lo, hi) > 0)
        return;
    if (!hi) { /* I > li with any fraction, and I == li above lo */
        if (li < top)
            uint_range(s, from, to, li + 1, top, any_fraction, NULL);
    } else if (li + 1 <= hi_i - 1 && hi_i > 0) {
        uint_range(s, from, to, li + 1, hi_i - 1, any_fraction, NULL);
    }
    frac_ctx c_lo = {{lo, hi && li == hi_i ? hi : NULL}}, c_hi = {{NULL, hi}};
    uint_range(s, from, to, li, li, any_fraction, &c_lo); /* I == li: fraction within lo (and hi) */
    if (hi && hi_i > li)
        uint_range(s, from, to, hi_i, hi_i, any_fraction, &c_hi);
}

static int number_bound(const gs_at *at, const char *key, const json_t **out)
{
    *out = json_object_get(at->node, key);
    if (*out && !json_is_number(*out))
        return dsk_err("\"%s\" at %s must be a number", key, at->path);
    return 0;
}

/* The tighter of an inclusive and an exclusive bound (lower: the larger). */
static void pick_bound(const json_t *incl, const json_t *excl, int lower, decimal *out)
{
    decimal a, b;
    out->set = 0;
    if (incl && !to_decimal(incl, 0, &a))
        *out = a;
    if (excl && !to_decimal(excl, 1, &b)) {
        int c = out->set ? dec_cmp(&b, out) : 0;
        if (!out->set || (lower ? c >= 0 : c <= 0))
            *out = b;
    }
}

static void int_bounds(const json_t *incl, const json_t *excl, int lower, long long *out)
{
    const double lim = 999999999999999999.0;
    double best = lower ? -lim : lim;
    if (incl) {
        double v = json_number_value(incl);
        best = lower ? fmax(best, ceil(v)) : fmin(best, floor(v));
    }
    if (excl) {
        double v = json_number_value(excl);
        best = lower ? fmax(best, floor(v) + 1) : fmin(best, ceil(v) - 1);
    }
    best = fmax(-lim, fmin(lim, best));
    *out = (long long)best;
    /* exact for integer bounds given as JSON integers (doubles lose digits above 2^53) */
    if (incl && json_is_integer(incl) && !excl)
        *out = json_integer_value(incl) < -(long long)lim ? -(long long)lim
             : json_integer_value(incl) > (long long)lim ? (long long)lim
                                                           : json_integer_value(incl);
}

int gs_number(gs_ctx *s, const gs_at *at, int integer, uint32_t from, uint32_t to)
{
    gr_nfa *a = s->a;
    const json_t *mn, *mx, *xmn, *xmx;
    if (number_bound(at, "minimum", &mn) || number_bound(at, "maximum", &mx) ||
        number_bound(at, "exclusiveMinimum", &xmn) || number_bound(at, "exclusiveMaximum", &xmx))
        return -1;
    uint32_t neg = nfa_state(a);
    if (!mn && !mx && !xmn && !xmx) { /* -?(0|[1-9][0-9]{0,17}) (. digits)? (e digits)? */
        uint32_t ip = nfa_state(a), one = nfa_state(a);
        nfa_eps(a, from, neg);
        nfa_str(a, from, neg, "-");
        nfa_str(a, neg, ip, "0");
        digits_edge(a, neg, one, 1, 9);
        uint32_t at_d = one;
        nfa_eps(a, one, ip);
        for (int i = 1; i < MAX_INT_DIGITS; i++) {
            uint32_t nx = nfa_state(a);
            digits_edge(a, at_d, nx, 0, 9);
            nfa_eps(a, nx, ip);
            at_d = nx;
        }
        if (integer) {
            nfa_eps(a, ip, to);
            return a->failed ? -1 : 0;
        }
        uint32_t fr = nfa_state(a), ex = nfa_state(a), es = nfa_state(a), ed = nfa_state(a);
        nfa_eps(a, ip, fr);
        uint32_t dot = nfa_then(a, ip, "."), at_f = dot;
        for (int i = 0; i < 16; i++) {
            uint32_t nx = nfa_state(a);
            digits_edge(a, at_f, nx, 0, 9);
            nfa_eps(a, nx, fr);
            at_f = nx;
        }
        nfa_eps(a, fr, to);
        nfa_str(a, fr, ex, "e");
        nfa_str(a, fr, ex, "E");
        nfa_eps(a, ex, es);
        nfa_str(a, ex, es, "+");
        nfa_str(a, ex, es, "-");
        digits_edge(a, es, ed, 0, 9);
        nfa_eps(a, ed, to);
        uint32_t ed2 = nfa_state(a);
        digits_edge(a, ed, ed2, 0, 9);
        nfa_eps(a, ed2, to);
        return a->failed ? -1 : 0;
    }
    if (integer) {
        long long lo, hi;
        int_bounds(mn, xmn, 1, &lo);
        int_bounds(mx, xmx, 0, &hi);
        if (lo > hi)
            return 0; /* no such integer */
        if (hi >= 0)
            uint_range(s, from, to, (uint64_t)(lo > 0 ? lo : 0), (uint64_t)hi, NULL, NULL);
        if (lo < 0) {
            nfa_str(a, from, neg, "-");
            uint_range(s, neg, to, (uint64_t)(hi < -1 ? -hi : 1), (uint64_t)-lo, NULL, NULL);
        }
        return a->failed ? -1 : 0;
    }
    decimal lo, hi; /* x >= lo, x <= hi (or strict) */
    pick_bound(mn, xmn, 1, &lo);
    pick_bound(mx, xmx, 0, &hi);
    if (lo.set && hi.set && dec_cmp(&lo, &hi) > 0)
        return 0;
    /* x >= 0: magnitude bounds are lo (when positive) and hi (when not negative) */
    int pos_lo = lo.set && !lo.neg, pos_hi = hi.set;
    if (!(hi.set && hi.neg))
        magnitude(s, pos_lo ? &lo : NULL, pos_hi ? &hi : NULL, from, to);
    /* x = -m: x >= lo means m <= -lo (lo negative); x <= hi means m >= -hi (hi negative) */
    if (!(lo.set && !lo.neg && (strcmp(lo.ip, "0") || lo.fp[0] || lo.excl))) {
        decimal m_hi = lo, m_lo = hi;
        m_hi.neg = m_lo.neg = 0;
        int hi_zero = hi.set && !strcmp(hi.ip, "0") && !hi.fp[0];
        nfa_str(a, from, neg, "-");
        magnitude(s, hi.set && (hi.neg || hi_zero) ? &m_lo : NULL, lo.set ? &m_hi : NULL, neg, to);
    }
    return a->failed ? -1 : 0;
}
