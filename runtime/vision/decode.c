/* Format sniffing and the decoders' common checks (vision.md §1.1-§1.2): the format comes from the magic
 * bytes, never from a MIME type or a file name. */
#include "runtime/common/error.h"
#include "runtime/vision/decode_internal.h"

#include <stdlib.h>
#include <string.h>

vision_format vision_sniff(const uint8_t *d, size_t n, const char **name)
{
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    static const struct {
        const char *magic;
        size_t off, len;
        const char *name;
    } other[] = {{"GIF87a", 0, 6, "GIF"},   {"GIF89a", 0, 6, "GIF"},   {"WEBP", 8, 4, "WebP"},
                 {"BM", 0, 2, "BMP"},       {"II*\0", 0, 4, "TIFF"},   {"MM\0*", 0, 4, "TIFF"},
                 {"\0\0\1\0", 0, 4, "ICO"}, {"ftypavif", 4, 8, "AVIF"}, {"ftypheic", 4, 8, "HEIC"},
                 {"8BPS", 0, 4, "PSD"},     {"\xff\x0a", 0, 2, "JPEG XL"}, {"qoif", 0, 4, "QOI"}};
    const char *nm = "unknown";
    vision_format f = VISION_FMT_NONE;
    if (n >= 8 && !memcmp(d, png, 8)) {
        nm = "PNG";
        f = VISION_FMT_PNG;
    } else if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) {
        nm = "JPEG";
        f = VISION_FMT_JPEG;
    } else {
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
            if (n >= other[i].off + other[i].len && !memcmp(d + other[i].off, other[i].magic, other[i].len) &&
                (strcmp(other[i].name, "WebP") || !memcmp(d, "RIFF", 4))) {
                nm = other[i].name;
                f = VISION_FMT_OTHER;
                break;
            }
    }
    if (name)
        *name = nm;
    return f;
}

int vision_decode(const uint8_t *data, size_t len, const vision_decode_opts *o, vision_rgb *out)
{
    memset(out, 0, sizeof *out);
    int64_t max_pixels = o && o->max_pixels > 0 ? o->max_pixels : VISION_DEFAULT_MAX_PIXELS;
    const char *name;
    if (!data || len == 0)
        return dsk_err("the image is empty (0 bytes)");
    switch (vision_sniff(data, len, &name)) {
    case VISION_FMT_PNG:
        return vision_decode_png(data, len, max_pixels, out);
    case VISION_FMT_JPEG:
        return vision_decode_jpeg(data, len, max_pixels, out);
    case VISION_FMT_OTHER:
        return dsk_err("%s images are not supported (PNG and JPEG are)", name);
    default:
        return dsk_err("the data is not an image dskit reads (PNG or JPEG, recognised by their first bytes; "
                       "these are %02x %02x %02x %02x)",
                       data[0], len > 1 ? data[1] : 0, len > 2 ? data[2] : 0, len > 3 ? data[3] : 0);
    }
}

void vision_rgb_free(vision_rgb *img)
{
    if (!img)
        return;
    free(img->rgb);
    img->rgb = NULL;
    img->width = img->height = 0;
}
