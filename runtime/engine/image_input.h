/* Images into a prompt (vision.md §1): a data URL or file to the engine's patches, and a prompt's image
 * places expanded into spans of image_token_id. Shared by `dskit run --image` and the server (which passes
 * image_url parts as data URLs and never file paths). */
#ifndef DSK_ENGINE_IMAGE_INPUT_H
#define DSK_ENGINE_IMAGE_INPUT_H

#include "runtime/engine/engine.h"
#include "runtime/vision/vision.h"

#include <stddef.h>
#include <stdint.h>

/* One image, decoded and preprocessed for the model: src is a `data:` URL, or with files set also a file
 * path (the command line; the server reads nothing but the request). Refused: a model without a vision
 * tower, http(s) URLs, a bad URL, an unsupported or broken file, more than max_bytes (0: 20 MiB) or
 * VISION_DEFAULT_MAX_PIXELS. img->patches and the plan are malloc'd (vision_image_free); *key is the
 * xxh64 of the image file's bytes. */
int engine_image_load(const model_config *c, const char *src, size_t len, int files, size_t max_bytes,
                      vision_image *img, uint64_t *key);

/* A prompt of ids with n images placed before ids[at[k]] (at ascending, as chat_encode gives them): the
 * expanded ids with each image's span of image_token_id, and each span's first position. */
typedef struct {
    int32_t *ids;          /* [n_ids] */
    int n_ids;
    engine_image *images;  /* [n_images], patches pointing into the vision_images given (or owned) */
    int64_t *pos;          /* [n_images] */
    int n_images;
    vision_image *owned;   /* engine_prompt_urls: the images themselves, freed with the prompt */
} engine_prompt;

int engine_prompt_images(const model_config *c, const int32_t *ids, size_t n_ids, const size_t *at,
                         const vision_image *imgs, const uint64_t *keys, int n, engine_prompt *out);
void engine_prompt_free(engine_prompt *p);

/* A request's images (the server: data URLs only, never files), each loaded with engine_image_load and
 * placed as engine_prompt_images does; the prompt owns them. On a refusal *bad is the image's index (-1:
 * not one image's fault, e.g. the prompt's length) and the message says why. */
int engine_prompt_urls(const model_config *c, const int32_t *ids, size_t n_ids, const size_t *at,
                       const char *const *urls, const size_t *url_lens, int n, size_t max_bytes, engine_prompt *out,
                       int *bad);

#endif
