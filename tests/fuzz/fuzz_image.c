/* Image bytes from anywhere (vision.md §1.1-§1.2): the first byte picks raw file bytes or the rest wrapped
 * in a data: URL (base64 of the bytes, or the bytes themselves as the payload), then decode and preprocess
 * with the tiny vision config. A bad file or URL is an error, never a crash; a decoded image stays within
 * the pixel bound and its plan within the position budget. */
#include "runtime/vision/vision.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

enum { MAX_PIXELS = 1 << 20 }; /* small: a bomb is refused, and each input stays fast */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *url_of(const uint8_t *d, size_t n, int encode)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *u = malloc(32 + 4 * (n / 3 + 1) + n), *w = u;
    FUZZ_CHECK(u);
    w += sprintf(w, "data:image/png;base64,");
    if (!encode) {
        memcpy(w, d, n);
        w[n] = 0;
        return u;
    }
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        *w++ = a[v >> 18];
        *w++ = a[(v >> 12) & 63];
        *w++ = i + 1 < n ? a[(v >> 6) & 63] : '=';
        *w++ = i + 2 < n ? a[v & 63] : '=';
    }
    *w = 0;
    return u;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    model_config c;
    memset(&c, 0, sizeof c);
    c.vision_n_layers = 2;
    c.vision_patch_size = 4;
    c.vision_downsample_ratio = 3;
    c.vision_max_n_token = 32;
    c.vision_min_pixels = 1024;
    const uint8_t *bytes = data + 1;
    size_t n = size - 1;
    uint8_t *decoded = NULL;
    if (data[0] % 3) {
        char *u = url_of(data + 1, size - 1, data[0] % 3 == 1);
        int rc = vision_data_url(u, strlen(u), &decoded, &n);
        free(u);
        if (rc)
            return 0;
        bytes = decoded;
    }
    vision_decode_opts o = {MAX_PIXELS};
    vision_rgb rgb;
    vision_image img;
    if (vision_decode(bytes, n, &o, &rgb) == 0) {
        FUZZ_CHECK(rgb.width > 0 && rgb.height > 0 && (int64_t)rgb.width * rgb.height <= MAX_PIXELS && rgb.rgb);
        if (vision_preprocess(&c, &rgb, &img) == 0) {
            FUZZ_CHECK(img.plan.positions <= c.vision_max_n_token && img.patches);
            vision_image_free(&img);
        }
        vision_rgb_free(&rgb);
    }
    free(decoded);
    return 0;
}
