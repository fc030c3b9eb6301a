/* The vision tower on the GPU (vision.md §3, docs/vision.md): one image at a time, eagerly on the backend's
 * stream, when the engine places the image (engine_seq_image), never inside a round. The same operations
 * and rounding points as the CPU tower (runtime/cpu/vision_tower.c), from the kit's vision_mm, vision_glue
 * and vision_attn families; the span's rows (START, the aligner rows of each line and NEWLINE, END) are
 * gathered into one device buffer the sequence keeps until the span is dropped. */
#include "runtime/common/error.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/launch/rows_copy.h"
#include "runtime/launch/vision_attn.h"
#include "runtime/launch/vision_glue.h"
#include "runtime/launch/vision_mm.h"
#include "runtime/model/vision_span.h"
#include "runtime/ref/vision_glue.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN256(x) (((x) + 255) & ~(size_t)255)

/* The tower's scratch for an N-patch image: its parts' offsets in one allocation. */
typedef struct {
    size_t x, xn, qkv, o, act, cells, a1, feat, cs, sn, patches, idx, bytes;
} tower_layout;

static void layout(const model_config *c, int K0, int64_t N, int64_t L, int64_t span, tower_layout *t)
{
    int64_t D = c->vision_dim, I = c->vision_inter_dim, r2 = (int64_t)c->vision_downsample_ratio * c->vision_downsample_ratio,
            R = D / c->vision_n_heads / 2;
    size_t at = 0;
#define PART(f, bytes) (t->f = at, at = ALIGN256(at + (size_t)(bytes)))
    PART(x, N * D * 2);
    PART(xn, N * D * 2);
    PART(qkv, N * 3 * D * 2);
    PART(o, N * D * 2);
    PART(act, N * I * 2);
    PART(cells, L * r2 * D * 2);
    PART(a1, L * c->dim * 2);
    PART(feat, (L + 3) * c->dim * 2); /* the aligner's rows, then START, END, NEWLINE */
    PART(cs, N * R * 4);
    PART(sn, N * R * 4);
    PART(patches, N * K0 * 2);
    PART(idx, span * 4);
#undef PART
    t->bytes = at;
}

/* The tower's launches into the scratch at base; taps (may be NULL) as in gpu_engine.h. */
static int tower(gpu_backend *b, CUdeviceptr base, const tower_layout *t, int nh, int nw, gpu_vision_taps *taps)
{
    const model_config *c = b->cfg;
    const gpu_vision_weights *v = &b->w.vision;
    const kit *k = b->k;
    CUstream s = b->s;
    int D = c->vision_dim, H = c->vision_n_heads, hd = D / H, I = c->vision_inter_dim, r = c->vision_downsample_ratio;
    int N = nh * nw, L = vision_cells(nh, r) * vision_cells(nw, r);
    CUdeviceptr x = base + t->x, xn = base + t->xn, qkv = base + t->qkv, o = base + t->o, act = base + t->act;
    CUdeviceptr cs = base + t->cs, sn = base + t->sn;
    TRY(op_vision_mm(k, s, base + t->patches, v->patch_w, v->patch_b, x, N, v->K0, D, VISION_MM_BIAS));
    if (taps && taps->embed)
        CU_TRY(cu.cuMemcpyDtoHAsync(taps->embed, x, (size_t)N * D * 2, s));
    for (int l = 0; l < c->vision_n_layers; l++) {
        const gpu_vision_block *g = &v->blocks[l];
        TRY(op_vision_rmsnorm(k, s, x, g->norm1, xn, N, D));
        TRY(op_vision_mm(k, s, xn, g->wqkv, g->bqkv, qkv, N, D, 3 * D, VISION_MM_BIAS));
        TRY(op_vision_rope(k, s, qkv, 3 * D, cs, sn, N, H, hd));
        TRY(op_vision_attn(k, s, qkv, o, N, H, hd));
        TRY(op_vision_mm(k, s, o, g->wo, g->bo, x, N, D, D, VISION_MM_RESIDUAL));
        TRY(op_vision_rmsnorm(k, s, x, g->norm2, xn, N, D));
        TRY(op_vision_mm(k, s, xn, g->w1, 0, act, N, D, 2 * I, VISION_MM_SWIGLU));
        TRY(op_vision_mm(k, s, act, g->w2, 0, x, N, I, D, VISION_MM_RESIDUAL));
    }
    TRY(op_vision_rmsnorm(k, s, x, v->norm, xn, N, D));
    if (taps && taps->vit)
        CU_TRY(cu.cuMemcpyDtoHAsync(taps->vit, xn, (size_t)N * D * 2, s));
    TRY(op_vision_s2d(k, s, xn, base + t->cells, nh, nw, D, r));
    TRY(op_vision_mm(k, s, base + t->cells, v->al_w1, v->al_b1, base + t->a1, L, r * r * D, c->dim, VISION_MM_GELU));
    TRY(op_vision_mm(k, s, base + t->a1, v->al_w2, v->al_b2, base + t->feat, L, c->dim, c->dim, VISION_MM_BIAS));
    return 0;
}

int gpu_vision_run(gpu_backend *b, const uint16_t *patches, int nh, int nw, CUdeviceptr *rows_out, int64_t *n_out,
                   gpu_vision_taps *taps)
{
    const model_config *c = b->cfg;
    const gpu_vision_weights *v = &b->w.vision;
    int D = c->vision_dim, r = c->vision_downsample_ratio, K = 3 * c->vision_patch_size * c->vision_patch_size;
    int lh = vision_cells(nh, r), lw = vision_cells(nw, r), L = lh * lw, hd = D / c->vision_n_heads;
    int64_t N = (int64_t)nh * nw, span = vision_span_positions(r, nh, nw);
    *rows_out = 0;
    if (!v->blocks)
        return dsk_err("this model has no vision tower");
    tower_layout t;
    layout(c, v->K0, N, L, span, &t);
    size_t span_bytes = (size_t)span * c->dim * 2;
    /* host side: the padded patches, the RoPE table, the span's gather list */
    uint16_t *hp = dsk_calloc((size_t)N * v->K0, 2);
    int32_t *idx = dsk_malloc(sizeof(int32_t) * (size_t)span);
    float *cs = NULL, *sn = NULL;
    CUdeviceptr base = 0, rows = 0;
    int rc = -1;
    if (!hp || !idx || ref_vision_rope_table(hd, (float)c->vision_rope_theta, nh, nw, &cs, &sn))
        goto done;
    for (int64_t i = 0; i < N; i++)
        memcpy(hp + i * v->K0, patches + i * K, sizeof(uint16_t) * (size_t)K);
    for (int64_t i = 0; i < span; i++) {
        int64_t cell = 0;
        int slot = vision_span_slot(lh, lw, i, &cell);
        idx[i] = slot == VISION_IMAGE ? (int32_t)cell : slot == VISION_START ? L : slot == VISION_END ? L + 1 : L + 2;
    }
    size_t free_b = 0, total_b = 0, grow = t.bytes > b->vis_scratch_bytes ? t.bytes : 0;
    if (cu.cuMemGetInfo(&free_b, &total_b) != CUDA_SUCCESS) {
        dsk_err("cuMemGetInfo failed");
        goto done;
    }
    if (grow + span_bytes > free_b + b->vis_scratch_bytes * (grow > 0)) {
        dsk_err("not enough GPU memory for a %d x %d patch image: its tower needs %.1f MiB of scratch and its span "
                "%.1f MiB, %.1f MiB are free",
                nh, nw, t.bytes / 1048576.0, span_bytes / 1048576.0, free_b / 1048576.0);
        goto done;
    }
    if (grow) { /* the scratch grows to this image's (kept for the next one) */
        if (b->vis_scratch)
            cu.cuMemFree(b->vis_scratch);
        b->vis_scratch = 0;
        b->vis_scratch_bytes = 0;
        if (cu.cuMemAlloc(&b->vis_scratch, t.bytes) != CUDA_SUCCESS) {
            b->vis_scratch = 0;
            dsk_err("allocating %.1f MiB of GPU memory for the vision tower's scratch failed", t.bytes / 1048576.0);
            goto done;
        }
        b->vis_scratch_bytes = t.bytes;
    }
    base = b->vis_scratch;
    if (cu.cuMemAlloc(&rows, span_bytes) != CUDA_SUCCESS) {
        rows = 0;
        dsk_err("allocating %.1f MiB of GPU memory for an image's span failed", span_bytes / 1048576.0);
        goto done;
    }
    size_t R = (size_t)hd / 2;
    if (cu.cuMemcpyHtoDAsync(base + t.patches, hp, (size_t)N * v->K0 * 2, b->s) != CUDA_SUCCESS ||
        cu.cuMemcpyHtoDAsync(base + t.cs, cs, (size_t)N * R * 4, b->s) != CUDA_SUCCESS ||
        cu.cuMemcpyHtoDAsync(base + t.sn, sn, (size_t)N * R * 4, b->s) != CUDA_SUCCESS ||
        cu.cuMemcpyHtoDAsync(base + t.idx, idx, (size_t)span * 4, b->s) != CUDA_SUCCESS ||
        cu.cuMemcpyDtoDAsync(base + t.feat + (CUdeviceptr)L * c->dim * 2, v->delims, (size_t)3 * c->dim * 2, b->s) !=
            CUDA_SUCCESS) {
        dsk_err("uploading an image's patches failed");
        goto done;
    }
    if (tower(b, base, &t, nh, nw, taps) ||
        op_rows_copy(b->k, b->s, base + t.feat, (int64_t)c->dim * 2, base + t.idx, rows, (int64_t)c->dim * 2, 0, (int)span,
                     c->dim * 2))
        goto done;
    if (taps && taps->features &&
        cu.cuMemcpyDtoHAsync(taps->features, base + t.feat, (size_t)L * c->dim * 2, b->s) != CUDA_SUCCESS) {
        dsk_err("copying the aligner's rows back failed");
        goto done;
    }
    CUresult cr = cu.cuStreamSynchronize(b->s);
    if (cr != CUDA_SUCCESS) {
        dsk_cu_fail(cr, "the vision tower on the device");
        goto done;
    }
    *rows_out = rows;
    *n_out = span;
    rows = 0;
    rc = 0;
done:
    if (rc)
        cu.cuStreamSynchronize(b->s); /* nothing of the failed tower may still run */
    if (rows)
        cu.cuMemFree(rows);
    free(hp);
    free(idx);
    free(cs);
    free(sn);
    return rc ? dsk_err_ctx("the vision tower on a %d x %d patch grid", nh, nw) : 0;
}
