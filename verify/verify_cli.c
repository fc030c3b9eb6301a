/* `dskit verify` and `dskit info`. */
#include "manifest/archive.h"
#include "manifest/needs.h"
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "manifest/kitcheck.h"
#include "runtime/common/escape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_report(const char *path, const verify_report *r, int json, double device_s, int device_ran)
{
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "kit", json_string(dsk_esc(path)));
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
        printf("OK %s: %s, %d kernels in %d blobs, root %s", dsk_esc(path), r->m.arch, r->m.nkernels, r->m.nblobs, r->root);
        if (device_ran)
            printf(", loaded and resolved on the GPU in %.3f s", device_s);
        printf("\n");
    } else {
        char sum[200];
        verify_summary(r, sum, sizeof sum);
        printf("BAD %s: %s\n", dsk_esc(path), sum);
    }
}

/* Every variant the model in model_dir needs must be in the kit: one NEEDS line per absent one. */
static int needs_check(const char *model_dir, verify_report *r)
{
    need_list needs;
    needs_settings ns = {0};
    if (mf_arch_parse(r->m.arch, &ns.sm, NULL))
        ns.sm = 0;
    if (needs_for_model_dir(model_dir, &ns, &needs))
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
    /* the loader's own check (kit_check_file): an unreadable file or a bad pinned root is exit 2, a
     * kit that fails the check (a truncated archive included) exit 1 */
    char root_buf[33];
    if (kit_pinned_root(root, root_buf, &root)) {
        fprintf(stderr, "dskit verify: %s\n", dsk_err_msg());
        return 2;
    }
    kit_entries a;
    verify_report r;
    int rc = kit_check_file(path, root, &a, &r);
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
    int rc = kit_open(argv[1], NULL, &k);
    if (rc) {
        fprintf(stderr, "dskit info: %s\n", dsk_err_msg());
        return rc == KIT_OPEN_BAD ? 1 : 2;
    }
    const manifest *m = kit_manifest(k);
    /* the manifest's strings are the kit's: escaped (the JSON too, for what jansson leaves as it is) */
    char *tc = json_dumps(m->toolchain, JSON_COMPACT | JSON_SORT_KEYS);
    char *src = json_dumps(m->source, JSON_COMPACT | JSON_SORT_KEYS);
    printf("kit       %s\nformat    %s\narch      %s\nroot      %s\ntoolchain %s\nsource    %s\n", dsk_esc(argv[1]),
           dsk_esc(m->format), m->arch, kit_root(k), tc ? dsk_esc(tc) : "?", src ? dsk_esc(src) : "?");
    free(tc);
    free(src);
    uint64_t bytes = 0;
    for (int i = 0; i < m->nblobs; i++)
        bytes += m->blobs[i].size;
    printf("kernels   %d in %d blobs (%.1f KiB of SASS)\n\n%-22s %8s %6s %6s %6s\n", m->nkernels, m->nblobs,
           (double)bytes / 1024.0, "family", "variants", "regs", "block", "smem");
    /* one line per family, in order of first appearance: variant count and the largest register / block
     * / smem figures (a hash set of families: a kit may list 8,192 kernels) */
    typedef struct {
        int first, n, regs, block, smem;
    } family_row;
    family_row *rows = dsk_calloc((size_t)m->nkernels + 1, sizeof *rows);
    name_table families = {0};
    int nrows = 0;
    rc = rows ? 0 : -1;
    for (int i = 0; i < m->nkernels && !rc; i++) {
        const mf_kernel *ki = &m->kernels[i];
        int prior;
        if (name_table_insert(&families, ki->family, nrows, &prior)) {
            rc = -1;
            break;
        }
        family_row *f = &rows[prior >= 0 ? prior : nrows];
        if (prior < 0)
            f->first = i, nrows++;
        f->n++;
        f->regs = ki->regs > f->regs ? ki->regs : f->regs;
        f->block = ki->block > f->block ? ki->block : f->block;
        f->smem = ki->smem + ki->smem_static > f->smem ? ki->smem + ki->smem_static : f->smem;
    }
    for (int r = 0; r < nrows && !rc; r++)
        printf("%-22s %8d %6d %6d %6d\n", dsk_esc(m->kernels[rows[r].first].family), rows[r].n, rows[r].regs,
               rows[r].block, rows[r].smem);
    if (rc)
        fprintf(stderr, "dskit info: %s\n", dsk_err_msg());
    name_table_free(&families);
    free(rows);
    kit_close(k);
    return rc ? 2 : 0;
}
