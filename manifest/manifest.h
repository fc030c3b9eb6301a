/* The kit's manifest (kit.md "The archive"): format dskit/1, read and written with jansson.
 * manifest.json is the index of the archive; manifest.xxh128 holds the xxh3-128 of its bytes (the kit's
 * root). Serialisation is canonical (sorted keys, fixed indentation, kernels sorted by symbol), so the
 * same manifest always gives the same bytes. */
#ifndef DSK_MANIFEST_H
#define DSK_MANIFEST_H

#include <jansson.h>
#include <stdint.h>

#define MANIFEST_FORMAT "dskit/1"
#define MANIFEST_MAX_PARAMS 12  /* variant parameters per kernel */
#define MANIFEST_MAX_ARGS 40    /* kernel arguments (parameter ABI; vec_glue takes 40) */
/* Counts and lengths a manifest may have (docs/kit-format.md "Limits"; the sm_90 kit has 140 kernels) */
#define MANIFEST_MAX_BYTES (8 << 20) /* of manifest.json (parsing costs ~20 bytes of memory per byte) */
#define MANIFEST_MAX_KERNELS 8192
#define MANIFEST_MAX_BLOBS 8192
#define MANIFEST_MAX_FILES 64
#define MANIFEST_MAX_FAMILY 63  /* characters of a family name */
#define MANIFEST_MAX_SYMBOL 159 /* characters of a symbol */
/* Bytes of a variant key with its NUL: family, ":", and 12 of ",NAME=VALUE" (23-byte names, 20-character
 * values) */
#define MF_VARIANT_KEY_MAX 640

typedef struct {
    char name[24];
    int64_t value;
} mf_param;

/* Kinds of kernel arguments, in launch order. */
typedef enum { MF_ARG_PTR, MF_ARG_I32, MF_ARG_U32, MF_ARG_I64, MF_ARG_U64, MF_ARG_F32 } mf_arg_kind;

typedef struct {
    char *family;                         /* e.g. "rmsnorm" */
    char *symbol;                         /* extern "C" name, e.g. "rmsnorm__T128" */
    char blob[33];                        /* xxh3-128 hex of the cubin holding it */
    char target[16];                      /* SASS target: the kit's arch, or its "a" form */
    int nparams;
    mf_param param[MANIFEST_MAX_PARAMS];  /* variant parameters (builder: axis order; parsed: name order) */
    int block;                            /* threads per block */
    int smem;                             /* dynamic shared memory bytes the launch asks for */
    int smem_static;                      /* static shared memory, from the cubin's .nv.shared section */
    int regs;                             /* registers per thread, from the cubin's .nv.info */
    int max_threads;                      /* __launch_bounds__ limit from .nv.info, 0 when none */
    int pdl;                              /* launched with programmatic dependent launch */
    int nargs;
    mf_arg_kind args[MANIFEST_MAX_ARGS];  /* parameter ABI */
} mf_kernel;

typedef struct {
    char hash[33]; /* xxh3-128 hex of the cubin's bytes; the entry is cubins/<hash>.cubin */
    uint64_t size;
} mf_blob;

/* Other files the kit carries (LICENSES/...). */
typedef struct {
    char *path;
    uint64_t size;
    char hash[33];
} mf_file;

typedef struct {
    char *format;     /* MANIFEST_FORMAT */
    char *arch;       /* "sm_90", "sm_121", ... */
    json_t *toolchain; /* {"nvrtc": "13.0", "flags": [...], "builder": "..."} */
    json_t *source;    /* {"xxh128": "...", "git": "..."} */
    mf_blob *blobs;
    int nblobs;
    mf_kernel *kernels;
    int nkernels;
    mf_file *files;
    int nfiles;
} manifest;

/* Parse manifest.json. Structural errors (missing fields, wrong types) fail with a message naming the
 * field; an unknown format fails with "unknown format". */
int manifest_parse(const char *json, size_t len, manifest *out);
/* Canonical JSON text (malloc'd, ends with a newline). */
char *manifest_serialize(const manifest *m);
void manifest_free(manifest *m);

const char *mf_arg_kind_name(mf_arg_kind k);
int mf_arg_kind_parse(const char *s, mf_arg_kind *out);

/* The lookup key of a variant: family and parameters sorted by name, "rmsnorm:T=128". */
int mf_variant_key(const char *family, const mf_param *params, int nparams, char *out, size_t cap);
/* Parse "K=4,CB=2" into parameters (any order). */
int mf_params_parse(const char *text, mf_param *out, int cap, int *n);

/* Arch helpers: "sm_90" -> 90, suffix 0 / 'a' / 'f'. */
int mf_arch_parse(const char *arch, int *sm, char *suffix);
/* The SM number a cubin's ELF header declares, or -1 when it is not a CUDA ELF. */
int mf_cubin_sm(const void *cubin, size_t len);
/* Resources read from a cubin for one function: registers, max threads, static shared memory. */
int mf_cubin_resources(const void *cubin, size_t len, const char *symbol, int *regs, int *max_threads,
                       int *smem_static);

#endif
