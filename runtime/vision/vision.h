/* Image input up to the tower (vision.md §1-§2): a data URL's bytes, decoded to 8-bit RGB exactly as
 * REF's Pillow `convert("RGB")` gives them, then the resize plan, the padded canvas (Pillow's bicubic
 * resampler, bit for bit) and the normalised bf16 patches the tower reads.
 *
 * For the server, one image_url part is (docs/vision.md "Serving"):
 *
 *     uint8_t *bytes; size_t n; vision_rgb rgb; vision_image img;
 *     if (vision_data_url(url, strlen(url), &bytes, &n) ||
 *         vision_decode(bytes, n, NULL, &rgb) ||
 *         vision_preprocess(cfg, &rgb, &img))          -> 400 "messages[i].content[j]: " + dsk_err_msg()
 *     key = dsk_xxh64(bytes, n);                        the span's identity for engine_seq_image
 *
 * Every function is a pure function of its inputs (thread-safe; errors in the calling thread's dsk_err
 * buffer), and every allocation is bounded by the checked pixel count before it is made. */
#ifndef DSK_VISION_H
#define DSK_VISION_H

#include "runtime/model/config.h"

#include <stddef.h>
#include <stdint.h>

/* ---- decoding (§1.2) ---- */

/* Pillow's decompression-bomb bound (it refuses above twice this); dskit refuses above it. */
#define VISION_DEFAULT_MAX_PIXELS INT64_C(89478485)

typedef struct {
    int width, height;
    uint8_t *rgb; /* [height][width][3] row-major, 8-bit R, G, B */
} vision_rgb;

typedef struct {
    int64_t max_pixels; /* width × height at most (0: VISION_DEFAULT_MAX_PIXELS); checked before allocating */
} vision_decode_opts;

typedef enum { VISION_FMT_NONE, VISION_FMT_PNG, VISION_FMT_JPEG, VISION_FMT_OTHER } vision_format;

/* The format from the magic bytes (PNG 89 50 4E 47 0D 0A 1A 0A, JPEG FF D8 FF); *name (may be NULL) gets
 * its name, also for known formats dskit does not decode (GIF, WebP, BMP, TIFF: VISION_FMT_OTHER). */
vision_format vision_sniff(const uint8_t *data, size_t len, const char **name);

/* Decode PNG or JPEG bytes (o may be NULL). Alpha is dropped without compositing, 16-bit samples keep their
 * high byte except 16-bit grey (clamped to 255), grey and palettes become RGB, EXIF orientation and colour
 * profiles are ignored. An unsupported format, a truncated or corrupt file and an image above the pixel
 * limit are errors naming the problem. */
int vision_decode(const uint8_t *data, size_t len, const vision_decode_opts *o, vision_rgb *out);
void vision_rgb_free(vision_rgb *img);

/* The bytes of an image_url's `data:` URL (RFC 2397 with ";base64", standard alphabet, '=' padding,
 * whitespace ignored; any other character, the URL-safe alphabet and misplaced padding are errors). http(s)
 * URLs and file paths are refused: the server reads nothing but the request. *bytes is malloc'd. */
int vision_data_url(const char *url, size_t len, uint8_t **bytes, size_t *n);

/* ---- preprocessing (§2) ---- */

/* The resize plan of a W × H image (§2.1, §2.3): a pure function of the size and the config. */
typedef struct {
    int best_w, best_h;   /* the canvas: whole patches */
    int n_vit_h, n_vit_w; /* the patch grid */
    int n_llm_h, n_llm_w; /* the aligner's cells */
    int64_t positions;    /* the span: n_llm_h · (n_llm_w + 1) + 2 */
    int fit_w, fit_h;     /* the resampled image */
    int off_x, off_y;     /* where it is pasted on the canvas (the rest is grey 127) */
} vision_plan;

int vision_plan_for(const model_config *c, int width, int height, vision_plan *out);

/* Pillow's bicubic resize (ImagingResample, 22-bit fixed point, horizontal pass then vertical, 8-bit
 * between): src [sh][sw][3] -> dst [dh][dw][3]. An unchanged size is a copy. */
int vision_resize_bicubic(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh);

/* The canvas of the plan: [best_h][best_w][3] uint8 (malloc'd). */
int vision_canvas(const vision_rgb *img, const vision_plan *p, uint8_t **canvas);

/* The bf16 value of 8-bit sample v: bf16((v / 255 − 0.5) / 0.5), each step in fp32 (§2.4). */
uint16_t vision_normalize(uint8_t v);

/* The tower's input cut from a canvas (§2.4): patch row·n_vit_w + col, inside it c·p² + dy·p + dx;
 * patches [n_vit_h · n_vit_w][3 · p · p] bf16 (malloc'd). */
int vision_patches(const uint8_t *canvas, const vision_plan *p, int patch, uint16_t **patches);

/* An image ready for the engine (engine_image takes patches, n_vit_h, n_vit_w). */
typedef struct {
    vision_plan plan;
    uint16_t *patches; /* [n_vit_h · n_vit_w][3 · patch²] bf16 */
} vision_image;

/* Plan, canvas and patches of a decoded image for the model's vision config (vision_n_layers > 0). */
int vision_preprocess(const model_config *c, const vision_rgb *img, vision_image *out);
void vision_image_free(vision_image *img);

#endif
