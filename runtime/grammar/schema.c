/* JSON Schema structure: keywords, $ref, flattening into alternatives, the rules of recursive
 * containers, and the entry points. Objects and arrays are in schema_container.c, strings and
 * literals in schema_scalar.c, numbers in schema_number.c. */
#include "runtime/common/error.h"
#include "runtime/grammar/schema.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct gs_rule {
    int kind;      /* GS_OBJ or GS_ARR */
    uint32_t rule; /* in the builder */
    gs_alt *alts;  /* sorted by (node, level): the memo key */
    uint32_t n;
};

static const char any_schema[] =
    "{\"anyOf\": [{\"type\": \"null\"}, {\"type\": \"boolean\"}, {\"type\": \"number\"}, "
    "{\"type\": \"string\"}, {\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}, "
    "{\"type\": \"object\", \"additionalProperties\": {\"$ref\": \"#\"}}]}";

int gs_init(gs_ctx *s, gr_build *b)
{
    *s = (gs_ctx){.b = b, .a = b->rules[0], .max_ws = b->opt.max_ws, .max_levels = b->opt.max_recursion,
                   .value = gs_value};
    s->any_doc = json_loads(any_schema, 0, NULL);
    return s->any_doc ? 0 : dsk_err("internal: cannot build the any-value schema");
}

void gs_free(gs_ctx *s)
{
    gs_arena_free(s);
    free(s->rules);
    cset_free(&s->excluded);
    json_decref(s->any_doc);
    *s = (gs_ctx){0};
}

/* ---- keywords ---- */

static const char *const annotation_words[] = {
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "deprecated", "readOnly",
    "writeOnly", "contentEncoding", "contentMediaType", "$defs", "definitions", NULL};
static const char *const validation_words[] = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
    "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "pattern", "format",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static int in_list(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (!strcmp(*list, k))
            return 1;
    return 0;
}

/* Refuse unknown keywords, and keywords beside a combinator (that would be an intersection). */
static int check_keywords(const gs_at *at)
{
    const char *key, *comb = NULL;
    const json_t *v;
    json_object_foreach((json_t *)at->node, key, v) {
        if (!in_list(annotation_words, key) && !in_list(validation_words, key))
            return dsk_err("unsupported keyword \"%s\" at %s", key, at->path);
        if (!strcmp(key, "$ref") || !strcmp(key, "anyOf") || !strcmp(key, "oneOf") || !strcmp(key, "allOf")) {
            if (comb)
                return dsk_err("\"%s\" together with \"%s\" at %s is not supported", key, comb, at->path);
            comb = key;
        }
    }
    int literal = json_object_get(at->node, "enum") || json_object_get(at->node, "const");
    if (json_object_get(at->node, "enum") && json_object_get(at->node, "const"))
        return dsk_err("\"enum\" together with \"const\" at %s is not supported", at->path);
    json_object_foreach((json_t *)at->node, key, v) {
        if (in_list(annotation_words, key))
            continue;
        if (comb && strcmp(key, comb))
            return dsk_err("\"%s\" beside \"%s\" at %s (an intersection) is not supported", key, comb, at->path);
        if (literal && strcmp(key, "enum") && strcmp(key, "const") && strcmp(key, "type"))
            return dsk_err("\"%s\" beside \"%s\" at %s is not supported", key,
                           json_object_get(at->node, "enum") ? "enum" : "const", at->path);
    }
    return 0;
}

static const char *const type_names[] = {
    [GS_NULL] = "null", [GS_BOOL] = "boolean", [GS_INT] = "integer", [GS_NUM] = "number",
    [GS_STR] = "string", [GS_OBJ] = "object", [GS_ARR] = "array"};

static int type_bit(const json_t *t)
{
    for (int i = GS_NULL; i <= GS_ARR; i++)
        if (json_is_string(t) && !strcmp(json_string_value(t), type_names[i]))
            return 1 << i;
    return 0;
}

/* The types a schema allows: its "type", else the kinds its keywords constrain, else all. */
static int schema_types(const gs_at *at, int *types)
{
    const json_t *t = json_object_get(at->node, "type");
    *types = 0;
    if (json_is_array(t)) {
        size_t i;
        const json_t *e;
        json_array_foreach(t, i, e) {
            int b = type_bit(e);
            if (!b)
                return dsk_err("\"type\" at %s: %s is not a JSON Schema type", at->path,
                               json_is_string(e) ? json_string_value(e) : "a non-string");
            *types |= b;
        }
        if (!*types)
            return dsk_err("\"type\" at %s is an empty list", at->path);
        return 0;
    }
    if (t) {
        if (!(*types = type_bit(t)))
            return dsk_err("\"type\" at %s: %s is not a JSON Schema type", at->path,
                           json_is_string(t) ? json_string_value(t) : "a non-string");
        return 0;
    }
    static const struct {
        const char *key;
        int type;
    } implied[] = {{"properties", GS_OBJ}, {"required", GS_OBJ}, {"additionalProperties", GS_OBJ},
                   {"items", GS_ARR}, {"prefixItems", GS_ARR}, {"minItems", GS_ARR}, {"maxItems", GS_ARR},
                   {"pattern", GS_STR}, {"format", GS_STR}, {"minLength", GS_STR}, {"maxLength", GS_STR},
                   {"minimum", GS_NUM}, {"maximum", GS_NUM}, {"exclusiveMinimum", GS_NUM},
                   {"exclusiveMaximum", GS_NUM}};
    for (size_t i = 0; i < sizeof implied / sizeof implied[0]; i++)
        if (json_object_get(at->node, implied[i].key))
            *types |= 1 << implied[i].type;
    if (!*types)
        *types = 1 << GS_NULL | 1 << GS_BOOL | 1 << GS_NUM | 1 << GS_STR | 1 << GS_OBJ | 1 << GS_ARR;
    return 0;
}

/* Whether JSON value v has one of the types. */
static int value_has_type(const json_t *v, int types)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return types >> GS_NULL & 1;
    case JSON_TRUE:
    case JSON_FALSE:
        return types >> GS_BOOL & 1;
    case JSON_INTEGER:
        return (types >> GS_INT & 1) || (types >> GS_NUM & 1);
    case JSON_REAL: {
        double d = json_real_value(v);
        return (types >> GS_NUM & 1) || ((types >> GS_INT & 1) && fabs(d) < 1e18 && d == floor(d));
    }
    case JSON_STRING:
        return types >> GS_STR & 1;
    case JSON_ARRAY:
        return types >> GS_ARR & 1;
    default:
        return types >> GS_OBJ & 1;
    }
}

/* ---- $ref ---- */

static const json_t *resolve_ref(gs_ctx *s, const gs_at *at, const char *ref, const char **path)
{
    if (ref[0] != '#') {
        dsk_err("$ref \"%s\" at %s: only local references (\"#...\") are supported", ref, at->path);
        return NULL;
    }
    const json_t *node = at->doc;
    const char *p = ref + 1;
    *path = "#";
    while (*p == '/') {
        p++;
        char key[1024];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && (p[1] == '0' || p[1] == '1'))
                c = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof key)
                key[n++] = c;
        }
        key[n] = 0;
        if (json_is_object(node)) {
            node = json_object_get(node, key);
        } else if (json_is_array(node)) {
            char *end;
            unsigned long i = strtoul(key, &end, 10);
            node = *key && !*end ? json_array_get(node, i) : NULL;
        } else {
            node = NULL;
        }
        *path = gs_path(s, *path, key);
        if (!node)
            break;
    }
    if (!node || *p) {
        dsk_err("$ref \"%s\" at %s does not resolve", ref, at->path);
        return NULL;
    }
    return node;
}

static int on_path(const gs_xs *xs, const json_t *node)
{
    for (; xs; xs = xs->up)
        if (xs->node == node)
            return 1;
    return 0;
}

/* Flatten the target of a reference from `at`: a target already on the path recurses one level. */
static int flatten_ref(gs_ctx *s, const gs_at *at, const json_t *target, const json_t *doc, const char *path,
                       gs_alts *out)
{
    gs_xs *xs = gs_alloc(s, sizeof *xs);
    if (!xs)
        return -1;
    gs_at next = {target, doc, path, xs, at->level};
    if (on_path(at->xs, target)) {
        /* one level past the bound keeps only the scalar alternatives (gs_emit_alts drops the
         * containers there); a chain of references that never enters a container stops here */
        if (at->level > s->max_levels)
            return 0;
        next.level++;
        *xs = (gs_xs){target, NULL};
    } else {
        *xs = (gs_xs){target, at->xs};
    }
    return gs_flatten(s, &next, out);
}

/* ---- flattening ---- */

static int push_alt(gs_alts *out, int type, const gs_at *at, const json_t *lit)
{
    if (out->n == out->cap) {
        uint32_t cap = out->cap ? 2 * out->cap : 8;
        gs_alt *a = dsk_realloc(out->a, cap * sizeof *a);
        if (!a)
            return -1;
        out->a = a;
        out->cap = cap;
    }
    out->a[out->n++] = (gs_alt){type, *at, lit};
    return 0;
}

static int flatten_list(gs_ctx *s, const gs_at *at, const char *key, gs_alts *out)
{
    const json_t *list = json_object_get(at->node, key);
    if (!json_is_array(list) || !json_array_size(list))
        return dsk_err("\"%s\" at %s must be a non-empty array of schemas", key, at->path);
    if (!strcmp(key, "allOf") && json_array_size(list) != 1)
        return dsk_err("\"allOf\" at %s: only a single subschema is supported (an intersection otherwise)",
                       at->path);
    size_t i;
    const json_t *sub;
    json_array_foreach(list, i, sub) {
        gs_at next = *at;
        next.node = sub;
        next.path = gs_path_index(s, at->path, key, i);
        if (gs_flatten(s, &next, out))
            return -1;
    }
    return 0;
}

static int flatten_node(gs_ctx *s, const gs_at *at, gs_alts *out)
{
    const json_t *node = at->node;
    if (json_is_true(node))
        return flatten_ref(s, at, s->any_doc, s->any_doc, "#(any value)", out);
    if (json_is_false(node))
        return 0;
    if (!json_is_object(node))
        return dsk_err("the schema at %s must be an object or a boolean", at->path);
    if (check_keywords(at))
        return -1;
    const json_t *ref = json_object_get(node, "$ref");
    if (ref) {
        if (!json_is_string(ref))
            return dsk_err("\"$ref\" at %s must be a string", at->path);
        const char *path;
        const json_t *target = resolve_ref(s, at, json_string_value(ref), &path);
        return target ? flatten_ref(s, at, target, at->doc, path, out) : -1;
    }
    static const char *const combinators[] = {"anyOf", "oneOf", "allOf"};
    for (int i = 0; i < 3; i++)
        if (json_object_get(node, combinators[i]))
            return flatten_list(s, at, combinators[i], out);
    int types;
    if (schema_types(at, &types))
        return -1;
    const json_t *lits = json_object_get(node, "enum"), *one = json_object_get(node, "const");
    if (lits && (!json_is_array(lits) || !json_array_size(lits)))
        return dsk_err("\"enum\" at %s must be a non-empty array", at->path);
    if (lits || one) {
        size_t i, n = lits ? json_array_size(lits) : 1;
        for (i = 0; i < n; i++) {
            const json_t *v = lits ? json_array_get(lits, i) : one;
            if (value_has_type(v, types) && push_alt(out, GS_LIT, at, v))
                return -1;
        }
        return 0;
    }
    for (int t = GS_NULL; t <= GS_ARR; t++)
        if ((types >> t & 1) && !(t == GS_INT && (types >> GS_NUM & 1)) && push_alt(out, t, at, NULL))
            return -1;
    return 0;
}

int gs_flatten(gs_ctx *s, const gs_at *at, gs_alts *out)
{
    if (++s->nest > GS_MAX_NEST) {
        s->nest--;
        return dsk_err("the schema nests deeper than %d at %s", GS_MAX_NEST, at->path);
    }
    int rc = flatten_node(s, at, out);
    s->nest--;
    return rc;
}

/* ---- containers: inline, or a rule of their own when recursive ---- */

static int cmp_alt_key(const void *x, const void *y)
{
    const gs_alt *a = x, *b = y;
    if (a->at.node != b->at.node)
        return (uintptr_t)a->at.node < (uintptr_t)b->at.node ? -1 : 1;
    return a->at.level - b->at.level;
}

static int container_rule(gs_ctx *s, int kind, gs_alt *alts, uint32_t n, uint32_t *rule)
{
    qsort(alts, n, sizeof *alts, cmp_alt_key);
    for (uint32_t i = 0; i < s->n_rules; i++) {
        gs_rule *r = &s->rules[i];
        uint32_t k = 0;
        if (r->kind != kind || r->n != n)
            continue;
        while (k < n && !cmp_alt_key(&r->alts[k], &alts[k]))
            k++;
        if (k == n) {
            *rule = r->rule;
            return 0;
        }
    }
    if (s->n_rules == s->cap_rules) {
        uint32_t cap = s->cap_rules ? 2 * s->cap_rules : 16;
        gs_rule *r = dsk_realloc(s->rules, cap * sizeof *r);
        if (!r)
            return -1;
        s->rules = r;
        s->cap_rules = cap;
    }
    gs_alt *copy = gs_alloc(s, n * sizeof *copy);
    if (!copy || build_rule(s->b, rule))
        return -1;
    memcpy(copy, alts, n * sizeof *copy);
    s->rules[s->n_rules++] = (gs_rule){kind, *rule, copy, n};
    return 0;
}

int gs_drain_rules(gs_ctx *s)
{
    gr_nfa *saved = s->a;
    for (; s->next_rule < s->n_rules; s->next_rule++) {
        gs_rule r = s->rules[s->next_rule];
        s->a = s->b->rules[r.rule];
        for (uint32_t i = 0; i < r.n; i++)
            if ((r.kind == GS_OBJ ? gs_object_body : gs_array_body)(s, &r.alts[i], s->a->start, s->a->final))
                return -1;
        if (s->a->failed)
            return -1;
    }
    s->a = saved;
    return 0;
}

int gs_emit_alts(gs_ctx *s, const gs_alts *alts, int level, uint32_t from, uint32_t to, int raw_strings)
{
    gr_nfa *a = s->a;
    gs_alt *box[2] = {NULL, NULL};
    uint32_t nbox[2] = {0, 0};
    int deeper[2] = {0, 0};
    int rc = -1;
    for (uint32_t i = 0; i < alts->n && !a->failed; i++) {
        const gs_alt *alt = &alts->a[i];
        switch (alt->type) {
        case GS_LIT:
            if (gs_literal(s, alt->lit, from, to, raw_strings && json_is_string(alt->lit)) < 0)
                goto out;
            break;
        case GS_NULL:
            nfa_str(a, from, to, "null");
            break;
        case GS_BOOL:
            nfa_str(a, from, to, "true");
            nfa_str(a, from, to, "false");
            break;
        case GS_INT:
        case GS_NUM:
            if (gs_number(s, &alt->at, alt->type == GS_INT, from, to))
                goto out;
            break;
        case GS_STR:
            if (gs_string(s, &alt->at, from, to, raw_strings))
                goto out;
            break;
        default: {
            int k = alt->type == GS_ARR;
            if (alt->at.level > s->max_levels)
                break; /* the recursion bound */
            if (!box[k] && !(box[k] = dsk_malloc(alts->n * sizeof *box[k])))
                goto out;
            box[k][nbox[k]++] = *alt;
            deeper[k] |= alt->at.level > level;
        }
        }
    }
    for (int k = 0; k < 2 && !a->failed; k++) {
        if (!nbox[k])
            continue;
        uint32_t open = nfa_then(a, from, k ? "[" : "{");
        if (deeper[k]) { /* reached through a recursive $ref: a call to the containers' own rule */
            uint32_t rule;
            if (container_rule(s, k ? GS_ARR : GS_OBJ, box[k], nbox[k], &rule))
                goto out;
            nfa_call(a, open, to, rule);
            continue;
        }
        for (uint32_t i = 0; i < nbox[k]; i++)
            if ((k ? gs_array_body : gs_object_body)(s, &box[k][i], open, to))
                goto out;
    }
    rc = a->failed ? -1 : 0;
out:
    free(box[0]);
    free(box[1]);
    return rc;
}

int gs_value(gs_ctx *s, const gs_at *at, uint32_t from, uint32_t to, int raw_strings)
{
    if (++s->nest > GS_MAX_NEST) {
        s->nest--;
        return dsk_err("the schema nests deeper than %d at %s", GS_MAX_NEST, at->path);
    }
    gs_alts alts = {0};
    int rc = gs_flatten(s, at, &alts) || gs_emit_alts(s, &alts, at->level, from, to, raw_strings) ? -1 : 0;
    free(alts.a);
    s->nest--;
    return rc;
}

/* ---- entry points ---- */

static int compile_root(const grammar_vocab *v, const json_t *schema, const grammar_options *opt, grammar **out)
{
    *out = NULL;
    gr_build b;
    gs_ctx s;
    int rc = build_init(&b, v, opt);
    if (rc) {
        build_free(&b);
        return -1;
    }
    rc = gs_init(&s, &b);
    if (!rc) {
        gs_at root = {schema, schema, "#", NULL, 0};
        gs_xs *xs = gs_alloc(&s, sizeof *xs);
        if (!xs)
            rc = -1;
        else
            *xs = (gs_xs){schema, NULL};
        root.xs = xs;
        if (!rc)
            rc = gs_value(&s, &root, s.a->start, s.a->final, 0) || gs_drain_rules(&s) ? -1 : 0;
    }
    if (!rc)
        rc = build_finish(&b, out);
    gs_free(&s);
    build_free(&b);
    return rc;
}

int grammar_from_schema(const grammar_vocab *v, const json_t *schema, const grammar_options *opt, grammar **out)
{
    if (!schema)
        return dsk_err("compiling the JSON schema: no schema");
    return compile_root(v, schema, opt, out) ? dsk_err_ctx("compiling the JSON schema") : 0;
}

int grammar_from_json_object(const grammar_vocab *v, const grammar_options *opt, grammar **out)
{
    json_t *schema = json_pack("{s:s}", "type", "object");
    if (!schema)
        return dsk_err("out of memory");
    int rc = compile_root(v, schema, opt, out);
    json_decref(schema);
    return rc ? dsk_err_ctx("compiling the json_object grammar") : 0;
}
