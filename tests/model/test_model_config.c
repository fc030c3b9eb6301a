/* config.json parsing, validation, the §1.2 role table, and the checkpoint schema. */
#include "tests/common/test_util.h"
#include "tests/common/test_proc.h"

#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/model/config.h"
#include "runtime/model/schema.h"

#include <jansson.h>
#include <string.h>
#include <sys/stat.h>

static json_t *load_json(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/model/configs/%s", test_source_dir(), name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fail_msg("cannot read %s: %s", path, je.text);
    return j;
}

static int parse_json(json_t *j, model_config *c)
{
    char *text = json_dumps(j, 0);
    int rc = model_config_parse(text, "config.json", c);
    free(text);
    return rc;
}

static void test_real_roles(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/model/configs/real.json", test_source_dir());
    model_config c;
    assert_ok(model_config_load(path, &c));
    assert_int_equal(c.n_layers, 40);
    assert_int_equal(c.n_all_layers, 43);
    assert_int_equal(c.dim, 5120);
    assert_int_equal(c.original_seq_len, 65536);
    assert_true(c.rope_factor == 16.0);
    assert_true(c.norm_eps == 1e-20f);
    assert_string_equal(c.quant_method, "exl3");
    assert_int_equal(model_hc_mix_dim(&c), 24);
    assert_int_equal(model_engram_cols(&c), 24);
    /* model.md §1.2, row by row */
    for (int l = 0; l < 43; l++) {
        const layer_role *r = &c.roles[l];
        layer_mode want;
        int kv = -1, tk = -1;
        if (l >= 40)
            want = LAYER_DSPARK;
        else if (l < 2)
            want = LAYER_SWA;
        else if (l == 2 || l == 8 || l == 14 || l == 20)
            want = LAYER_FULL;
        else if (l == 24 || l == 28 || l == 32 || l == 36)
            want = LAYER_REINDEX;
        else
            want = LAYER_REUSE;
        if (l >= 2 && l < 40) {
            kv = l < 8 ? 2 : l < 14 ? 8 : l < 20 ? 14 : 20;
            tk = l < 8 ? 2 : l < 14 ? 8 : l < 20 ? 14 : l < 24 ? 20 : l < 28 ? 24 : l < 32 ? 28 : l < 36 ? 32 : 36;
        }
        assert_int_equal(r->mode, want);
        assert_int_equal(r->ratio, l >= 2 && l < 20 ? 2 : l >= 20 && l < 40 ? 1 : 0);
        assert_int_equal(r->kv_source, kv);
        assert_int_equal(r->topk_source, tk);
        assert_int_equal(r->is_candidate_source, l == 20);
        assert_int_equal(r->uses_candidates, l == 24 || l == 28 || l == 32 || l == 36);
        assert_int_equal(r->engram, l == 1 ? 0 : l == 14 ? 1 : -1);
        assert_int_equal(r->dspark_tap, l >= 37 && l < 40 ? l - 37 : -1);
    }
}

static void test_tiny_roles(void **state)
{
    (void)state;
    json_t *j = load_json("tiny.json");
    model_config c;
    assert_ok(parse_json(j, &c));
    json_decref(j);
    static const layer_mode modes[9] = {LAYER_SWA,  LAYER_SWA,   LAYER_FULL,    LAYER_REUSE, LAYER_FULL,
                                        LAYER_REUSE, LAYER_REINDEX, LAYER_REUSE, LAYER_DSPARK};
    static const int kv[9] = {-1, -1, 2, 2, 4, 4, 4, 4, -1}, tk[9] = {-1, -1, 2, 2, 4, 4, 6, 6, -1};
    for (int l = 0; l < 9; l++) {
        assert_int_equal(c.roles[l].mode, modes[l]);
        assert_int_equal(c.roles[l].kv_source, kv[l]);
        assert_int_equal(c.roles[l].topk_source, tk[l]);
    }
    assert_true(c.roles[4].is_candidate_source);
    assert_false(c.roles[4].uses_candidates);
    assert_true(c.roles[6].uses_candidates);
    assert_int_equal(c.roles[1].engram, 0);
    assert_int_equal(c.roles[2].engram, 1);
    assert_int_equal(c.roles[7].dspark_tap, 2);
}

/* The inference/config.json names (flat, §1.1 third column) give the same config. */
static void test_inference_names(void **state)
{
    (void)state;
    json_t *j = load_json("tiny.json");
    model_config want, got;
    assert_ok(parse_json(j, &want));
    json_t *t = json_deep_copy(json_object_get(j, "text_config"));
    static const char *const ren[][2] = {
        {"hidden_size", "dim"}, {"num_hidden_layers", "n_layers"}, {"num_attention_heads", "n_heads"},
        {"qk_rope_head_dim", "rope_head_dim"}, {"rms_norm_eps", "norm_eps"},
        {"max_position_embeddings", "max_seq_len"}, {"moe_intermediate_size", "moe_inter_dim"},
        {"num_experts_per_tok", "n_activated_experts"}, {"scoring_func", "score_func"},
        {"routed_scaling_factor", "route_scale"}, {"sliding_window", "window_size"},
        {"kv_source_layer_ids", "kv_source_layers"}, {"index_source_layer_ids", "index_source_layers"},
        {"candidate_source_layer_id", "candidate_source_layer"}, {"engram_pad_token_id", "engram_pad_id"},
        {"num_nextn_predict_layers", "n_mtp_layers"}, {"dspark_num_experts_per_tok", "dspark_n_activated_experts"},
    };
    for (size_t i = 0; i < sizeof ren / sizeof ren[0]; i++) {
        json_t *v = json_object_get(t, ren[i][0]);
        assert_non_null(v);
        json_object_set(t, ren[i][1], v);
        json_object_del(t, ren[i][0]);
    }
    json_object_del(t, "rope_scaling");
    json_object_set_new(t, "rope_factor", json_integer(16));
    json_object_set_new(t, "beta_fast", json_integer(32));
    json_object_set_new(t, "beta_slow", json_integer(1));
    json_object_set_new(t, "original_seq_len", json_integer(65536));
    json_object_set(t, "quantization_config", json_object_get(j, "quantization_config"));
    json_object_set_new(t, "model_type", json_string("deepseek_v41"));
    assert_ok(parse_json(t, &got));
    assert_memory_equal(&want, &got, sizeof want);
    json_decref(t);
    json_decref(j);
}

/* Set text_config.key (or the top level when top) to v, parse, and expect an error naming `needle`. */
static void expect_error(const char *key, json_t *v, int top, const char *needle)
{
    json_t *j = load_json("tiny.json");
    json_t *o = top ? j : json_object_get(j, "text_config");
    if (v)
        json_object_set_new(o, key, v);
    else
        json_object_del(o, key);
    model_config c;
    if (parse_json(j, &c) == 0)
        fail_msg("setting %s did not fail", key);
    if (!strstr(dsk_err_msg(), needle))
        fail_msg("setting %s: message '%s' does not name '%s'", key, dsk_err_msg(), needle);
    json_decref(j);
}

static json_t *int_list(int n, const int *v)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("model_type", json_string("llama"), 1, "model_type");
    expect_error("model_type", json_string("deepseek_v4_text"), 0, "model_type");
    expect_error("hidden_size", NULL, 0, "hidden_size");
    expect_error("hidden_size", json_string("128"), 0, "hidden_size");
    expect_error("num_key_value_heads", json_integer(2), 0, "num_key_value_heads");
    expect_error("o_groups", json_integer(3), 0, "o_groups");
    expect_error("scoring_func", json_string("softmax"), 0, "scoring_func");
    expect_error("hidden_act", json_string("gelu"), 0, "hidden_act");
    expect_error("norm_topk_prob", json_false(), 0, "norm_topk_prob");
    expect_error("tie_word_embeddings", json_true(), 1, "tie_word_embeddings");
    expect_error("num_experts_per_tok", json_integer(9), 0, "num_experts_per_tok");
    expect_error("qk_rope_head_dim", json_integer(33), 0, "qk_rope_head_dim");
    static const int short_ratios[8] = {0, 0, 2, 2, 1, 1, 1, 1};
    expect_error("compress_ratios", int_list(8, short_ratios), 0, "compress_ratios");
    static const int bad_ratio[9] = {0, 0, 3, 2, 1, 1, 1, 1, 0};
    expect_error("compress_ratios", int_list(9, bad_ratio), 0, "compress_ratios");
    static const int mtp_ratio[9] = {0, 0, 2, 2, 1, 1, 1, 1, 1};
    expect_error("compress_ratios", int_list(9, mtp_ratio), 0, "compress_ratios");
    static const int kv_bad[2] = {1, 4};
    expect_error("kv_source_layer_ids", int_list(2, kv_bad), 0, "kv_source_layer_ids");
    static const int kv_desc[2] = {4, 2};
    expect_error("kv_source_layer_ids", int_list(2, kv_desc), 0, "kv_source_layer_ids");
    static const int kv_late[1] = {4};
    expect_error("kv_source_layer_ids", int_list(1, kv_late), 0, "kv_source_layer_ids");
    static const int idx_missing[2] = {4, 6};
    expect_error("index_source_layer_ids", int_list(2, idx_missing), 0, "index_source_layer_ids");
    expect_error("candidate_source_layer_id", json_integer(5), 0, "candidate_source_layer_id");
    expect_error("candidate_source_layer_id", json_integer(8), 0, "candidate_source_layer_id");
    static const int one_emb[1] = {714};
    expect_error("engram_num_embeddings", int_list(1, one_emb), 0, "engram_num_embeddings");
    expect_error("engram_head_dim", json_integer(48), 0, "engram_head_dim");
    expect_error("dspark_noise_token_id", json_integer(129280), 0, "dspark_noise_token_id");
    static const int tgt_dup[3] = {5, 5, 7};
    expect_error("dspark_target_layer_ids", int_list(3, tgt_dup), 0, "dspark_target_layer_ids");
    expect_error("rms_norm_eps", json_real(-1.0), 0, "rms_norm_eps");
    /* size fields are bounded so that sums the model forms (window + index_topk, ...) fit an int */
    expect_error("index_topk", json_integer(INT32_MAX), 0, "index_topk");
    expect_error("candidate_topk_blocks", json_integer(INT32_MAX), 0, "candidate_topk_blocks");
    expect_error("dspark_markov_rank", json_integer(INT32_MAX), 0, "dspark_markov_rank");
    expect_error("hidden_size", json_integer(INT32_MAX), 0, "hidden_size");
    expect_error("moe_intermediate_size", json_integer(INT32_MAX), 0, "moe_intermediate_size");
    expect_error("vocab_size", json_integer(INT32_MAX), 0, "vocab_size");
}

static int load_fifo(void *arg)
{
    model_config c;
    if (model_config_load(arg, &c) == 0)
        return 3;
    return strstr(dsk_err_msg(), "not a regular file") ? 0 : 4;
}

/* A FIFO as config.json (given as the file or inside the model folder) is refused, not waited on. */
static void test_fifo(void **state)
{
    (void)state;
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "/tmp/dskit-test-config-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(mkfifo(path, 0644), 0);
    test_status st = test_run_fn(load_fifo, path, TEST_HANG_S, 0);
    test_status st_dir = test_run_fn(load_fifo, dir, TEST_HANG_S, 0);
    unlink(path);
    rmdir(dir);
    if (!st.exited || st.exit_code || !st_dir.exited || st_dir.exit_code)
        fail_msg("config.json FIFO: exit %d / %d, signal %d / %d (14: it hung)", st.exit_code, st_dir.exit_code,
                 st.signal, st_dir.signal);
}

static const schema_tensor *find(const schema_tensor *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    fail_msg("schema has no %s", name);
    return NULL;
}

/* Counts from model.md §4 with EXL3 linears and FP8 tables as one entry each: per plain layer 384·3
 * experts + 3 shared + 3 gate + 8 attention + 2 norms + 6 hc = 1174; kv-source extras 4·4 + 3 wgate;
 * index-source extras 8·2; Engram 2·5; top 3 + token map; DSpark 3·(128·3 + 22) + 6. */
static void test_schema_real(void **state)
{
    (void)state;
    json_t *j = load_json("real.json");
    model_config c;
    assert_ok(parse_json(j, &c));
    json_decref(j);
    schema_tensor *t;
    int n;
    assert_ok(model_schema(&c, &t, &n));
    assert_int_equal(n, 40 * 1174 + 19 + 16 + 10 + 4 + 3 * (128 * 3 + 22) + 6);
    const schema_tensor *e = find(t, n, "layers.7.attn.wo_a");
    assert_int_equal(e->kind, TENSOR_EXL3);
    assert_int_equal(e->shape[0], 4096);
    assert_int_equal(e->shape[1], 8192);
    assert_int_equal(e->bits, 4);
    e = find(t, n, "layers.14.engram.wkv");
    assert_int_equal(e->shape[0], 6144);
    assert_int_equal(e->shape[1], 25600);
    e = find(t, n, "layers.14.engram.embed");
    assert_int_equal(e->kind, TENSOR_F8_ROWS);
    assert_int_equal(e->shape[0], 384016682);
    assert_int_equal(e->shape[1], 256);
    assert_int_equal(find(t, n, "layers.3.ffn.experts.383.w2")->bits, 3);
    assert_int_equal(find(t, n, "layers.4.ffn.experts.0.w1")->bits, 2);
    assert_int_equal(find(t, n, "layers.20.attn.indexer.wk")->bits, 8);
    assert_int_equal(find(t, n, "head")->bits, 6);
    e = find(t, n, "mtp.0.main_proj");
    assert_int_equal(e->bits, 6);
    assert_int_equal(e->shape[0], 15360);
    assert_int_equal(find(t, n, "mtp.1.ffn.experts.127.w3")->bits, 4);
    e = find(t, n, "mtp.2.confidence_head.proj.weight");
    assert_int_equal(e->shape[1], 5376);
    assert_int_equal(find(t, n, "layers.0.hc_attn_fn")->shape[1], 20480);
    assert_true(find(t, n, "layers.0.attn_norm.weight")->allow_f32);
    for (int i = 0; i < n; i++) {
        assert_true(strncmp(t[i].name, "layers.20.attn.compressor.wgate", 31)); /* ratio 1: no gate */
        assert_true(strncmp(t[i].name, "layers.3.attn.compressor", 24));        /* Reuse: no compressor */
    }
    find(t, n, "layers.2.attn.compressor.wgate");
    find(t, n, "layers.24.attn.indexer.weights_proj.weight");
    free(t);
}

static void test_schema_tiny(void **state)
{
    (void)state;
    json_t *j = load_json("tiny.json");
    model_config c;
    assert_ok(parse_json(j, &c));
    schema_tensor *t;
    int n;
    assert_ok(model_schema(&c, &t, &n));
    /* 8 layers of 8·3 + 22; kv sources 2 (+ wgate on 2): 9; index sources 3·2; Engram 2·5; top 4;
     * one DSpark stage of 4·3 + 22 with main_proj, main_norm, norm, markov ×2, confidence. */
    assert_int_equal(n, 8 * (24 + 22) + 9 + 6 + 10 + 4 + (12 + 22) + 6);
    const schema_tensor *e = find(t, n, "layers.3.attn.wo_a");
    assert_int_equal(e->shape[0], 256);
    assert_int_equal(e->shape[1], 512);
    e = find(t, n, "layers.1.engram.wkv");
    assert_int_equal(e->shape[0], 384);
    assert_int_equal(e->shape[1], 640);
    assert_int_equal(find(t, n, "engram.token_map")->shape[0], 129280);
    assert_int_equal(find(t, n, "layers.2.engram.multipliers")->shape[0], 4);
    assert_int_equal(find(t, n, "mtp.0.main_proj")->shape[0], 384);
    free(t);
    /* an EXL3 width that is not a multiple of 128 is refused, naming the tensor */
    c.q_lora_rank = 96;
    assert_int_equal(model_schema(&c, &t, &n), -1);
    assert_non_null(strstr(dsk_err_msg(), "layers.0.attn.wq_a"));
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_roles),  cmocka_unit_test(test_tiny_roles),  cmocka_unit_test(test_inference_names),
        cmocka_unit_test(test_errors),      cmocka_unit_test(test_schema_real), cmocka_unit_test(test_schema_tiny),
        cmocka_unit_test(test_fifo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
