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
    int archs[8];       /* the SM numbers the family is built for (narchs 0: every arch asked) */
    int narchs;
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

/* Bounds of a spec (docs/kit-format.md "Limits"): the product of a family's axes, of all families'
 * products together (each combination evaluates the expressions), and the variants kept. */
#define SPEC_MAX_BYTES (4 << 20)        /* of variants.json */
#define SPEC_MAX_FAMILY_COMBOS 65536
#define SPEC_MAX_COMBOS (1 << 20)
#define SPEC_MAX_VARIANTS MANIFEST_MAX_KERNELS
#define SPEC_MAX_FLAGS 16 /* extra NVRTC options of a family */

/* One expanded variant. */
typedef struct {
    const spec_family *fam;
    char symbol[MANIFEST_MAX_SYMBOL + 1];
    int nparams;
    mf_param param[MANIFEST_MAX_PARAMS];
    int block, smem;
} spec_variant;

/* Read and check kit/variants.json (spec_parse: the same from its text; name is used in messages). */
int spec_load(const char *path, variant_spec *out);
int spec_parse(const char *text, size_t len, const char *name, variant_spec *out);
void spec_free(variant_spec *s);
/* Whether f is built for arch ("sm_90", "sm_90a", ...): its 'archs' list names arch's SM number, or it has
 * none. */
int spec_family_has_arch(const spec_family *f, const char *arch);
/* Every variant of every family, in spec order; constraints applied, block/smem evaluated. A spec past
 * the bounds above, an expression that fails (overflow, division by zero, nesting) or two variants
 * with one symbol is an error. */
int spec_expand(const variant_spec *s, spec_variant **out, int *n);
/* The symbol of a variant: family "__" NAME VALUE "_" NAME VALUE ... (negative values spelled m3);
 * -1 if it does not fit cap bytes. */
int spec_symbol(const char *family, const mf_param *p, int n, char *out, size_t cap);

#endif
