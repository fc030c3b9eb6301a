/* The declarative variant spec (kit/variants.json): every kernel family, its source, parameter axes
 * and the constraints between them. Expanding it gives every variant the builder compiles; nothing is
 * recorded from a run. See docs/kit-format.md for the file's fields. */
#ifndef DSK_SPEC_H
#define DSK_SPEC_H

#include "manifest/manifest.h"

typedef struct {
    char name[24];
    int64_t *values;
    int nvalues;
} spec_axis;

typedef struct {
    char *family;
    char *source;   /* file in kit/src */
    char *doc;
    spec_axis *axes;
    int naxes;
    char *where;    /* constraint expression or NULL */
    char *block;    /* expression */
    char *smem;     /* expression, dynamic shared memory bytes */
    int pdl;
    char target_suffix; /* 0, 'a' or 'f' */
    char **flags;   /* extra NVRTC options */
    int nflags;
    mf_param defines[MANIFEST_MAX_PARAMS]; /* fixed -D values */
    int ndefines;
    int nargs;
    mf_arg_kind args[MANIFEST_MAX_ARGS];
} spec_family;

typedef struct {
    spec_family *families;
    int nfamilies;
} variant_spec;

/* One expanded variant. */
typedef struct {
    const spec_family *fam;
    char symbol[160];
    int nparams;
    mf_param param[MANIFEST_MAX_PARAMS];
    int block, smem;
} spec_variant;

int spec_load(const char *path, variant_spec *out);
void spec_free(variant_spec *s);
/* Every variant of every family, in spec order; constraints applied, block/smem evaluated. */
int spec_expand(const variant_spec *s, spec_variant **out, int *n);
/* The symbol of a variant: family "__" NAME VALUE "_" NAME VALUE ... (negative values spelled m3). */
void spec_symbol(const char *family, const mf_param *p, int n, char *out, size_t cap);

#endif
