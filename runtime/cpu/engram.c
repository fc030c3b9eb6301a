/* Engram (model.md §3.3): n-gram hashed rows of an FP8 table, projected to one key per stream and a
 * shared value, gated per stream and added to the streams. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/layers.h"
#include "runtime/ref/engram_gate.h"
#include "runtime/ref/engram_rows.h"

#include <math.h>
#include <stdlib.h>

int engram_rows(const cpu_model *m, int l, int n, const uint8_t *records, uint16_t *X)
{
    const model_config *c = &m->cfg;
    const block_weights *b = &m->blocks[l];
    int cols = model_engram_cols(c), w = c->engram_head_dim;
    int d = c->dim, hc = c->hc_mult, kvw = (hc + 1) * d;
    uint16_t *e = dsk_malloc(sizeof(uint16_t) * (size_t)n * cols * w);
    uint16_t *kv = dsk_malloc(sizeof(uint16_t) * (size_t)n * kvw);
    int rc = -1;
    if (!e || !kv)
        goto done;
    /* the records (e4m3 values, then their e8m0 scales) dequantised to bf16, then the projection */
    ref_engram_records(records, n, cols, w, e, (int64_t)cols * w);
    if (linear_bf16(&b->eg_wkv, e, n, kv))
        goto done;
    ref_engram_gate(X, kv, b->eg_w, n, hc, d, c->norm_eps);
    rc = 0;
done:
    free(e);
    free(kv);
    return rc;
}
