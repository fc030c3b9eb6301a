/* JPEG with libjpeg(-turbo), to the pixels Pillow's open(...).convert("RGB") gives (vision.md §1.2):
 * libjpeg's defaults (JDCT_ISLOW, fancy upsampling), YCbCr and RGB to RGB, grey replicated, and CMYK/YCCK
 * read as Adobe-inverted CMYK (Pillow's "CMYK;I") then turned into RGB with Pillow's integer formula.
 * EXIF orientation is ignored. Data that ends before the decoder has read the last block is a truncated
 * file, as for Pillow ("image file is truncated"); libjpeg's bit reader reads up to 8 bytes ahead, so a
 * file cut just before its end marker is refused or not depending on where the last fill fell, for both.
 * Data after the last scanline is not read. */
#include "runtime/common/error.h"
#include "runtime/vision/decode_internal.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* A progressive file may carry any number of scans, each a pass over the whole image: a time bomb in a
 * few kilobytes. Real encoders write about ten; djpeg's -maxscans suggests this kind of bound. */
#define JPEG_MAX_SCANS 256

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX + 64];
} jpeg_err;

static void on_error(j_common_ptr ci)
{
    jpeg_err *e = (jpeg_err *)ci->err;
    if (!e->msg[0])
        (*ci->err->format_message)(ci, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings (corrupt entropy data that libjpeg recovers from) are accepted, as Pillow accepts them. */
static void on_message(j_common_ptr ci, int level)
{
    (void)ci;
    (void)level;
}

static void fail(j_decompress_ptr ci, const char *msg)
{
    jpeg_err *e = (jpeg_err *)ci->err;
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jb, 1);
}

/* The source: the whole file in memory; asking for more than it holds is a truncated file. */
static void src_init(j_decompress_ptr ci)
{
    (void)ci;
}

static boolean src_fill(j_decompress_ptr ci)
{
    fail(ci, "the file is truncated (the data ends inside the image)");
    return FALSE;
}

static void src_skip(j_decompress_ptr ci, long n)
{
    struct jpeg_source_mgr *s = ci->src;
    if (n <= 0)
        return;
    if ((size_t)n > s->bytes_in_buffer)
        fail(ci, "the file is truncated (a marker segment runs past its end)");
    s->next_input_byte += n;
    s->bytes_in_buffer -= (size_t)n;
}

static void src_term(j_decompress_ptr ci)
{
    (void)ci;
}

static void on_progress(j_common_ptr ci)
{
    j_decompress_ptr d = (j_decompress_ptr)ci;
    if (ci->is_decompressor && d->input_scan_number > JPEG_MAX_SCANS) {
        char m[96];
        snprintf(m, sizeof m, "more than %d scans (a decompression bomb)", JPEG_MAX_SCANS);
        fail(d, m);
    }
}

/* Pillow's cmyk2rgb on "CMYK;I" samples: stored bytes are 255 − value, and with nk = 255 − K each channel
 * is nk − X·nk/255 in Pillow's rounding (MULDIV255), clipped to 0..255. */
static void cmyk_row(const uint8_t *in, int w, uint8_t *out)
{
    for (int x = 0; x < w; x++, in += 4, out += 3) {
        int nk = in[3]; /* 255 − K = the stored K byte */
        for (int c = 0; c < 3; c++) {
            int t = (255 - in[c]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            out[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

typedef struct {
    struct jpeg_decompress_struct ci;
    jpeg_err err;
    struct jpeg_source_mgr src;
    struct jpeg_progress_mgr prog;
    uint8_t *row; /* one decoded scanline */
    uint8_t *rgb;
    int created;
} jpeg_job;

static int decode(jpeg_job *j, const uint8_t *data, size_t len, int64_t max_pixels, vision_rgb *out)
{
    if (setjmp(j->err.jb))
        return dsk_err("JPEG: %s", j->err.msg[0] ? j->err.msg : "the file does not decode");
    jpeg_create_decompress(&j->ci);
    j->created = 1;
    j->src = (struct jpeg_source_mgr){.next_input_byte = data, .bytes_in_buffer = len, .init_source = src_init,
                                      .fill_input_buffer = src_fill, .skip_input_data = src_skip,
                                      .resync_to_restart = jpeg_resync_to_restart, .term_source = src_term};
    j->ci.src = &j->src;
    j->prog.progress_monitor = on_progress;
    j->ci.progress = &j->prog;
    jpeg_read_header(&j->ci, TRUE);
    /* the header gives the size: checked before libjpeg allocates anything of it */
    if (vision_check_size("JPEG", j->ci.image_width, j->ci.image_height, max_pixels))
        return -1;
    int cmyk = 0;
    switch (j->ci.jpeg_color_space) {
    case JCS_GRAYSCALE:
        j->ci.out_color_space = JCS_GRAYSCALE;
        break;
    case JCS_YCbCr:
    case JCS_RGB:
        j->ci.out_color_space = JCS_RGB;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        j->ci.out_color_space = JCS_CMYK;
        cmyk = 1;
        break;
    default:
        return dsk_err("JPEG: colour space %d with %d components is not supported", (int)j->ci.jpeg_color_space,
                       j->ci.num_components);
    }
    j->ci.dct_method = JDCT_ISLOW;
    j->ci.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&j->ci);
    int w = (int)j->ci.output_width, h = (int)j->ci.output_height, ch = j->ci.output_components;
    if (ch != (cmyk ? 4 : j->ci.out_color_space == JCS_GRAYSCALE ? 1 : 3))
        return dsk_err("JPEG: the decoder gives %d components per pixel", ch);
    j->row = dsk_malloc((size_t)w * ch);
    j->rgb = dsk_malloc((size_t)w * h * 3);
    if (!j->row || !j->rgb)
        return dsk_err_ctx("JPEG: %d x %d pixels", w, h);
    while ((int)j->ci.output_scanline < h) {
        uint8_t *o = j->rgb + (size_t)j->ci.output_scanline * w * 3;
        JSAMPROW rp = ch == 3 ? o : j->row;
        if (jpeg_read_scanlines(&j->ci, &rp, 1) != 1)
            return dsk_err("JPEG: the decoder stopped at scanline %u of %d", j->ci.output_scanline, h);
        if (cmyk)
            cmyk_row(j->row, w, o);
        else if (ch == 1)
            for (int x = 0; x < w; x++)
                o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = j->row[x];
    }
    out->width = w;
    out->height = h;
    out->rgb = j->rgb;
    j->rgb = NULL;
    return 0;
}

int vision_decode_jpeg(const uint8_t *data, size_t len, int64_t max_pixels, vision_rgb *out)
{
    jpeg_job *j = dsk_calloc(1, sizeof *j); /* on the heap: libjpeg's state outlives a longjmp intact */
    if (!j)
        return -1;
    j->ci.err = jpeg_std_error(&j->err.pub);
    j->err.pub.error_exit = on_error;
    j->err.pub.emit_message = on_message;
    int rc = decode(j, data, len, max_pixels, out);
    if (j->created)
        jpeg_destroy_decompress(&j->ci); /* after the last scanline: what follows it is not read */
    free(j->row);
    free(j->rgb);
    free(j);
    return rc;
}
