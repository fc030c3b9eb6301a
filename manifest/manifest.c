#include "manifest/manifest.h"
#include "runtime/common/error.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const arg_names[] = {"ptr", "i32", "u32", "i64", "u64", "f32"};

const char *mf_arg_kind_name(mf_arg_kind k)
{
    return (unsigned)k < sizeof arg_names / sizeof arg_names[0] ? arg_names[k] : "?";
}

int mf_arg_kind_parse(const char *s, mf_arg_kind *out)
{
    for (size_t i = 0; i < sizeof arg_names / sizeof arg_names[0]; i++)
        if (!strcmp(s, arg_names[i])) {
            *out = (mf_arg_kind)i;
            return 0;
        }
    return dsk_err("unknown argument kind '%s' (known: ptr, i32, u32, i64, u64, f32)", s);
}

int mf_arch_parse(const char *arch, int *sm, char *suffix)
{
    if (strncmp(arch, "sm_", 3) || !isdigit((unsigned char)arch[3]))
        return dsk_err("unknown arch '%s' (expected sm_NN, e.g. sm_90, sm_121)", arch);
    char *end;
    long v = strtol(arch + 3, &end, 10);
    char suf = 0;
    if (*end == 'a' || *end == 'f')
        suf = *end++;
    if (*end || v < 50 || v > 200)
        return dsk_err("unknown arch '%s' (expected sm_NN, e.g. sm_90, sm_121)", arch);
    if (sm)
        *sm = (int)v;
    if (suffix)
        *suffix = suf;
    return 0;
}

static int param_cmp(const void *a, const void *b)
{
    return strcmp(((const mf_param *)a)->name, ((const mf_param *)b)->name);
}

int mf_variant_key(const char *family, const mf_param *params, int nparams, char *out, size_t cap)
{
    mf_param sorted[MANIFEST_MAX_PARAMS];
    if (nparams > MANIFEST_MAX_PARAMS)
        return dsk_err("%s: too many parameters (%d)", family, nparams);
    memcpy(sorted, params, sizeof(mf_param) * (size_t)nparams);
    qsort(sorted, (size_t)nparams, sizeof(mf_param), param_cmp);
    size_t n = (size_t)snprintf(out, cap, "%s:", family);
    for (int i = 0; i < nparams && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s=%lld", i ? "," : "", sorted[i].name,
                              (long long)sorted[i].value);
    if (n >= cap)
        return dsk_err("%s: variant key too long", family);
    return 0;
}

int mf_params_parse(const char *text, mf_param *out, int cap, int *n)
{
    *n = 0;
    const char *p = text;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq || eq == p)
            return dsk_err("bad parameter list '%s' (expected NAME=INT,...)", text);
        size_t nl = (size_t)(eq - p);
        if (*n >= cap || nl >= sizeof out->name)
            return dsk_err("bad parameter list '%s' (too many or too long names)", text);
        memcpy(out[*n].name, p, nl);
        out[*n].name[nl] = 0;
        char *end;
        out[*n].value = strtoll(eq + 1, &end, 10);
        if (end == eq + 1 || (*end && *end != ','))
            return dsk_err("bad parameter list '%s' (value of %s is not an integer)", text, out[*n].name);
        (*n)++;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* ---- parsing ---- */

static int get_str(json_t *obj, const char *key, const char *where, const char **out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        return dsk_err("%s: field '%s' is missing or not a string", where, key);
    *out = json_string_value(v);
    return 0;
}

static int get_int(json_t *obj, const char *key, const char *where, long long lo, long long hi, long long *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        return dsk_err("%s: field '%s' is missing or not an integer", where, key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return dsk_err("%s: field '%s' = %lld is out of range [%lld, %lld]", where, key, x, lo, hi);
    *out = x;
    return 0;
}

static int is_hex32(const char *s)
{
    if (strlen(s) != 32)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return 0;
    return 1;
}

static int parse_kernel(json_t *k, int index, mf_kernel *out)
{
    char where[MANIFEST_MAX_SYMBOL + 16];
    snprintf(where, sizeof where, "kernels[%d]", index);
    if (!json_is_object(k))
        return dsk_err("%s is not an object", where);
    const char *family = NULL, *symbol = NULL, *blob = NULL, *target = NULL;
    if (get_str(k, "family", where, &family) || get_str(k, "symbol", where, &symbol) ||
        get_str(k, "blob", where, &blob) || get_str(k, "target", where, &target))
        return -1;
    if (strlen(symbol) > MANIFEST_MAX_SYMBOL || strlen(family) > MANIFEST_MAX_FAMILY)
        return dsk_err("%s: symbol or family longer than %d / %d characters", where, MANIFEST_MAX_SYMBOL,
                       MANIFEST_MAX_FAMILY);
    snprintf(where, sizeof where, "kernel %s", symbol);
    if (!is_hex32(blob))
        return dsk_err("%s: blob '%s' is not 32 lowercase hex digits", where, blob);
    if (strlen(target) >= sizeof out->target || mf_arch_parse(target, NULL, NULL))
        return dsk_err("%s: bad target '%s'", where, target);
    out->family = dsk_strdup(family);
    out->symbol = dsk_strdup(symbol);
    if (!out->family || !out->symbol)
        return -1;
    strcpy(out->blob, blob);
    strcpy(out->target, target);

    json_t *var = json_object_get(k, "variant");
    if (!json_is_object(var))
        return dsk_err("%s: field 'variant' is missing or not an object", where);
    const char *key;
    json_t *val;
    out->nparams = 0;
    json_object_foreach(var, key, val)
    {
        if (out->nparams >= MANIFEST_MAX_PARAMS || strlen(key) >= sizeof out->param[0].name)
            return dsk_err("%s: too many or too long variant parameters", where);
        if (!json_is_integer(val))
            return dsk_err("%s: variant parameter %s is not an integer", where, key);
        strcpy(out->param[out->nparams].name, key);
        out->param[out->nparams++].value = json_integer_value(val);
    }
    long long v = 0; /* set by get_int; initialised for -O3's maybe-uninitialized */
    if (get_int(k, "block", where, 1, 1024, &v))
        return -1;
    out->block = (int)v;
    if (get_int(k, "smem", where, 0, 1 << 20, &v))
        return -1;
    out->smem = (int)v;
    if (get_int(k, "smem_static", where, 0, 1 << 20, &v))
        return -1;
    out->smem_static = (int)v;
    if (get_int(k, "regs", where, 0, 255, &v))
        return -1;
    out->regs = (int)v;
    if (get_int(k, "max_threads", where, 0, 1024, &v))
        return -1;
    out->max_threads = (int)v;
    json_t *pdl = json_object_get(k, "pdl");
    if (!json_is_boolean(pdl))
        return dsk_err("%s: field 'pdl' is missing or not a boolean", where);
    out->pdl = json_is_true(pdl);
    json_t *params = json_object_get(k, "params");
    if (!json_is_array(params) || json_array_size(params) > MANIFEST_MAX_ARGS)
        return dsk_err("%s: field 'params' is missing, not an array or too long", where);
    out->nargs = (int)json_array_size(params);
    for (int i = 0; i < out->nargs; i++) {
        json_t *a = json_array_get(params, (size_t)i);
        if (!json_is_string(a) || mf_arg_kind_parse(json_string_value(a), &out->args[i]))
            return dsk_err_ctx("%s: params[%d]", where, i);
    }
    return 0;
}

int manifest_parse(const char *text, size_t len, manifest *m)
{
    memset(m, 0, sizeof *m);
    if (len > MANIFEST_MAX_BYTES)
        return dsk_err("manifest.json is %zu bytes, more than a manifest may have (%d)", len, MANIFEST_MAX_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return dsk_err("manifest.json is not valid JSON: %s (line %d)", jerr.text, jerr.line);
    int rc = -1;
    const char *format = NULL, *arch = NULL;
    if (!json_is_object(root)) {
        dsk_err("manifest.json: top level is not an object");
        goto out;
    }
    if (get_str(root, "format", "manifest.json", &format))
        goto out;
    if (strcmp(format, MANIFEST_FORMAT)) {
        dsk_err("manifest.json: unknown format '%s' (this dskit reads %s)", format, MANIFEST_FORMAT);
        goto out;
    }
    if (get_str(root, "arch", "manifest.json", &arch))
        goto out;
    if (mf_arch_parse(arch, NULL, NULL)) {
        dsk_err_ctx("manifest.json: field 'arch'");
        goto out;
    }
    m->format = dsk_strdup(format);
    m->arch = dsk_strdup(arch);
    m->toolchain = json_incref(json_object_get(root, "toolchain"));
    m->source = json_incref(json_object_get(root, "source"));
    if (!json_is_object(m->toolchain) || !json_is_object(m->source)) {
        dsk_err("manifest.json: fields 'toolchain' and 'source' must be objects");
        goto out;
    }

    json_t *blobs = json_object_get(root, "blobs");
    if (!json_is_object(blobs)) {
        dsk_err("manifest.json: field 'blobs' is missing or not an object");
        goto out;
    }
    if (json_object_size(blobs) > MANIFEST_MAX_BLOBS) {
        dsk_err("manifest.json: %zu blobs, more than a kit may have (%d)", json_object_size(blobs),
                MANIFEST_MAX_BLOBS);
        goto out;
    }
    m->blobs = dsk_calloc(json_object_size(blobs) + 1, sizeof(mf_blob));
    if (!m->blobs)
        goto out;
    const char *key;
    json_t *val;
    json_object_foreach(blobs, key, val)
    {
        char where[64];
        snprintf(where, sizeof where, "blob %.40s", key);
        long long size = 0;
        if (!is_hex32(key)) {
            dsk_err("manifest.json: blob name '%s' is not 32 lowercase hex digits", key);
            goto out;
        }
        if (!json_is_object(val) || get_int(val, "size", where, 0, (1LL << 40), &size))
            goto out_ctx;
        strcpy(m->blobs[m->nblobs].hash, key);
        m->blobs[m->nblobs++].size = (uint64_t)size;
    }

    json_t *files = json_object_get(root, "files");
    if (files && !json_is_object(files)) {
        dsk_err("manifest.json: field 'files' is not an object");
        goto out;
    }
    if (json_object_size(files) > MANIFEST_MAX_FILES) {
        dsk_err("manifest.json: %zu files, more than a kit may have (%d)", json_object_size(files),
                MANIFEST_MAX_FILES);
        goto out;
    }
    m->files = dsk_calloc(json_object_size(files) + 1, sizeof(mf_file));
    if (!m->files)
        goto out;
    json_object_foreach(files, key, val)
    {
        const char *h = NULL;
        long long size = 0;
        if (!json_is_object(val) || get_str(val, "xxh128", key, &h) || get_int(val, "size", key, 0, 1LL << 40, &size))
            goto out_ctx;
        if (!is_hex32(h)) {
            dsk_err("manifest.json: file %s: xxh128 '%s' is not 32 lowercase hex digits", key, h);
            goto out;
        }
        mf_file *f = &m->files[m->nfiles++];
        f->path = dsk_strdup(key);
        if (!f->path)
            goto out;
        f->size = (uint64_t)size;
        strcpy(f->hash, h);
    }

    json_t *kernels = json_object_get(root, "kernels");
    if (!json_is_array(kernels)) {
        dsk_err("manifest.json: field 'kernels' is missing or not an array");
        goto out;
    }
    if (json_array_size(kernels) > MANIFEST_MAX_KERNELS) {
        dsk_err("manifest.json: %zu kernels, more than a kit may have (%d)", json_array_size(kernels),
                MANIFEST_MAX_KERNELS);
        goto out;
    }
    m->kernels = dsk_calloc(json_array_size(kernels) + 1, sizeof(mf_kernel));
    if (!m->kernels)
        goto out;
    for (size_t i = 0; i < json_array_size(kernels); i++) {
        m->nkernels++;
        if (parse_kernel(json_array_get(kernels, i), (int)i, &m->kernels[i]))
            goto out_ctx;
    }
    rc = 0;
    goto out;
out_ctx:
    dsk_err_ctx("manifest.json");
out:
    json_decref(root);
    if (rc)
        manifest_free(m);
    return rc;
}

char *manifest_serialize(const manifest *m)
{
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(m->format));
    json_object_set_new(root, "arch", json_string(m->arch));
    json_object_set(root, "toolchain", m->toolchain);
    json_object_set(root, "source", m->source);
    json_t *blobs = json_object();
    for (int i = 0; i < m->nblobs; i++) {
        json_t *b = json_object();
        json_object_set_new(b, "size", json_integer((json_int_t)m->blobs[i].size));
        json_object_set_new(blobs, m->blobs[i].hash, b);
    }
    json_object_set_new(root, "blobs", blobs);
    json_t *files = json_object();
    for (int i = 0; i < m->nfiles; i++) {
        json_t *f = json_object();
        json_object_set_new(f, "size", json_integer((json_int_t)m->files[i].size));
        json_object_set_new(f, "xxh128", json_string(m->files[i].hash));
        json_object_set_new(files, m->files[i].path, f);
    }
    json_object_set_new(root, "files", files);
    json_t *kernels = json_array();
    for (int i = 0; i < m->nkernels; i++) {
        const mf_kernel *k = &m->kernels[i];
        json_t *o = json_object();
        json_object_set_new(o, "family", json_string(k->family));
        json_object_set_new(o, "symbol", json_string(k->symbol));
        json_object_set_new(o, "blob", json_string(k->blob));
        json_object_set_new(o, "target", json_string(k->target));
        json_t *var = json_object();
        for (int j = 0; j < k->nparams; j++)
            json_object_set_new(var, k->param[j].name, json_integer((json_int_t)k->param[j].value));
        json_object_set_new(o, "variant", var);
        json_object_set_new(o, "block", json_integer(k->block));
        json_object_set_new(o, "smem", json_integer(k->smem));
        json_object_set_new(o, "smem_static", json_integer(k->smem_static));
        json_object_set_new(o, "regs", json_integer(k->regs));
        json_object_set_new(o, "max_threads", json_integer(k->max_threads));
        json_object_set_new(o, "pdl", json_boolean(k->pdl));
        json_t *params = json_array();
        for (int j = 0; j < k->nargs; j++)
            json_array_append_new(params, json_string(mf_arg_kind_name(k->args[j])));
        json_object_set_new(o, "params", params);
        json_array_append_new(kernels, o);
    }
    json_object_set_new(root, "kernels", kernels);
    char *text = json_dumps(root, JSON_SORT_KEYS | JSON_INDENT(1));
    json_decref(root);
    if (!text) {
        dsk_err("cannot serialise the manifest (out of memory)");
        return NULL;
    }
    size_t n = strlen(text);
    char *out = dsk_malloc(n + 2);
    if (out) {
        memcpy(out, text, n);
        out[n] = '\n';
        out[n + 1] = 0;
    }
    free(text);
    return out;
}

void manifest_free(manifest *m)
{
    free(m->format);
    free(m->arch);
    json_decref(m->toolchain);
    json_decref(m->source);
    free(m->blobs);
    for (int i = 0; i < m->nfiles; i++)
        free(m->files[i].path);
    free(m->files);
    for (int i = 0; i < m->nkernels; i++) {
        free(m->kernels[i].family);
        free(m->kernels[i].symbol);
    }
    free(m->kernels);
    memset(m, 0, sizeof *m);
}
