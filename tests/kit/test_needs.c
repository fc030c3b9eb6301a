/* `needs` against the launchers: for the tiny, layer and real configs, every (family, parameters) a
 * launcher picks over the whole range of shapes the model produces (rows of a launch, reachable
 * compressed rows, candidate blocks, context) is in the needs list. The shapes are enumerated here from
 * the model's definition, one value at a time, independently of how needs.c finds them. */
#include "manifest/needs.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/mkmodel/mkmodel.h"
#include "runtime/common/kv_quant.h"
#include "runtime/model/schema.h"
#include "tests/common/test_util.h"

#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static int listed(const need_list *l, const char *family, const char *params)
{
    mf_param p[MANIFEST_MAX_PARAMS];
    int np;
    if (mf_params_parse(params, p, MANIFEST_MAX_PARAMS, &np))
        return 0;
    for (int i = 0; i < l->n; i++)
        if (need_matches_params(&l->v[i], family, p, np))
            return 1;
    return 0;
}

#define MAX_ROWS 64 /* needs' default rows per launch */

typedef struct {
    const need_list *l;
    const char *config;
    int misses;
    char last[64]; /* the last pick found listed: consecutive shapes mostly pick the same variant */
} sweep;

static void expect(sweep *s, const char *why, const char *family, const char *params, long shape)
{
    char key[64];
    snprintf(key, sizeof key, "%s %s", family, params);
    if (!strcmp(key, s->last))
        return;
    if (listed(s->l, family, params)) {
        snprintf(s->last, sizeof s->last, "%s", key);
        return;
    }
    if (s->misses++ < 8)
        print_error("%s: %s picks %s %s at shape %ld, which needs does not list\n", s->config, why, family, params,
                    shape);
}

static void expect_topk(sweep *s, const char *why, long N, int k_cap)
{
    rule_variant v;
    rule_topk_pick((int)N, N < k_cap ? (int)N : k_cap, &v);
    expect(s, why, v.family, v.params, N);
}

static void expect_vec_glue(sweep *s, const char *why, int width, int qdq)
{
    rule_variant v;
    rule_vec_glue_pick(width, qdq, &v);
    expect(s, why, v.family, v.params, width);
}

/* The glue launches of every layer, backbone and DSpark stages, by what the layer does (model.md §3.5,
 * §3.3, §3.9): vec_glue at its widths and QDQ kinds, rows_copy, compress_pool, engram_rows, engram_gate. */
static void sweep_glue(sweep *s, const model_config *c)
{
    rule_variant v;
    for (int L = 0; L < c->n_all_layers; L++) {
        const layer_role *r = &c->roles[L];
        expect_vec_glue(s, "q_norm + window keys (+ ratio-1 latent norm), one launch",
                        c->q_lora_rank > c->head_dim ? c->q_lora_rank : c->head_dim, RULE_VEC_GLUE_MIXED);
        expect_vec_glue(s, "DSpark main KV", c->head_dim, KVQ_FP8_E4M3);
        rule_rows_copy_pick(&v);
        expect(s, "window ring write", v.family, v.params, L);
        if (r->is_kv_source) {
            if (r->ratio == 2)
                expect_vec_glue(s, "ratio-2 compressor norm", c->head_dim, KVQ_NONE);
            expect_vec_glue(s, "index key + compressed latent, one launch",
                            c->head_dim > c->index_head_dim ? c->head_dim : c->index_head_dim, RULE_VEC_GLUE_MIXED);
            if (r->ratio == 2) {
                rule_compress_pool_pick(&v);
                expect(s, "ratio-2 pooling", v.family, v.params, L);
            }
        }
        if (r->is_index_source)
            expect_vec_glue(s, "index query", c->index_head_dim, KVQ_FP4_E8M0);
        if (r->engram >= 0) {
            for (int t = 0; t < 2; t++) {
                rule_engram_rows_pick(t, &v);
                expect(s, "Engram rows", v.family, v.params, L);
            }
            rule_engram_gate_pick(c->dim, &v);
            expect(s, "Engram gate", v.family, v.params, c->dim);
        }
    }
}

/* Every launch site of the config's layers, one shape at a time. */
static void sweep_config(const model_config *c, const char *name, const need_list *l, int sm)
{
    sweep s = {l, name, 0, ""};
    char p[32];
    const int widths[] = {c->dim, c->q_lora_rank, c->head_dim, c->index_head_dim};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        snprintf(p, sizeof p, "T=%d", rule_rmsnorm_threads(widths[i]));
        expect(&s, "rmsnorm", "rmsnorm", p, widths[i]);
    }
    snprintf(p, sizeof p, "R=%d", c->rope_head_dim);
    expect(&s, "rope", "rope", p, c->rope_head_dim);
    /* router gate and indexer weights: one launch of any row count, chunks of the bucket of min(rows, 16) */
    for (int rows = 1; rows <= MAX_ROWS; rows++) {
        snprintf(p, sizeof p, "M=%d", rule_rowmm_bucket(rows < 16 ? rows : 16));
        expect(&s, "rowmm_bf16", "rowmm_bf16", p, rows);
    }
    expect_topk(&s, "router top-k", c->n_routed_experts, c->n_activated_experts);
    if (c->n_mtp_layers > 0)
        expect_topk(&s, "drafter router top-k", c->dspark_n_routed_experts, c->dspark_n_activated_experts);
    /* mHC: the embedding, both sublayers of every layer (backbone and drafter stages: mixes, pre with
     * its norm, post), the head's pre, and the taps entering each DSpark target layer */
    rule_variant mv;
    rule_embed_pick(c->hc_mult, &mv);
    expect(&s, "embed", mv.family, mv.params, c->dim);
    for (int L = 0; L < c->n_all_layers; L++) {
        rule_mhc_mix_pick(c->hc_mult, &mv);
        expect(&s, "mhc_mix", mv.family, mv.params, L);
        rule_mhc_pre_pick(c->hc_mult, c->dim, &mv);
        expect(&s, "mhc_pre", mv.family, mv.params, L);
        rule_mhc_post_pick(c->hc_mult, &mv);
        expect(&s, "mhc_post", mv.family, mv.params, L);
        if (L < c->n_layers && c->n_mtp_layers > 0 && c->roles[L].dspark_tap >= 0) {
            rule_tap_mean_pick(c->hc_mult, &mv);
            expect(&s, "tap_mean", mv.family, mv.params, L);
        }
    }
    rule_mhc_pre_pick(c->hc_mult, c->dim, &mv);
    expect(&s, "mhc_pre (head)", mv.family, mv.params, c->dim);
    int ratio_seen[3] = {0};
    for (int L = 0; L < c->n_layers; L++) {
        const layer_role *r = &c->roles[L];
        /* layers of one ratio launch the same shapes; the candidate source adds its blocks */
        if (!r->is_index_source || (ratio_seen[r->ratio] && !r->is_candidate_source))
            continue;
        ratio_seen[r->ratio] = 1;
        /* a call ending at position p: N = (p + 1) / ratio rows exist, each row takes min(index_topk, N) */
        for (long pos = 0; pos < c->max_seq_len; pos++) {
            long N = (pos + 1) / r->ratio;
            if (N > 0)
                expect_topk(&s, "indexer top-k", N, c->index_topk);
            if (r->is_candidate_source && N > 0)
                expect_topk(&s, "candidate blocks", (N + c->candidate_block_size - 1) / c->candidate_block_size,
                            c->candidate_topk_blocks);
        }
    }
    /* index_score per index source, cand_blocks on the candidate source, routing, sampling, DSpark */
    for (int L = 0; L < c->n_layers; L++)
        if (c->roles[L].is_index_source) {
            rule_variant v;
            assert_int_equal(rule_index_score_pick(c->index_n_heads, c->index_head_dim, &v), 0);
            expect(&s, "index_score", v.family, v.params, L);
            if (c->roles[L].is_candidate_source) {
                rule_variant vm;
                rule_cand_blocks_pick(&v, &vm);
                expect(&s, "cand_blocks", v.family, v.params, L);
                expect(&s, "cand_mask", vm.family, vm.params, L);
            }
        }
    {
        rule_variant v;
        assert_int_equal(rule_moe_route_pick(c->n_routed_experts, c->n_activated_experts, &v), 0);
        expect(&s, "moe_route", v.family, v.params, c->n_routed_experts);
        assert_int_equal(rule_moe_route_plan_pick(c->n_routed_experts, c->n_activated_experts, &v), 0);
        expect(&s, "moe_route in the plan", v.family, v.params, c->n_routed_experts);
        if (c->n_mtp_layers > 0) {
            assert_int_equal(rule_moe_route_pick(c->dspark_n_routed_experts, c->dspark_n_activated_experts, &v), 0);
            expect(&s, "drafter moe_route", v.family, v.params, c->dspark_n_routed_experts);
            assert_int_equal(rule_moe_route_plan_pick(c->dspark_n_routed_experts, c->dspark_n_activated_experts, &v), 0);
            expect(&s, "drafter moe_route in the plan", v.family, v.params, c->dspark_n_routed_experts);
        }
        rule_sample_pick(&v);
        expect(&s, "sample", v.family, v.params, c->vocab_size);
        expect_topk(&s, "sample candidates", c->vocab_size, RULE_SAMPLE_CANDIDATES);
        if (c->n_mtp_layers > 0) {
            rule_dspark_conf_pick(&v);
            expect(&s, "dspark_conf", v.family, v.params, 0);
            for (int rows = 1; rows <= MAX_ROWS; rows++) { /* the Markov bias: rowmm_bf16, as above */
                snprintf(p, sizeof p, "M=%d", rule_rowmm_bucket(rows < 16 ? rows : 16));
                expect(&s, "Markov bias rowmm_bf16", "rowmm_bf16", p, rows);
            }
        }
    }
    sweep_glue(&s, c);
    /* the vision tower: its linears at every patch count up to r² per position of the budget (the aligner
     * at every cell count), its glue */
    if (c->vision_n_layers > 0) {
        rule_variant v;
        int r2 = c->vision_downsample_ratio * c->vision_downsample_ratio, D = c->vision_dim;
        const int vw[] = {D, 3 * D, 2 * c->vision_inter_dim};
        for (int rows = 1; rows <= r2 * c->vision_max_n_token; rows++)
            for (int i = 0; i < 3; i++) {
                rule_vision_mm_pick(sm, rows, vw[i], &v);
                expect(&s, "vision tower linear", v.family, v.params, rows);
                if (rows <= c->vision_max_n_token) {
                    rule_vision_mm_pick(sm, rows, c->dim, &v);
                    expect(&s, "vision aligner", v.family, v.params, rows);
                }
            }
        for (int op = 0; op < 3; op++) {
            rule_vision_glue_pick(op, &v);
            expect(&s, "vision glue", v.family, v.params, op);
        }
    }
    /* sparse attention: every layer's list length (window, + top-k at ratio > 0, + a DSpark block) at 1 ..
     * a prompt chunk of rows; the launcher's form (whole, or the three split steps) by the rule */
    for (int L = 0; L < c->n_layers + (c->n_mtp_layers > 0); L++) {
        int list = c->window_size;
        if (L == c->n_layers)
            list += c->dspark_block_size;
        else if (c->roles[L].ratio > 0)
            list += c->index_topk;
        for (int rows = 1; rows <= 4096; rows++) {
            int split = rule_sparse_attn_split(rows, c->n_heads, list);
            for (int mode = split; mode <= 2 * split; mode++) {
                rule_variant v;
                rule_sparse_attn_pick(c->head_dim, mode, &v);
                expect(&s, "sparse attention", v.family, v.params, rows);
            }
        }
    }
    /* the vision tower's attention, one launch per block of an image */
    if (c->vision_n_layers > 0) {
        rule_variant v;
        assert_int_equal(rule_vision_attn_pick(c->vision_dim / c->vision_n_heads, &v), 0);
        expect(&s, "vision attention", v.family, v.params, c->vision_dim / c->vision_n_heads);
    }
    assert_int_equal(s.misses, 0);
}

/* The EXL3 launchers over 1 .. a prompt chunk of rows, for every (bits, codebook) of the schema. */
static void sweep_exl3(const model_config *c, const char *name, int codebook)
{
    schema_tensor *t;
    int n;
    assert_ok(model_schema(c, &t, &n));
    need_list l = {0};
    for (int i = 0; i < n; i++)
        if (t[i].kind == TENSOR_EXL3)
            assert_ok(needs_add_exl3(&l, t[i].bits, codebook, MAX_ROWS, strstr(t[i].name, ".ffn.experts.") != NULL));
    sweep s = {&l, name, 0, ""};
    char p[32];
    int seen[9][2] = {{0}};
    for (int i = 0; i < n; i++) {
        int moe = strstr(t[i].name, ".ffn.experts.") != NULL;
        if (t[i].kind != TENSOR_EXL3 || seen[t[i].bits][moe])
            continue;
        seen[t[i].bits][moe] = 1;
        for (int rows = 1; rows <= 4096; rows++) {
            snprintf(p, sizeof p, "K=%d,CB=%d,M=%d", t[i].bits, codebook, rule_exl3_bucket(rows < 64 ? rows : 64));
            expect(&s, t[i].name, "exl3_mm", p, rows);
            if (rule_exl3_pretransform(rows))
                expect(&s, t[i].name, "exl3_had", "T=256", rows);
        }
        if (moe)
            expect(&s, t[i].name, "exl3_moe_plan", "T=1024,R=0", 0);
    }
    assert_int_equal(s.misses, 0);
    need_list_free(&l);
    free(t);
}

static void check_config(const char *name, const model_config *c)
{
    need_list l;
    assert_ok(needs_for_model(c, NULL, &l));
    sweep_config(c, name, &l, 0);
    need_list_free(&l);
    /* a kit for sm_90 (Hopper's own forms: vision_mm_wgmma) */
    needs_settings ns = {.sm = 90};
    assert_ok(needs_for_model(c, &ns, &l));
    sweep_config(c, name, &l, 90);
    need_list_free(&l);
    sweep_exl3(c, name, 2);
}

static void load_file_config(const char *file, model_config *c)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/model/configs/%s", test_source_dir(), file);
    assert_ok(model_config_load(path, c));
}

static void test_tiny(void **state)
{
    (void)state;
    model_config c;
    load_file_config("tiny.json", &c);
    check_config("tiny", &c);
}

static void test_real(void **state)
{
    (void)state;
    model_config c;
    load_file_config("real.json", &c);
    check_config("real", &c);
}

static void test_layer_presets(void **state)
{
    (void)state;
    const char *presets[] = {"layer-a", "layer-b", "layer-c", "tiny-vision"};
    for (int i = 0; i < 4; i++) {
        char *json;
        model_config c;
        assert_ok(mkmodel_preset_config(presets[i], "mul1", 1, &json));
        assert_ok(model_config_parse(json, presets[i], &c));
        free(json);
        check_config(presets[i], &c);
    }
}

/* The vision tower's attention is needed exactly when the config has a tower: tiny-vision (head dim 16),
 * the release tower's shape (64), and neither for the text-only configs. */
static void test_vision_tower(void **state)
{
    (void)state;
    char *json;
    model_config c;
    assert_ok(mkmodel_preset_config("tiny-vision", "mul1", 1, &json));
    assert_ok(model_config_parse(json, "tiny-vision", &c));
    free(json);
    check_config("tiny-vision", &c);
    need_list l;
    assert_ok(needs_for_model(&c, NULL, &l));
    assert_true(listed(&l, "vision_attn", "HD=16"));
    need_list_free(&l);
    load_file_config("real.json", &c);
    assert_int_equal(c.vision_n_layers, 0);
    assert_ok(needs_for_model(&c, NULL, &l));
    assert_false(listed(&l, "vision_attn", "HD=16") || listed(&l, "vision_attn", "HD=64"));
    need_list_free(&l);
    c.vision_n_layers = 32, c.vision_dim = 1024, c.vision_n_heads = 16; /* vision.md §3.1 */
    check_config("real + release tower", &c);
    assert_ok(needs_for_model(&c, NULL, &l));
    assert_true(listed(&l, "vision_attn", "HD=64"));
    need_list_free(&l);
    c.vision_n_heads = 32; /* head dim 32: no variant, and needs says so */
    assert_int_equal(needs_for_model(&c, NULL, &l), -1);
    assert_non_null(strstr(dsk_err_msg(), "vision_attn"));
}

/* The defect this test was written for: the tiny indexer at 129..1024 reachable rows runs topk_small
 * NPL=12, which needs once omitted. */
static void test_tiny_indexer_mid_range(void **state)
{
    (void)state;
    model_config c;
    load_file_config("tiny.json", &c);
    need_list l;
    assert_ok(needs_for_model(&c, NULL, &l));
    rule_variant v;
    rule_topk_pick(300, c.index_topk, &v);
    assert_string_equal(v.family, "topk_small");
    assert_string_equal(v.params, "NPL=12");
    assert_true(listed(&l, "topk_small", "NPL=12"));
    need_list_free(&l);
}

/* A config.json of the longest context config.c accepts: needs ends its top-k sweeps where the multi-block
 * kernel takes over instead of at the context (2^29 rows took about a minute), with the same list as the
 * real context gives, which test_real checks position by position. */
static void test_longest_context(void **state)
{
    (void)state;
    model_config c;
    load_file_config("real.json", &c);
    need_list real, longest;
    assert_ok(needs_for_model(&c, NULL, &real));
    c.max_seq_len = INT32_MAX;
    clock_t t0 = clock();
    assert_ok(needs_for_model(&c, NULL, &longest));
    double cpu_s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    if (cpu_s > 1.0)
        fail_msg("needs for a context of 2^31 - 1 took %.2f s of CPU", cpu_s);
    assert_int_equal(longest.n, real.n);
    for (int i = 0; i < real.n; i++)
        assert_true(need_matches_params(&longest.v[i], real.v[i].family, real.v[i].param, real.v[i].nparams));
    need_list_free(&real);
    need_list_free(&longest);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_longest_context),
        cmocka_unit_test(test_tiny_indexer_mid_range),
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_real),
        cmocka_unit_test(test_layer_presets),
        cmocka_unit_test(test_vision_tower),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
