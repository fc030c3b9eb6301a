/* `needs`: the kernel variants a model config and serving settings launch. One function, shared by the
 * builder (dskit-build --for MODEL_DIR builds exactly these), verify (dskit verify --needs MODEL_DIR
 * proves a kit covers them) and the runtime (which resolves them all at start). Each entry says why it
 * is needed. The variant choices come from runtime/gpu/variant_rules.h, the same rules the launchers use. */
#ifndef DSK_NEEDS_H
#define DSK_NEEDS_H

#include "manifest/manifest.h"
#include "runtime/model/config.h"

typedef struct {
    int max_rows; /* rows one launch may carry (decode streams x verify window); default 64 */
    int sm;       /* the kit's SM number (90: Hopper's own forms, e.g. vision_mm_wgmma); 0: the generic forms */
} needs_settings;

typedef struct {
    char family[48];
    int nparams;
    mf_param param[MANIFEST_MAX_PARAMS];
    char why[96];
} need;

typedef struct {
    need *v;
    int n;
} need_list;

/* What the config alone decides (norms, RoPE, routers, indexer, candidates). */
int needs_for_model(const model_config *c, const needs_settings *s, need_list *out);
/* The whole list for a model folder: its config.json, plus the EXL3 variants of every (bits, codebook)
 * its checkpoint's linears use, read from the safetensors headers. A folder without a checkpoint is
 * an error naming it. */
int needs_for_model_dir(const char *dir, const needs_settings *s, need_list *out);
/* Add the EXL3 variants linears of K bits and codebook cb need at up to max_rows rows per launch (moe: the
 * routed MoE too); what needs_for_model_dir adds for each (bits, codebook) its checkpoint holds. */
int needs_add_exl3(need_list *l, int K, int cb, int max_rows, int moe);
/* Whether a manifest kernel is the variant a need asks for. */
int need_matches(const need *n, const mf_kernel *k);
int need_matches_params(const need *n, const char *family, const mf_param *p, int np);
/* "family K=4,CB=2" */
void need_describe(const need *n, char *out, size_t cap);
void need_list_free(need_list *l);

#endif
