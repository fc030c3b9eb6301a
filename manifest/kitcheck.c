#include "manifest/kitcheck.h"
#include "runtime/common/error.h"
#include "runtime/common/escape.h"
#include "runtime/common/util.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int verify_add(verify_report *r, const char *kind, const char *entry, const char *fmt, ...)
{
    verify_problem *p = dsk_realloc(r->p, sizeof(verify_problem) * (size_t)(r->n + 1));
    if (!p)
        return -1;
    r->p = p;
    verify_problem *x = &r->p[r->n++];
    snprintf(x->kind, sizeof x->kind, "%s", kind);
    /* entry names and details come from the kit: one escaped line each, so a newline in a name cannot
     * forge a line of verify's report and --json always gets UTF-8 */
    dsk_escape(entry, strlen(entry), 0, x->entry, sizeof x->entry);
    char raw[sizeof x->detail];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    dsk_escape(raw, n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1, 0, x->detail, sizeof x->detail);
    return 0;
}

void verify_report_free(verify_report *r)
{
    free(r->p);
    if (r->keys)
        for (int i = 0; i < r->m.nkernels; i++)
            free(r->keys[i]);
    free(r->keys);
    name_table_free(&r->variants);
    if (r->manifest_ok)
        manifest_free(&r->m);
    memset(r, 0, sizeof *r);
}

void verify_summary(const verify_report *r, char *out, size_t cap)
{
    static const char *const kinds[] = {"ARCHIVE", "MISSING",  "DIFFERS", "EXTRA",  "ROOT",
                                        "FORMAT",  "ARCH",     "MANIFEST", "NEEDS", "DEVICE"};
    size_t n = (size_t)snprintf(out, cap, "%d problem%s", r->n, r->n == 1 ? "" : "s");
    int first = 1;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0] && n < cap; k++) {
        int c = 0;
        for (int i = 0; i < r->n; i++)
            c += !strcmp(r->p[i].kind, kinds[k]);
        if (c) {
            n += (size_t)snprintf(out + n, cap - n, "%s%d %s", first ? " (" : ", ", c, kinds[k]);
            first = 0;
        }
    }
    if (!first && n < cap)
        snprintf(out + n, cap - n, ")");
}

static int starts_with(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

/* The blob hash named by an entry path "cubins/<h>.cubin", or NULL. */
static const char *cubin_hash_of(const char *path, char out[33])
{
    size_t n = strlen(path);
    if (!starts_with(path, "cubins/") || n != 7 + 32 + 6 || strcmp(path + n - 6, ".cubin"))
        return NULL;
    memcpy(out, path + 7, 32);
    out[32] = 0;
    return out;
}

static int check_root(const kit_entries *a, const char *expect_root, verify_report *r, const kit_entry **mj)
{
    *mj = kit_entries_find(a, "manifest.json");
    const kit_entry *mx = kit_entries_find(a, "manifest.xxh128");
    if (!*mj)
        return verify_add(r, "MISSING", "manifest.json", "the kit's index is absent");
    dsk_xxh128_hex((*mj)->data, (*mj)->size, r->root);
    if (!mx)
        return verify_add(r, "MISSING", "manifest.xxh128", "the kit's root hash is absent");
    char stated[33] = {0};
    size_t sl = mx->size;
    while (sl && (mx->data[sl - 1] == '\n' || mx->data[sl - 1] == ' '))
        sl--;
    if (sl == 32)
        memcpy(stated, mx->data, 32);
    if (strcmp(stated, r->root) &&
        verify_add(r, "DIFFERS", "manifest.json", "hashes to %s but manifest.xxh128 says %.*s", r->root,
                   (int)(sl < 64 ? sl : 64), (const char *)mx->data))
        return -1;
    if (expect_root && strcmp(expect_root, r->root) &&
        verify_add(r, "ROOT", "manifest.json", "kit root %s is not the pinned root %s", r->root, expect_root))
        return -1;
    return 0;
}

static int check_blobs(const kit_entries *a, const manifest *m, verify_report *r)
{
    int sm;
    if (mf_arch_parse(m->arch, &sm, NULL))
        return -1;
    for (int i = 0; i < m->nblobs; i++) {
        char path[64];
        snprintf(path, sizeof path, "cubins/%s.cubin", m->blobs[i].hash);
        const kit_entry *e = kit_entries_find(a, path);
        int rc = 0;
        if (!e) {
            rc = verify_add(r, "MISSING", path, "blob listed in the manifest is absent");
        } else if (e->size != m->blobs[i].size) {
            rc = verify_add(r, "DIFFERS", path, "size %zu, manifest says %llu", e->size,
                            (unsigned long long)m->blobs[i].size);
        } else {
            char h[33];
            dsk_xxh128_hex(e->data, e->size, h);
            if (strcmp(h, m->blobs[i].hash))
                rc = verify_add(r, "DIFFERS", path, "content hashes to %s", h);
            else {
                int csm = mf_cubin_sm(e->data, e->size);
                if (csm != sm)
                    rc = verify_add(r, "ARCH", path, "cubin is SASS for sm_%d, the kit is %s", csm, m->arch);
            }
        }
        if (rc)
            return -1;
    }
    for (int i = 0; i < m->nfiles; i++) {
        const kit_entry *e = kit_entries_find(a, m->files[i].path);
        char h[33];
        int rc = 0;
        if (!e)
            rc = verify_add(r, "MISSING", m->files[i].path, "file listed in the manifest is absent");
        else if (e->size != m->files[i].size)
            rc = verify_add(r, "DIFFERS", m->files[i].path, "size %zu, manifest says %llu", e->size,
                            (unsigned long long)m->files[i].size);
        else if (dsk_xxh128_hex(e->data, e->size, h), strcmp(h, m->files[i].hash))
            rc = verify_add(r, "DIFFERS", m->files[i].path, "content hashes to %s, manifest says %s", h,
                            m->files[i].hash);
        if (rc)
            return -1;
    }
    return 0;
}

/* Symbols and variants each name one kernel: the loader finds kernels by variant, so two kernels of one
 * variant (or one key, e.g. family "a:b=1" beside family "a" with b=1) would make lookups depend on
 * order. The keys become the report's lookup table. */
static int check_kernels(const manifest *m, const name_table *blobs, verify_report *r)
{
    int sm;
    char suffix;
    mf_arch_parse(m->arch, &sm, &suffix);
    r->keys = dsk_calloc((size_t)m->nkernels + 1, sizeof *r->keys);
    if (!r->keys)
        return -1;
    name_table symbols = {0};
    int rc = 0;
    for (int i = 0; i < m->nkernels && !rc; i++) {
        const mf_kernel *k = &m->kernels[i];
        if (name_table_find(blobs, k->blob) < 0 &&
            verify_add(r, "MANIFEST", k->symbol, "refers to blob %s, which is not listed", k->blob))
            rc = -1;
        int tsm;
        char tsuf;
        if (!rc && mf_arch_parse(k->target, &tsm, &tsuf) == 0 && (tsm != sm || (tsuf && tsuf != 'a' && tsuf != 'f')) &&
            verify_add(r, "ARCH", k->symbol, "target %s does not belong to a %s kit", k->target, m->arch))
            rc = -1;
        int prior;
        if (!rc && name_table_insert(&symbols, k->symbol, i, &prior))
            rc = -1;
        if (!rc && prior >= 0 && verify_add(r, "MANIFEST", k->symbol, "symbol listed twice"))
            rc = -1;
        char key[MF_VARIANT_KEY_MAX];
        if (!rc && (mf_variant_key(k->family, k->param, k->nparams, key, sizeof key) ||
                    !(r->keys[i] = dsk_strdup(key)) || name_table_insert(&r->variants, r->keys[i], i, &prior)))
            rc = -1;
        if (!rc && prior >= 0 &&
            verify_add(r, "MANIFEST", k->symbol, "is the same variant (%s) as kernel %s", key,
                       m->kernels[prior].symbol))
            rc = -1;
    }
    name_table_free(&symbols);
    return rc;
}

static int check_extra(const kit_entries *a, const name_table *blobs, const name_table *files, verify_report *r)
{
    for (int i = 0; i < a->n; i++) {
        const char *p = a->e[i].path;
        if (!strcmp(p, "manifest.json") || !strcmp(p, "manifest.xxh128"))
            continue;
        char h[33];
        int listed = cubin_hash_of(p, h) ? name_table_find(blobs, h) >= 0 : name_table_find(files, p) >= 0;
        if (!listed && verify_add(r, "EXTRA", p, "entry is not listed in the manifest"))
            return -1;
    }
    return 0;
}

/* The manifest's blob hashes and file paths as hash sets: a kit may list thousands of each. */
static int index_manifest(const manifest *m, name_table *blobs, name_table *files)
{
    int prior;
    for (int i = 0; i < m->nblobs; i++)
        if (name_table_insert(blobs, m->blobs[i].hash, i, &prior))
            return -1;
    for (int i = 0; i < m->nfiles; i++)
        if (name_table_insert(files, m->files[i].path, i, &prior))
            return -1;
    return 0;
}

int kit_verify_entries(const kit_entries *a, const char *expect_root, const char *expect_arch, verify_report *r)
{
    memset(r, 0, sizeof *r);
    const kit_entry *mj;
    if (check_root(a, expect_root, r, &mj))
        return -1;
    if (!mj)
        return 0;
    if (manifest_parse((const char *)mj->data, mj->size, &r->m)) {
        const char *msg = dsk_err_msg();
        const char *kind = strstr(msg, "unknown format") ? "FORMAT" : "MANIFEST";
        return verify_add(r, kind, "manifest.json", "%s", msg);
    }
    r->manifest_ok = 1;
    const manifest *m = &r->m;
    if (expect_arch && strcmp(expect_arch, m->arch) &&
        verify_add(r, "ARCH", "manifest.json", "kit is for %s, expected %s", m->arch, expect_arch))
        return -1;
    name_table blobs = {0}, files = {0};
    int rc = 0;
    if (index_manifest(m, &blobs, &files) || check_blobs(a, m, r) || check_kernels(m, &blobs, r) ||
        check_extra(a, &blobs, &files, r))
        rc = -1;
    name_table_free(&blobs);
    name_table_free(&files);
    return rc;
}

int kit_pinned_root(const char *given, char out[33], const char **pinned)
{
    const char *from = given ? "--kit-root" : "DSKIT_KIT_ROOT";
    const char *root = given ? given : getenv("DSKIT_KIT_ROOT");
    *pinned = NULL;
    if (!root || !*root)
        return 0;
    size_t n = strlen(root);
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)root[i]))
            n = 0;
    if (n != 32)
        return dsk_err("%s must be a kit root of 32 hex digits, got '%s'", from, root);
    for (int i = 0; i < 32; i++)
        out[i] = (char)tolower((unsigned char)root[i]);
    out[32] = 0;
    *pinned = out;
    return 0;
}

void kit_arch_from_name(const char *path, char *out, size_t cap)
{
    out[0] = 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *suffix = ".tar.zst";
    size_t n = strlen(base), sl = strlen(suffix);
    if (strncmp(base, "dskit-", 6) || n <= 6 + sl || strcmp(base + n - sl, suffix))
        return;
    size_t al = n - 6 - sl;
    if (al >= cap)
        return;
    memcpy(out, base + 6, al);
    out[al] = 0;
    if (mf_arch_parse(out, NULL, NULL)) { /* a name that promises no arch pins none */
        dsk_err_clear();
        out[0] = 0;
    }
}

int kit_check_file(const char *path, const char *expect_root, kit_entries *entries, verify_report *r)
{
    memset(entries, 0, sizeof *entries);
    memset(r, 0, sizeof *r);
    char root_buf[33];
    const char *root;
    if (kit_pinned_root(expect_root, root_buf, &root))
        return -1;
    int rc = kit_archive_read_file(path, entries);
    if (rc == KIT_READ_IO_ERROR)
        return rc;
    if (rc)
        return verify_add(r, "ARCHIVE", path, "%s", dsk_err_msg());
    char arch[32];
    kit_arch_from_name(path, arch, sizeof arch);
    return kit_verify_entries(entries, root, arch[0] ? arch : NULL, r);
}
