/* `dskit bench vision`: decode + preprocessing time on the CPU (one thread) for the image sizes, as
 * PNG and as JPEG, generated in memory: a photo-like picture (smooth gradients, edges, mild noise) so the
 * files compress as real ones do. With --kit (and --model, a model with a tower: mkmodel --preset
 * layer-vision has the release's), the tower and aligner on the GPU for the same sizes: the whole tower per
 * image (gpu_vision_run, as a request's image runs), then one row per launch of a block and of the aligner
 * with its TFLOP/s, GB/s against the streaming-read roofline of the same run, and for the linears the time
 * of the same product on rowmm_bf16 (the kit's other bf16 tensor-core kernel, 16 rows a launch) as the
 * baseline. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/launch/gpu_time.h"
#include "runtime/launch/rowmm.h"
#include "runtime/launch/stream_read.h"
#include "runtime/launch/vision_attn.h"
#include "runtime/launch/vision_glue.h"
#include "runtime/launch/vision_mm.h"
#include "runtime/model/vision_span.h"
#include "runtime/ref/vision_glue.h"
#include "runtime/common/numerics.h"
#include "runtime/vision/image_write.h"
#include "runtime/vision/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model_dir, *kit;
    long reps;
} bench_opts;

static int parse(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v)
            o->model_dir = v;
        else if (!strcmp(a, "--kit") && v)
            o->kit = v;
        else if (!strcmp(a, "--reps") && v) {
            if (cli_parse_int(a, v, 1, 1000, &o->reps))
                return -1;
        } else
            return dsk_err("bench vision: unknown or incomplete option '%s' (options: --model DIR, --kit KIT, --reps N)",
                           a);
    }
    if (o->kit && !o->model_dir)
        return dsk_err("bench vision: --kit needs --model, a model with a vision tower (dskit mkmodel --preset "
                       "layer-vision)");
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

/* ---- the tower on the GPU ---- */

typedef struct {
    gpu_backend *b;
    CUdeviceptr x, w, y, bias, qkv, cs, sn, big, out;
    int M, K, N, mode, op, heads, hd, blocks;
    size_t bytes;
} vlaunch;

static int launch_mm(void *p)
{
    vlaunch *v = p;
    return op_vision_mm(v->b->k, v->b->s, v->x, v->w, v->bias, v->y, v->M, v->K, v->N, v->mode);
}

static int launch_rowmm(void *p)
{
    vlaunch *v = p;
    return op_rowmm_bf16(v->b->k, v->b->s, v->x, v->w, v->qkv, v->M, v->K, v->N);
}

static int launch_attn(void *p)
{
    vlaunch *v = p;
    return op_vision_attn(v->b->k, v->b->s, v->qkv, v->y, v->M, v->heads, v->hd);
}

static int launch_glue(void *p)
{
    vlaunch *v = p;
    if (v->op == 0)
        return op_vision_rmsnorm(v->b->k, v->b->s, v->x, v->cs, v->y, v->M, v->K);
    return op_vision_rope(v->b->k, v->b->s, v->qkv, 3 * v->heads * v->hd, v->cs, v->sn, v->M, v->heads, v->hd);
}

static int launch_sr(void *p)
{
    vlaunch *v = p;
    return op_stream_read(v->b->k, v->b->s, v->big, v->bytes, v->out, v->blocks);
}

/* One table row: the graph-replayed time of a launch, TFLOP/s, GB/s against the roofline, and for a linear the
 * rowmm_bf16 baseline of the same product. */
static int op_row(vlaunch *v, const char *op, double flops, double bytes, double roof, gpu_launch_fn fn, int baseline)
{
    double us = gpu_time_graph_us(v->b->s, 3, 5, fn, v);
    if (us < 0)
        return -1;
    double base = baseline ? gpu_time_graph_us(v->b->s, 1, 3, launch_rowmm, v) : 0;
    if (base < 0)
        return -1;
    char shape[48], ratio[16] = "-";
    snprintf(shape, sizeof shape, "%d x %d -> %d", v->M, v->K, v->N);
    if (baseline)
        snprintf(ratio, sizeof ratio, "%.1fx", base / us);
    printf("  %-18s %-22s %10.1f %9.1f %9.0f %6.1f%% %12.1f %8s\n", op, shape, us, flops / us / 1e6,
           bytes / us / 1e3, 100.0 * bytes / us / 1e3 / roof, baseline ? base : 0.0, ratio);
    return 0;
}

static int bench_gpu(const bench_opts *o, const model_config *cfg, const vision_plan *plans, int nplans)
{
    engine_opts eo = {.backend = "gpu", .model_dir = o->model_dir, .kit = o->kit, .max_seqs = 1, .max_rows = 64,
                      .context = 4096};
    size_t words = (size_t)(cfg->vocab_size + 31) / 32;
    uint32_t *valid = dsk_malloc(sizeof(uint32_t) * words);
    if (!valid)
        return -1;
    memset(valid, 0xff, sizeof(uint32_t) * words);
    engine_info info = {0};
    engine_backend_args a = {&eo, valid, &info, rank_xchg_single()};
    void *impl;
    const engine_backend_ops *ops;
    if (gpu_backend_open(&a, &impl, &ops)) {
        free(valid);
        return -1;
    }
    gpu_backend *b = impl;
    int D = cfg->vision_dim, H = cfg->vision_n_heads, hd = D / H, I = cfg->vision_inter_dim, dim = cfg->dim;
    int r = cfg->vision_downsample_ratio, K = 3 * cfg->vision_patch_size * cfg->vision_patch_size, rc = 0;
    /* the roofline: 2 GiB streamed, the best of three grid sizes */
    vlaunch v = {.b = b, .bytes = 2ull << 30};
    double roof = 0;
    if (cu.cuMemAlloc(&v.big, v.bytes) != CUDA_SUCCESS || cu.cuMemAlloc(&v.out, 1 << 20) != CUDA_SUCCESS ||
        cu.cuMemsetD8(v.big, 0x3c, v.bytes) != CUDA_SUCCESS)
        rc = dsk_err("bench vision: the roofline's 2 GiB buffer");
    for (int m = 2; m <= 8 && !rc; m *= 2) {
        v.blocks = b->g.sms * m;
        double us = gpu_time_us(b->s, 3, 5, launch_sr, &v);
        rc = us < 0;
        if (!rc && v.bytes / us / 1e3 > roof)
            roof = v.bytes / us / 1e3;
    }
    if (v.big)
        cu.cuMemFree(v.big);
    if (v.out)
        cu.cuMemFree(v.out);
    if (!rc)
        printf("\nthe tower and aligner on the GPU: %s; %d blocks of width %d (%d heads), aligner %d -> %d; "
               "streaming-read roofline %.0f GB/s (same run)\n",
               b->device, cfg->vision_n_layers, D, H, r * r * D, dim, roof);
    dsk_rng rng;
    dsk_rng_seed(&rng, 11);
    for (int pi = 0; pi < nplans && !rc; pi++) {
        const vision_plan *pl = &plans[pi];
        int nh = pl->n_vit_h, nw = pl->n_vit_w, N = nh * nw, L = pl->n_llm_h * pl->n_llm_w;
        uint16_t *patches = dsk_malloc(sizeof(uint16_t) * (size_t)N * K);
        if (!patches) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < (size_t)N * K; i++)
            patches[i] = f32_to_bf16(dsk_rng_normal(&rng));
        /* the whole tower as a request's image runs it: uploads, launches, the span, synchronised */
        double best = 0;
        for (long rep = 0; rep <= o->reps && !rc; rep++) {
            CUdeviceptr rows;
            int64_t n;
            double t0 = dsk_now();
            rc = gpu_vision_run(b, patches, nh, nw, &rows, &n, NULL);
            double t = dsk_now() - t0;
            if (!rc)
                cu.cuMemFree(rows);
            if (rep == 1 || (rep > 1 && t < best)) /* rep 0 warms up */
                best = t;
        }
        double lin = 2.0 * N * ((double)K * D + (double)D * 3 * D + (double)D * D + (double)D * 2 * I + (double)I * D),
               att = 4.0 * N * (double)N * D, al = 2.0 * L * ((double)r * r * D * dim + (double)dim * dim);
        double flops = cfg->vision_n_layers * (lin - 2.0 * N * K * D + att) + 2.0 * N * K * D + al;
        if (!rc)
            printf("%dx%d canvas: %d x %d patches, %d cells, %lld positions: tower + aligner %.2f ms (best of %ld), "
                   "%.1f TFLOP, %.0f TFLOP/s\n",
                   pl->best_w, pl->best_h, nh, nw, L, (long long)pl->positions, best * 1e3, o->reps, flops / 1e12,
                   flops / best / 1e12);
        free(patches);
        if (rc)
            break;
        /* one block's launches and the aligner's, at this image's shapes, on scratch of random values */
        size_t big = (size_t)N * 3 * D > (size_t)N * 2 * I ? (size_t)N * 3 * D : (size_t)N * 2 * I;
        size_t wbig = (size_t)dim * r * r * D > (size_t)2 * I * D ? (size_t)dim * r * r * D : (size_t)2 * I * D;
        size_t cells = (size_t)L * r * r * D;
        big = big > cells ? big : cells;
        CUdeviceptr buf[4] = {0};
        size_t sizes[4] = {big * 2, big * 2, wbig * 2, big * 4}; /* x, y, w, rowmm's fp32 out (in qkv) */
        for (int i = 0; i < 4 && !rc; i++)
            if (cu.cuMemAlloc(&buf[i], sizes[i]) != CUDA_SUCCESS || cu.cuMemsetD8(buf[i], 0x3c, sizes[i]) != CUDA_SUCCESS)
                rc = dsk_err("bench vision: %.0f MiB of scratch", sizes[i] / 1048576.0);
        float *cs = NULL, *sn = NULL;
        CUdeviceptr dcs = 0, dsn = 0;
        if (!rc)
            rc = ref_vision_rope_table(hd, 10000.0f, nh, nw, &cs, &sn);
        if (!rc && (cu.cuMemAlloc(&dcs, (size_t)N * hd * 2) != CUDA_SUCCESS ||
                    cu.cuMemAlloc(&dsn, (size_t)N * hd * 2) != CUDA_SUCCESS ||
                    cu.cuMemcpyHtoD(dcs, cs, (size_t)N * hd / 2 * 4) != CUDA_SUCCESS ||
                    cu.cuMemcpyHtoD(dsn, sn, (size_t)N * hd / 2 * 4) != CUDA_SUCCESS))
            rc = dsk_err("bench vision: the RoPE table");
        if (!rc)
            printf("  %-18s %-22s %10s %9s %9s %7s %12s %8s\n", "launch", "rows x K -> N", "us", "TFLOP/s", "GB/s",
                   "%roof", "rowmm us", "speedup");
        struct {
            const char *op;
            int M, K, N, mode;
        } mm[] = {{"wqkv", N, D, 3 * D, VISION_MM_BIAS},         {"wo + residual", N, D, D, VISION_MM_RESIDUAL},
                  {"w1 SwiGLU", N, D, 2 * I, VISION_MM_SWIGLU},   {"w2 + residual", N, I, D, VISION_MM_RESIDUAL},
                  {"aligner w1 GELU", L, r * r * D, dim, VISION_MM_GELU}, {"aligner w2", L, dim, dim, VISION_MM_BIAS}};
        v = (vlaunch){.b = b, .x = buf[0], .y = buf[1], .w = buf[2], .qkv = buf[3], .cs = dcs, .sn = dsn, .heads = H, .hd = hd};
        for (size_t i = 0; i < sizeof mm / sizeof mm[0] && !rc; i++) {
            v.M = mm[i].M, v.K = mm[i].K, v.N = mm[i].N, v.mode = mm[i].mode, v.bias = mm[i].mode == VISION_MM_BIAS ? buf[2] : 0;
            int out = mm[i].mode == VISION_MM_SWIGLU ? v.N / 2 : v.N;
            rc = op_row(&v, mm[i].op, 2.0 * v.M * v.K * v.N, 2.0 * ((double)v.M * v.K + (double)v.K * v.N + (double)v.M * out),
                        roof, launch_mm, 1);
        }
        if (!rc) {
            v.qkv = buf[0], v.y = buf[1], v.M = N, v.K = 3 * D, v.N = D;
            rc = op_row(&v, "attention", 4.0 * N * (double)N * D, 2.0 * N * 4.0 * D, roof, launch_attn, 0);
        }
        if (!rc) {
            v.op = 0, v.x = buf[0], v.cs = buf[2], v.y = buf[1], v.M = N, v.K = D, v.N = D; /* the norm's weight: fp32 */
            rc = op_row(&v, "rmsnorm", 0, 4.0 * N * D, roof, launch_glue, 0);
        }
        if (!rc) {
            v.op = 1, v.qkv = buf[0], v.cs = dcs, v.sn = dsn, v.M = N, v.K = 3 * D, v.N = 3 * D;
            rc = op_row(&v, "2-D RoPE (q, k)", 0, 2.0 * N * 4.0 * D + 4.0 * N * hd, roof, launch_glue, 0);
        }
        for (int i = 0; i < 4; i++)
            if (buf[i])
                cu.cuMemFree(buf[i]);
        if (dcs)
            cu.cuMemFree(dcs);
        if (dsn)
            cu.cuMemFree(dsn);
        free(cs);
        free(sn);
    }
    ops->close(impl);
    free(valid);
    return rc;
}

int bench_vision(int argc, char **argv)
{
    bench_opts o = {NULL, NULL, 5};
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
    vision_plan plans[3];
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
            plans[s] = t.plan;
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
    if (o.kit && bench_gpu(&o, &cfg, plans, 3)) {
        fprintf(stderr, "dskit bench vision: %s\n", dsk_err_msg());
        return dsk_err_msg()[0] && strstr(dsk_err_msg(), "no CUDA device") ? 2 : 1;
    }
    return 0;
}
