/* `dskit bench vision`: decode + preprocessing time on the CPU (one thread) for the image sizes, as
 * PNG and as JPEG, generated in memory: a photo-like picture (smooth gradients, edges, mild noise) so the
 * files compress as real ones do. The tower's GPU rows join this table when its kernels land. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/vision/image_write.h"
#include "runtime/vision/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model_dir;
    long reps;
} bench_opts;

static int parse(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v)
            o->model_dir = v;
        else if (!strcmp(a, "--reps") && v) {
            if (cli_parse_int(a, v, 1, 1000, &o->reps))
                return -1;
        } else
            return dsk_err("bench vision: unknown or incomplete option '%s' (options: --model DIR, --reps N)", a);
    }
    return 0;
}

/* A synthetic photograph: two gradients, a few discs with hard edges, and ±8 of noise. */
static void picture(uint8_t *px, int w, int h, dsk_rng *r)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double u = (double)x / w, v = (double)y / h;
            double base[3] = {200 * u + 30 * v, 120 + 90 * sin(6.0 * v + 2.0 * u), 60 + 150 * u * v};
            for (int k = 0; k < 3; k++) {
                double cx = 0.2 + 0.3 * k, cy = 0.3 + 0.2 * k, dx = u - cx, dy = v - cy;
                if (dx * dx + dy * dy < 0.02)
                    base[k] = 255 - base[k];
            }
            for (int c = 0; c < 3; c++) {
                double s = base[c] + (double)dsk_rng_below(r, 17) - 8;
                px[((size_t)y * w + x) * 3 + c] = (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
            }
        }
}

/* The release's vision config (vision.md §1.1), for a run without --model. */
static void release_vision(model_config *c)
{
    memset(c, 0, sizeof *c);
    c->vision_n_layers = 32;
    c->vision_dim = 1024;
    c->vision_n_heads = 16;
    c->vision_inter_dim = 2816;
    c->vision_patch_size = 14;
    c->vision_downsample_ratio = 3;
    c->vision_max_n_token = 1024;
    c->vision_min_pixels = 295936;
    c->vision_rope_theta = 10000;
}

typedef struct {
    double decode_s, prep_s;
    vision_plan plan;
} timing;

static int time_one(const model_config *c, const uint8_t *file, size_t len, long reps, timing *t)
{
    for (long r = 0; r < reps; r++) {
        vision_rgb rgb;
        vision_image img;
        double t0 = dsk_now();
        if (vision_decode(file, len, NULL, &rgb))
            return -1;
        double t1 = dsk_now();
        int rc = vision_preprocess(c, &rgb, &img);
        double t2 = dsk_now();
        vision_rgb_free(&rgb);
        if (rc)
            return -1;
        t->plan = img.plan;
        vision_image_free(&img);
        if (r == 0 || t1 - t0 < t->decode_s)
            t->decode_s = t1 - t0;
        if (r == 0 || t2 - t1 < t->prep_s)
            t->prep_s = t2 - t1;
    }
    return 0;
}

int bench_vision(int argc, char **argv)
{
    bench_opts o = {NULL, 5};
    model_config cfg;
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "dskit bench vision: %s\n", dsk_err_msg());
        return 2;
    }
    if (o.model_dir) {
        if (model_config_load(o.model_dir, &cfg)) {
            fprintf(stderr, "dskit bench vision: %s\n", dsk_err_msg());
            return 2;
        }
        if (cfg.vision_n_layers <= 0) {
            fprintf(stderr, "dskit bench vision: %s has no vision tower\n", o.model_dir);
            return 2;
        }
    } else {
        release_vision(&cfg);
    }
    static const int sizes[3][2] = {{448, 448}, {1024, 768}, {1920, 1080}};
    printf("dskit bench vision: decode + preprocessing on the CPU, one thread, best of %ld; vision config %s "
           "(patch %d, ratio %d, at most %d positions, min %lld pixels)\n",
           o.reps, o.model_dir ? o.model_dir : "of the release", cfg.vision_patch_size, cfg.vision_downsample_ratio,
           cfg.vision_max_n_token, (long long)cfg.vision_min_pixels);
    printf("MB/s: decoded RGB bytes (W x H x 3) per second of decode + preprocessing\n");
    printf("%-10s %-6s %9s %10s %9s %9s %8s %10s %9s\n", "image", "format", "file KB", "decode ms", "prep ms",
           "total ms", "MB/s", "canvas", "positions");
    dsk_rng r;
    dsk_rng_seed(&r, 7);
    for (int s = 0; s < 3; s++) {
        int w = sizes[s][0], h = sizes[s][1];
        uint8_t *px = dsk_malloc((size_t)w * h * 3);
        uint16_t *samples = dsk_malloc(sizeof(uint16_t) * (size_t)w * h * 3);
        if (!px || !samples) {
            free(px);
            free(samples);
            fprintf(stderr, "dskit bench vision: %s\n", dsk_err_msg());
            return 1;
        }
        picture(px, w, h, &r);
        for (size_t i = 0; i < (size_t)w * h * 3; i++)
            samples[i] = px[i];
        for (int f = 0; f < 2; f++) {
            uint8_t *file = NULL;
            size_t len = 0;
            png_spec ps = {.width = w, .height = h, .channels = 3, .depth = 8, .trns_grey = -1};
            timing t = {0};
            int rc = f == 0 ? image_write_png(&ps, samples, &file, &len)
                            : image_write_jpeg(px, w, h, 3, 90, 0, &file, &len);
            if (rc || time_one(&cfg, file, len, o.reps, &t)) {
                fprintf(stderr, "dskit bench vision: %dx%d: %s\n", w, h, dsk_err_msg());
                free(file);
                free(px);
                free(samples);
                return 1;
            }
            double total = t.decode_s + t.prep_s;
            char dims[24], canvas[24];
            snprintf(dims, sizeof dims, "%dx%d", w, h);
            snprintf(canvas, sizeof canvas, "%dx%d", t.plan.best_w, t.plan.best_h);
            printf("%-10s %-6s %9.1f %10.2f %9.2f %9.2f %8.1f %10s %9lld\n", dims, f ? "JPEG" : "PNG", len / 1024.0,
                   t.decode_s * 1e3, t.prep_s * 1e3, total * 1e3, (double)w * h * 3 / total / 1e6, canvas,
                   (long long)t.plan.positions);
            free(file);
        }
        free(px);
        free(samples);
    }
    return 0;
}
