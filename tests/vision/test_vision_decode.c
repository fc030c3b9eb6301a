/* Decoding (vision.md §1.2): every PNG variant against the pixels the spec's rules give for its samples
 * (computed here from the samples, independently of libpng's transforms), JPEG variants against their
 * source within the codec's loss, and every kind of bad file refused with a message naming the problem.
 * Images are generated at test time from fresh random samples. */
#include "tests/common/test_util.h"

#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/vision/image_write.h"
#include "runtime/vision/vision.h"

#include <jpeglib.h>
#include <math.h>
#include <setjmp.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static dsk_rng R;

static int setup(void **state)
{
    (void)state;
    uint64_t seed = test_seed("vision decode test");
    dsk_rng_seed(&R, seed);
    return 0;
}

/* Random samples below 2^depth. */
static uint16_t *random_samples(size_t n, int depth)
{
    uint16_t *s = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++)
        s[i] = (uint16_t)dsk_rng_below(&R, (uint64_t)1 << depth);
    return s;
}

/* The 8-bit value §1.2 gives a sample of `depth` bits in a non-palette image. */
static uint8_t expect8(unsigned v, int depth, int grey16)
{
    switch (depth) {
    case 1:
        return (uint8_t)(v * 255);
    case 2:
        return (uint8_t)(v * 85);
    case 4:
        return (uint8_t)(v * 17);
    case 8:
        return (uint8_t)v;
    default:
        return grey16 ? (uint8_t)(v < 255 ? v : 255) : (uint8_t)(v >> 8);
    }
}

/* Write s with random samples (indices into a random palette when it has one), decode, compare. */
static void check_png(png_spec s)
{
    int w = s.width, h = s.height, ch = s.channels;
    uint16_t *px = random_samples((size_t)w * h * ch, s.palette_n > 0 && s.depth == 8 ? 8 : s.depth);
    uint8_t pal[256 * 3], trns[256];
    if (s.palette_n > 0) {
        for (int i = 0; i < 3 * s.palette_n; i++)
            pal[i] = (uint8_t)dsk_rng_below(&R, 256);
        for (int i = 0; i < s.trns_n; i++)
            trns[i] = (uint8_t)dsk_rng_below(&R, 256);
        for (size_t i = 0; i < (size_t)w * h; i++)
            px[i] = (uint16_t)(px[i] % s.palette_n);
        s.palette = pal;
        s.trns = trns;
    }
    uint8_t *file;
    size_t len;
    assert_ok(image_write_png(&s, px, &file, &len));
    vision_rgb img;
    assert_ok(vision_decode(file, len, NULL, &img));
    assert_int_equal(img.width, w);
    assert_int_equal(img.height, h);
    int grey16 = s.depth == 16 && ch == 1 && s.palette_n == 0;
    for (size_t i = 0; i < (size_t)w * h; i++) {
        uint8_t want[3];
        const uint16_t *p = px + i * ch;
        if (s.palette_n > 0)
            memcpy(want, pal + 3 * p[0], 3);
        else if (ch <= 2)
            want[0] = want[1] = want[2] = expect8(p[0], s.depth, grey16);
        else
            for (int c = 0; c < 3; c++)
                want[c] = expect8(p[c], s.depth, 0);
        if (memcmp(want, img.rgb + 3 * i, 3))
            fail_msg("PNG %d ch, %d-bit%s%s%s: pixel %zu is %u,%u,%u, expected %u,%u,%u", ch, s.depth,
                     s.palette_n ? ", palette" : "", s.trns_n || s.trns_grey >= 0 ? ", tRNS" : "",
                     s.interlace ? ", interlaced" : "", i, img.rgb[3 * i], img.rgb[3 * i + 1], img.rgb[3 * i + 2],
                     want[0], want[1], want[2]);
    }
    vision_rgb_free(&img);
    free(file);
    free(px);
}

static void test_png_variants(void **state)
{
    (void)state;
    int w = 37 + (int)dsk_rng_below(&R, 20), h = 23 + (int)dsk_rng_below(&R, 20);
    for (int interlace = 0; interlace < 2; interlace++) {
        png_spec s = {.width = w, .height = h, .interlace = interlace, .trns_grey = -1};
        /* RGB, RGBA, grey + alpha, grey: 8 and 16 bits (16-bit grey clamps, the others keep the high byte) */
        for (int ch = 1; ch <= 4; ch++)
            for (int depth = 8; depth <= 16; depth += 8) {
                s.channels = ch;
                s.depth = depth;
                check_png(s);
            }
        /* grey of 1, 2, 4 bits: bit replication */
        s.channels = 1;
        for (int depth = 1; depth <= 4; depth *= 2) {
            s.depth = depth;
            check_png(s);
        }
        /* grey with a transparent value: the value is kept, no alpha appears */
        s.depth = 8;
        s.trns_grey = 17;
        check_png(s);
        s.depth = 16;
        check_png(s);
        s.trns_grey = -1;
        /* palettes of every depth, with and without tRNS (transparency dropped) */
        for (int depth = 1; depth <= 8; depth *= 2) {
            s.depth = depth;
            s.palette_n = depth == 8 ? 200 : 1 << depth;
            s.trns_n = 0;
            check_png(s);
            s.trns_n = s.palette_n / 2 + 1;
            check_png(s);
        }
        s.palette_n = s.trns_n = 0;
    }
}

/* Mean and largest absolute difference of two byte arrays. */
static void diff_stats(const uint8_t *a, const uint8_t *b, size_t n, double *mean, int *max)
{
    double sum = 0;
    *max = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        sum += d;
        *max = d > *max ? d : *max;
    }
    *mean = sum / (double)n;
}

/* A smooth random picture (JPEG keeps such content within a few levels). */
static void smooth(uint8_t *px, int w, int h, int ch)
{
    double f[4][3];
    for (int c = 0; c < ch; c++)
        for (int k = 0; k < 3; k++)
            f[c][k] = 0.02 + dsk_rng_f32(&R) * 0.05;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < ch; c++)
                px[((size_t)y * w + x) * ch + c] =
                    (uint8_t)(127.5 + 100 * sin(f[c][0] * x + f[c][1] * y + f[c][2] * x * y * 0.01));
}

static void test_jpeg_variants(void **state)
{
    (void)state;
    int w = 64 + (int)dsk_rng_below(&R, 40), h = 48 + (int)dsk_rng_below(&R, 40);
    for (int ch = 1; ch <= 4; ch++) {
        if (ch == 2)
            continue;
        for (int progressive = 0; progressive < 2; progressive++) {
            uint8_t *px = malloc((size_t)w * h * ch), *file;
            size_t len;
            smooth(px, w, h, ch);
            assert_ok(image_write_jpeg(px, w, h, ch, 95, progressive, &file, &len));
            vision_rgb img;
            assert_ok(vision_decode(file, len, NULL, &img));
            assert_int_equal(img.width, w);
            assert_int_equal(img.height, h);
            /* what the source pixels are in RGB: grey replicated; CMYK by Pillow's integer formula */
            uint8_t *want = malloc((size_t)w * h * 3);
            for (size_t i = 0; i < (size_t)w * h; i++)
                for (int c = 0; c < 3; c++) {
                    const uint8_t *p = px + i * ch;
                    if (ch == 1)
                        want[3 * i + c] = p[0];
                    else if (ch == 3)
                        want[3 * i + c] = p[c];
                    else {
                        int nk = 255 - p[3], t = p[c] * nk + 128, v = nk - (((t >> 8) + t) >> 8);
                        want[3 * i + c] = (uint8_t)(v < 0 ? 0 : v);
                    }
                }
            double mean;
            int max;
            diff_stats(want, img.rgb, (size_t)w * h * 3, &mean, &max);
            printf("JPEG %d channels%s: mean |error| %.2f, max %d\n", ch, progressive ? " progressive" : "", mean,
                   max);
            /* q95 on smooth content: a level or two on average; an inverted CMYK or swapped channel is ~100 */
            assert_true(mean < 3.0);
            if (ch == 1)
                for (size_t i = 0; i < (size_t)w * h; i++)
                    assert_true(img.rgb[3 * i] == img.rgb[3 * i + 1] && img.rgb[3 * i] == img.rgb[3 * i + 2]);
            vision_rgb_free(&img);
            free(want);
            free(file);
            free(px);
        }
    }
}

/* The decode fails and the message contains want. */
static void refused(const uint8_t *d, size_t n, const vision_decode_opts *o, const char *want)
{
    vision_rgb img = {0};
    int rc = vision_decode(d, n, o, &img);
    if (rc != -1)
        fail_msg("a bad image (%s expected) decoded as %d x %d", want, img.width, img.height);
    assert_null(img.rgb);
    if (!strstr(dsk_err_msg(), want))
        fail_msg("the error '%s' does not say '%s'", dsk_err_msg(), want);
}

static void small_png(uint8_t **file, size_t *len, int w, int h, int bad_crc)
{
    png_spec s = {.width = w, .height = h, .channels = 3, .depth = 8, .trns_grey = -1, .bad_crc = bad_crc};
    uint16_t *px = random_samples((size_t)w * h * 3, 8);
    assert_ok(image_write_png(&s, px, file, len));
    free(px);
}

/* Big-endian 32-bit store (PNG fields). */
static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The standard CRC-32 of PNG chunks. */
static uint32_t crc32_png(const uint8_t *d, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= d[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void test_bad_png(void **state)
{
    (void)state;
    uint8_t *f;
    size_t n;
    small_png(&f, &n, 40, 30, 0);
    refused(f, 0, NULL, "empty");
    refused(f, 7, NULL, "not an image");      /* a partial signature */
    refused(f, 20, NULL, "truncated");        /* inside IHDR */
    refused(f, n / 2, NULL, "truncated");     /* inside IDAT */
    /* a corrupt byte inside the compressed data (its CRC recomputed: the zlib stream itself is bad) */
    uint8_t *g = malloc(n);
    memcpy(g, f, n);
    size_t at = 8;
    while (memcmp(g + at + 4, "IDAT", 4))
        at += 12 + ((size_t)g[at] << 24 | (size_t)g[at + 1] << 16 | (size_t)g[at + 2] << 8 | g[at + 3]);
    size_t clen = (size_t)g[at] << 24 | (size_t)g[at + 1] << 16 | (size_t)g[at + 2] << 8 | g[at + 3];
    memset(g + at + 8 + 2, 0xff, clen > 8 ? 6 : 1);
    be32(g + at + 8 + clen, crc32_png(g + at + 4, clen + 4));
    refused(g, n, NULL, "PNG:");
    free(g);
    free(f);
    /* a bad chunk checksum */
    small_png(&f, &n, 40, 30, 1);
    refused(f, n, NULL, "PNG:");
    free(f);
    /* a decompression bomb: IHDR says 100000 x 100000 (10^10 pixels) over a few bytes of data */
    small_png(&f, &n, 40, 30, 0);
    be32(f + 16, 100000);
    be32(f + 20, 100000);
    be32(f + 29, crc32_png(f + 12, 17));
    refused(f, n, NULL, "more than the limit");
    free(f);
    /* the configurable limit: one pixel over refuses, exactly at it decodes */
    small_png(&f, &n, 40, 30, 0);
    vision_decode_opts lim = {.max_pixels = 40 * 30 - 1};
    refused(f, n, &lim, "1200 pixels, more than the limit of 1199");
    lim.max_pixels = 40 * 30;
    vision_rgb img;
    assert_ok(vision_decode(f, n, &lim, &img));
    vision_rgb_free(&img);
    free(f);
}

/* A JPEG whose scan script has 3 components × 63 single-coefficient bands × 2 approximation passes plus DC:
 * 379 scans, valid and tiny, far more than any encoder writes. */
static void many_scans_jpeg(uint8_t **out, unsigned long *len)
{
    static jpeg_scan_info scans[400];
    int n = 0;
    scans[n++] = (jpeg_scan_info){3, {0, 1, 2, 0}, 0, 0, 0, 0};
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < 3; c++)
            for (int k = 1; k < 64; k++)
                scans[n++] = (jpeg_scan_info){1, {c, 0, 0, 0}, k, k, pass ? 1 : 0, pass ? 0 : 1};
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr err;
    ci.err = jpeg_std_error(&err);
    jpeg_create_compress(&ci);
    *out = NULL;
    jpeg_mem_dest(&ci, out, len);
    ci.image_width = 16;
    ci.image_height = 16;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    ci.scan_info = scans;
    ci.num_scans = n;
    jpeg_start_compress(&ci, TRUE);
    uint8_t row[16 * 3];
    for (int y = 0; y < 16; y++) {
        for (int i = 0; i < 48; i++)
            row[i] = (uint8_t)dsk_rng_below(&R, 256);
        JSAMPROW rp = row;
        jpeg_write_scanlines(&ci, &rp, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
}

static void test_bad_jpeg(void **state)
{
    (void)state;
    int w = 80, h = 60;
    uint8_t *px = malloc((size_t)w * h * 3), *f;
    size_t n;
    smooth(px, w, h, 3);
    assert_ok(image_write_jpeg(px, w, h, 3, 90, 0, &f, &n));
    refused(f, 2, NULL, "not an image");
    refused(f, 40, NULL, "truncated");     /* inside the header */
    refused(f, n / 2, NULL, "truncated");  /* inside the scan */
    /* the frame header (SOF0: FF C0, length, precision, height, width) damaged */
    uint8_t *g = malloc(n);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < n && !sof; i++)
        if (f[i] == 0xff && f[i + 1] == 0xc0)
            sof = i;
    assert_true(sof > 0);
    memcpy(g, f, n);
    g[sof + 4] = 12; /* 12-bit samples: not what an 8-bit decoder reads */
    refused(g, n, NULL, "JPEG:");
    memcpy(g, f, n);
    g[sof + 4 + 5] = 0; /* no components */
    refused(g, n, NULL, "JPEG:");
    /* a bomb: the frame header says 65000 x 65000 */
    memcpy(g, f, n);
    g[sof + 5] = 0xfd, g[sof + 6] = 0xe8, g[sof + 7] = 0xfd, g[sof + 8] = 0xe8;
    refused(g, n, NULL, "more than the limit");
    free(g);
    /* the scan's last 16 bytes gone: more than libjpeg's bit reader reads ahead (at most 8 bytes), so it
     * asks past the data before the last block: truncated, as Pillow says ("image file is truncated") */
    assert_true(f[n - 2] == 0xff && f[n - 1] == 0xd9);
    refused(f, n - 2 - 16, NULL, "truncated");
    /* only the end marker gone: whether the reader's last fill asks past the data depends on where it fell
     * (Pillow alike), so the file is refused as truncated or gives the whole file's pixels */
    vision_rgb img, cut = {0};
    assert_ok(vision_decode(f, n, NULL, &img));
    if (vision_decode(f, n - 2, NULL, &cut) == 0) {
        assert_int_equal(cut.width, w);
        assert_int_equal(cut.height, h);
        assert_memory_equal(cut.rgb, img.rgb, (size_t)w * h * 3);
        vision_rgb_free(&cut);
    } else {
        assert_null(cut.rgb);
        assert_non_null(strstr(dsk_err_msg(), "truncated"));
    }
    vision_rgb_free(&img);
    free(f);
    free(px);
    unsigned long ml;
    uint8_t *m;
    many_scans_jpeg(&m, &ml);
    refused(m, ml, NULL, "scans");
    free(m);
}

static void test_other_formats(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        size_t n;
        const char *name;
    } cases[] = {{"GIF89a\x01\x00\x01\x00", 10, "GIF images are not supported"},
                 {"RIFF\x10\0\0\0WEBPVP8 ", 16, "WebP images are not supported"},
                 {"BM\x3a\0\0\0", 6, "BMP images are not supported"},
                 {"II*\0\x08\0\0\0", 8, "TIFF images are not supported"},
                 {"<svg xmlns=", 11, "not an image"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        refused((const uint8_t *)cases[i].bytes, cases[i].n, NULL, cases[i].name);
    const char *name;
    static const uint8_t jpg[3] = {0xff, 0xd8, 0xff};
    assert_int_equal(vision_sniff(jpg, 3, &name), VISION_FMT_JPEG);
    assert_string_equal(name, "JPEG");
}

/* base64 of d[0..n) (standard alphabet, padded), every 76 characters a CRLF when wrap. */
static char *b64(const uint8_t *d, size_t n, int wrap)
{
    static const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + n / 57 * 2 + 8), *p = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        *p++ = a[v >> 18];
        *p++ = a[(v >> 12) & 63];
        *p++ = i + 1 < n ? a[(v >> 6) & 63] : '=';
        *p++ = i + 2 < n ? a[v & 63] : '=';
        if (wrap && (i / 3 + 1) % 19 == 0)
            *p++ = '\r', *p++ = '\n';
    }
    *p = 0;
    return o;
}

static void url_refused(const char *url, const char *want)
{
    uint8_t *b = (uint8_t *)"x";
    size_t n = 1;
    assert_int_equal(vision_data_url(url, strlen(url), &b, &n), -1);
    assert_null(b);
    if (!strstr(dsk_err_msg(), want))
        fail_msg("data URL '%.40s': the error '%s' does not say '%s'", url, dsk_err_msg(), want);
}

static void test_data_url(void **state)
{
    (void)state;
    for (int k = 0; k < 40; k++) {
        size_t n = 1 + dsk_rng_below(&R, 300);
        uint8_t *d = malloc(n);
        for (size_t i = 0; i < n; i++)
            d[i] = (uint8_t)dsk_rng_below(&R, 256);
        char *enc = b64(d, n, k & 1);
        const char *head = k % 3 == 0 ? "data:image/png;base64," : k % 3 == 1 ? "DATA:;base64," : "data:x/y;a=b;base64,";
        char *url = malloc(strlen(head) + strlen(enc) + 1);
        strcpy(url, head);
        strcat(url, enc);
        uint8_t *got;
        size_t gn;
        assert_ok(vision_data_url(url, strlen(url), &got, &gn));
        assert_int_equal(gn, n);
        assert_memory_equal(got, d, n);
        free(got);
        free(url);
        free(enc);
        free(d);
    }
    url_refused("http://example.com/a.png", "http URLs are not fetched");
    url_refused("HTTPS://example.com/a.png", "https URLs are not fetched");
    url_refused("/etc/passwd", "not a data: URL");
    url_refused("file:///etc/passwd", "not a data: URL");
    url_refused("data:image/png,iVBORw0KGgo=", "lacks \";base64\"");
    url_refused("data:image/png;base64", "no ','");
    url_refused("data:image/png;base64,", "empty");
    url_refused("data:image/png;base64,ab-_", "URL-safe alphabet");
    url_refused("data:image/png;base64,aGVs*bG8=", "outside the alphabet");
    url_refused("data:image/png;base64,aGVsbG8", "padding");
    url_refused("data:image/png;base64,aGVsbG8=aGVs", "after its '=' padding");
    url_refused("data:image/png;base64,a===", "padding");
    /* a data URL of a real image decodes */
    uint8_t *f, *got;
    size_t n, gn;
    small_png(&f, &n, 9, 7, 0);
    char *enc = b64(f, n, 1), url[4096];
    snprintf(url, sizeof url, "data:image/jpeg;base64,%s", enc); /* the MIME type is not what decides */
    assert_ok(vision_data_url(url, strlen(url), &got, &gn));
    vision_rgb img;
    assert_ok(vision_decode(got, gn, NULL, &img));
    assert_int_equal(img.width, 9);
    vision_rgb_free(&img);
    free(got);
    free(enc);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_variants), cmocka_unit_test(test_jpeg_variants), cmocka_unit_test(test_bad_png),
        cmocka_unit_test(test_bad_jpeg),     cmocka_unit_test(test_other_formats), cmocka_unit_test(test_data_url),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
