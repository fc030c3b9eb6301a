#include "builder/compile.h"
#include "manifest/archive.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <dirent.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

static int cmp_src(const void *a, const void *b)
{
    return strcmp(((const src_file *)a)->name, ((const src_file *)b)->name);
}

int src_tree_load(const char *dir, src_tree *t)
{
    memset(t, 0, sizeof *t);
    DIR *d = opendir(dir);
    if (!d)
        return dsk_err_errno("cannot open the kernel source folder %s", dir);
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        size_t l = strlen(n);
        int is_src = (l > 3 && !strcmp(n + l - 3, ".cu")) || (l > 4 && !strcmp(n + l - 4, ".cuh"));
        if (n[0] == '.' || !is_src)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, n);
        src_file *f = dsk_realloc(t->files, sizeof(src_file) * (size_t)(t->n + 1));
        if (!f) {
            rc = -1;
            break;
        }
        t->files = f;
        src_file *x = &t->files[t->n];
        x->name = dsk_strdup(n);
        if (!x->name || dsk_read_file(path, &x->data, &x->len)) {
            free(x->name);
            rc = -1;
            break;
        }
        t->n++;
    }
    closedir(d);
    if (rc) {
        src_tree_free(t);
        return dsk_err_ctx("reading kernel sources in %s", dir);
    }
    qsort(t->files, (size_t)t->n, sizeof(src_file), cmp_src);
    return 0;
}

const src_file *src_tree_find(const src_tree *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->files[i].name, name))
            return &t->files[i];
    return NULL;
}

void src_tree_free(src_tree *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->files[i].name);
        free(t->files[i].data);
    }
    free(t->files);
    memset(t, 0, sizeof *t);
}

static void hash_field(XXH3_state_t *st, const void *data, size_t len)
{
    uint64_t n = len;
    XXH3_128bits_update(st, &n, sizeof n);
    XXH3_128bits_update(st, data, len);
}

static void hash_hex(XXH3_state_t *st, char out[33])
{
    XXH128_hash_t h = XXH3_128bits_digest(st);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

void src_tree_hash(const src_tree *t, const char *extra, size_t extra_len, char out[33])
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    for (int i = 0; i < t->n; i++) {
        hash_field(st, t->files[i].name, strlen(t->files[i].name));
        hash_field(st, t->files[i].data, t->files[i].len);
    }
    hash_field(st, extra, extra_len);
    hash_hex(st, out);
    XXH3_freeState(st);
}

int nvrtc_version_string(char *out, size_t cap)
{
    int major, minor;
    nvrtcResult r = nvrtcVersion(&major, &minor);
    if (r != NVRTC_SUCCESS)
        return dsk_err("nvrtcVersion: %s", nvrtcGetErrorString(r));
    snprintf(out, cap, "%d.%d", major, minor);
    return 0;
}

/* The cache key: family source, all headers, options, NVRTC version. */
static void cache_key(const compile_job *job, const src_file *src, char out[33])
{
    char ver[32] = "";
    nvrtc_version_string(ver, sizeof ver);
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    hash_field(st, "dskit-cubin-cache/1", 19);
    hash_field(st, ver, strlen(ver));
    hash_field(st, src->name, strlen(src->name));
    hash_field(st, src->data, src->len);
    for (int i = 0; i < job->tree->n; i++) {
        const src_file *f = &job->tree->files[i];
        size_t l = strlen(f->name);
        if (l > 4 && !strcmp(f->name + l - 4, ".cuh")) {
            hash_field(st, f->name, l);
            hash_field(st, f->data, f->len);
        }
    }
    for (int i = 0; i < job->nopts; i++)
        hash_field(st, job->opts[i], strlen(job->opts[i]));
    hash_hex(st, out);
    XXH3_freeState(st);
}

static int nvrtc_compile(const compile_job *job, const src_file *src, unsigned char **cubin, size_t *len)
{
    /* headers are handed to NVRTC from memory, so only kit/src's own files can be included by name */
    int nh = 0;
    const char **hdr = dsk_calloc((size_t)job->tree->n + 1, sizeof(char *));
    const char **hdr_names = dsk_calloc((size_t)job->tree->n + 1, sizeof(char *));
    if (!hdr || !hdr_names) {
        free(hdr);
        free(hdr_names);
        return -1;
    }
    for (int i = 0; i < job->tree->n; i++) {
        const src_file *f = &job->tree->files[i];
        size_t l = strlen(f->name);
        if (l > 4 && !strcmp(f->name + l - 4, ".cuh")) {
            hdr[nh] = f->data;
            hdr_names[nh++] = f->name;
        }
    }
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, src->data, src->name, nh, hdr, hdr_names);
    free(hdr);
    free(hdr_names);
    if (r != NVRTC_SUCCESS)
        return dsk_err("nvrtcCreateProgram(%s): %s", src->name, nvrtcGetErrorString(r));
    int rc = -1;
    r = nvrtcCompileProgram(prog, job->nopts, job->opts);
    if (r != NVRTC_SUCCESS) {
        size_t log_len = 0;
        nvrtcGetProgramLogSize(prog, &log_len);
        char *log = dsk_malloc(log_len + 1);
        if (log) {
            log[0] = 0;
            nvrtcGetProgramLog(prog, log);
            dsk_err("%s does not compile (%s):\n%s", src->name, nvrtcGetErrorString(r), log);
            free(log);
        }
        goto out;
    }
    size_t n = 0;
    r = nvrtcGetCUBINSize(prog, &n);
    if (r != NVRTC_SUCCESS || n == 0) {
        dsk_err("%s: no cubin produced (%s); is the arch a real sm_NN?", src->name, nvrtcGetErrorString(r));
        goto out;
    }
    *cubin = dsk_malloc(n);
    if (!*cubin)
        goto out;
    r = nvrtcGetCUBIN(prog, (char *)*cubin);
    if (r != NVRTC_SUCCESS) {
        free(*cubin);
        *cubin = NULL;
        dsk_err("nvrtcGetCUBIN(%s): %s", src->name, nvrtcGetErrorString(r));
        goto out;
    }
    *len = n;
    rc = 0;
out:
    nvrtcDestroyProgram(&prog);
    return rc;
}

/* A cache entry DIR/<key>.cubin is trusted only when DIR/<key>.xxh128 beside it holds the xxh3-128 of
 * its bytes: a damaged or empty entry (or one an older dskit-build wrote without the hash) is said so on
 * stderr and compiled again. Returns 0 with the cubin, or -1 (no error set) to compile. */
static int cache_read(const char *cubin_path, const char *sum_path, unsigned char **cubin, size_t *len)
{
    struct stat st;
    if (stat(cubin_path, &st) != 0)
        return -1;
    char *data = NULL, *sum = NULL;
    size_t n = 0, sn = 0;
    char h[33], why[4608];
    if (dsk_read_file_max(cubin_path, KIT_MAX_ENTRY_BYTES, "cache entry", &data, &n)) {
        snprintf(why, sizeof why, "cannot be read (%s)", dsk_err_msg());
    } else if (n == 0) {
        snprintf(why, sizeof why, "is empty");
    } else if (dsk_read_file_max(sum_path, 64, "cache checksum", &sum, &sn)) {
        snprintf(why, sizeof why, "has no readable checksum %s beside it", sum_path);
    } else if (dsk_xxh128_hex(data, n, h), sn < 32 || memcmp(sum, h, 32)) {
        snprintf(why, sizeof why, "hashes to %s, its checksum says %.32s", h, sum);
    } else {
        free(sum);
        *cubin = (unsigned char *)data;
        *len = n;
        return 0;
    }
    dsk_err_clear();
    fprintf(stderr, "dskit-build: cache entry %s %s; compiling it again\n", cubin_path, why);
    free(data);
    free(sum);
    return -1;
}

int compile_variant(const compile_job *job, unsigned char **cubin, size_t *len, int *cached)
{
    const src_file *src = src_tree_find(job->tree, job->source);
    if (!src)
        return dsk_err("kernel source %s is not in kit/src", job->source);
    char key[33], path[4096], sum_path[4096];
    *cached = 0;
    if (job->cache_dir) {
        cache_key(job, src, key);
        snprintf(path, sizeof path, "%s/%s.cubin", job->cache_dir, key);
        snprintf(sum_path, sizeof sum_path, "%s/%s.xxh128", job->cache_dir, key);
        if (cache_read(path, sum_path, cubin, len) == 0) {
            *cached = 1;
            return 0;
        }
    }
    if (nvrtc_compile(job, src, cubin, len))
        return -1;
    if (job->cache_dir) {
        /* the cubin first: a checksum never names bytes that are not there yet */
        char h[40];
        dsk_xxh128_hex(*cubin, *len, h);
        strcat(h, "\n");
        if (dsk_write_file_atomic(path, *cubin, *len) || dsk_write_file_atomic(sum_path, h, 33))
            return dsk_err_ctx("writing the compile cache");
    }
    return 0;
}
