/* `dskit run --image` end to end on tiny-vision: a PNG file, the same bytes as a data URL and a JPEG each
 * give a run that repeats bit for bit and differs from the run without the image, drafted == serial; two ranks (--tp 2) take
 * the image too; an http URL, a broken file and a text-only model are refused with a clear message. */
#include "tests/model/model_test_util.h"

#include "runtime/common/rng.h"
#include "runtime/vision/image_write.h"

#include <string.h>
#include <sys/wait.h>
#include <time.h>

static char dir[1100], png[1100], jpg[1100], bad[1100];
static char *data_url;

static int put(const char *path, const uint8_t *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(d, 1, n, f) == n;
    return (f && fclose(f)) || !ok ? -1 : 0;
}

static char *base64(const uint8_t *d, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(4 * (n / 3 + 1) + 1), *w = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        *w++ = a[v >> 18];
        *w++ = a[(v >> 12) & 63];
        *w++ = i + 1 < n ? a[(v >> 6) & 63] : '=';
        *w++ = i + 2 < n ? a[v & 63] : '=';
    }
    *w = 0;
    return o;
}

static int setup(void **state)
{
    (void)state;
    dsk_rng r;
    uint64_t seed = (uint64_t)time(NULL);
    printf("vision run test: seed %llu\n", (unsigned long long)seed);
    dsk_rng_seed(&r, seed);
    cpu_model *m = model_test_make("tiny-vision", 3);
    if (!m)
        return -1;
    cpu_model_free(m);
    snprintf(dir, sizeof dir, "%s/ckpt", model_test_root);
    snprintf(png, sizeof png, "%s/a.png", model_test_root);
    snprintf(jpg, sizeof jpg, "%s/a.jpg", model_test_root);
    snprintf(bad, sizeof bad, "%s/bad.png", model_test_root);
    int w = 33, h = 21;
    uint16_t *s = malloc(sizeof(uint16_t) * w * h * 3);
    uint8_t *px = malloc((size_t)w * h * 3), *file;
    size_t len;
    for (int i = 0; i < w * h * 3; i++)
        px[i] = (uint8_t)(s[i] = (uint16_t)dsk_rng_below(&r, 256));
    png_spec sp = {.width = w, .height = h, .channels = 3, .depth = 8, .trns_grey = -1};
    if (image_write_png(&sp, s, &file, &len) || put(png, file, len) || put(bad, file, len / 2))
        return -1;
    char *b = base64(file, len);
    data_url = malloc(strlen(b) + 32);
    sprintf(data_url, "data:image/png;base64,%s", b);
    free(b);
    free(file);
    if (image_write_jpeg(px, w, h, 3, 90, 0, &file, &len) || put(jpg, file, len))
        return -1;
    free(file);
    free(s);
    free(px);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(data_url);
    model_test_cleanup(NULL);
    return 0;
}

/* `dskit run` on model with extra options: its stdout (the ids) into out, stderr into err; the exit code. */
static int run(const char *model, const char *extra, char *out, size_t cap, char *err, size_t ecap)
{
    char cmd[8192], errf[1200];
    snprintf(errf, sizeof errf, "%s/run.err", model_test_root);
    snprintf(cmd, sizeof cmd, "%s/dskit run --backend cpu --model %s --prompt-ids \"0 4444 1234 77\" --print-ids "
             "--max-tokens 6 %s 2>%s", test_binary_dir(), model, extra, errf);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    FILE *e = fopen(errf, "r");
    n = e ? fread(err, 1, ecap - 1, e) : 0;
    err[n] = 0;
    if (e)
        fclose(e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_runs(void **state)
{
    (void)state;
    char none[256], a[256], a2[256], url[256], j[256], err[4096];
    char opt[8192];
    assert_int_equal(run(dir, "", none, sizeof none, err, sizeof err), 0);
    snprintf(opt, sizeof opt, "--image %s", png);
    assert_int_equal(run(dir, opt, a, sizeof a, err, sizeof err), 0);
    assert_non_null(strstr(err, "image 0: 10 x 7 patches, 17 positions")); /* 33 x 21 -> 40 x 25 -> 40 x 28: 4 x 3 cells */
    assert_non_null(strstr(err, "prompt 21 tokens"));                    /* 4 ids + the span */
    assert_int_equal(run(dir, opt, a2, sizeof a2, err, sizeof err), 0);
    assert_string_equal(a, a2);
    assert_string_not_equal(a, none);
    snprintf(opt, sizeof opt, "--draft --image %s", png); /* the drafter's rings see the span's streams too */
    assert_int_equal(run(dir, opt, a2, sizeof a2, err, sizeof err), 0);
    assert_string_equal(a, a2);
    snprintf(opt, sizeof opt, "--image '%s'", data_url);
    assert_int_equal(run(dir, opt, url, sizeof url, err, sizeof err), 0);
    assert_string_equal(url, a);
    snprintf(opt, sizeof opt, "--image %s", jpg);
    assert_int_equal(run(dir, opt, j, sizeof j, err, sizeof err), 0);
    assert_string_not_equal(j, none);
    printf("without: %swith the PNG: %swith the JPEG: %s", none, a, j);
}

static void test_tp(void **state)
{
    (void)state;
    char a[256], b[256], none[256], err[4096], opt[2200];
    snprintf(opt, sizeof opt, "--tp 2 --image %s", png);
    assert_int_equal(run(dir, opt, a, sizeof a, err, sizeof err), 0);
    assert_int_equal(run(dir, opt, b, sizeof b, err, sizeof err), 0);
    assert_string_equal(a, b);
    assert_int_equal(run(dir, "--tp 2", none, sizeof none, err, sizeof err), 0);
    assert_string_not_equal(a, none);
}

static void test_refusals(void **state)
{
    (void)state;
    char out[256], err[4096], opt[2200], text[1200];
    assert_int_not_equal(run(dir, "--image http://example.com/a.png", out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(err, "http URLs are not fetched"));
    snprintf(opt, sizeof opt, "--image %s", bad);
    assert_int_not_equal(run(dir, opt, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(err, "bad.png"));
    assert_int_not_equal(run(dir, "--image 'data:image/png;base64,iVBO*w0K'", out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(err, "--image data:"));
    snprintf(text, sizeof text, "%s/text", model_test_root);
    char *argv[] = {"mkmodel", "--preset", "tiny", "--out", text, NULL};
    assert_ok(cmd_mkmodel(5, argv));
    snprintf(opt, sizeof opt, "--image %s", png);
    assert_int_not_equal(run(text, opt, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(err, "no vision tower"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_runs), cmocka_unit_test(test_tp),
                                       cmocka_unit_test(test_refusals)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
