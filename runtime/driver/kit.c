#include "runtime/driver/kit.h"
#include "manifest/archive.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "manifest/kitcheck.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kit {
    char *path;
    kit_entries entries;
    verify_report report; /* holds the parsed manifest and the variant table kit_find uses */
    kit_kernel *kernels;
    int nkernels;
    CUmodule *modules;
    int nmodules;
    int loaded;
};

int kit_open(const char *path, const char *expect_root, kit **out)
{
    *out = NULL;
    kit *k = dsk_calloc(1, sizeof *k);
    if (!k)
        return -1;
    int rc = -1;
    k->path = dsk_strdup(path);
    /* the very check `dskit verify` runs: they never disagree on a kit */
    if (!k->path || kit_check_file(path, expect_root, &k->entries, &k->report))
        goto fail;
    if (k->report.n) {
        char sum[160];
        verify_summary(&k->report, sum, sizeof sum);
        const verify_problem *p = &k->report.p[0];
        dsk_err("kit %s is bad: %s; first: %s %s: %s (run `dskit verify %s` for the full list)", path, sum,
                p->kind, p->entry, p->detail, path);
        rc = KIT_OPEN_BAD;
        goto fail;
    }
    const manifest *m = &k->report.m;
    k->nkernels = m->nkernels;
    k->kernels = dsk_calloc((size_t)m->nkernels + 1, sizeof(kit_kernel));
    if (!k->kernels)
        goto fail;
    name_table blobs = {0}; /* blob hash -> module: a kit may hold thousands of each */
    int prior;
    for (int b = 0; b < m->nblobs; b++)
        if (name_table_insert(&blobs, m->blobs[b].hash, b, &prior)) {
            name_table_free(&blobs);
            goto fail;
        }
    for (int i = 0; i < m->nkernels; i++) {
        k->kernels[i].meta = &m->kernels[i];
        k->kernels[i].module = name_table_find(&blobs, m->kernels[i].blob);
    }
    name_table_free(&blobs);
    *out = k;
    return 0;
fail:
    kit_close(k);
    return rc;
}

const manifest *kit_manifest(const kit *k)
{
    return &k->report.m;
}

int kit_sm(const kit *k)
{
    int sm;
    return mf_arch_parse(kit_manifest(k)->arch, &sm, NULL) ? 0 : sm;
}

const char *kit_root(const kit *k)
{
    return k->report.root;
}

int kit_arch_runs_on(const char *arch, int major, int minor)
{
    int sm;
    char suffix;
    if (mf_arch_parse(arch, &sm, &suffix))
        return 0;
    int smaj = sm / 10, smin = sm % 10;
    if (suffix == 'a')
        return smaj == major && smin == minor;
    return smaj == major && minor >= smin;
}

int kit_load(kit *k, const dsk_gpu *g)
{
    const manifest *m = &k->report.m;
    if (!kit_arch_runs_on(m->arch, g->cc_major, g->cc_minor))
        return dsk_err("kit %s is for %s, but GPU %d (%s) is compute capability %d.%d: build a kit with "
                       "`dskit-build --arch sm_%d%d`",
                       k->path, m->arch, g->ordinal, g->name, g->cc_major, g->cc_minor, g->cc_major, g->cc_minor);
    for (int i = 0; i < m->nkernels; i++)
        if (!kit_arch_runs_on(m->kernels[i].target, g->cc_major, g->cc_minor))
            return dsk_err("kit %s: kernel %s is SASS for %s, which does not run on compute capability %d.%d",
                           k->path, m->kernels[i].symbol, m->kernels[i].target, g->cc_major, g->cc_minor);
    k->modules = dsk_calloc((size_t)m->nblobs + 1, sizeof(CUmodule));
    if (!k->modules)
        return -1;
    for (int b = 0; b < m->nblobs; b++) {
        char path[64];
        snprintf(path, sizeof path, "cubins/%s.cubin", m->blobs[b].hash);
        const kit_entry *e = kit_entries_find(&k->entries, path);
        CUresult r = cu.cuModuleLoadData(&k->modules[b], e->data);
        if (r != CUDA_SUCCESS)
            return dsk_cu_fail(r, "cuModuleLoadData"), dsk_err_ctx("kit %s: loading %s", k->path, path);
        k->nmodules = b + 1;
    }
    for (int i = 0; i < k->nkernels; i++) {
        kit_kernel *kk = &k->kernels[i];
        const mf_kernel *mk = kk->meta;
        CUresult r = cu.cuModuleGetFunction(&kk->fn, k->modules[kk->module], mk->symbol);
        if (r == CUDA_SUCCESS)
            r = cu.cuFuncLoad(kk->fn); /* resolve now, also under lazy loading: never during a capture */
        /* a block gets more than 48 KiB of shared memory, static and dynamic together, only after the
         * dynamic limit is raised */
        if (r == CUDA_SUCCESS && mk->smem + mk->smem_static > 48 * 1024) {
            if (mk->smem + mk->smem_static > g->smem_optin)
                return dsk_err("kit %s: kernel %s needs %d + %d bytes of shared memory, GPU %d allows %d",
                               k->path, mk->symbol, mk->smem, mk->smem_static, g->ordinal, g->smem_optin);
            r = cu.cuFuncSetAttribute(kk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, mk->smem);
        }
        if (r != CUDA_SUCCESS)
            return dsk_cu_fail(r, "resolving"), dsk_err_ctx("kit %s: kernel %s", k->path, mk->symbol);
    }
    k->loaded = 1;
    return 0;
}

const kit_kernel *kit_find(const kit *k, const char *family, const char *params)
{
    mf_param p[MANIFEST_MAX_PARAMS];
    int n;
    char key[MF_VARIANT_KEY_MAX];
    if (mf_params_parse(params, p, MANIFEST_MAX_PARAMS, &n) || mf_variant_key(family, p, n, key, sizeof key)) {
        dsk_err_ctx("looking up kernel %s", family);
        return NULL;
    }
    int i = name_table_find(&k->report.variants, key);
    if (i >= 0)
        return &k->kernels[i];
    dsk_err("kit %s has no kernel %s with %s (family %s, parameters {%s}): build a kit that covers this "
            "model (dskit-build --for MODEL_DIR)",
            k->path, family, params, family, params);
    return NULL;
}

const kit_kernel *kit_findf(const kit *k, const char *family, const char *fmt, ...)
{
    char params[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(params, sizeof params, fmt, ap);
    va_end(ap);
    return kit_find(k, family, params);
}

int kit_nkernels(const kit *k)
{
    return k->nkernels;
}

const kit_kernel *kit_kernel_at(const kit *k, int i)
{
    return &k->kernels[i];
}

static _Atomic unsigned long long launches; /* every launch of the process (benchmarks count them) */

unsigned long long kit_launches(void)
{
    return launches;
}

/* kit_profile_*: each kernel's launches and device time while a profile is on (one thread launches) */
#define PROFILE_MAX 256
static struct {
    int on, n;
    CUevent ev[2];
    struct prof_kernel {
        const char *symbol;
        unsigned long long calls;
        double us;
    } k[PROFILE_MAX];
} prof;

int kit_profile_begin(void)
{
    CUresult r;
    for (int i = 0; i < 2; i++)
        if (!prof.ev[i] && (r = cu.cuEventCreate(&prof.ev[i], CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
            return dsk_cu_fail(r, "cuEventCreate"), dsk_err_ctx("starting the launch profile");
    prof.on = 1, prof.n = 0;
    return 0;
}

static int prof_cmp(const void *a, const void *b)
{
    double x = ((const struct prof_kernel *)a)->us, y = ((const struct prof_kernel *)b)->us;
    return x < y ? 1 : x > y ? -1 : 0;
}

int kit_profile_end(FILE *f, double per)
{
    prof.on = 0;
    qsort(prof.k, (size_t)prof.n, sizeof prof.k[0], prof_cmp);
    double total = 0;
    unsigned long long calls = 0;
    for (int i = 0; i < prof.n; i++)
        total += prof.k[i].us, calls += prof.k[i].calls;
    fprintf(f, "  %-44s %9s %10s %8s\n", "kernel (eager, each launch waited for)", "launches", "us", "share");
    for (int i = 0; i < prof.n; i++)
        fprintf(f, "  %-44s %9.1f %10.1f %7.1f%%\n", prof.k[i].symbol, (double)prof.k[i].calls / per,
                prof.k[i].us / per, total > 0 ? 100.0 * prof.k[i].us / total : 0.0);
    fprintf(f, "  %-44s %9.1f %10.1f\n", "all", (double)calls / per, total / per);
    prof.n = 0;
    return 0;
}

static int prof_add(const char *symbol, float ms)
{
    int i = 0;
    while (i < prof.n && strcmp(prof.k[i].symbol, symbol))
        i++;
    if (i == prof.n) {
        if (prof.n == PROFILE_MAX)
            return dsk_err("launch profile: more than %d kernels", PROFILE_MAX);
        prof.k[prof.n++] = (struct prof_kernel){.symbol = symbol};
    }
    prof.k[i].calls++, prof.k[i].us += 1e3 * ms;
    return 0;
}

static int launch(const kit_kernel *kk, unsigned gx, unsigned gy, unsigned gz, CUstream stream, void **args,
                  int nargs);

int kit_launch(const kit_kernel *kk, unsigned gx, unsigned gy, unsigned gz, CUstream stream, void **args,
               int nargs)
{
    if (!prof.on)
        return launch(kk, gx, gy, gz, stream, args, nargs);
    CUresult r;
    float ms;
    if ((r = cu.cuEventRecord(prof.ev[0], stream)) != CUDA_SUCCESS)
        return dsk_cu_fail(r, "cuEventRecord"), dsk_err_ctx("profiling %s", kk->meta->symbol);
    if (launch(kk, gx, gy, gz, stream, args, nargs))
        return -1;
    if ((r = cu.cuEventRecord(prof.ev[1], stream)) != CUDA_SUCCESS ||
        (r = cu.cuEventSynchronize(prof.ev[1])) != CUDA_SUCCESS ||
        (r = cu.cuEventElapsedTime(&ms, prof.ev[0], prof.ev[1])) != CUDA_SUCCESS)
        return dsk_cu_fail(r, "timing a launch (profile on: the launches must not be captured)"),
               dsk_err_ctx("profiling %s", kk->meta->symbol);
    return prof_add(kk->meta->symbol, ms);
}

static int launch(const kit_kernel *kk, unsigned gx, unsigned gy, unsigned gz, CUstream stream, void **args,
                  int nargs)
{
    launches++;
    const mf_kernel *m = kk->meta;
    if (kit_trace_launches())
        fprintf(stderr, "launch %llu: %s grid %u,%u,%u\n", (unsigned long long)launches, m->symbol, gx, gy, gz);
    if (nargs != m->nargs)
        return dsk_err("launching %s: %d arguments given, the kernel takes %d", m->symbol, nargs, m->nargs);
    if (!kk->fn)
        return dsk_err("launching %s: the kit is not loaded", m->symbol);
    CUresult r;
    if (m->pdl && !kit_no_pdl()) {
        /* programmatic dependent launch: the kernel may start while the previous one on the stream
         * finishes; it waits for it (griddepcontrol.wait) before reading what it wrote */
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = gx, cfg.gridDimY = gy, cfg.gridDimZ = gz;
        cfg.blockDimX = (unsigned)m->block, cfg.blockDimY = 1, cfg.blockDimZ = 1;
        cfg.sharedMemBytes = (unsigned)m->smem;
        cfg.hStream = stream;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        r = cu.cuLaunchKernelEx(&cfg, kk->fn, args, NULL);
    } else {
        r = cu.cuLaunchKernel(kk->fn, gx, gy, gz, (unsigned)m->block, 1, 1, (unsigned)m->smem, stream, args, NULL);
    }
    if (r != CUDA_SUCCESS)
        return dsk_cu_fail(r, m->pdl ? "cuLaunchKernelEx" : "cuLaunchKernel"),
               dsk_err_ctx("launching %s (grid %u,%u,%u)", m->symbol, gx, gy, gz);
    /* DSKIT_SYNC_LAUNCHES=1: wait for every kernel, so that a fault names the kernel that made it (a fault
     * is otherwise seen at the round's one synchronisation, after many launches) */
    if (kit_sync_launches() && (r = cu.cuStreamSynchronize(stream)) != CUDA_SUCCESS)
        return dsk_cu_fail(r, "cuStreamSynchronize"),
               dsk_err_ctx("%s (grid %u,%u,%u) failed on the device", m->symbol, gx, gy, gz);
    return 0;
}

/* An environment switch, read once: set and not "0". */
static int env_switch(const char *name, int *cache)
{
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = e && *e && strcmp(e, "0") ? 1 : 0;
    }
    return *cache;
}

int kit_sync_launches(void)
{
    static int v = -1;
    return env_switch("DSKIT_SYNC_LAUNCHES", &v);
}

int kit_trace_launches(void)
{
    static int v = -1;
    return env_switch("DSKIT_TRACE_LAUNCHES", &v);
}

int kit_no_pdl(void)
{
    static int v = -1;
    return env_switch("DSKIT_NO_PDL", &v);
}

void kit_close(kit *k)
{
    if (!k)
        return;
    for (int i = 0; i < k->nmodules; i++)
        if (k->modules[i])
            cu.cuModuleUnload(k->modules[i]);
    free(k->modules);
    free(k->kernels);
    verify_report_free(&k->report);
    kit_entries_free(&k->entries);
    free(k->path);
    free(k);
}
