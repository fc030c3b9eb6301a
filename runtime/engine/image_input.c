/* Images into a prompt: bytes from a data URL or a file, decoded and preprocessed (runtime/vision), and the
 * prompt's ids expanded with each image's span (vision.md §1.3: every span position holds image_token_id,
 * the id taken from the config, never from the tokenizer). */
#include "runtime/engine/image_input.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

enum { DEFAULT_MAX_BYTES = 20 << 20 };

int engine_image_load(const model_config *c, const char *src, size_t len, int files, size_t max_bytes,
                      vision_image *img, uint64_t *key)
{
    uint8_t *bytes = NULL;
    size_t n = 0;
    vision_rgb rgb = {0};
    if (c->vision_n_layers <= 0)
        return dsk_err("this model has no vision tower (vision_config.num_hidden_layers is 0): it takes no images");
    max_bytes = max_bytes ? max_bytes : DEFAULT_MAX_BYTES;
    if (len >= 5 && !strncmp(src, "data:", 5)) {
        if (vision_data_url(src, len, &bytes, &n))
            return -1;
    } else if (files && !(len >= 7 && !strncasecmp(src, "http://", 7)) && !(len >= 8 && !strncasecmp(src, "https://", 8))) {
        char path[4096];
        char *data;
        if (len >= sizeof path)
            return dsk_err("an image path of %zu bytes is too long", len);
        memcpy(path, src, len);
        path[len] = 0;
        struct stat st;
        if (stat(path, &st))
            return dsk_err_errno("image %s", path);
        if ((uint64_t)st.st_size > max_bytes) /* before reading it: the bound holds for files too */
            return dsk_err("image %s: %lld bytes, more than the %zu accepted", path, (long long)st.st_size, max_bytes);
        if (dsk_read_file(path, &data, &n))
            return dsk_err_ctx("image %s", path);
        bytes = (uint8_t *)data;
    } else if (vision_data_url(src, len, &bytes, &n)) /* refuses http(s) URLs and paths, naming them */
        return -1;
    int rc = -1;
    if (n > max_bytes)
        dsk_err("the image is %zu bytes, more than the %zu accepted", n, max_bytes);
    else if (!vision_decode(bytes, n, NULL, &rgb) && !vision_preprocess(c, &rgb, img)) {
        *key = dsk_xxh64(bytes, n);
        rc = 0;
    }
    vision_rgb_free(&rgb);
    free(bytes);
    return rc;
}

int engine_prompt_images(const model_config *c, const int32_t *ids, size_t n_ids, const size_t *at,
                         const vision_image *imgs, const uint64_t *keys, int n, engine_prompt *out)
{
    *out = (engine_prompt){0};
    int64_t total = (int64_t)n_ids;
    for (int k = 0; k < n; k++) {
        if (at[k] > n_ids || (k && at[k] < at[k - 1]))
            return dsk_err("image %d: its place %zu is not in order within the %zu prompt ids", k, at[k], n_ids);
        total += imgs[k].plan.positions;
    }
    if (total > INT32_MAX)
        return dsk_err("a prompt of %lld positions with its images is too long", (long long)total);
    out->ids = dsk_malloc(sizeof(int32_t) * (size_t)(total ? total : 1));
    out->images = dsk_calloc((size_t)(n ? n : 1), sizeof *out->images);
    out->pos = dsk_calloc((size_t)(n ? n : 1), sizeof *out->pos);
    if (!out->ids || !out->images || !out->pos) {
        engine_prompt_free(out);
        return -1;
    }
    size_t from = 0;
    int64_t w = 0;
    for (int k = 0; k <= n; k++) {
        size_t to = k < n ? at[k] : n_ids;
        memcpy(out->ids + w, ids + from, sizeof(int32_t) * (to - from));
        w += (int64_t)(to - from);
        from = to;
        if (k == n)
            break;
        out->pos[k] = w;
        out->images[k] = (engine_image){imgs[k].patches, imgs[k].plan.n_vit_h, imgs[k].plan.n_vit_w, keys ? keys[k] : 0};
        for (int64_t i = 0; i < imgs[k].plan.positions; i++)
            out->ids[w++] = c->image_token_id;
    }
    out->n_ids = (int)w;
    out->n_images = n;
    return 0;
}

void engine_prompt_free(engine_prompt *p)
{
    free(p->ids);
    free(p->images);
    free(p->pos);
    for (int k = 0; p->owned && k < p->n_images; k++)
        vision_image_free(&p->owned[k]);
    free(p->owned);
    *p = (engine_prompt){0};
}

int engine_prompt_urls(const model_config *c, const int32_t *ids, size_t n_ids, const size_t *at,
                       const char *const *urls, const size_t *url_lens, int n, size_t max_bytes, engine_prompt *out,
                       int *bad)
{
    *out = (engine_prompt){0};
    *bad = -1;
    vision_image *imgs = dsk_calloc((size_t)(n ? n : 1), sizeof *imgs);
    uint64_t *keys = dsk_calloc((size_t)(n ? n : 1), sizeof *keys);
    int k = 0, rc = !imgs || !keys ? -1 : 0;
    for (; !rc && k < n; k++)
        if (engine_image_load(c, urls[k], url_lens[k], 0, max_bytes, &imgs[k], &keys[k])) {
            *bad = k;
            rc = -1;
        }
    if (!rc)
        rc = engine_prompt_images(c, ids, n_ids, at, imgs, keys, n, out);
    free(keys);
    if (rc) {
        for (int j = 0; imgs && j < n; j++)
            vision_image_free(&imgs[j]);
        free(imgs);
        return -1;
    }
    out->owned = imgs;
    return 0;
}
