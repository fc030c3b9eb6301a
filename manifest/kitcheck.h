/* Kit integrity check (kit.md "Integrity and trust"): the root hash, the format and arch, every blob's
 * size and xxh3-128, every listed file, missing and extra entries, and the consistency of the kernel
 * list. Used by `dskit verify` and by the runtime on every load. */
#ifndef DSK_KITCHECK_H
#define DSK_KITCHECK_H

#include "manifest/archive.h"
#include "manifest/manifest.h"

typedef struct {
    char kind[12];   /* MISSING, DIFFERS, EXTRA, ROOT, FORMAT, ARCH, MANIFEST, NEEDS, DEVICE */
    char entry[160]; /* the archive entry, kernel or field concerned */
    char detail[320];
} verify_problem;

typedef struct {
    verify_problem *p;
    int n;
    char root[33];     /* xxh3-128 of manifest.json as found ("" when absent) */
    int manifest_ok;   /* m below is valid */
    manifest m;
} verify_report;

/* Check entries; expect_root (32 hex, or NULL) pins the kit; expect_arch (or NULL) is the arch the kit
 * must be for. Returns 0 when the check ran (the kit is good iff r->n == 0), -1 on internal failure. */
int kit_verify_entries(const kit_entries *a, const char *expect_root, const char *expect_arch, verify_report *r);
int verify_add(verify_report *r, const char *kind, const char *entry, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void verify_report_free(verify_report *r);
/* "3 problems (1 MISSING, 2 DIFFERS)" */
void verify_summary(const verify_report *r, char *out, size_t cap);

#endif
