/* The runtime's kit: open the archive in memory, check it (every load: root, sizes, hashes), check its
 * arch against the GPU, load its modules with the driver API, resolve every kernel, and look kernels up
 * by (family, parameters) in O(1). Host code that launches a family names the family and its
 * parameters, never a cubin or a file. */
#ifndef DSK_KIT_H
#define DSK_KIT_H

#include "manifest/manifest.h"
#include "runtime/driver/cuda_api.h"

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const mf_kernel *meta; /* family, symbol, variant parameters, launch facts */
    CUfunction fn;         /* resolved by kit_load */
    int module;            /* index into the kit's modules */
} kit_kernel;

typedef struct kit kit;

/* kit_open's result for a kit that fails its check (kitcheck.h), as opposed to -1, one that could not be
 * checked (unreadable file, bad pinned root); `dskit verify` exits 1 and 2 for these. */
#define KIT_OPEN_BAD (-3)

/* Open and check a kit file with kit_check_file, the check `dskit verify` runs. expect_root: 32 hex
 * digits of either case, or NULL (then the DSKIT_KIT_ROOT environment variable, when set, pins it).
 * Returns 0, KIT_OPEN_BAD (the message names the first problem) or -1. */
int kit_open(const char *path, const char *expect_root, kit **out);
/* The manifest of an opened kit. */
const manifest *kit_manifest(const kit *k);
/* The SM number of the kit's arch (90 for sm_90 and sm_90a), what rules and needs take; 0 if unparsable. */
int kit_sm(const kit *k);
const char *kit_root(const kit *k);
/* Check the kit's arch against the current context's GPU, load every module and resolve every kernel,
 * raising the dynamic shared memory limit where a kernel needs more than 48 KiB. */
int kit_load(kit *k, const dsk_gpu *g);
/* Whether a kit for `arch` runs on compute capability major.minor (SASS sm_XY: same major, minor >= Y;
 * the "a" forms only on exactly XY). */
int kit_arch_runs_on(const char *arch, int major, int minor);
/* O(1) lookup. params: "K=4,CB=2,M=8" in any order. A missing variant is an error that names the family
 * and its parameters. */
const kit_kernel *kit_find(const kit *k, const char *family, const char *params);
const kit_kernel *kit_findf(const kit *k, const char *family, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int kit_nkernels(const kit *k);
const kit_kernel *kit_kernel_at(const kit *k, int i);
/* Launch with the manifest's block size and dynamic shared memory; nargs must equal the kernel's
 * parameter count. */
/* DSKIT_SYNC_LAUNCHES set (not 0): kit_launch waits for each kernel and names it when it faults (slow;
 * the GPU backend then runs without graphs). */
int kit_sync_launches(void);
/* DSKIT_TRACE_LAUNCHES set (not 0): each launch printed to stderr, its number, kernel and grid (what a
 * round or a layer launches; a graph's launches are printed when it is captured, not when replayed). */
int kit_trace_launches(void);
/* DSKIT_NO_PDL set (not 0): every kernel launched without programmatic dependent launch (its
 * griddepcontrol instructions then return at once): the same bits, for measuring what PDL gives. */
int kit_no_pdl(void);
/* Kernel launches this process has made through kit_launch (benchmarks: launches per layer and round). */
unsigned long long kit_launches(void);
/* Per-kernel device time, for benchmarks: between kit_profile_begin and kit_profile_end every launch
 * is bracketed by two events and waited for (so the launches must be eager, not captured), and its
 * time added to its kernel's total. kit_profile_end prints the kernels by total time, per `per` calls
 * (a benchmark's rounds), to f, and clears the totals. */
int kit_profile_begin(void);
int kit_profile_end(FILE *f, double per);
int kit_launch(const kit_kernel *kk, unsigned gx, unsigned gy, unsigned gz, CUstream stream, void **args,
               int nargs);
void kit_close(kit *k);

#endif
