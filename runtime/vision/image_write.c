/* PNG and JPEG writers over libpng and libjpeg, to memory (see image_write.h). */
#include "runtime/vision/image_write.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* ---- PNG ---- */

typedef struct {
    dsk_buf buf;
    int failed;
    char msg[256];
} png_sink;

static void png_write_mem(png_structp png, png_bytep data, size_t n)
{
    png_sink *s = png_get_io_ptr(png);
    if (dsk_buf_append(&s->buf, data, n))
        png_error(png, "out of memory");
}

static void png_flush_mem(png_structp png)
{
    (void)png;
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_sink *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

typedef struct {
    png_structp png;
    png_infop info;
    uint8_t *rows;
} png_wjob;

static int png_body(png_wjob *j, png_sink *sink, const png_spec *s, const uint16_t *px)
{
    if (setjmp(png_jmpbuf(j->png)))
        return dsk_err("writing PNG: %s", sink->msg);
    png_set_write_fn(j->png, sink, png_write_mem, png_flush_mem);
    static const int types[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                 PNG_COLOR_TYPE_RGB_ALPHA};
    int type = s->palette_n > 0 ? PNG_COLOR_TYPE_PALETTE : types[s->channels];
    png_set_IHDR(j->png, j->info, (png_uint_32)s->width, (png_uint_32)s->height, s->depth, type,
                 s->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (s->palette_n > 0) {
        png_color pal[256];
        for (int i = 0; i < s->palette_n; i++)
            pal[i] = (png_color){s->palette[3 * i], s->palette[3 * i + 1], s->palette[3 * i + 2]};
        png_set_PLTE(j->png, j->info, pal, s->palette_n);
        if (s->trns_n > 0)
            png_set_tRNS(j->png, j->info, s->trns, s->trns_n, NULL);
    } else if (s->trns_grey >= 0 && s->channels == 1) {
        png_color_16 t = {.gray = (png_uint_16)s->trns_grey};
        png_set_tRNS(j->png, j->info, NULL, 0, &t);
    }
    png_write_info(j->png, j->info);
    /* rows packed as PNG stores them: big-endian 16-bit samples, sub-byte samples MSB first */
    int per_row_samples = s->width * s->channels;
    size_t rowbytes = ((size_t)per_row_samples * s->depth + 7) / 8;
    if (!(j->rows = dsk_calloc(rowbytes * (size_t)s->height, 1)))
        return -1;
    for (int y = 0; y < s->height; y++) {
        uint8_t *r = j->rows + rowbytes * y;
        const uint16_t *in = px + (size_t)y * per_row_samples;
        for (int i = 0; i < per_row_samples; i++) {
            unsigned v = in[i];
            if (s->depth == 16) {
                r[2 * i] = (uint8_t)(v >> 8);
                r[2 * i + 1] = (uint8_t)v;
            } else if (s->depth == 8) {
                r[i] = (uint8_t)v;
            } else {
                size_t bit = (size_t)i * s->depth;
                r[bit / 8] |= (uint8_t)(v << (8 - s->depth - bit % 8));
            }
        }
    }
    png_bytep *rp = dsk_malloc(sizeof(png_bytep) * (size_t)s->height);
    if (!rp)
        return -1;
    for (int y = 0; y < s->height; y++)
        rp[y] = j->rows + rowbytes * y;
    png_write_image(j->png, rp);
    free(rp);
    png_write_end(j->png, NULL);
    return 0;
}

/* Offset of the first IDAT chunk's CRC in a PNG file, or 0. */
static size_t first_idat_crc(const uint8_t *d, size_t n)
{
    for (size_t at = 8; at + 12 <= n;) {
        size_t len = (size_t)d[at] << 24 | (size_t)d[at + 1] << 16 | (size_t)d[at + 2] << 8 | d[at + 3];
        if (!memcmp(d + at + 4, "IDAT", 4))
            return at + 8 + len;
        at += 12 + len;
    }
    return 0;
}

int image_write_png(const png_spec *s, const uint16_t *samples, uint8_t **out, size_t *len)
{
    png_sink sink = {0};
    png_wjob j = {0};
    j.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, png_on_error, png_on_warning);
    if (j.png)
        j.info = png_create_info_struct(j.png);
    if (!j.png || !j.info) {
        png_destroy_write_struct(j.png ? &j.png : NULL, NULL);
        return dsk_err("writing PNG: cannot create a libpng encoder");
    }
    int rc = png_body(&j, &sink, s, samples);
    png_destroy_write_struct(&j.png, &j.info);
    free(j.rows);
    if (rc) {
        dsk_buf_free(&sink.buf);
        return -1;
    }
    if (s->bad_crc) {
        size_t at = first_idat_crc((uint8_t *)sink.buf.data, sink.buf.len);
        if (!at || at >= sink.buf.len) {
            dsk_buf_free(&sink.buf);
            return dsk_err("writing PNG: no IDAT chunk to corrupt");
        }
        sink.buf.data[at] ^= 0x55;
    }
    *out = (uint8_t *)sink.buf.data;
    *len = sink.buf.len;
    return 0;
}

/* ---- JPEG ---- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jw_err;

static void jw_error(j_common_ptr ci)
{
    jw_err *e = (jw_err *)ci->err;
    (*ci->err->format_message)(ci, e->msg);
    longjmp(e->jb, 1);
}

typedef struct {
    struct jpeg_compress_struct ci;
    jw_err err;
    unsigned char *mem;
    unsigned long size;
    uint8_t *row;
    int created;
} jpeg_wjob;

static int jpeg_body(jpeg_wjob *j, const uint8_t *px, int w, int h, int ch, int quality, int progressive)
{
    if (setjmp(j->err.jb))
        return dsk_err("writing JPEG: %s", j->err.msg);
    jpeg_create_compress(&j->ci);
    j->created = 1;
    jpeg_mem_dest(&j->ci, &j->mem, &j->size);
    j->ci.image_width = (JDIMENSION)w;
    j->ci.image_height = (JDIMENSION)h;
    j->ci.input_components = ch;
    j->ci.in_color_space = ch == 1 ? JCS_GRAYSCALE : ch == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&j->ci);
    if (ch == 4)
        jpeg_set_colorspace(&j->ci, JCS_CMYK); /* writes the Adobe marker */
    jpeg_set_quality(&j->ci, quality, TRUE);
    if (progressive)
        jpeg_simple_progression(&j->ci);
    jpeg_start_compress(&j->ci, TRUE);
    if (!(j->row = dsk_malloc((size_t)w * ch)))
        return -1;
    while (j->ci.next_scanline < j->ci.image_height) {
        const uint8_t *in = px + (size_t)j->ci.next_scanline * w * ch;
        /* CMYK is stored inverted (Adobe's convention, which Pillow's "CMYK;I" undoes) */
        for (size_t i = 0; i < (size_t)w * ch; i++)
            j->row[i] = ch == 4 ? (uint8_t)(255 - in[i]) : in[i];
        JSAMPROW rp = j->row;
        jpeg_write_scanlines(&j->ci, &rp, 1);
    }
    jpeg_finish_compress(&j->ci);
    return 0;
}

int image_write_jpeg(const uint8_t *pixels, int w, int h, int ch, int quality, int progressive, uint8_t **out,
                     size_t *len)
{
    if (ch != 1 && ch != 3 && ch != 4)
        return dsk_err("writing JPEG: %d channels (1, 3 or 4 are written)", ch);
    jpeg_wjob *j = dsk_calloc(1, sizeof *j);
    if (!j)
        return -1;
    j->ci.err = jpeg_std_error(&j->err.pub);
    j->err.pub.error_exit = jw_error;
    int rc = jpeg_body(j, pixels, w, h, ch, quality, progressive);
    if (j->created)
        jpeg_destroy_compress(&j->ci);
    free(j->row);
    if (!rc) {
        /* jpeg_mem_dest's buffer is malloc'd: handed over as is */
        *out = j->mem;
        *len = j->size;
    } else {
        free(j->mem);
    }
    free(j);
    return rc;
}
