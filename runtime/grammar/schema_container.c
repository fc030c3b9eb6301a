/* JSON Schema objects and arrays: the body after '{' or '[' through the closing bracket, members in
 * declared order with bounded whitespace, and item counts as copies or a loop. */
#include "runtime/common/error.h"
#include "runtime/grammar/schema.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t n;
    const char **names;
    size_t *lens;
    gs_at *at; /* [n + 1]: the members' schemas, then the additional members' */
    const gs_at *obj;
} obj_ctx;

static void json_sep(gs_ctx *s, uint32_t from, uint32_t to)
{
    uint32_t a = nfa_state(s->a), b = nfa_state(s->a);
    emit_ws(s->a, from, a, s->max_ws);
    nfa_str(s->a, a, b, ",");
    emit_ws(s->a, b, to, s->max_ws);
}

static int obj_member(gs_ctx *s, void *ctx, uint32_t i, uint32_t from, uint32_t to)
{
    obj_ctx *o = ctx;
    gr_nfa *a = s->a;
    uint32_t k = nfa_state(a), c1 = nfa_state(a), c2 = nfa_state(a), v = nfa_state(a);
    if (i < o->n) {
        if (gs_json_key(s, o->names[i], o->lens[i], from, k))
            return -1;
    } else {
        uint32_t q1 = nfa_then(a, from, "\""), q2 = nfa_state(a);
        if (gs_other_name(s, o->names, o->lens, o->n, NULL, q1, q2))
            return -1;
        nfa_str(a, q2, k, "\"");
    }
    emit_ws(a, k, c1, s->max_ws);
    nfa_str(a, c1, c2, ":");
    emit_ws(a, c2, v, s->max_ws);
    return s->value(s, &o->at[i], v, to, 0);
}

int gs_object_body(gs_ctx *s, const gs_alt *alt, uint32_t from, uint32_t to)
{
    const gs_at *at = &alt->at;
    const json_t *props = json_object_get(at->node, "properties");
    const json_t *req = json_object_get(at->node, "required");
    const json_t *add = json_object_get(at->node, "additionalProperties");
    if (props && !json_is_object(props))
        return dsk_err("\"properties\" at %s must be an object", at->path);
    if (req && !json_is_array(req))
        return dsk_err("\"required\" at %s must be an array of strings", at->path);
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return dsk_err("\"additionalProperties\" at %s must be a boolean or a schema", at->path);
    size_t np = json_object_size(props), nr = json_array_size(req), cap = np + nr;
    obj_ctx o = {.obj = at};
    o.names = gs_alloc(s, (cap + 1) * sizeof *o.names);
    o.lens = gs_alloc(s, (cap + 1) * sizeof *o.lens);
    o.at = gs_alloc(s, (cap + 1) * sizeof *o.at);
    uint8_t *required = gs_alloc(s, cap + 1);
    if (!o.names || !o.lens || !o.at || !required)
        return -1;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        o.names[o.n] = key;
        o.lens[o.n] = strlen(key);
        o.at[o.n] = (gs_at){v, at->doc, gs_path(s, gs_path(s, at->path, "properties"), key), at->xs, at->level};
        required[o.n++] = 0;
    }
    /* absent additionalProperties: none beside declared properties, any when none are declared */
    int has_add = add ? !json_is_false(add) : !np;
    const json_t *add_schema = add && json_is_object(add) ? add : json_true();
    o.at[cap] = (gs_at){add_schema, at->doc, add == add_schema ? gs_path(s, at->path, "additionalProperties") : at->path,
                        at->xs, at->level};
    size_t i;
    const json_t *r;
    json_array_foreach(req, i, r) {
        if (!json_is_string(r))
            return dsk_err("\"required\" at %s must be an array of strings", at->path);
        uint32_t k = 0;
        while (k < o.n && strcmp(o.names[k], json_string_value(r)))
            k++;
        if (k == o.n) { /* required but not declared: a member with the additional schema */
            if (!has_add)
                return dsk_err("required property \"%s\" at %s is not allowed (no such property, and "
                               "additionalProperties is false)", json_string_value(r), at->path);
            o.names[o.n] = json_string_value(r);
            o.lens[o.n] = json_string_length(r);
            o.at[o.n] = o.at[cap];
            o.n++;
        }
        required[k] = 1;
    }
    o.at[o.n] = o.at[cap];
    gs_members m = {o.n, required, has_add, obj_member, json_sep, &o};
    gr_nfa *a = s->a;
    uint32_t s1 = nfa_state(a), e = nfa_state(a), ne = nfa_state(a), w = nfa_state(a);
    emit_ws(a, from, s1, s->max_ws);
    if (gs_emit_members(s, &m, s1, e, ne))
        return -1;
    nfa_str(a, e, to, "}");
    emit_ws(a, ne, w, s->max_ws);
    nfa_str(a, w, to, "}");
    return a->failed ? -1 : 0;
}

int gs_emit_members(gs_ctx *s, const gs_members *m, uint32_t from, uint32_t to_empty, uint32_t to_any)
{
    gr_nfa *a = s->a;
    uint32_t n = m->n;
    uint32_t *A = gs_alloc(s, (n + 1) * 4), *B = gs_alloc(s, (n + 1) * 4), *C = gs_alloc(s, (n + 1) * 4);
    if (!A || !B || !C)
        return -1;
    for (uint32_t i = 0; i <= n; i++) {
        A[i] = i ? nfa_state(a) : from;
        B[i] = nfa_state(a);
        C[i] = nfa_state(a);
    }
    /* A: nothing written yet; B: after a member; C: after a separator. Skipping an optional member
     * moves A and C on; a member goes from A or C to the next B. */
    for (uint32_t i = 0; i < n && !a->failed; i++) {
        uint32_t k = nfa_state(a);
        nfa_eps(a, A[i], k);
        nfa_eps(a, C[i], k);
        if (m->member(s, m->ctx, i, k, B[i + 1]))
            return -1;
        if (!m->required[i]) {
            nfa_eps(a, A[i], A[i + 1]);
            nfa_eps(a, C[i], C[i + 1]);
        }
    }
    nfa_eps(a, A[n], to_empty);
    int rest_optional = 1;
    for (uint32_t i = n; i >= 1; i--) {
        if (i < n || m->additional)
            m->sep(s, B[i], C[i]);
        if (rest_optional)
            nfa_eps(a, B[i], to_any);
        rest_optional &= !m->required[i - 1];
    }
    if (m->additional) {
        uint32_t k = nfa_state(a), b = nfa_state(a), c = nfa_state(a);
        nfa_eps(a, A[n], k);
        nfa_eps(a, C[n], k);
        if (m->member(s, m->ctx, n, k, b))
            return -1;
        m->sep(s, b, c);
        nfa_eps(a, c, k);
        nfa_eps(a, b, to_any);
    }
    return a->failed ? -1 : 0;
}

int gs_array_body(gs_ctx *s, const gs_alt *alt, uint32_t from, uint32_t to)
{
    const gs_at *at = &alt->at;
    gr_nfa *a = s->a;
    const json_t *prefix = json_object_get(at->node, "prefixItems");
    const json_t *items = json_object_get(at->node, "items");
    const json_t *jmin = json_object_get(at->node, "minItems"), *jmax = json_object_get(at->node, "maxItems");
    if (prefix && !json_is_array(prefix))
        return dsk_err("\"prefixItems\" at %s must be an array of schemas", at->path);
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return dsk_err("\"items\" at %s must be a schema (a list of schemas is \"prefixItems\")", at->path);
    if ((jmin && (!json_is_integer(jmin) || json_integer_value(jmin) < 0)) ||
        (jmax && (!json_is_integer(jmax) || json_integer_value(jmax) < 0)))
        return dsk_err("\"minItems\" and \"maxItems\" at %s must be non-negative integers", at->path);
    uint64_t np = json_array_size(prefix), mn = jmin ? (uint64_t)json_integer_value(jmin) : 0;
    uint64_t mx = jmax ? (uint64_t)json_integer_value(jmax) : UINT64_MAX;
    if (json_is_false(items) && np < mx)
        mx = np;
    if (mn > mx)
        return 0; /* no array of this alternative */
    const json_t *item = items && !json_is_boolean(items) ? items : json_true();
    const char *item_path = items && !json_is_boolean(items) ? gs_path(s, at->path, "items") : at->path;
    uint32_t s1 = nfa_state(a);
    emit_ws(a, from, s1, s->max_ws);
    if (!mn)
        nfa_str(a, s1, to, "]");
    uint64_t fixed = np > mn ? np : mn; /* positions that differ from the repeating tail */
    if (!fixed)
        fixed = 1;
    uint64_t last = mx == UINT64_MAX ? fixed : mx; /* positions written out */
    uint32_t at_state = s1;
    for (uint64_t j = 0; j < last && !a->failed; j++) {
        uint32_t c = at_state, e = nfa_state(a);
        if (j) {
            c = nfa_state(a);
            json_sep(s, at_state, c);
        }
        gs_at it = {item, at->doc, item_path, at->xs, at->level};
        if (j < np)
            it = (gs_at){json_array_get(prefix, j), at->doc, gs_path_index(s, at->path, "prefixItems", j), at->xs,
                         at->level};
        if (s->value(s, &it, c, e, 0))
            return -1;
        if (j + 1 >= mn) {
            uint32_t w = nfa_state(a);
            emit_ws(a, e, w, s->max_ws);
            nfa_str(a, w, to, "]");
        }
        at_state = e;
    }
    if (mx == UINT64_MAX && !json_is_false(items)) { /* the repeating tail: a loop */
        uint32_t c = nfa_state(a);
        json_sep(s, at_state, c);
        gs_at it = {item, at->doc, item_path, at->xs, at->level};
        if (s->value(s, &it, c, at_state, 0))
            return -1;
    }
    return a->failed ? -1 : 0;
}
