/* The C side of check_pillow.py: decode IMAGE and preprocess it with the given vision numbers, write the
 * decoded RGB, the canvas and the patches to OUT_DIR/{rgb,canvas,patches}.bin and print the plan as one
 * JSON line (or "error: MESSAGE" and exit 1 when the image is refused).
 *
 * usage: vision_dump IMAGE PATCH MAX_TOKENS MIN_PIXELS OUT_DIR */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/vision/vision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int put(const char *dir, const char *name, const void *data, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "vision_dump: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: vision_dump IMAGE PATCH MAX_TOKENS MIN_PIXELS OUT_DIR\n");
        return 2;
    }
    model_config c;
    memset(&c, 0, sizeof c);
    c.vision_n_layers = 1;
    c.vision_patch_size = atoi(argv[2]);
    c.vision_downsample_ratio = 3;
    c.vision_max_n_token = atoi(argv[3]);
    c.vision_min_pixels = atoll(argv[4]);
    char *data;
    size_t len;
    vision_rgb rgb;
    vision_image img;
    uint8_t *canvas;
    if (dsk_read_file(argv[1], &data, &len))
        return fprintf(stderr, "vision_dump: %s\n", dsk_err_msg()), 2;
    if (vision_decode((const uint8_t *)data, len, NULL, &rgb)) {
        printf("error: %s\n", dsk_err_msg());
        return 1;
    }
    if (vision_preprocess(&c, &rgb, &img) || vision_canvas(&rgb, &img.plan, &canvas)) {
        printf("error: %s\n", dsk_err_msg());
        return 1;
    }
    const vision_plan *p = &img.plan;
    size_t np = (size_t)p->n_vit_h * p->n_vit_w * 3 * c.vision_patch_size * c.vision_patch_size;
    if (put(argv[5], "rgb.bin", rgb.rgb, (size_t)rgb.width * rgb.height * 3) ||
        put(argv[5], "canvas.bin", canvas, (size_t)p->best_w * p->best_h * 3) ||
        put(argv[5], "patches.bin", img.patches, np * 2))
        return 2;
    printf("{\"width\": %d, \"height\": %d, \"best_w\": %d, \"best_h\": %d, \"n_vit_h\": %d, \"n_vit_w\": %d, "
           "\"positions\": %lld, \"fit_w\": %d, \"fit_h\": %d, \"off_x\": %d, \"off_y\": %d}\n",
           rgb.width, rgb.height, p->best_w, p->best_h, p->n_vit_h, p->n_vit_w, (long long)p->positions, p->fit_w,
           p->fit_h, p->off_x, p->off_y);
    free(canvas);
    vision_image_free(&img);
    vision_rgb_free(&rgb);
    free(data);
    return 0;
}
