/* The decoders behind vision_decode (one per format), internal to runtime/vision. */
#ifndef DSK_VISION_DECODE_INTERNAL_H
#define DSK_VISION_DECODE_INTERNAL_H

#include "runtime/common/error.h"
#include "runtime/vision/vision.h"

/* Each decodes a whole file of its format into out (rgb malloc'd), refusing more than max_pixels before
 * any pixel buffer exists. */
int vision_decode_png(const uint8_t *data, size_t len, int64_t max_pixels, vision_rgb *out);
int vision_decode_jpeg(const uint8_t *data, size_t len, int64_t max_pixels, vision_rgb *out);

/* The size check every decoder makes once the header is read: both sides positive and the product within
 * max_pixels (the message names the format and the size). */
static inline int vision_check_size(const char *format, int64_t w, int64_t h, int64_t max_pixels)
{
    if (w <= 0 || h <= 0)
        return dsk_err("%s: the image is %lld x %lld pixels", format, (long long)w, (long long)h);
    /* both sides are below 2^31 (the formats' headers hold at most 31 bits), so the product is exact */
    if (w * h > max_pixels)
        return dsk_err("%s: the image is %lld x %lld = %lld pixels, more than the limit of %lld (a "
                       "decompression bomb, or too large to serve)",
                       format, (long long)w, (long long)h, (long long)(w * h), (long long)max_pixels);
    return 0;
}

#endif
