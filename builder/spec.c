#include "builder/spec.h"
#include "builder/expr.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/weights/name_table.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int valid_name(const char *s, size_t cap)
{
    if (!*s || strlen(s) >= cap || !(isalpha((unsigned char)*s) || *s == '_'))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

static char *opt_str(json_t *o, const char *key, const char *dflt)
{
    json_t *v = json_object_get(o, key);
    return dsk_strdup(json_is_string(v) ? json_string_value(v) : dflt);
}

static int parse_axis(json_t *a, const char *fam, spec_axis *out)
{
    json_t *name = json_object_get(a, "name"), *values = json_object_get(a, "values"),
           *range = json_object_get(a, "range");
    if (!json_is_string(name) || !valid_name(json_string_value(name), sizeof out->name))
        return dsk_err("family %s: an axis has no valid 'name'", fam);
    strcpy(out->name, json_string_value(name));
    if (json_is_array(values) && json_array_size(values) > 0) {
        if (json_array_size(values) > SPEC_MAX_FAMILY_COMBOS)
            return dsk_err("family %s: axis %s: more than %d values", fam, out->name, SPEC_MAX_FAMILY_COMBOS);
        out->nvalues = (int)json_array_size(values);
        out->values = dsk_calloc((size_t)out->nvalues, sizeof(int64_t));
        if (!out->values)
            return -1;
        for (int i = 0; i < out->nvalues; i++) {
            json_t *v = json_array_get(values, (size_t)i);
            if (!json_is_integer(v))
                return dsk_err("family %s: axis %s: values must be integers", fam, out->name);
            out->values[i] = json_integer_value(v);
        }
    } else if (json_is_array(range) && json_array_size(range) == 2 && json_is_integer(json_array_get(range, 0)) &&
               json_is_integer(json_array_get(range, 1))) {
        int64_t lo = json_integer_value(json_array_get(range, 0)), hi = json_integer_value(json_array_get(range, 1));
        if (hi < lo || (uint64_t)hi - (uint64_t)lo > 4096) /* unsigned: [-2^63, 2^63-1] spans 2^64 - 1 */
            return dsk_err("family %s: axis %s: bad range [%lld, %lld]", fam, out->name, (long long)lo, (long long)hi);
        out->nvalues = (int)(hi - lo + 1);
        out->values = dsk_calloc((size_t)out->nvalues, sizeof(int64_t));
        if (!out->values)
            return -1;
        for (int i = 0; i < out->nvalues; i++)
            out->values[i] = lo + i;
    } else
        return dsk_err("family %s: axis %s needs 'values' (a non-empty list) or 'range' [lo, hi]", fam, out->name);
    return 0;
}

static int parse_family(json_t *f, int index, spec_family *out)
{
    json_t *fam = json_object_get(f, "family");
    if (!json_is_string(fam) || !valid_name(json_string_value(fam), MANIFEST_MAX_FAMILY + 1))
        return dsk_err("families[%d]: 'family' is missing or not a valid name", index);
    const char *name = json_string_value(fam);
    out->family = dsk_strdup(name);
    json_t *src = json_object_get(f, "source");
    if (!json_is_string(src) || strchr(json_string_value(src), '/') || strstr(json_string_value(src), ".."))
        return dsk_err("family %s: 'source' must name a file in kit/src", name);
    out->source = dsk_strdup(json_string_value(src));
    out->doc = opt_str(f, "doc", "");
    json_t *block = json_object_get(f, "block");
    if (json_is_integer(block)) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(block));
        out->block = dsk_strdup(buf);
    } else if (json_is_string(block))
        out->block = dsk_strdup(json_string_value(block));
    else
        return dsk_err("family %s: 'block' (threads per block) is missing", name);
    json_t *smem = json_object_get(f, "smem");
    if (json_is_integer(smem)) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(smem));
        out->smem = dsk_strdup(buf);
    } else
        out->smem = opt_str(f, "smem", "0");
    json_t *where = json_object_get(f, "where");
    out->where = json_is_string(where) ? dsk_strdup(json_string_value(where)) : NULL;
    out->pdl = json_is_true(json_object_get(f, "pdl"));
    json_t *suffix = json_object_get(f, "target_suffix");
    if (suffix) {
        const char *s = json_is_string(suffix) ? json_string_value(suffix) : "?";
        if (strcmp(s, "a") && strcmp(s, "f"))
            return dsk_err("family %s: 'target_suffix' must be \"a\" or \"f\"", name);
        out->target_suffix = s[0];
    }
    json_t *archs = json_object_get(f, "archs");
    if (archs) {
        size_t n = json_array_size(archs);
        if (!json_is_array(archs) || n == 0 || n > sizeof out->archs / sizeof out->archs[0])
            return dsk_err("family %s: 'archs' must be a list of 1 to %zu archs (\"sm_90\")", name,
                           sizeof out->archs / sizeof out->archs[0]);
        for (size_t i = 0; i < n; i++) {
            json_t *a = json_array_get(archs, i);
            char suf = 0;
            int sm;
            if (!json_is_string(a) || mf_arch_parse(json_string_value(a), &sm, &suf) || suf)
                return dsk_err("family %s: archs[%zu] is not an arch without suffix (\"sm_90\")", name, i);
            out->archs[out->narchs++] = sm;
        }
    }
    if (!out->family || !out->source || !out->doc || !out->block || !out->smem)
        return -1;

    json_t *axes = json_object_get(f, "axes");
    if (axes && !json_is_array(axes))
        return dsk_err("family %s: 'axes' must be a list", name);
    /* naxes counts only axes that exist, so spec_free never walks past what was allocated */
    size_t naxes = json_array_size(axes);
    if (naxes > MANIFEST_MAX_PARAMS)
        return dsk_err("family %s: %zu axes, more than %d", name, naxes, MANIFEST_MAX_PARAMS);
    out->axes = dsk_calloc(naxes + 1, sizeof(spec_axis));
    if (!out->axes)
        return -1;
    for (size_t i = 0; i < naxes; i++) {
        json_t *a = json_array_get(axes, i);
        out->naxes++;
        if (!json_is_object(a))
            return dsk_err("family %s: axes[%zu] is not an object", name, i);
        if (parse_axis(a, name, &out->axes[i]))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(out->axes[j].name, out->axes[i].name))
                return dsk_err("family %s: axis %s is declared twice", name, out->axes[i].name);
    }

    json_t *defines = json_object_get(f, "defines");
    if (defines && !json_is_object(defines))
        return dsk_err("family %s: 'defines' must be an object of integers", name);
    const char *key;
    json_t *val;
    json_object_foreach(defines, key, val)
    {
        if (out->ndefines >= MANIFEST_MAX_PARAMS || !valid_name(key, sizeof out->defines[0].name) ||
            !json_is_integer(val))
            return dsk_err("family %s: bad 'defines' entry %s (integers only)", name, key);
        strcpy(out->defines[out->ndefines].name, key);
        out->defines[out->ndefines++].value = json_integer_value(val);
    }
    json_t *flags = json_object_get(f, "flags");
    if (flags && (!json_is_array(flags) || json_array_size(flags) > SPEC_MAX_FLAGS))
        return dsk_err("family %s: 'flags' must be a list of at most %d strings", name, SPEC_MAX_FLAGS);
    size_t nflags = json_array_size(flags);
    out->flags = dsk_calloc(nflags + 1, sizeof(char *));
    if (!out->flags)
        return -1;
    for (size_t i = 0; i < nflags; i++) {
        json_t *v = json_array_get(flags, i);
        if (!json_is_string(v))
            return dsk_err("family %s: 'flags' must be strings", name);
        if (!(out->flags[i] = dsk_strdup(json_string_value(v))))
            return -1;
        out->nflags++;
    }
    json_t *params = json_object_get(f, "params");
    if (!json_is_array(params) || json_array_size(params) > MANIFEST_MAX_ARGS)
        return dsk_err("family %s: 'params' (the kernel's argument kinds) is missing or too long", name);
    out->nargs = (int)json_array_size(params);
    for (int i = 0; i < out->nargs; i++) {
        json_t *v = json_array_get(params, (size_t)i);
        if (!json_is_string(v) || mf_arg_kind_parse(json_string_value(v), &out->args[i]))
            return dsk_err_ctx("family %s: params[%d]", name, i);
    }
    return 0;
}

int spec_parse(const char *text, size_t len, const char *path, variant_spec *out)
{
    memset(out, 0, sizeof *out);
    name_table names = {0}; /* family names seen */
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return dsk_err("%s: %s (line %d)", path, jerr.text, jerr.line);
    int rc = -1;
    json_t *fmt = json_object_get(root, "format");
    json_t *fams = json_object_get(root, "families");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "dskit-variants/1")) {
        dsk_err("%s: 'format' must be \"dskit-variants/1\"", path);
        goto out;
    }
    if (!json_is_array(fams)) {
        dsk_err("%s: 'families' must be a list", path);
        goto out;
    }
    out->families = dsk_calloc(json_array_size(fams) + 1, sizeof(spec_family));
    if (!out->families)
        goto out;
    for (size_t i = 0; i < json_array_size(fams); i++) {
        out->nfamilies++;
        json_t *f = json_array_get(fams, i);
        if (!json_is_object(f)) {
            dsk_err("%s: families[%zu] is not an object", path, i);
            goto out;
        }
        if (parse_family(f, (int)i, &out->families[i])) {
            dsk_err_ctx("%s", path);
            goto out;
        }
        int prior;
        if (name_table_insert(&names, out->families[i].family, (int)i, &prior))
            goto out;
        if (prior >= 0) {
            dsk_err("%s: family %s is declared twice", path, out->families[i].family);
            goto out;
        }
    }
    rc = 0;
out:
    name_table_free(&names);
    json_decref(root);
    if (rc)
        spec_free(out);
    return rc;
}

int spec_load(const char *path, variant_spec *out)
{
    char *text;
    size_t len;
    memset(out, 0, sizeof *out);
    if (dsk_read_file_max(path, SPEC_MAX_BYTES, "variant spec", &text, &len))
        return -1;
    int rc = spec_parse(text, len, path, out);
    free(text);
    return rc;
}

int spec_family_has_arch(const spec_family *f, const char *arch)
{
    int sm;
    if (f->narchs == 0)
        return 1;
    if (mf_arch_parse(arch, &sm, NULL))
        return 0;
    for (int i = 0; i < f->narchs; i++)
        if (f->archs[i] == sm)
            return 1;
    return 0;
}

void spec_free(variant_spec *s)
{
    for (int i = 0; i < s->nfamilies; i++) {
        spec_family *f = &s->families[i];
        free(f->family);
        free(f->source);
        free(f->doc);
        free(f->where);
        free(f->block);
        free(f->smem);
        for (int a = 0; a < f->naxes; a++)
            free(f->axes[a].values);
        free(f->axes);
        for (int a = 0; a < f->nflags; a++)
            free(f->flags[a]);
        free(f->flags);
    }
    free(s->families);
    memset(s, 0, sizeof *s);
}

int spec_symbol(const char *family, const mf_param *p, int n, char *out, size_t cap)
{
    size_t len = (size_t)snprintf(out, cap, "%s", family);
    for (int i = 0; i < n && len < cap; i++) {
        long long v = (long long)p[i].value;
        unsigned long long mag = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
        len += (size_t)snprintf(out + len, cap - len, "%s%s%s%llu", i ? "_" : "__", p[i].name, v < 0 ? "m" : "", mag);
    }
    return len < cap ? 0 : -1;
}

/* The number of combinations of f's axes (before 'where'), or -1 past SPEC_MAX_FAMILY_COMBOS. */
static int64_t family_combos(const spec_family *f)
{
    int64_t n = 1;
    for (int a = 0; a < f->naxes; a++)
        if (__builtin_mul_overflow(n, (int64_t)f->axes[a].nvalues, &n) || n > SPEC_MAX_FAMILY_COMBOS)
            return -1;
    return n;
}

/* Append the variants of family f; idx[] walks the axes like an odometer. */
static int expand_family(const spec_family *f, spec_variant **out, int *n, int *cap)
{
    int idx[MANIFEST_MAX_PARAMS] = {0};
    const char *names[MANIFEST_MAX_PARAMS];
    int64_t values[MANIFEST_MAX_PARAMS];
    for (int a = 0; a < f->naxes; a++)
        names[a] = f->axes[a].name;
    expr_env env = {names, values, f->naxes};
    for (;;) {
        for (int a = 0; a < f->naxes; a++)
            values[a] = f->axes[a].values[idx[a]];
        int64_t keep = 1, block, smem;
        if (f->where && expr_eval(f->where, &env, &keep))
            return dsk_err_ctx("family %s: 'where'", f->family);
        if (keep) {
            if (expr_eval(f->block, &env, &block))
                return dsk_err_ctx("family %s: 'block'", f->family);
            if (expr_eval(f->smem, &env, &smem))
                return dsk_err_ctx("family %s: 'smem'", f->family);
            if (block < 1 || block > 1024 || smem < 0 || smem > 232448)
                return dsk_err("family %s: block %lld or smem %lld out of range", f->family, (long long)block,
                               (long long)smem);
            if (*n == SPEC_MAX_VARIANTS)
                return dsk_err("family %s: more than %d variants in all (the most a kit holds)", f->family,
                               SPEC_MAX_VARIANTS);
            if (*n == *cap) {
                *cap = *cap ? *cap * 2 : 64;
                spec_variant *v = dsk_realloc(*out, sizeof(spec_variant) * (size_t)*cap);
                if (!v)
                    return -1;
                *out = v;
            }
            spec_variant *v = &(*out)[(*n)++];
            memset(v, 0, sizeof *v);
            v->fam = f;
            v->nparams = f->naxes;
            for (int a = 0; a < f->naxes; a++) {
                strcpy(v->param[a].name, names[a]);
                v->param[a].value = values[a];
            }
            v->block = (int)block;
            v->smem = (int)smem;
            if (spec_symbol(f->family, v->param, v->nparams, v->symbol, sizeof v->symbol))
                return dsk_err("family %s: the symbol %s... is longer than %d characters", f->family, v->symbol,
                               MANIFEST_MAX_SYMBOL);
        }
        int a = f->naxes - 1;
        while (a >= 0 && ++idx[a] == f->axes[a].nvalues)
            idx[a--] = 0;
        if (a < 0)
            return 0;
    }
}

/* No two variants may share a symbol: the kit names kernels by it (family "a__K1" and family "a" with
 * axis K = 1 would). */
static int check_symbols(const spec_variant *v, int n)
{
    name_table seen = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        int prior;
        if (name_table_insert(&seen, v[i].symbol, i, &prior))
            rc = -1;
        else if (prior >= 0)
            rc = dsk_err("families %s and %s both make the symbol %s", v[prior].fam->family, v[i].fam->family,
                         v[i].symbol);
    }
    name_table_free(&seen);
    return rc;
}

int spec_expand(const variant_spec *s, spec_variant **out, int *n)
{
    int cap = 0;
    *out = NULL;
    *n = 0;
    int64_t combos = 0;
    for (int i = 0; i < s->nfamilies; i++) {
        const spec_family *f = &s->families[i];
        int64_t c = family_combos(f);
        if (c < 0) {
            dsk_err("family %s: its axes make more than %d combinations", f->family, SPEC_MAX_FAMILY_COMBOS);
            goto fail;
        }
        if ((combos += c) > SPEC_MAX_COMBOS) {
            dsk_err("family %s: the families' axes make more than %d combinations together", f->family,
                    SPEC_MAX_COMBOS);
            goto fail;
        }
        if (expand_family(f, out, n, &cap))
            goto fail;
    }
    if (check_symbols(*out, *n))
        goto fail;
    return 0;
fail:
    free(*out);
    *out = NULL;
    *n = 0;
    return -1;
}
