/* dskit-build: compile every kernel variant of kit/src for each architecture asked, and pack one
 * reproducible, hashed archive per architecture (kit.md). The only program that links NVRTC. */
#include "builder/compile.h"
#include "builder/git.h"
#include "builder/spec.h"
#include "manifest/archive.h"
#include "manifest/manifest.h"
#include "manifest/needs.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "manifest/kitcheck.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DSKIT_SOURCE_DIR
#define DSKIT_SOURCE_DIR "."
#endif

static const char *const known_archs[] = {"sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120", "sm_120a", "sm_121", "sm_121a"};
/* Options every variant gets (recorded in the manifest; the CUDA include folder is added at compile time
 * and not recorded, since it is a path, not an input). */
static const char *const common_flags[] = {"-std=c++17", "-default-device"};

typedef struct {
    const spec_variant *v;
    const char *arch;
    char *opts[64];
    int nopts;
    unsigned char *cubin;
    size_t len;
    int cached;
    int done, failed;
    char *error;
} job;

typedef struct {
    job *jobs;
    int njobs;
    int next, finished, stop;
    int ncached;
    pthread_mutex_t mu;
    const src_tree *tree;
    const char *cache_dir;
    double t0;
    int tty;
} work;

static void progress(work *w, const job *j)
{
    if (!w->tty)
        return;
    fprintf(stderr, "\r\033[K[%4d/%d] %5.1fs  %s (%s)", w->finished, w->njobs, dsk_now() - w->t0, j->v->symbol,
            j->arch);
    fflush(stderr);
}

static void *worker(void *arg)
{
    work *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        if (w->stop || w->next >= w->njobs) {
            pthread_mutex_unlock(&w->mu);
            return NULL;
        }
        job *j = &w->jobs[w->next++];
        pthread_mutex_unlock(&w->mu);

        compile_job cj = {w->tree, j->v->fam->source, (const char *const *)j->opts, j->nopts, w->cache_dir};
        int rc = compile_variant(&cj, &j->cubin, &j->len, &j->cached);
        pthread_mutex_lock(&w->mu);
        w->finished++;
        if (rc) {
            j->failed = 1;
            j->error = strdup(dsk_err_msg());
            w->stop = 1;
        } else {
            j->done = 1;
            w->ncached += j->cached;
        }
        progress(w, j);
        pthread_mutex_unlock(&w->mu);
    }
}

static int add_opt(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append one NVRTC option; an option that does not fit is an error, never a cut one. */
static int add_opt(job *j, const char *fmt, ...)
{
    char buf[4200];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof buf)
        return dsk_err("an NVRTC option of %s is longer than %zu bytes", j->v->symbol, sizeof buf - 1);
    if (j->nopts >= 63 || !(j->opts[j->nopts] = dsk_strdup(buf)))
        return dsk_err("too many NVRTC options for %s", j->v->symbol);
    j->nopts++;
    return 0;
}

/* The -D definitions a variant is compiled with, in order: DSK_SYMBOL, DSK_SM, P_<axis> for every
 * parameter, the family's fixed defines, then its extra flags that are -D options. Each goes to
 * sink(ctx, "-DNAME=VALUE"). NVRTC gets exactly these (make_opts) and `--list-defines` prints exactly
 * these, so the emulator (tests/emu) compiles a variant with the definitions its cubin was built with. */
typedef int (*define_sink)(void *ctx, const char *def);

static int variant_defines(const spec_variant *v, const char *arch, define_sink sink, void *ctx)
{
    const spec_family *f = v->fam;
    char buf[4200];
    int sm;
    if (mf_arch_parse(arch, &sm, NULL))
        return dsk_err("variant %s: bad arch %s", v->symbol, arch);
    snprintf(buf, sizeof buf, "-DDSK_SYMBOL=%s", v->symbol);
    if (sink(ctx, buf))
        return -1;
    snprintf(buf, sizeof buf, "-DDSK_SM=%d", sm);
    if (sink(ctx, buf))
        return -1;
    for (int i = 0; i < v->nparams; i++) {
        snprintf(buf, sizeof buf, "-DP_%s=%lld", v->param[i].name, (long long)v->param[i].value);
        if (sink(ctx, buf))
            return -1;
    }
    for (int i = 0; i < f->ndefines; i++) {
        snprintf(buf, sizeof buf, "-D%s=%lld", f->defines[i].name, (long long)f->defines[i].value);
        if (sink(ctx, buf))
            return -1;
    }
    for (int i = 0; i < f->nflags; i++)
        if (!strncmp(f->flags[i], "-D", 2) && sink(ctx, f->flags[i]))
            return -1;
    return 0;
}

static int sink_opt(void *ctx, const char *def)
{
    return add_opt(ctx, "%s", def);
}

static int make_opts(job *j, const char *cuda_include)
{
    const spec_family *f = j->v->fam;
    char arch[24];
    snprintf(arch, sizeof arch, "%s%s", j->arch, f->target_suffix == 'a' && !strchr(j->arch + 3, 'a') ? "a" : "");
    if (add_opt(j, "-arch=%s", arch))
        return -1;
    for (size_t i = 0; i < sizeof common_flags / sizeof common_flags[0]; i++)
        if (add_opt(j, "%s", common_flags[i]))
            return -1;
    if (variant_defines(j->v, j->arch, sink_opt, j))
        return -1;
    for (int i = 0; i < f->nflags; i++)
        if (strncmp(f->flags[i], "-D", 2) && add_opt(j, "%s", f->flags[i]))
            return -1;
    /* last, and not part of the recorded flags: where cuda_fp16.h and friends live */
    return add_opt(j, "-I%s", cuda_include);
}

static int cmp_symbol(const void *a, const void *b)
{
    return strcmp(((const mf_kernel *)a)->symbol, ((const mf_kernel *)b)->symbol);
}

/* Pack the jobs of one arch into DIR/dskit-<arch>.tar.zst. */
static int pack_kit(job *jobs, int njobs, const char *arch, const char *out_dir, json_t *toolchain, json_t *source,
                    const char *license_path)
{
    manifest m = {0};
    kit_entries entries = {0};
    int rc = -1;
    m.format = MANIFEST_FORMAT;
    m.arch = (char *)arch;
    m.toolchain = toolchain;
    m.source = source;
    m.blobs = dsk_calloc((size_t)njobs + 1, sizeof(mf_blob));
    m.kernels = dsk_calloc((size_t)njobs + 1, sizeof(mf_kernel));
    m.files = dsk_calloc(1, sizeof(mf_file));
    if (!m.blobs || !m.kernels || !m.files)
        goto out;
    for (int i = 0; i < njobs; i++) {
        job *j = &jobs[i];
        if (strcmp(j->arch, arch))
            continue;
        const spec_variant *v = j->v;
        char h[33];
        dsk_xxh128_hex(j->cubin, j->len, h);
        char path[64];
        snprintf(path, sizeof path, "cubins/%s.cubin", h);
        if (!kit_entries_find(&entries, path)) { /* one blob per distinct cubin */
            strcpy(m.blobs[m.nblobs].hash, h);
            m.blobs[m.nblobs++].size = j->len;
            if (kit_entries_add(&entries, path, j->cubin, j->len))
                goto out;
        }
        mf_kernel *k = &m.kernels[m.nkernels++];
        k->family = v->fam->family;
        k->symbol = (char *)v->symbol;
        strcpy(k->blob, h);
        snprintf(k->target, sizeof k->target, "%s%s", arch,
                 v->fam->target_suffix == 'a' && !strchr(arch + 3, 'a') ? "a" : "");
        k->nparams = v->nparams;
        memcpy(k->param, v->param, sizeof(mf_param) * (size_t)v->nparams);
        k->block = v->block;
        k->smem = v->smem;
        k->pdl = v->fam->pdl;
        k->nargs = v->fam->nargs;
        memcpy(k->args, v->fam->args, sizeof(mf_arg_kind) * (size_t)v->fam->nargs);
        if (mf_cubin_resources(j->cubin, j->len, v->symbol, &k->regs, &k->max_threads, &k->smem_static)) {
            dsk_err_ctx("variant %s (%s)", v->symbol, arch);
            goto out;
        }
        if (k->max_threads && k->block > k->max_threads) {
            dsk_err("variant %s: block %d exceeds its __launch_bounds__ %d", v->symbol, k->block, k->max_threads);
            goto out;
        }
    }
    char *lic;
    size_t lic_len;
    if (dsk_read_file(license_path, &lic, &lic_len))
        goto out;
    m.files[0].path = "LICENSES/dskit.txt";
    m.files[0].size = lic_len;
    dsk_xxh128_hex(lic, lic_len, m.files[0].hash);
    m.nfiles = 1;
    rc = kit_entries_add(&entries, "LICENSES/dskit.txt", lic, lic_len);
    free(lic);
    if (rc)
        goto out;
    rc = -1;
    /* kernels sorted by symbol (unique, spec_expand checks): the manifest does not depend on the order
     * jobs finished */
    qsort(m.kernels, (size_t)m.nkernels, sizeof *m.kernels, cmp_symbol);
    char *text = manifest_serialize(&m);
    if (!text)
        goto out;
    char root[33];
    dsk_xxh128_hex(text, strlen(text), root);
    char rootline[40];
    snprintf(rootline, sizeof rootline, "%s\n", root);
    if (kit_entries_add(&entries, "manifest.json", text, strlen(text)) ||
        kit_entries_add(&entries, "manifest.xxh128", rootline, 33)) {
        free(text);
        goto out;
    }
    free(text);
    /* check what we are about to write with the runtime's own verifier */
    verify_report vr;
    if (kit_verify_entries(&entries, root, arch, &vr))
        goto out;
    if (vr.n) {
        dsk_err("internal error: the kit fails its own check: %s %s: %s", vr.p[0].kind, vr.p[0].entry, vr.p[0].detail);
        verify_report_free(&vr);
        goto out;
    }
    verify_report_free(&vr);
    char path[4096];
    snprintf(path, sizeof path, "%s/dskit-%s.tar.zst", out_dir, arch);
    if (kit_archive_write(path, &entries))
        goto out;
    struct {
        int k, b;
    } counts = {m.nkernels, m.nblobs};
    printf("wrote %s: %d kernels, %d blobs, root %s\n", path, counts.k, counts.b, root);
    rc = 0;
out:
    kit_entries_free(&entries);
    free(m.blobs);
    free(m.kernels);
    free(m.files);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dskit-build --arch sm_90[,sm_121,...] [--out DIR] [--for MODEL_DIR] [--list | --list-defines] [-j N]\n"
               "                   [--src KIT_DIR] [--cache DIR | --no-cache]\n"
               "  --arch    GPU architectures: sm_90 (H100/H200), sm_100, sm_120, sm_121 (GB10), and their 'a' forms\n"
               "  --out     folder for dskit-<arch>.tar.zst (default kit/cubins)\n"
               "  --for     build only the variants the model in MODEL_DIR (its config.json) needs\n"
               "  --list    print every variant that would be built, build nothing\n"
               "  --list-defines  print per variant: symbol, family, source under kit/src and the -D definitions\n"
               "            NVRTC gets (one arch; the kernel emulator, tests/emu, builds from this list)\n"
               "  -j N      parallel compiles (default: the number of cores)\n"
               "  --src     the kit folder holding variants.json and src/ (default %s/kit)\n"
               "  --cache   compile cache folder (default <kit>/cubins/cache)\n",
            DSKIT_SOURCE_DIR);
}

typedef struct {
    char *archs[16];
    int narchs;
    const char *out_dir, *kit_dir, *cache_arg, *for_model;
    int list, list_defines, njobs, no_cache;
} build_opts;

/* Everything a build holds, released in one place. */
typedef struct {
    variant_spec spec;
    spec_variant *vars;
    int nvars;
    src_tree tree;
    char *spec_text;
    size_t spec_len;
    work w;
} build_state;

static void build_state_free(build_state *b)
{
    for (int i = 0; i < b->w.njobs; i++) {
        free(b->w.jobs[i].cubin);
        free(b->w.jobs[i].error);
        for (int o = 0; o < b->w.jobs[i].nopts; o++)
            free(b->w.jobs[i].opts[o]);
    }
    free(b->w.jobs);
    free(b->vars);
    free(b->spec_text);
    src_tree_free(&b->tree);
    spec_free(&b->spec);
}

/* Compile every job on njobs threads; print the failures. Returns the number of failed jobs. */
static int compile_all(build_state *b, int njobs)
{
    work *w = &b->w;
    w->t0 = dsk_now();
    int nthreads = njobs < w->njobs ? njobs : w->njobs;
    pthread_t th[256];
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, worker, w))
            break;
    if (started == 0)
        worker(w);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    if (w->tty)
        fprintf(stderr, "\r\033[K");
    int failed = 0;
    for (int i = 0; i < w->njobs; i++) {
        job *j = &w->jobs[i];
        if (!j->failed)
            continue;
        failed++;
        fprintf(stderr, "dskit-build: variant %s of family %s failed for %s, parameters {", j->v->symbol,
                j->v->fam->family, j->arch);
        for (int p = 0; p < j->v->nparams; p++)
            fprintf(stderr, "%s%s=%lld", p ? ", " : "", j->v->param[p].name, (long long)j->v->param[p].value);
        fprintf(stderr, "}:\n%s\n", j->error);
    }
    if (!failed)
        fprintf(stderr, "compiled %d variants (%d from the cache) in %.2f s with %d threads\n", w->njobs, w->ncached,
                dsk_now() - w->t0, started ? started : 1);
    return failed;
}

/* Keep only the variants a model needs on the arch (dskit-build --for): the union over the archs asked; a
 * need the spec cannot produce is an error. */
static int keep_arch(const char *model_dir, const char *arch, build_state *b, char *keep)
{
    need_list needs;
    needs_settings ns = {0};
    if (mf_arch_parse(arch, &ns.sm, NULL))
        return dsk_err("--for %s: bad arch %s", model_dir, arch);
    if (needs_for_model_dir(model_dir, &ns, &needs))
        return dsk_err_ctx("--for %s", model_dir);
    int rc = 0;
    for (int i = 0; i < needs.n && !rc; i++) {
        int found = 0;
        for (int v = 0; v < b->nvars; v++)
            if (need_matches_params(&needs.v[i], b->vars[v].fam->family, b->vars[v].param, b->vars[v].nparams)) {
                keep[v] = 1;
                found = 1;
            }
        if (!found) {
            char d[160];
            need_describe(&needs.v[i], d, sizeof d);
            rc = dsk_err("model %s needs %s (%s) on %s, which kit/variants.json does not declare", model_dir, d,
                         needs.v[i].why, arch);
        }
    }
    need_list_free(&needs);
    return rc;
}

static int keep_needed(const char *model_dir, const build_opts *o, build_state *b)
{
    int kept = 0, rc = 0;
    char *keep = dsk_calloc((size_t)b->nvars + 1, 1);
    if (!keep)
        return -1;
    for (int a = 0; a < o->narchs && !rc; a++)
        rc = keep_arch(model_dir, o->archs[a], b, keep);
    for (int v = 0; v < b->nvars; v++)
        if (keep[v])
            b->vars[kept++] = b->vars[v];
    if (!rc)
        fprintf(stderr, "%s needs %d of the spec's %d variants\n", model_dir, kept, b->nvars);
    b->nvars = kept;
    free(keep);
    return rc;
}

static int sink_print(void *ctx, const char *def)
{
    (void)ctx;
    printf(" %s", def);
    return 0;
}

/* dskit-build --list-defines: one line per variant, "SYMBOL FAMILY SOURCE -D... -D...", fields separated
 * by one space; SOURCE is the family's file under kit/src. Families not built for the arch are left out. */
static int list_defines(const build_state *b, const char *arch)
{
    for (int i = 0; i < b->nvars; i++) {
        const spec_variant *v = &b->vars[i];
        if (!spec_family_has_arch(v->fam, arch))
            continue;
        printf("%s %s %s", v->symbol, v->fam->family, v->fam->source);
        if (variant_defines(v, arch, sink_print, NULL))
            return 2;
        printf("\n");
    }
    return 0;
}

/* Returns the exit status: 0 built, 1 a variant failed or the kit could not be packed, 2 bad input. */
static int build(const build_opts *o, build_state *b)
{
    char spec_path[4096], src_dir[4096], cache_dir[4096], license[4096], cuda_inc[4096];
    snprintf(spec_path, sizeof spec_path, "%s/variants.json", o->kit_dir);
    snprintf(src_dir, sizeof src_dir, "%s/src", o->kit_dir);
    if (o->cache_arg)
        snprintf(cache_dir, sizeof cache_dir, "%s", o->cache_arg);
    else
        snprintf(cache_dir, sizeof cache_dir, "%s/cubins/cache", o->kit_dir);
    snprintf(license, sizeof license, "%s/../LICENSE", o->kit_dir);
    snprintf(cuda_inc, sizeof cuda_inc, "%s/include", DSKIT_CUDA_ROOT);

    if (spec_load(spec_path, &b->spec) || spec_expand(&b->spec, &b->vars, &b->nvars))
        return 2;
    if (o->for_model && keep_needed(o->for_model, o, b))
        return 2;
    if (o->list_defines)
        return list_defines(b, o->archs[0]);
    if (o->list) {
        for (int i = 0; i < b->nvars; i++)
            printf("%-40s %-16s block %4d smem %6d\n", b->vars[i].symbol, b->vars[i].fam->family, b->vars[i].block,
                   b->vars[i].smem);
        printf("%d variants in %d families, per arch\n", b->nvars, b->spec.nfamilies);
        return 0;
    }
    if (src_tree_load(src_dir, &b->tree) || dsk_read_file(spec_path, &b->spec_text, &b->spec_len) ||
        dsk_mkdirs(o->out_dir) || (!o->no_cache && dsk_mkdirs(cache_dir)))
        return 2;
    for (int f = 0; f < b->spec.nfamilies; f++)
        if (!src_tree_find(&b->tree, b->spec.families[f].source))
            return dsk_err("family %s: source %s/%s does not exist", b->spec.families[f].family, src_dir,
                           b->spec.families[f].source), 2;

    work *w = &b->w;
    w->jobs = dsk_calloc((size_t)b->nvars * (size_t)o->narchs + 1, sizeof(job));
    if (!w->jobs)
        return 2;
    w->tree = &b->tree;
    w->cache_dir = o->no_cache ? NULL : cache_dir;
    w->tty = isatty(2);
    pthread_mutex_init(&w->mu, NULL);
    w->njobs = 0;
    for (int a = 0; a < o->narchs; a++)
        for (int i = 0; i < b->nvars; i++) {
            if (!spec_family_has_arch(b->vars[i].fam, o->archs[a])) /* a family for some archs only */
                continue;
            job *j = &w->jobs[w->njobs++];
            j->v = &b->vars[i];
            j->arch = o->archs[a];
            if (make_opts(j, cuda_inc))
                return 2;
        }
    int failed = compile_all(b, o->njobs);
    pthread_mutex_destroy(&w->mu);
    if (failed) {
        fprintf(stderr, "dskit-build: stopped; no kit written\n");
        dsk_err_clear();
        return 1;
    }

    char ver[32], src_hash[33];
    if (nvrtc_version_string(ver, sizeof ver))
        return 2;
    src_tree_hash(&b->tree, b->spec_text, b->spec_len, src_hash);
    json_t *toolchain = json_object(), *flags = json_array(), *source = json_object();
    for (size_t i = 0; i < sizeof common_flags / sizeof common_flags[0]; i++)
        json_array_append_new(flags, json_string(common_flags[i]));
    json_object_set_new(toolchain, "nvrtc", json_string(ver));
    json_object_set_new(toolchain, "flags", flags);
    json_object_set_new(toolchain, "builder", json_string("dskit-build " DSKIT_VERSION));
    json_object_set_new(source, "xxh128", json_string(src_hash));
    char *commit = builder_git_commit(o->kit_dir);
    if (commit)
        json_object_set_new(source, "git", json_string(commit));
    free(commit);
    int rc = 0;
    for (int a = 0; a < o->narchs && !rc; a++)
        if (pack_kit(w->jobs, w->njobs, o->archs[a], o->out_dir, toolchain, source, license))
            rc = 1;
    json_decref(toolchain);
    json_decref(source);
    return rc;
}

int main(int argc, char **argv)
{
    build_opts o = {.kit_dir = DSKIT_SOURCE_DIR "/kit", .out_dir = DSKIT_SOURCE_DIR "/kit/cubins",
                    .njobs = (int)sysconf(_SC_NPROCESSORS_ONLN)};
    const char *arch_list = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--arch") && i + 1 < argc)
            arch_list = argv[++i];
        else if (!strcmp(a, "--out") && i + 1 < argc)
            o.out_dir = argv[++i];
        else if (!strcmp(a, "--src") && i + 1 < argc)
            o.kit_dir = argv[++i];
        else if (!strcmp(a, "--cache") && i + 1 < argc)
            o.cache_arg = argv[++i];
        else if (!strcmp(a, "--for") && i + 1 < argc)
            o.for_model = argv[++i];
        else if (!strcmp(a, "--no-cache"))
            o.no_cache = 1;
        else if (!strcmp(a, "--list"))
            o.list = 1;
        else if (!strcmp(a, "--list-defines"))
            o.list_defines = 1;
        else if (!strcmp(a, "-j") && i + 1 < argc) {
            o.njobs = atoi(argv[++i]);
            if (o.njobs < 1 || o.njobs > 256) {
                fprintf(stderr, "dskit-build: -j takes 1..256\n");
                return 2;
            }
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "dskit-build: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!arch_list) {
        usage(stderr);
        return 2;
    }
    char arch_copy[256];
    if (strlen(arch_list) >= sizeof arch_copy) {
        fprintf(stderr, "dskit-build: --arch list longer than %zu characters\n", sizeof arch_copy - 1);
        return 2;
    }
    snprintf(arch_copy, sizeof arch_copy, "%s", arch_list);
    for (char *save = NULL, *t = strtok_r(arch_copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int ok = 0;
        for (size_t k = 0; k < sizeof known_archs / sizeof known_archs[0]; k++)
            ok |= !strcmp(t, known_archs[k]);
        if (!ok) {
            fprintf(stderr, "dskit-build: unknown arch '%s' (known: sm_90, sm_90a, sm_100, sm_100a, sm_120, sm_120a, "
                            "sm_121, sm_121a)\n", t);
            return 2;
        }
        /* one kit per arch: a second mention would compile it twice and write the same file twice */
        for (int k = 0; k < o.narchs; k++)
            if (!strcmp(o.archs[k], t)) {
                fprintf(stderr, "dskit-build: --arch names %s twice\n", t);
                return 2;
            }
        o.archs[o.narchs++] = t; /* at most 8 distinct known archs: archs[16] holds them */
    }
    if (o.narchs == 0) {
        fprintf(stderr, "dskit-build: --arch '%s' names no architecture\n", arch_list);
        usage(stderr);
        return 2;
    }
    if (o.list_defines && o.narchs != 1) {
        fprintf(stderr, "dskit-build: --list-defines takes one arch\n");
        return 2;
    }
    build_state b;
    memset(&b, 0, sizeof b);
    int rc = build(&o, &b);
    if (rc && dsk_err_msg()[0])
        fprintf(stderr, "dskit-build: %s\n", dsk_err_msg());
    build_state_free(&b);
    return rc;
}
