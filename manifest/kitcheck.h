/* Kit integrity check (kit.md "Integrity and trust"): the archive's limits, the root hash (pinned or
 * not), the format and the arch its file name promises, every blob's size and xxh3-128, every listed
 * file, missing and extra entries, and the consistency of the kernel list (unique symbols, unique
 * variants). kit_check_file is the one check `dskit verify` and the runtime's loader both run, so they
 * never disagree on a kit (issue 15). Every string a report holds is escaped (escape.h). */
#ifndef DSK_KITCHECK_H
#define DSK_KITCHECK_H

#include "manifest/archive.h"
#include "manifest/manifest.h"

#include "runtime/weights/name_table.h"

typedef struct {
    char kind[12];   /* ARCHIVE, MISSING, DIFFERS, EXTRA, ROOT, FORMAT, ARCH, MANIFEST, NEEDS, DEVICE */
    char entry[160]; /* the archive entry, kernel or field concerned */
    char detail[512];
} verify_problem;

typedef struct {
    verify_problem *p;
    int n;
    char root[33];     /* xxh3-128 of manifest.json as found ("" when absent) */
    int manifest_ok;   /* m below is valid */
    manifest m;
    char **keys;       /* [m.nkernels] each kernel's variant key (mf_variant_key), when manifest_ok */
    name_table variants; /* variant key -> kernel index: the loader's lookup table */
} verify_report;

/* The root a kit must have: given as 32 hex digits in either case (NULL: the DSKIT_KIT_ROOT environment
 * variable), lowercased into out, *pinned = out; none given or "" leaves *pinned NULL. Anything else
 * is -1 with a message naming where it came from. */
int kit_pinned_root(const char *given, char out[33], const char **pinned);
/* The arch a kit's file name promises ("dskit-sm_90.tar.zst" -> "sm_90"), or "" when it names none. */
void kit_arch_from_name(const char *path, char *out, size_t cap);
/* Read the kit at path (bounded, archive.h) and check it: the root pinned by kit_pinned_root(expect_root),
 * the arch its name promises. An archive that is not a good kit (truncated, corrupt, past a limit) is
 * one ARCHIVE problem. Returns 0 when the check ran (the kit is good iff r->n == 0; *entries holds the
 * archive read), KIT_READ_IO_ERROR when the file cannot be read, -1 on a bad pinned root or an internal
 * failure. Whatever it returns, the caller frees *entries and *r. */
int kit_check_file(const char *path, const char *expect_root, kit_entries *entries, verify_report *r);

/* Check entries; expect_root (32 hex, or NULL) pins the kit; expect_arch (or NULL) is the arch the kit
 * must be for. Returns 0 when the check ran (the kit is good iff r->n == 0), -1 on internal failure. */
int kit_verify_entries(const kit_entries *a, const char *expect_root, const char *expect_arch, verify_report *r);
int verify_add(verify_report *r, const char *kind, const char *entry, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void verify_report_free(verify_report *r);
/* "3 problems (1 MISSING, 2 DIFFERS)" */
void verify_summary(const verify_report *r, char *out, size_t cap);

#endif
