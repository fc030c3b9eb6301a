/* Writing PNG and JPEG files in memory, in every variant the decoder reads: what the tests and
 * `dskit bench vision` generate their images with (no image file is committed). */
#ifndef DSK_VISION_IMAGE_WRITE_H
#define DSK_VISION_IMAGE_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int width, height;
    int channels;    /* 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA; with a palette: 1 (samples are indices) */
    int depth;       /* bits per sample: 8 or 16; grey and palette also 1, 2, 4 */
    int interlace;   /* Adam7 */
    int palette_n;   /* > 0: a palette image of palette_n entries (palette [n][3]) */
    const uint8_t *palette;
    int trns_n;      /* palette: alpha of the first trns_n entries (trns) */
    const uint8_t *trns;
    int trns_grey;   /* grey without alpha: the transparent grey value, -1 for none */
    int bad_crc;     /* corrupt the CRC of the first IDAT chunk (a test of the decoder's refusal) */
} png_spec;

/* samples [height][width][channels], each value below 2^depth. *out is malloc'd. */
int image_write_png(const png_spec *s, const uint16_t *samples, uint8_t **out, size_t *len);

/* channels 1 (grey), 3 (RGB, stored YCbCr 4:2:0) or 4 (CMYK given as Pillow's CMYK values, stored inverted
 * with an Adobe marker, as Photoshop writes it). quality 1..100. */
int image_write_jpeg(const uint8_t *pixels, int width, int height, int channels, int quality, int progressive,
                     uint8_t **out, size_t *len);

#endif
