/* The resize plan (vision.md §2.1, REF plan_image_grid) and the fit and paste of ImageOps.pad (§2.3). All
 * arithmetic is IEEE double in the order REF's Python evaluates it: C's pow and sqrt are what CPython
 * calls, int() truncates, and round() is rint() in the default rounding mode (ties to even). */
#include "runtime/common/error.h"
#include "runtime/model/vision_span.h"
#include "runtime/vision/vision.h"

#include <math.h>

static void grid(vision_plan *o, int p, int r)
{
    o->n_vit_h = o->best_h / p;
    o->n_vit_w = o->best_w / p;
    o->n_llm_h = vision_cells(o->n_vit_h, r);
    o->n_llm_w = vision_cells(o->n_vit_w, r);
    o->positions = vision_span_positions(r, o->n_vit_h, o->n_vit_w);
}

int vision_plan_for(const model_config *c, int W, int H, vision_plan *o)
{
    const int p = c->vision_patch_size, r = c->vision_downsample_ratio, M = c->vision_max_n_token;
    const double m = (double)c->vision_min_pixels, q = c->vision_max_wh_ratio;
    if (c->vision_n_layers <= 0)
        return dsk_err("this model has no vision tower (vision_config.num_hidden_layers is 0): it takes no images");
    if (W < 1 || H < 1)
        return dsk_err("an image of %d x %d pixels has no plan", W, H);
    /* 1. the aspect clamp (max_wh_ratio; null in the release, vision.md §7.5) */
    double w = W, h = H;
    int stretch = q > 0 && W > H * q;
    if (stretch)
        w = H * q;
    /* 2. upscale to about min_pixels; the aspect ratio is kept only approximately */
    if (w * h > 0 && w * h < m) {
        double s = pow(m / (w * h), 0.5);
        w = trunc(w * s);
        h = trunc(h * s);
    }
    /* 3. whole patches */
    o->best_w = (int)(ceil(w / p) * p);
    o->best_h = (int)(ceil(h / p) * p);
    grid(o, p, r);
    /* 4. shrink: the largest x with ρ·x·(x+1) + 2 <= M cells, x columns by y = x·ρ rows */
    if (o->positions > M) {
        double rho = h / w, x = sqrt((M - 2) / rho + 0.25) - 0.5, y = x * rho;
        int cell = p * r;
        if (x < 1) { /* very tall: one column */
            o->best_h = (M - 2) / 2 * cell;
            o->best_w = cell;
        } else if (y < 1) { /* very wide: one row */
            o->best_h = cell;
            o->best_w = (M - 3) * cell;
        } else {
            double bx = (double)((int64_t)floor(x) * cell) / w, by = (double)((int64_t)floor(y) * cell) / h;
            double beta = bx < by ? bx : by;
            o->best_h = (int)(floor(h * beta / p) * p);
            o->best_w = (int)(floor(w * beta / p) * p);
        }
        grid(o, p, r);
        if (o->best_w < p || o->best_h < p || o->positions > M) /* REF asserts this */
            return dsk_err("the resize plan of a %d x %d image gives a %d x %d canvas (%lld positions, at most %d)",
                           W, H, o->best_w, o->best_h, (long long)o->positions, M);
    }
    /* the fit (ImageOps.contain): the aspect ratios compared as doubles */
    int bw = o->best_w, bh = o->best_h;
    double im = (double)W / H, dest = (double)bw / bh;
    o->fit_w = bw;
    o->fit_h = bh;
    if (!stretch && im != dest) {
        if (im > dest)
            o->fit_h = (int)rint((double)H / W * bw);
        else
            o->fit_w = (int)rint((double)W / H * bh);
    }
    /* A side that rounds to 0 (an image of extreme aspect, e.g. 2 x 2192 on a 12-wide canvas) is kept: REF's
     * contain() then returns an empty image and the canvas stays all grey (checked against Pillow 13). */
    o->off_x = o->fit_w != bw ? (int)rint((bw - o->fit_w) * 0.5) : 0;
    o->off_y = o->fit_w == bw ? (int)rint((bh - o->fit_h) * 0.5) : 0;
    return 0;
}
