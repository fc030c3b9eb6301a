/* Loading: a missing or misshapen tensor is an error naming it; f32 norm weights load as bf16; a
 * checkpoint that is not EXL3 is refused. Variants are written from the tiny checkpoint with the
 * safetensors writer (tensor data is copied from the mapping). */
#include "tests/model/model_test_util.h"

#include "runtime/common/numerics.h"
#include "runtime/common/util.h"

#include <string.h>

static cpu_model *M;

static int setup(void **state)
{
    (void)state;
    M = model_test_make("tiny", 99);
    return M ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    model_test_cleanup(M);
    return 0;
}

typedef enum { DROP, RESHAPE, TO_F32 } edit_kind;

/* Write dir = the tiny checkpoint with tensor `name` dropped, reshaped or stored as F32; config.json
 * copied (with quant_method replaced when quant is not NULL). */
static void write_variant(const char *dir, const char *name, edit_kind kind, const char *quant)
{
    char src[1200], path[1300], *text;
    size_t len;
    snprintf(src, sizeof src, "%s/ckpt", model_test_root);
    snprintf(path, sizeof path, "%s/config.json", src);
    assert_ok(dsk_read_file(path, &text, &len));
    assert_ok(dsk_mkdirs(dir));
    if (quant) {
        char *q = strstr(text, "\"exl3\"");
        assert_non_null(q);
        memcpy(q, quant, 6);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_ok(dsk_write_file_atomic(path, text, len));
    free(text);
    st_writer *w;
    assert_ok(st_writer_open(dir, 0, &w));
    for (int i = 0; i < st_count(M->st); i++) {
        const st_tensor *t = st_at(M->st, i);
        if (!strcmp(t->name, name)) {
            if (kind == DROP)
                continue;
            if (kind == RESHAPE) {
                int64_t shape[1] = {t->shape[0] / 2};
                assert_ok(st_writer_add(w, t->name, t->dtype, 1, shape, t->data, t->nbytes / 2));
                continue;
            }
            size_t n = t->nbytes / 2;
            float *f = malloc(sizeof(float) * n);
            for (size_t k = 0; k < n; k++) {
                uint16_t h;
                memcpy(&h, (const char *)t->data + 2 * k, 2);
                f[k] = bf16_to_f32(h) * (1.0f + 1.0f / 64.0f + 1.0f / 4096.0f); /* not a bf16 value: rounds on load */
            }
            assert_ok(st_writer_add(w, t->name, ST_F32, t->ndim, t->shape, f, sizeof(float) * n));
            free(f);
            continue;
        }
        assert_ok(st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes));
    }
    assert_ok(st_writer_close(w));
}

static void expect_load_error(const char *sub, const char *name, edit_kind kind, const char *quant,
                              const char *needle)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", model_test_root, sub);
    write_variant(dir, name, kind, quant);
    cpu_model *m = NULL;
    assert_int_equal(cpu_model_load(dir, 0, &m), -1);
    if (!strstr(dsk_err_msg(), needle))
        fail_msg("message '%s' does not name '%s'", dsk_err_msg(), needle);
}

static void test_missing_and_misshapen(void **state)
{
    (void)state;
    expect_load_error("drop-wo-a", "layers.3.attn.wo_a.svh", DROP, NULL, "layers.3.attn.wo_a");
    expect_load_error("drop-sink", "layers.6.attn.attn_sink", DROP, NULL, "layers.6.attn.attn_sink");
    expect_load_error("drop-map", "engram.token_map", DROP, NULL, "engram.token_map");
    expect_load_error("shape-norm", "layers.2.attn.q_norm.weight", RESHAPE, NULL, "layers.2.attn.q_norm.weight");
    expect_load_error("not-exl3", "", DROP, "\"fp8\" ", "EXL3");
}

static void test_f32_norm(void **state)
{
    (void)state;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/f32-norm", model_test_root);
    write_variant(dir, "layers.5.ffn_norm.weight", TO_F32, NULL);
    cpu_model *m;
    assert_ok(cpu_model_load(dir, 0, &m));
    const st_tensor *t = st_get(M->st, "layers.5.ffn_norm.weight");
    int differ = 0;
    for (int k = 0; k < M->cfg.dim; k++) {
        uint16_t h;
        memcpy(&h, (const char *)t->data + 2 * k, 2);
        uint16_t want = f32_to_bf16(bf16_to_f32(h) * (1.0f + 1.0f / 64.0f + 1.0f / 4096.0f));
        assert_int_equal(m->blocks[5].ffn_norm[k], want);
        differ += want != h;
    }
    assert_true(differ > 0);
    cpu_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_missing_and_misshapen), cmocka_unit_test(test_f32_norm)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
