/* The canvas (ImageOps.pad with colour 127, vision.md §2.3) and the tower's input (§2.4): values
 * normalised per sample to bf16, cut into channel-major patches in reading order. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/vision/vision.h"

#include <stdlib.h>
#include <string.h>

enum { PAD_GREY = 127 };

int vision_canvas(const vision_rgb *img, const vision_plan *p, uint8_t **canvas)
{
    size_t cw = (size_t)p->best_w, ch = (size_t)p->best_h;
    uint8_t *out = dsk_malloc(cw * ch * 3);
    if (!out)
        return dsk_err_ctx("the canvas of %d x %d", p->best_w, p->best_h);
    if (p->fit_w == p->best_w && p->fit_h == p->best_h) {
        if (vision_resize_bicubic(img->rgb, img->width, img->height, out, p->fit_w, p->fit_h)) {
            free(out);
            return -1;
        }
        *canvas = out;
        return 0;
    }
    memset(out, PAD_GREY, cw * ch * 3);
    if (p->fit_w > 0 && p->fit_h > 0) { /* an empty fit (extreme aspect) leaves the canvas grey, as in REF */
        uint8_t *fit = dsk_malloc((size_t)p->fit_w * p->fit_h * 3);
        if (!fit || vision_resize_bicubic(img->rgb, img->width, img->height, fit, p->fit_w, p->fit_h)) {
            free(fit);
            free(out);
            return dsk_err_ctx("the canvas of %d x %d", p->best_w, p->best_h);
        }
        for (int y = 0; y < p->fit_h; y++)
            memcpy(out + ((size_t)(y + p->off_y) * cw + p->off_x) * 3, fit + (size_t)y * p->fit_w * 3,
                   (size_t)p->fit_w * 3);
        free(fit);
    }
    *canvas = out;
    return 0;
}

uint16_t vision_normalize(uint8_t v)
{
    /* REF: ToTensor's fp32 division, then Normalize(0.5, 0.5) in fp32, then one cast to bf16 */
    float t = (float)v / 255.0f;
    t = (t - 0.5f) / 0.5f;
    return f32_to_bf16(t);
}

int vision_patches(const uint8_t *canvas, const vision_plan *p, int patch, uint16_t **patches)
{
    int nh = p->n_vit_h, nw = p->n_vit_w, pp = patch * patch;
    if (nh < 1 || nw < 1 || p->best_w != nw * patch || p->best_h != nh * patch)
        return dsk_err("patches: a %d x %d canvas is not %d x %d patches of %d", p->best_w, p->best_h, nw, nh, patch);
    uint16_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = vision_normalize((uint8_t)v);
    uint16_t *out = dsk_malloc(sizeof(uint16_t) * (size_t)nh * nw * 3 * pp);
    if (!out)
        return dsk_err_ctx("%d x %d patches", nh, nw);
    size_t stride = (size_t)p->best_w * 3;
    for (int pr = 0; pr < nh; pr++)
        for (int pc = 0; pc < nw; pc++) {
            uint16_t *o = out + ((size_t)pr * nw + pc) * 3 * pp;
            for (int c = 0; c < 3; c++)
                for (int dy = 0; dy < patch; dy++) {
                    const uint8_t *row = canvas + (size_t)(pr * patch + dy) * stride + (size_t)pc * patch * 3 + c;
                    for (int dx = 0; dx < patch; dx++)
                        o[c * pp + dy * patch + dx] = lut[row[3 * dx]];
                }
        }
    *patches = out;
    return 0;
}

int vision_preprocess(const model_config *c, const vision_rgb *img, vision_image *out)
{
    memset(out, 0, sizeof *out);
    uint8_t *canvas = NULL;
    if (vision_plan_for(c, img->width, img->height, &out->plan) || vision_canvas(img, &out->plan, &canvas))
        return -1;
    int rc = vision_patches(canvas, &out->plan, c->vision_patch_size, &out->patches);
    free(canvas);
    return rc;
}

void vision_image_free(vision_image *img)
{
    if (!img)
        return;
    free(img->patches);
    img->patches = NULL;
}
