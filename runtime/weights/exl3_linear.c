/* Recognition of one EXL3 linear among a checkpoint's tensors (exl3.md §1.1, §1.3). */
#include "runtime/common/error.h"
#include "runtime/weights/exl3_linear.h"

#include <stdio.h>
#include <string.h>

enum { NAME_CAP = 512 };

/* "<prefix>.<part>" into buf; -1 if the prefix is too long. */
static int part_name(char *buf, const char *prefix, const char *part)
{
    if ((size_t)snprintf(buf, NAME_CAP, "%s.%s", prefix, part) >= NAME_CAP)
        return dsk_err("EXL3 linear name '%s' is too long", prefix);
    return 0;
}

static const st_tensor *part(const st_set *set, const char *prefix, const char *name)
{
    char buf[NAME_CAP];
    return part_name(buf, prefix, name) == 0 ? st_get(set, buf) : NULL;
}

/* The pointer must suit its element type: the decoder reads uint16/float directly from the map. */
static int check_aligned(const st_tensor *t, size_t align)
{
    if ((uintptr_t)t->data % align)
        return dsk_err("tensor '%s' (%s): data is not %zu-byte aligned in the file, so it cannot be "
                       "used in place; rewrite the checkpoint with aligned tensors",
                       t->name, t->file, align);
    return 0;
}

/* A codebook flag: an I32 0-dim scalar holding the locked multiplier (exl3.md §1.3). */
static int check_flag(const st_tensor *t, uint32_t locked)
{
    char sb[200];
    if (t->dtype != ST_I32 || t->ndim != 0)
        return dsk_err("tensor '%s' (%s): expected an I32 scalar (shape []), found %s %s", t->name, t->file,
                       st_dtype_name(t->dtype), st_shape_str(t->ndim, t->shape, sb, sizeof sb));
    uint32_t v;
    memcpy(&v, t->data, 4);
    if (v != locked)
        return dsk_err("tensor '%s' (%s): value 0x%08X is not the locked multiplier 0x%08X (an experimental "
                       "pre-2025-10-12 codebook that current EXL3 decoders do not decode); reconvert the layer",
                       t->name, t->file, v, locked);
    return 0;
}

static int get(const st_set *set, const char *prefix, exl3_linear *L)
{
    char name[NAME_CAP];
    const st_tensor *tr, *suh, *svh, *mcg, *mul1, *bias;
    if (part_name(name, prefix, "trellis") != 0)
        return -1;
    if (!(tr = st_get(set, name)))
        return dsk_err("tensor '%s' is missing", name);
    char sb[200];
    if (tr->dtype != ST_I16 || tr->ndim != 3)
        return dsk_err("tensor '%s' (%s): expected I16 [k/16, n/16, 16·K], found %s %s", name, tr->file,
                       st_dtype_name(tr->dtype), st_shape_str(tr->ndim, tr->shape, sb, sizeof sb));
    int64_t kt = tr->shape[0], nt = tr->shape[1], w = tr->shape[2];
    if (w % 16 || w < 16 || w > 128)
        return dsk_err("tensor '%s' (%s): last dimension %lld is not 16·K for K in 1..8 bits per weight",
                       name, tr->file, (long long)w);
    /* an empty trellis may have any first two extents (up to 2^63 - 1): k and n are formed in range only */
    if (kt > EXL3_MAX_FEATURES / 16 || nt > EXL3_MAX_FEATURES / 16)
        return dsk_err("tensor '%s' (%s): shape [%lld, %lld, %lld] gives k = 16 x %lld, n = 16 x %lld; both must "
                       "be at most %lld",
                       name, tr->file, (long long)kt, (long long)nt, (long long)w, (long long)kt, (long long)nt,
                       (long long)EXL3_MAX_FEATURES);
    if (kt <= 0 || nt <= 0 || kt % 8 || nt % 8)
        return dsk_err("tensor '%s' (%s): shape [%lld, %lld, %lld] gives k = %lld, n = %lld; both must be "
                       "positive multiples of 128 (EXL3 pads layers to 128)",
                       name, tr->file, (long long)kt, (long long)nt, (long long)w, (long long)(16 * kt),
                       (long long)(16 * nt));
    *L = (exl3_linear){.name = tr->name, .k = 16 * kt, .n = 16 * nt, .K = (int)(w / 16)};

    if (part(set, prefix, "scale"))
        return dsk_err("tensor '%s.scale' is present: a separate scale tensor is no longer used by EXL3; "
                       "reconvert the layer", prefix);
    if (!part(set, prefix, "suh") && (part(set, prefix, "su") || part(set, prefix, "sv")))
        return dsk_err("EXL3 linear '%s' has pre-release .su/.sv sign bitfields instead of .suh/.svh; "
                       "they are not supported, reconvert the layer", prefix);
    int64_t kshape[1] = {L->k}, nshape[1] = {L->n};
    part_name(name, prefix, "suh");
    if (st_require(set, name, ST_F16, 1, kshape, &suh) != 0)
        return dsk_err_ctx("trellis [%lld, %lld, %lld] implies k = %lld", (long long)kt, (long long)nt,
                           (long long)w, (long long)L->k);
    part_name(name, prefix, "svh");
    if (st_require(set, name, ST_F16, 1, nshape, &svh) != 0)
        return dsk_err_ctx("trellis [%lld, %lld, %lld] implies n = %lld", (long long)kt, (long long)nt,
                           (long long)w, (long long)L->n);

    mcg = part(set, prefix, "mcg");
    mul1 = part(set, prefix, "mul1");
    if (mcg && mul1)
        return dsk_err("tensors '%s' and '%s' are both present; a layer selects one codebook", mcg->name,
                       mul1->name);
    if (mcg && check_flag(mcg, EXL3_MCG_MULT) != 0)
        return -1;
    if (mul1 && check_flag(mul1, EXL3_MUL1_MULT) != 0)
        return -1;
    L->codebook = mcg ? EXL3_CB_MCG : mul1 ? EXL3_CB_MUL1 : EXL3_CB_3INST;

    if ((bias = part(set, prefix, "bias"))) {
        if ((bias->dtype != ST_F16 && bias->dtype != ST_F32) || bias->ndim != 1 || bias->shape[0] != L->n)
            return dsk_err("tensor '%s' (%s): expected F16 or F32 [%lld], found %s %s", bias->name, bias->file,
                           (long long)L->n, st_dtype_name(bias->dtype),
                           st_shape_str(bias->ndim, bias->shape, sb, sizeof sb));
        L->bias_is_f32 = bias->dtype == ST_F32;
        if (check_aligned(bias, L->bias_is_f32 ? 4 : 2) != 0)
            return -1;
        L->bias = bias->data;
    }
    if (check_aligned(tr, 2) != 0 || check_aligned(suh, 2) != 0 || check_aligned(svh, 2) != 0)
        return -1;
    L->trellis = tr->data;
    L->suh = suh->data;
    L->svh = svh->data;
    return 0;
}

int exl3_linear_get(const st_set *set, const char *prefix, exl3_linear *out)
{
    *out = (exl3_linear){0};
    if (get(set, prefix, out) != 0) {
        *out = (exl3_linear){0};
        return dsk_err_ctx("EXL3 linear '%s'", prefix);
    }
    return 0;
}

int exl3_linear_is_present(const st_set *set, const char *prefix)
{
    static const char *parts[] = {"trellis", "suh", "svh", "mcg", "mul1", "su", "sv"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (part(set, prefix, parts[i]))
            return 1;
    return 0;
}
