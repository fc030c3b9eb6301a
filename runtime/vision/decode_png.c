/* PNG with libpng, to the pixels Pillow's open(...).convert("RGB") gives (vision.md §1.2): grey 1/2/4-bit
 * scaled by bit replication, palettes looked up, alpha and tRNS dropped without compositing, 16-bit samples
 * cut to their high byte except 16-bit grey, which Pillow opens as I;16 and clamps to 255; interlaced
 * images de-interlaced; gamma, chromaticities and ICC profiles ignored (no colour management). */
#include "runtime/common/error.h"
#include "runtime/vision/decode_internal.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ancillary chunks (zTXt, iCCP) decompress into at most this much: a text bomb stays small. */
#define PNG_CHUNK_MAX ((png_alloc_size_t)8 << 20)

typedef struct {
    const uint8_t *data;
    size_t len, at;
    char msg[256];
} png_src;

static void on_error(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings (a known-bad sRGB profile, extra data after the image) do not change the pixels. */
static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void read_mem(png_structp png, png_bytep out, size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->at)
        png_error(png, "the file is truncated");
    memcpy(out, s->data + s->at, n);
    s->at += n;
}

/* Everything the decode allocates, so a longjmp from libpng leaves nothing behind. */
typedef struct {
    png_structp png;
    png_infop info;
    uint8_t *raw;   /* decoded rows after libpng's transforms */
    png_bytep *rows;
    uint8_t *rgb;
} png_job;

static int decode(png_job *j, png_src *src, int64_t max_pixels, vision_rgb *out)
{
    if (setjmp(png_jmpbuf(j->png)))
        return dsk_err("PNG: %s", src->msg[0] ? src->msg : "the file does not decode");
    png_set_read_fn(j->png, src, read_mem);
    /* the size is checked against the pixel limit below, before anything of that size exists */
    png_set_user_limits(j->png, 0x7fffffff, 0x7fffffff);
    png_set_chunk_malloc_max(j->png, PNG_CHUNK_MAX);
    /* a damaged chunk of any kind makes the file undecodable, as for Pillow */
    png_set_crc_action(j->png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
    png_read_info(j->png, j->info);
    png_uint_32 w, h;
    int depth, color, interlace;
    png_get_IHDR(j->png, j->info, &w, &h, &depth, &color, &interlace, NULL, NULL);
    if (vision_check_size("PNG", w, h, max_pixels))
        return -1;
    int grey16 = depth == 16 && color == PNG_COLOR_TYPE_GRAY;
    if (color == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(j->png); /* RGB, or RGBA with a tRNS chunk: its alpha is dropped below */
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(j->png); /* bit replication: ×255, ×85, ×17; tRNS is not expanded */
    if (depth == 16 && !grey16)
        png_set_strip_16(j->png); /* the high byte */
    png_set_interlace_handling(j->png);
    png_read_update_info(j->png, j->info);
    int ch = png_get_channels(j->png, j->info);
    size_t rowbytes = png_get_rowbytes(j->png, j->info);
    if (ch < 1 || ch > 4 || rowbytes != (size_t)w * ch * (grey16 ? 2 : 1))
        return dsk_err("PNG: unexpected row layout (%d channels, %zu bytes per row of %u pixels)", ch, rowbytes,
                       (unsigned)w);
    j->raw = dsk_malloc(rowbytes * h);
    j->rows = dsk_malloc(sizeof(png_bytep) * h);
    j->rgb = dsk_malloc((size_t)w * h * 3);
    if (!j->raw || !j->rows || !j->rgb)
        return dsk_err_ctx("PNG: %u x %u pixels", (unsigned)w, (unsigned)h);
    for (png_uint_32 y = 0; y < h; y++)
        j->rows[y] = j->raw + rowbytes * y;
    png_read_image(j->png, j->rows);
    for (png_uint_32 y = 0; y < h; y++) {
        const uint8_t *r = j->rows[y];
        uint8_t *o = j->rgb + (size_t)y * w * 3;
        for (png_uint_32 x = 0; x < w; x++, o += 3) {
            if (grey16) {
                unsigned v = (unsigned)r[2 * x] << 8 | r[2 * x + 1]; /* PNG samples are big-endian */
                o[0] = o[1] = o[2] = (uint8_t)(v < 255 ? v : 255);
            } else if (ch <= 2) {
                o[0] = o[1] = o[2] = r[(size_t)x * ch];
            } else {
                memcpy(o, r + (size_t)x * ch, 3);
            }
        }
    }
    /* the end of the image (IEND) is not required: Pillow stops reading after the pixel data too */
    out->width = (int)w;
    out->height = (int)h;
    out->rgb = j->rgb;
    j->rgb = NULL;
    return 0;
}

int vision_decode_png(const uint8_t *data, size_t len, int64_t max_pixels, vision_rgb *out)
{
    png_src src = {.data = data, .len = len};
    png_job j = {0};
    j.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
    if (j.png)
        j.info = png_create_info_struct(j.png);
    if (!j.png || !j.info) {
        png_destroy_read_struct(j.png ? &j.png : NULL, NULL, NULL);
        return dsk_err("PNG: cannot create a libpng decoder (out of memory)");
    }
    int rc = decode(&j, &src, max_pixels, out);
    png_destroy_read_struct(&j.png, &j.info, NULL);
    free(j.raw);
    free(j.rows);
    free(j.rgb);
    return rc;
}
