/* Images through the engine and the CPU model on tiny-vision (vision.md §3.8): a span placed in a prompt
 * changes what follows and is repeatable; a chunked prefill that splits the span gives the same logits as one
 * step; span rows route with bias_vl and Engram passes them through; a roll back below a span drops it; and
 * every misuse is refused (a text-only model, a row that is not image_token_id, overlaps, a span before the
 * committed length); the checkpoint's vision tensors under HF-style names load the same. */
#include "tests/model/model_test_util.h"

#include "runtime/common/numerics.h"
#include "runtime/common/util.h"
#include "runtime/common/rng.h"
#include "runtime/model/vision_span.h"
#include "runtime/vision/vision.h"
#include "runtime/weights/safetensors.h"

#include <string.h>
#include <time.h>

static cpu_model *M;
static engine *E;
static dsk_rng R;
static int V, IMG;

static int setup(void **state)
{
    (void)state;
    uint64_t seed = test_seed("vision engine test");
    dsk_rng_seed(&R, seed);
    M = model_test_make("tiny-vision", 5);
    E = M ? model_test_engine(4) : NULL;
    if (!E)
        return -1;
    V = engine_get_info(E)->vocab;
    IMG = M->cfg.image_token_id;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    engine_close(E);
    model_test_cleanup(M);
    return 0;
}

/* A random W × H picture, preprocessed for the model. */
static void random_image(int W, int H, vision_image *img)
{
    vision_rgb rgb = {.width = W, .height = H, .rgb = malloc((size_t)W * H * 3)};
    for (size_t i = 0; i < (size_t)W * H * 3; i++)
        rgb.rgb[i] = (uint8_t)dsk_rng_below(&R, 256);
    assert_ok(vision_preprocess(&M->cfg, &rgb, img));
    vision_rgb_free(&rgb);
}

/* A prompt of pre text tokens, the image's span, post text tokens; *at gets the span's first position. */
static int32_t *prompt(const vision_image *img, int pre, int post, int *n, int *at)
{
    int span = (int)img->plan.positions;
    *n = pre + span + post;
    *at = pre;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)*n);
    for (int i = 0; i < *n; i++)
        t[i] = i >= pre && i < pre + span ? IMG : (int32_t)dsk_rng_below(&R, 120000);
    return t;
}

/* Run tokens [from, to) of seq in one step (greedy draws), logits of the last row to lg; commit them. */
static int run(int seq, const int32_t *t, int from, int to, float *lg)
{
    int n = to - from;
    engine_row *rows = calloc((size_t)n, sizeof *rows);
    float *all = malloc(sizeof(float) * (size_t)n * V);
    int32_t *drawn = calloc((size_t)n, sizeof *drawn);
    for (int i = 0; i < n; i++)
        rows[i] = (engine_row){.seq = seq, .token = t[from + i], .pos = from + i, .sample = i == n - 1,
                               .sp = SAMPLE_GREEDY, .top_logprobs = -1};
    engine_out eo = {.tokens = drawn, .logits = all};
    int rc = engine_step(E, rows, n, &eo);
    if (!rc)
        rc = engine_commit(E, seq, to);
    if (!rc && lg)
        memcpy(lg, all + (size_t)(n - 1) * V, sizeof(float) * V);
    free(rows);
    free(all);
    free(drawn);
    return rc;
}

static engine_image as_engine(const vision_image *img)
{
    return (engine_image){img->patches, img->plan.n_vit_h, img->plan.n_vit_w, 0};
}

/* The same prompt with and without the image (the span's rows then are plain image_token_id embeddings),
 * with another image, twice with the same one, and in chunks that split the span. */
static void test_span(void **state)
{
    (void)state;
    vision_image a, b;
    random_image(37, 22, &a);
    random_image(90, 61, &b);
    int n, at, seq;
    int32_t *t = prompt(&a, 5, 4, &n, &at);
    float *la = malloc(sizeof(float) * V), *la2 = malloc(sizeof(float) * V), *lt = malloc(sizeof(float) * V);
    float *lc = malloc(sizeof(float) * V);
    engine_image ea = as_engine(&a), eb = as_engine(&b);
    int64_t span;
    /* with image a, one step */
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(engine_seq_image(E, seq, at, &ea, &span));
    assert_int_equal(span, a.plan.positions);
    assert_ok(run(seq, t, 0, n, la));
    engine_seq_close(E, seq);
    /* again: the same bits */
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(engine_seq_image(E, seq, at, &ea, NULL));
    assert_ok(run(seq, t, 0, n, la2));
    engine_seq_close(E, seq);
    assert_memory_equal(la, la2, sizeof(float) * V);
    /* chunks of 3 rows: the span's positions arrive over several steps */
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(engine_seq_image(E, seq, at, &ea, NULL));
    for (int p = 0; p < n; p += 3)
        assert_ok(run(seq, t, p, p + 3 < n ? p + 3 : n, lc));
    engine_seq_close(E, seq);
    assert_memory_equal(la, lc, sizeof(float) * V);
    /* no image: the same ids, other logits */
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(run(seq, t, 0, n, lt));
    engine_seq_close(E, seq);
    assert_true(memcmp(la, lt, sizeof(float) * V) != 0);
    /* image b has its own span length: a prompt of its own, whose logits differ from a's */
    int nb, atb;
    int32_t *tb = prompt(&b, 5, 4, &nb, &atb);
    memcpy(tb, t, sizeof(int32_t) * 5);
    memcpy(tb + nb - 4, t + n - 4, sizeof(int32_t) * 4);
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(engine_seq_image(E, seq, atb, &eb, NULL));
    assert_ok(run(seq, tb, 0, nb, lt));
    engine_seq_close(E, seq);
    assert_true(memcmp(la, lt, sizeof(float) * V) != 0);
    free(tb);
    free(t);
    free(la);
    free(la2);
    free(lt);
    free(lc);
    vision_image_free(&a);
    vision_image_free(&b);
}

/* A roll back below the span drops it: the positions then run as text, as in a sequence that never had it. */
static void test_rollback(void **state)
{
    (void)state;
    vision_image a;
    random_image(30, 30, &a);
    int n, at, seq;
    int32_t *t = prompt(&a, 6, 3, &n, &at);
    float *l1 = malloc(sizeof(float) * V), *l2 = malloc(sizeof(float) * V);
    engine_image ea = as_engine(&a);
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(engine_seq_image(E, seq, at, &ea, NULL));
    assert_ok(run(seq, t, 0, 4, NULL));
    assert_ok(run(seq, t, 4, at + 2, NULL)); /* into the span */
    assert_ok(engine_commit(E, seq, 5));     /* below it */
    assert_ok(run(seq, t, 5, n, l1));
    engine_seq_close(E, seq);
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(run(seq, t, 0, n, l2));
    engine_seq_close(E, seq);
    assert_memory_equal(l1, l2, sizeof(float) * V);
    free(t);
    free(l1);
    free(l2);
    vision_image_free(&a);
}

static void test_refusals(void **state)
{
    (void)state;
    vision_image a;
    random_image(25, 14, &a);
    engine_image ea = as_engine(&a);
    int seq, span = (int)a.plan.positions;
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(engine_seq_image(E, seq, 2, &ea, NULL));
    assert_int_equal(engine_seq_image(E, seq, 2 + span - 1, &ea, NULL), -1); /* overlaps */
    assert_non_null(strstr(dsk_err_msg(), "overlaps"));
    assert_int_equal(engine_seq_image(E, seq, 250, &ea, NULL), -1); /* past the reservation */
    int32_t t[4] = {100, 200, IMG, 7};                                /* position 3 is in the span, 7 is not IMG */
    assert_int_equal(run(seq, t, 0, 4, NULL), -1);
    assert_non_null(strstr(dsk_err_msg(), "image span"));
    t[3] = IMG;
    assert_ok(run(seq, t, 0, 4, NULL));
    assert_int_equal(engine_seq_image(E, seq, 1, &ea, NULL), -1); /* before the committed length */
    engine_seq_close(E, seq);
    vision_image_free(&a);
}

/* Inside the CPU model: span rows route with bias_vl (making it equal to bias moves the image rows' logits
 * and leaves a text-only prompt's alone), and Engram (before layers 1 and 2) leaves span rows untouched. */
typedef struct {
    uint16_t *out0, *in1; /* layer 0's output, layer 1's input after Engram: [n][hc][d] */
    int n;
} engram_probe;

static void probe_hook(void *ctx, int layer, int stage, uint16_t *X, float *pi, int n)
{
    (void)pi;
    engram_probe *p = ctx;
    size_t bytes = sizeof(uint16_t) * (size_t)n * M->cfg.hc_mult * M->cfg.dim;
    if (layer == 0 && stage == CPU_HOOK_BLOCK_OUT)
        memcpy(p->out0, X, bytes);
    if (layer == 1 && stage == CPU_HOOK_BLOCK_IN)
        memcpy(p->in1, X, bytes);
}

static void test_model_rules(void **state)
{
    (void)state;
    const model_config *c = &M->cfg;
    vision_image a;
    random_image(40, 25, &a);
    int n, at;
    int32_t *t = prompt(&a, 4, 3, &n, &at);
    size_t sd = (size_t)c->hc_mult * c->dim;
    float *l1 = malloc(sizeof(float) * (size_t)n * V), *l2 = malloc(sizeof(float) * (size_t)n * V);
    engram_probe pr = {malloc(sizeof(uint16_t) * n * sd), malloc(sizeof(uint16_t) * n * sd), n};
    cpu_seq *s;
    assert_ok(cpu_seq_new(M, 256, &s));
    assert_ok(cpu_seq_image(M, s, at, a.patches, a.plan.n_vit_h, a.plan.n_vit_w));
    M->layer_hook = probe_hook;
    M->layer_ctx = &pr;
    assert_ok(cpu_forward(M, s, t, n, 0, l1, NULL));
    M->layer_hook = NULL;
    int span = (int)a.plan.positions;
    for (int i = 0; i < n; i++) {
        int same = !memcmp(pr.out0 + i * sd, pr.in1 + i * sd, sizeof(uint16_t) * sd);
        assert_int_equal(same, i >= at && i < at + span); /* Engram skips exactly the span */
    }
    /* bias_vl -> bias on every layer: the span's rows (and what follows) change */
    const float *saved[64];
    for (int l = 0; l < c->n_layers; l++) {
        saved[l] = M->blocks[l].gate_bias_vl;
        M->blocks[l].gate_bias_vl = M->blocks[l].gate_bias;
    }
    assert_ok(cpu_forward(M, s, t, n, 0, l2, NULL));
    assert_memory_equal(l1, l2, sizeof(float) * (size_t)at * V); /* text before the span: unchanged */
    assert_true(memcmp(l1 + (size_t)at * V, l2 + (size_t)at * V, sizeof(float) * (size_t)(n - at) * V) != 0);
    for (int l = 0; l < c->n_layers; l++)
        M->blocks[l].gate_bias_vl = saved[l];
    cpu_seq_free(s);
    free(pr.out0);
    free(pr.in1);
    free(l1);
    free(l2);
    free(t);
    vision_image_free(&a);
}

/* The checkpoint with its vision tensors under HF-style names (model.vision.*, model.aligner.*,
 * model.image_*: vision.md §4) loads and gives the same logits, bit for bit, for a prompt with an image. */
static void test_hf_names(void **state)
{
    (void)state;
    char src[1100], dst[1100], from[1200], to[1200];
    snprintf(src, sizeof src, "%s/ckpt", model_test_root);
    snprintf(dst, sizeof dst, "%s/hf", model_test_root);
    st_set *in;
    st_writer *w;
    assert_ok(st_open(src, &in));
    assert_ok(st_writer_open(dst, 0, &w));
    int renamed = 0;
    for (int i = 0; i < st_count(in); i++) {
        const st_tensor *t = st_at(in, i);
        char name[512];
        int vision = !strncmp(t->name, "vision.", 7) || !strncmp(t->name, "aligner.", 8) ||
                     !strncmp(t->name, "image_", 6);
        snprintf(name, sizeof name, "%s%s", vision ? "model." : "", t->name);
        renamed += vision;
        assert_ok(st_writer_add(w, name, t->dtype, t->ndim, t->shape, t->data, t->nbytes));
    }
    assert_ok(st_writer_close(w));
    st_close(in);
    assert_true(renamed >= 2 + 1 + 4 + 3); /* patch embed, norm, aligner, delimiters and the blocks' */
    static const char *const files[] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        snprintf(from, sizeof from, "%s/%s", src, files[f]);
        snprintf(to, sizeof to, "%s/%s", dst, files[f]);
        char *data;
        size_t len;
        assert_ok(dsk_read_file(from, &data, &len));
        assert_ok(dsk_write_file_atomic(to, data, len));
        free(data);
    }
    engine_opts o = {.backend = "cpu", .model_dir = dst, .max_seqs = 1, .cache_bytes = (size_t)1 << 28};
    engine *hf;
    assert_ok(engine_open(&o, &hf));
    assert_true(engine_get_info(hf)->takes_images);
    vision_image a;
    random_image(41, 29, &a);
    engine_image ea = as_engine(&a);
    int n, at, seq;
    int32_t *t = prompt(&a, 3, 4, &n, &at);
    float *want = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(engine_seq_image(E, seq, at, &ea, NULL));
    assert_ok(run(seq, t, 0, n, want));
    engine_seq_close(E, seq);
    engine *mine = E;
    E = hf; /* run() steps E */
    assert_ok(engine_seq_open(E, 256, 0, &seq));
    assert_ok(engine_seq_image(E, seq, at, &ea, NULL));
    assert_ok(run(seq, t, 0, n, got));
    engine_seq_close(E, seq);
    E = mine;
    assert_memory_equal(want, got, sizeof(float) * V);
    engine_close(hf);
    free(want);
    free(got);
    free(t);
    vision_image_free(&a);
}

/* The text-only tiny model refuses images. */
static void test_text_only(void **state)
{
    (void)state;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/text", model_test_root);
    char *argv[] = {"mkmodel", "--preset", "tiny", "--out", dir, NULL};
    assert_ok(cmd_mkmodel(5, argv));
    engine_opts o = {.backend = "cpu", .model_dir = dir, .max_seqs = 1, .cache_bytes = (size_t)1 << 28};
    engine *e;
    assert_ok(engine_open(&o, &e));
    vision_image a;
    random_image(20, 20, &a);
    engine_image ea = as_engine(&a);
    int seq;
    assert_ok(engine_seq_open(e, 64, 0, &seq));
    assert_int_equal(engine_seq_image(e, seq, 0, &ea, NULL), -1);
    assert_non_null(strstr(dsk_err_msg(), "no vision tower"));
    engine_close(e);
    vision_image_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_span), cmocka_unit_test(test_rollback),
                                       cmocka_unit_test(test_refusals), cmocka_unit_test(test_model_rules),
                                       cmocka_unit_test(test_text_only), cmocka_unit_test(test_hf_names)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
