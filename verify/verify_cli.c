/* `dskit verify` and `dskit info`. */
#include "manifest/archive.h"
#include "manifest/needs.h"
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "manifest/kitcheck.h"

#include <ctype.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The arch a kit's file name promises ("dskit-sm_90.tar.zst" -> "sm_90"), or "" when it names none. */
static void arch_from_name(const char *path, char *out, size_t cap)
{
    out[0] = 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *suffix = ".tar.zst";
    size_t n = strlen(base), sl = strlen(suffix);
    if (strncmp(base, "dskit-", 6) || n <= 6 + sl || strcmp(base + n - sl, suffix))
        return;
    size_t al = n - 6 - sl;
    if (al < cap) {
        memcpy(out, base + 6, al);
        out[al] = 0;
    }
    if (mf_arch_parse(out, NULL, NULL)) {
        dsk_err_clear();
        out[0] = 0;
    }
}

static int valid_root(const char *s)
{
    if (strlen(s) != 32)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!isxdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

static void print_report(const char *path, const verify_report *r, int json, double device_s, int device_ran)
{
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "kit", json_string(path));
        json_object_set_new(o, "ok", json_boolean(r->n == 0));
        json_object_set_new(o, "root", json_string(r->root));
        if (r->manifest_ok) {
            json_object_set_new(o, "arch", json_string(r->m.arch));
            json_object_set_new(o, "kernels", json_integer(r->m.nkernels));
            json_object_set_new(o, "blobs", json_integer(r->m.nblobs));
        }
        if (device_ran)
            json_object_set_new(o, "device_load_s", json_real(device_s));
        json_t *arr = json_array();
        for (int i = 0; i < r->n; i++) {
            json_t *p = json_object();
            json_object_set_new(p, "kind", json_string(r->p[i].kind));
            json_object_set_new(p, "entry", json_string(r->p[i].entry));
            json_object_set_new(p, "detail", json_string(r->p[i].detail));
            json_array_append_new(arr, p);
        }
        json_object_set_new(o, "problems", arr);
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
        if (s)
            puts(s);
        free(s);
        json_decref(o);
        return;
    }
    for (int i = 0; i < r->n; i++)
        printf("%-8s %s: %s\n", r->p[i].kind, r->p[i].entry, r->p[i].detail);
    if (r->n == 0) {
        printf("OK %s: %s, %d kernels in %d blobs, root %s", path, r->m.arch, r->m.nkernels, r->m.nblobs, r->root);
        if (device_ran)
            printf(", loaded and resolved on the GPU in %.3f s", device_s);
        printf("\n");
    } else {
        char sum[200];
        verify_summary(r, sum, sizeof sum);
        printf("BAD %s: %s\n", path, sum);
    }
}

/* Every variant the model in model_dir needs must be in the kit: one NEEDS line per absent one. */
static int needs_check(const char *model_dir, verify_report *r)
{
    need_list needs;
    if (needs_for_model_dir(model_dir, NULL, &needs))
        return dsk_err_ctx("--needs %s", model_dir);
    int rc = 0;
    for (int i = 0; i < needs.n && !rc; i++) {
        int found = 0;
        for (int k = 0; k < r->m.nkernels && !found; k++)
            found = need_matches(&needs.v[i], &r->m.kernels[k]);
        if (!found) {
            char d[160];
            need_describe(&needs.v[i], d, sizeof d);
            rc = verify_add(r, "NEEDS", d, "the model in %s needs it (%s); the kit lacks it", model_dir,
                            needs.v[i].why);
        }
    }
    need_list_free(&needs);
    return rc;
}

static int device_check(const char *path, const char *root, verify_report *r, double *secs)
{
    dsk_gpu g;
    if (dsk_gpu_open(0, &g))
        return -1;
    double t0 = dsk_now();
    kit *k;
    int rc = kit_open(path, root, &k);
    if (rc == 0) {
        if (kit_load(k, &g))
            rc = verify_add(r, "DEVICE", path, "%s", dsk_err_msg()) ? -1 : 0;
        kit_close(k);
    }
    *secs = dsk_now() - t0;
    dsk_gpu_close(&g);
    return rc;
}

int cmd_verify(int argc, char **argv)
{
    const char *path = NULL, *root = NULL, *needs_dir = NULL;
    int json = 0, device = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--device"))
            device = 1;
        else if (!strcmp(argv[i], "--kit-root") && i + 1 < argc)
            root = argv[++i];
        else if (!strcmp(argv[i], "--needs") && i + 1 < argc)
            needs_dir = argv[++i];
        else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "usage: dskit verify KIT [--json] [--kit-root HEX] [--needs MODEL_DIR] [--device]\n");
            return 2;
        } else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: dskit verify KIT [--json] [--kit-root HEX] [--needs MODEL_DIR] [--device]\n");
        return 2;
    }
    if (!root)
        root = getenv("DSKIT_KIT_ROOT");
    if (root && *root && !valid_root(root)) {
        fprintf(stderr, "dskit verify: --kit-root must be 32 hex digits, got '%s'\n", root);
        return 2;
    }
    char lower[33] = {0};
    if (root && *root) {
        for (int i = 0; i < 32; i++)
            lower[i] = (char)tolower((unsigned char)root[i]);
        root = lower;
    } else
        root = NULL;

    /* an unreadable file is an I/O error (2); a truncated or corrupt archive is a bad kit (1) */
    kit_entries a;
    int read_rc = kit_archive_read_file(path, &a);
    if (read_rc == KIT_READ_IO_ERROR) {
        fprintf(stderr, "dskit verify: %s\n", dsk_err_msg());
        return 2;
    }
    if (read_rc) {
        printf("BAD %s: %s\n", path, dsk_err_msg());
        return 1;
    }
    char arch[32];
    arch_from_name(path, arch, sizeof arch);
    verify_report r;
    int rc = kit_verify_entries(&a, root, arch[0] ? arch : NULL, &r);
    kit_entries_free(&a);
    if (rc) {
        fprintf(stderr, "dskit verify: %s\n", dsk_err_msg());
        verify_report_free(&r);
        return 2;
    }
    if (needs_dir && r.manifest_ok && needs_check(needs_dir, &r)) {
        fprintf(stderr, "dskit verify: %s\n", dsk_err_msg());
        verify_report_free(&r);
        return 2;
    }
    double secs = 0;
    int device_ran = 0;
    if (device && r.n == 0) {
        if (device_check(path, root, &r, &secs)) {
            fprintf(stderr, "dskit verify: %s\n", dsk_err_msg());
            verify_report_free(&r);
            return 2;
        }
        device_ran = 1;
    }
    print_report(path, &r, json, secs, device_ran);
    int bad = r.n != 0;
    verify_report_free(&r);
    return bad ? 1 : 0;
}

int cmd_info(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: dskit info KIT\n");
        return 2;
    }
    kit *k;
    if (kit_open(argv[1], NULL, &k)) {
        fprintf(stderr, "dskit info: %s\n", dsk_err_msg());
        return strstr(dsk_err_msg(), "is bad") ? 1 : 2;
    }
    const manifest *m = kit_manifest(k);
    char *tc = json_dumps(m->toolchain, JSON_COMPACT | JSON_SORT_KEYS);
    char *src = json_dumps(m->source, JSON_COMPACT | JSON_SORT_KEYS);
    printf("kit       %s\nformat    %s\narch      %s\nroot      %s\ntoolchain %s\nsource    %s\n", argv[1],
           m->format, m->arch, kit_root(k), tc ? tc : "?", src ? src : "?");
    free(tc);
    free(src);
    uint64_t bytes = 0;
    for (int i = 0; i < m->nblobs; i++)
        bytes += m->blobs[i].size;
    printf("kernels   %d in %d blobs (%.1f KiB of SASS)\n\n%-22s %8s %6s %6s %6s\n", m->nkernels, m->nblobs,
           (double)bytes / 1024.0, "family", "variants", "regs", "block", "smem");
    /* one line per family: variant count and the largest register / block / smem figures */
    for (int i = 0; i < m->nkernels; i++) {
        const mf_kernel *ki = &m->kernels[i];
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(m->kernels[j].family, ki->family);
        if (seen)
            continue;
        int n = 0, regs = 0, block = 0, smem = 0;
        for (int j = i; j < m->nkernels; j++) {
            const mf_kernel *kj = &m->kernels[j];
            if (strcmp(kj->family, ki->family))
                continue;
            n++;
            regs = kj->regs > regs ? kj->regs : regs;
            block = kj->block > block ? kj->block : block;
            smem = kj->smem + kj->smem_static > smem ? kj->smem + kj->smem_static : smem;
        }
        printf("%-22s %8d %6d %6d %6d\n", ki->family, n, regs, block, smem);
    }
    kit_close(k);
    return 0;
}
