/* `dskit mkmodel`: the tiny preset is byte-identical for one seed, reads back through the safetensors
 * reader with exactly the schema's tensors, carries the values its rules promise, and bad options are
 * refused with a message and leave nothing behind. Two generations of the tiny model (~120 MB each). */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/model/engram_layout.h"
#include "runtime/mkmodel/mkmodel.h"
#include "runtime/cpu/cpu_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/ref/exl3.h"
#include "tests/common/test_util.h"
#include "tests/common/test_proc.h"

#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[512], dir_a[600], dir_b[600];
static uint64_t seed;

static int rm_entry(const char *p, const struct stat *sb, int f, struct FTW *w)
{
    (void)sb, (void)f, (void)w;
    return remove(p);
}

static int run_mkmodel(const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"mkmodel";
    for (; args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    dsk_err_clear();
    return cmd_mkmodel(argc, argv);
}

/* Generate A once; B is generated in test_force_replaces (over a stale checkpoint) and compared there. */
static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "%s/mkmodel-test-XXXXXX", test_binary_dir());
    if (!mkdtemp(root))
        return -1;
    snprintf(dir_a, sizeof dir_a, "%s/a", root);
    snprintf(dir_b, sizeof dir_b, "%s/b", root);
    /* a fresh seed every run; DSKIT_TEST_SEED repeats one (the seed a failure printed) */
    const char *fixed = getenv("DSKIT_TEST_SEED");
    seed = fixed ? strtoull(fixed, NULL, 10) : ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20)) % 1000000007u;
    char s[32];
    snprintf(s, sizeof s, "%" PRIu64, seed);
    printf("mkmodel test: seed %s in %s\n", s, root);
    const char *args[] = {"--preset", "tiny", "--seed", s, "--out", dir_a, "--shard-size", "24M", NULL};
    return run_mkmodel(args) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int load(const char *dir, model_config *cfg, schema_tensor **t, int *n, st_set **set)
{
    if (model_config_load(dir, cfg) || model_schema(cfg, t, n) || st_open(dir, set))
        return -1;
    return 0;
}

/* Every schema tensor is there with its dtype and shape, and nothing else is. */
static void test_schema_readback(void **state)
{
    (void)state;
    model_config cfg;
    schema_tensor *t;
    int n;
    st_set *set;
    assert_ok(load(dir_a, &cfg, &t, &n, &set));
    assert_int_equal(cfg.n_layers, 8);
    assert_int_equal(cfg.engram_num_embeddings[1], 1402);
    int stored = 0;
    char name[160];
    for (int i = 0; i < n; i++) {
        const schema_tensor *e = &t[i];
        switch (e->kind) {
        case TENSOR_EXL3: {
            exl3_linear L;
            if (exl3_linear_get(set, e->name, &L))
                fail_msg("%s", dsk_err_msg());
            assert_int_equal(L.k, e->shape[0]);
            assert_int_equal(L.n, e->shape[1]);
            assert_int_equal(L.K, e->bits);
            assert_int_equal(L.codebook, EXL3_CB_MUL1);
            stored += 4;
            break;
        }
        case TENSOR_F8_ROWS: {
            int64_t sc[2] = {e->shape[0], e->shape[1] / 32};
            snprintf(name, sizeof name, "%s.weight", e->name);
            assert_ok(st_require(set, name, ST_F8_E4M3, 2, e->shape, NULL));
            snprintf(name, sizeof name, "%s.scale", e->name);
            assert_ok(st_require(set, name, ST_F8_E8M0, 2, sc, NULL));
            stored += 2;
            break;
        }
        default: {
            st_dtype dt = e->kind == TENSOR_BF16  ? ST_BF16
                          : e->kind == TENSOR_F32 ? ST_F32
                          : e->kind == TENSOR_I32 ? ST_I32
                                                  : ST_I64;
            assert_ok(st_require(set, e->name, dt, e->ndim, e->shape, NULL));
            stored++;
        }
        }
    }
    assert_int_equal(st_count(set), stored);
    /* --shard-size 24M spread the ~120 MB over several shards */
    const char *first = st_at(set, 0)->file, *last = st_at(set, st_count(set) - 1)->file;
    assert_string_not_equal(first, last);
    st_close(set);
    free(t);
}

static const st_tensor *get(const st_set *set, const char *name)
{
    const st_tensor *x = st_get(set, name);
    if (!x)
        fail_msg("tensor %s missing", name);
    return x;
}

static double rms_bf16(const st_tensor *x, double *mean)
{
    const uint16_t *v = x->data;
    size_t n = x->nbytes / 2;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        double f = bf16_to_f32(v[i]);
        s += f;
        s2 += f * f;
    }
    *mean = s / (double)n;
    return sqrt(s2 / (double)n);
}

/* The value rules: token map, multipliers, Engram rows and scales, norms, router, mHC base, EXL3 scales. */
static void test_values(void **state)
{
    (void)state;
    model_config cfg;
    schema_tensor *t;
    int n;
    st_set *set;
    assert_ok(load(dir_a, &cfg, &t, &n, &set));
    const int32_t *map = get(set, "engram.token_map")->data;
    for (int i = 0; i < cfg.vocab_size; i++)
        assert_int_equal(map[i], i % 1000);
    int64_t m[4];
    for (int e = 0; e < cfg.n_engram_layers; e++) {
        char name[96];
        snprintf(name, sizeof name, "layers.%d.engram.multipliers", cfg.engram_layer_ids[e]);
        assert_ok(engram_stored_multipliers(cfg.engram_layer_ids[e], 1000, 4, m));
        assert_memory_equal(get(set, name)->data, m, sizeof m);
        /* FP8 rows: no NaN code, scales 2^-7..2^-5, dequantized RMS near 1 */
        snprintf(name, sizeof name, "layers.%d.engram.embed.weight", cfg.engram_layer_ids[e]);
        const st_tensor *w = get(set, name);
        snprintf(name, sizeof name, "layers.%d.engram.embed.scale", cfg.engram_layer_ids[e]);
        const st_tensor *sc = get(set, name);
        const uint8_t *q = w->data, *s = sc->data;
        double s2 = 0;
        for (size_t i = 0; i < w->nbytes; i++) {
            assert_true((q[i] & 0x7f) != 0x7f);
            assert_true(s[i / 32] >= 120 && s[i / 32] <= 122);
            double v = e4m3_to_f32(q[i]) * e8m0_to_f32(s[i / 32]);
            s2 += v * v;
        }
        double rms = sqrt(s2 / (double)w->nbytes);
        assert_true(rms > 0.8 && rms < 1.6);
    }
    double mean, rms;
    /* 1 + 0.05 N(0,1) over dim = 128 values: bounds at about six standard errors of each estimate */
    rms = rms_bf16(get(set, "layers.3.attn_norm.weight"), &mean);
    double sd = sqrt(rms * rms - mean * mean);
    assert_true(fabs(mean - 1.0) < 0.025 && sd > 0.03 && sd < 0.07);
    /* router logits x·g of a unit-RMS x: std 1, i.e. g has RMS 1/sqrt(dim) */
    rms = rms_bf16(get(set, "layers.3.ffn.gate.weight"), &mean);
    assert_true(fabs(rms * sqrt(cfg.dim) - 1.0) < 0.1);
    rms = rms_bf16(get(set, "embed.weight"), &mean);
    assert_true(fabs(rms - 1.0) < 0.01 && fabs(mean) < 0.01);
    /* mHC comb base: N(0, 0.5²) + 1 on the diagonal of the 4 × 4 block. Over every layer's two bases
     * (16 blocks in tiny) the diagonal's mean less the rest's has mean 1 and a standard error of
     * 0.5·sqrt(1/4 + 1/12)/4 = 0.072: 0.5 is about seven of them below (one block alone, the bound 0.3
     * failed about one seed in a hundred) */
    double diag = 0, off = 0;
    int blocks = 0;
    for (int l = 0; l < cfg.n_layers; l++)
        for (int sub = 0; sub < 2; sub++) {
            char name[64];
            snprintf(name, sizeof name, "layers.%d.hc_%s_base", l, sub ? "ffn" : "attn");
            float base[24]; /* [pre 4][post 4][comb 4 x 4]; the file's data need not be 4-byte aligned */
            const st_tensor *bt = get(set, name);
            assert_true(bt->nbytes == sizeof base);
            memcpy(base, bt->data, sizeof base);
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    *(i == j ? &diag : &off) += base[8 + 4 * i + j];
            blocks++;
        }
    assert_true(blocks >= 16 && diag / (4.0 * blocks) - off / (12.0 * blocks) > 0.5);
    /* EXL3 suh: |suh| has geometric mean 1/(codebook std · sqrt(in)) for gain 1; signs are mixed */
    const st_tensor *suh = get(set, "layers.2.attn.wq_b.suh");
    const uint16_t *h = suh->data;
    double lg = 0;
    int neg = 0;
    for (int i = 0; i < cfg.q_lora_rank; i++) {
        lg += log(fabs(f16_to_f32(h[i])));
        neg += h[i] >> 15;
    }
    assert_true(fabs(exp(lg / cfg.q_lora_rank) * 1.00031 * sqrt(cfg.q_lora_rank) - 1.0) < 0.05);
    assert_true(neg > cfg.q_lora_rank / 4 && neg < cfg.q_lora_rank * 3 / 4);
    st_close(set);
    free(t);
}

/* EXL3 linears through the CPU reference matmul: y = x·W on random unit-RMS rows keeps the RMS times
 * the rule's gain (1; 3 for the head) within 15 %, at every bit width the tiny model uses. */
static void test_exl3_gain(void **state)
{
    (void)state;
    st_set *set;
    assert_ok(st_open(dir_a, &set));
    const struct {
        const char *name;
        double gain;
    } lin[] = {
        {"layers.0.attn.wq_a", 1},        /* K 4 */
        {"layers.2.attn.indexer.wk", 1},  /* K 8 */
        {"layers.4.ffn.experts.5.w2", 1}, /* K 2 */
        {"layers.7.ffn.experts.2.w1", 1}, /* K 3 */
        {"mtp.0.main_proj", 1},           /* K 6, in 384 */
        {"layers.1.engram.wkv", 1},       /* K 4, in 384, out 640 */
        {"head", 3},                      /* K 6, out 129280 */
    };
    enum { M = 8 };
    dsk_rng rng;
    dsk_rng_seed(&rng, seed ^ 0x6a11u);
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        exl3_linear L;
        assert_ok(exl3_linear_get(set, lin[i].name, &L));
        float *x = malloc(sizeof(float) * M * (size_t)L.k), *y = malloc(sizeof(float) * M * (size_t)L.n);
        assert_non_null(x);
        assert_non_null(y);
        double sx = 0, sy = 0;
        for (int64_t j = 0; j < M * L.k; j++) {
            x[j] = bf16_round(dsk_rng_normal(&rng));
            sx += (double)x[j] * x[j];
        }
        assert_ok(exl3_matmul(&L, x, M, y));
        for (int64_t j = 0; j < M * L.n; j++) {
            assert_true(isfinite(y[j]));
            sy += (double)y[j] * y[j];
        }
        double ratio = sqrt(sy / (double)(M * L.n)) / sqrt(sx / (double)(M * L.k));
        if (fabs(ratio / lin[i].gain - 1.0) > 0.15)
            fail_msg("%s: RMS(x·W)/RMS(x) = %.3f, expected %.1f", lin[i].name, ratio, lin[i].gain);
        free(x);
        free(y);
    }
    st_close(set);
}

static double row_cos(const uint16_t *a, const uint16_t *b, int d)
{
    double ab = 0, aa = 0, bb = 0;
    for (int k = 0; k < d; k++) {
        double x = bf16_to_f32(a[k]), y = bf16_to_f32(b[k]);
        ab += x * y, aa += x * x, bb += y * y;
    }
    return ab / sqrt(aa * bb);
}

static int32_t argmax_sampler(const float *logits, int vocab, int64_t pos, void *ctx)
{
    (void)pos, (void)ctx;
    int32_t best = 0;
    for (int v = 1; v < vocab; v++)
        if (logits[v] > logits[best])
            best = v;
    return best;
}

/* The CPU model on the tiny checkpoint and 64 random tokens: the streams the drafter taps (entering
 * layers 5, 6, 7) are finite, of moderate RMS and differ between tokens; the logits have std ≈ 3 (the
 * head's gain) and a spread-out distribution; the drafter runs. Values that exploded, vanished or
 * collapsed every token onto one vector would fail here. */
static void test_activations(void **state)
{
    (void)state;
    cpu_model *m;
    cpu_seq *s;
    assert_ok(cpu_model_load(dir_a, 0, &m));
    assert_ok(cpu_seq_new(m, 256, &s));
    const model_config *c = &m->cfg;
    enum { N = 64, LAST = 4 };
    int d = c->dim, nt = c->n_dspark_targets;
    int64_t V = c->vocab_size;
    int32_t tok[N];
    dsk_rng rng;
    dsk_rng_seed(&rng, seed ^ 0xac71u);
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)dsk_rng_below(&rng, 128000);
    uint16_t *taps = malloc(sizeof(uint16_t) * N * nt * d);
    float *logits = malloc(sizeof(float) * LAST * V);
    assert_non_null(taps);
    assert_non_null(logits);
    assert_ok(cpu_forward(m, s, tok, N, N - LAST, logits, taps));
    for (int k = 0; k < nt; k++) {
        double s2 = 0, cs = 0;
        for (int i = 0; i < N; i++) {
            const uint16_t *row = taps + ((int64_t)i * nt + k) * d;
            for (int j = 0; j < d; j++) {
                float v = bf16_to_f32(row[j]);
                assert_true(isfinite(v));
                s2 += (double)v * v;
            }
            if (i + 1 < N)
                cs += fabs(row_cos(row, row + (int64_t)nt * d, d));
        }
        double rms = sqrt(s2 / ((double)N * d));
        cs /= N - 1;
        if (rms < 0.5 || rms > 8 || cs > 0.5)
            fail_msg("stream entering layer %d: RMS %.3f, mean |cos| of neighbours %.3f", c->dspark_target_layer_ids[k],
                     rms, cs);
    }
    double ents[LAST];
    for (int r = 0; r < LAST; r++) {
        const float *l = logits + r * V;
        double mean = 0, s2 = 0, mx = -INFINITY, z = 0, ent = 0;
        for (int64_t v = 0; v < V; v++) {
            assert_true(isfinite(l[v]));
            mean += l[v], s2 += (double)l[v] * l[v], mx = l[v] > mx ? l[v] : mx;
        }
        mean /= (double)V;
        double sd = sqrt(s2 / (double)V - mean * mean);
        for (int64_t v = 0; v < V; v++)
            z += exp(l[v] - mx);
        for (int64_t v = 0; v < V; v++) {
            double p = exp(l[v] - mx) / z;
            ent -= p > 0 ? p * log(p) : 0;
        }
        if (sd < 2.5 || sd > 4 || ent > 10)
            fail_msg("logits row %d: std %.3f, entropy %.2f nats", r, sd, ent);
        ents[r] = ent;
    }
    /* the entropy of the rows' median: one row of random weights may have a single token far ahead (about one
     * seed in 15 gives a row under 2 nats); a scale defect lowers them all */
    for (int i = 1; i < LAST; i++)
        for (int j = i; j > 0 && ents[j] < ents[j - 1]; j--) {
            double t = ents[j];
            ents[j] = ents[j - 1];
            ents[j - 1] = t;
        }
    if ((ents[LAST / 2 - 1] + ents[LAST / 2]) / 2 < 2)
        fail_msg("logits: the median row's entropy is %.2f nats (rows %.2f .. %.2f)", (ents[LAST / 2 - 1] + ents[LAST / 2]) / 2,
                 ents[0], ents[LAST - 1]);
    s->len = N;
    int32_t drafts[8];
    assert_ok(cpu_draft_feed(m, s, taps, N));
    int32_t t0 = argmax_sampler(logits + (LAST - 1) * V, (int)V, N, NULL);
    assert_ok(cpu_draft(m, s, t0, argmax_sampler, NULL, drafts, NULL));
    for (int i = 0; i < c->dspark_block_size; i++)
        assert_true(drafts[i] >= 0 && drafts[i] < V);
    free(taps);
    free(logits);
    cpu_seq_free(s);
    cpu_model_free(m);
}

/* A tensor's bytes depend only on (seed, its name): written alone, it equals its copy in the checkpoint;
 * another seed changes it. Codebook flags follow --codebook. */
static void test_tensor_streams(void **state)
{
    (void)state;
    model_config cfg;
    schema_tensor *t;
    int n;
    st_set *set;
    assert_ok(load(dir_a, &cfg, &t, &n, &set));
    const schema_tensor *pick[2] = {NULL, NULL};
    for (int i = 0; i < n; i++) {
        if (!strcmp(t[i].name, "layers.6.attn.wq_a"))
            pick[0] = &t[i];
        if (!strcmp(t[i].name, "layers.1.hc_attn_fn"))
            pick[1] = &t[i];
    }
    assert_non_null(pick[0]);
    assert_non_null(pick[1]);
    char one[700];
    for (int variant = 0; variant < 4; variant++) {
        snprintf(one, sizeof one, "%s/one-%d", root, variant);
        assert_int_equal(mkdir(one, 0755), 0);
        st_writer *w;
        assert_ok(st_writer_open(one, 0, &w));
        /* 0: as generated; 1: another seed; 2: MCG; 3: 3INST */
        mkmodel_gen g = {.seed = seed + (variant == 1), .codebook = variant == 2 ? 1 : variant == 3 ? 0 : 2,
                         .cfg = &cfg};
        mkmodel_stats st = {0};
        assert_ok(mkmodel_write_tensor(w, &g, pick[0], &st));
        assert_ok(mkmodel_write_tensor(w, &g, pick[1], &st));
        assert_int_equal(st.tensors, 2);
        assert_int_equal(st.stored, variant == 3 ? 4 : 5);
        assert_ok(st_writer_close(w));
        st_set *s1;
        assert_ok(st_open(one, &s1));
        const char *names[] = {"layers.6.attn.wq_a.trellis", "layers.6.attn.wq_a.suh", "layers.6.attn.wq_a.svh",
                               "layers.1.hc_attn_fn"};
        for (int k = 0; k < 4; k++) {
            const st_tensor *a = get(set, names[k]), *b = get(s1, names[k]);
            assert_int_equal(a->nbytes, b->nbytes);
            int same = !memcmp(a->data, b->data, a->nbytes);
            if (variant == 1)
                assert_false(same);
            else if (k != 1 || variant == 0)
                assert_true(same); /* suh carries the codebook's std, the other parts do not */
        }
        exl3_linear L;
        assert_ok(exl3_linear_get(s1, "layers.6.attn.wq_a", &L));
        assert_int_equal(L.codebook, variant == 2 ? EXL3_CB_MCG : variant == 3 ? EXL3_CB_3INST : EXL3_CB_MUL1);
        st_close(s1);
    }
    st_close(set);
    free(t);
}

/* The written tokenizer.json through the runtime's tokenizer: the chat tokens are single ids, 128815..,
 * and a chat string encodes to the ids Hugging Face tokenizers 0.23 gives for the same file. */
static void test_tokenizer(void **state)
{
    (void)state;
    char path[700];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir_a);
    dsk_tokenizer *tok;
    assert_ok(tok_load(path, &tok));
    for (int i = 0; i < mkmodel_n_added_tokens; i++)
        assert_int_equal(tok_id(tok, mkmodel_added_tokens[i]), 128815 + i);
    assert_int_equal(tok_vocab_size(tok), 128826);
    assert_int_equal(tok_id(tok, "<｜User｜>"), 128803);
    static const char text[] = "<｜begin▁of▁sentence｜><｜System｜>sys<｜User｜>hi<｜Assistant｜><think>ok</think>x\n\n"
                               "<｜DSML｜ calls>\n</｜DSML｜ calls><｜latest_reminder｜><｜read_url｜><｜title｜>";
    static const int32_t want[] = {0,     128815, 44489,  128803, 6366, 128804, 128816, 633,
                                   128817, 90,    271,    30,     128818, 10699, 1018,  1718,
                                   128818, 10699, 32,     128819, 128825, 128824};
    int32_t *ids;
    size_t n;
    assert_ok(tok_encode(tok, text, sizeof text - 1, 0, &ids, &n));
    assert_int_equal(n, sizeof want / sizeof want[0]);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    tok_free(tok);
}

/* Every file of two generations, byte for byte. */
static void assert_same_tree(const char *a, const char *b)
{
    DIR *d = opendir(a);
    assert_non_null(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char pa[1200], pb[1200];
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        char *da, *db;
        size_t na, nb;
        assert_ok(dsk_read_file(pa, &da, &na));
        assert_ok(dsk_read_file(pb, &db, &nb));
        if (na != nb || memcmp(da, db, na))
            fail_msg("%s differs between two generations with seed %" PRIu64, e->d_name, seed);
        free(da);
        free(db);
        files++;
    }
    closedir(d);
    int files_b = 0;
    d = opendir(b);
    while ((e = readdir(d)))
        files_b += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(files, files_b);
    assert_true(files >= 7); /* config, tokenizer x2, index, >= 3 shards */
}

/* --force replaces a folder holding a (stale) checkpoint, not any other folder; the result is the same
 * bytes as the first generation. */
static void test_force_replaces(void **state)
{
    (void)state;
    char s[32], path[700];
    snprintf(s, sizeof s, "%" PRIu64, seed);
    const char *args[] = {"--preset", "tiny", "--seed", s, "--out", dir_b, "--shard-size", "24M", "--force", NULL};
    assert_int_equal(mkdir(dir_b, 0755), 0);
    snprintf(path, sizeof path, "%s/notes.txt", dir_b);
    assert_ok(dsk_write_file_atomic(path, "keep", 4));
    assert_int_equal(run_mkmodel(args), 2);
    assert_non_null(strstr(dsk_err_msg(), "does not look like a checkpoint"));
    assert_true(dsk_file_exists(path));
    snprintf(path, sizeof path, "%s/config.json", dir_b);
    assert_ok(dsk_write_file_atomic(path, "{}", 2));
    assert_int_equal(run_mkmodel(args), 0);
    snprintf(path, sizeof path, "%s/notes.txt", dir_b);
    assert_false(dsk_file_exists(path));
    assert_same_tree(dir_a, dir_b);
}

/* Each bad invocation exits 2 with a message naming the problem and leaves nothing in the parent. */
static void test_bad_options(void **state)
{
    (void)state;
    char out[700], file[700];
    snprintf(out, sizeof out, "%s/never", root);
    snprintf(file, sizeof file, "%s/a-file", root);
    assert_ok(dsk_write_file_atomic(file, "x", 1));
    static const char *tok_missing = "/nonexistent/tokenizer.json";
    const struct {
        const char *args[12];
        const char *message;
    } cases[] = {
        {{NULL}, "--preset is required"},
        {{"--preset", "huge", "--out", out, NULL}, "unknown preset 'huge'"},
        {{"--preset", "tiny", NULL}, "--out DIR is required"},
        {{"--preset", "tiny", "--out", out, "--seed", "-3", NULL}, "--seed"},
        {{"--preset", "tiny", "--out", out, "--seed", "12x", NULL}, "not an integer"},
        {{"--preset", "tiny", "--out", out, "--codebook", "mul2", NULL}, "'mul2' is not one of"},
        {{"--preset", "tiny", "--out", out, "--shard-size", "0", NULL}, "not a positive size"},
        {{"--preset", "tiny", "--out", out, "--shard-size", "3T", NULL}, "not a positive size"},
        {{"--preset", "tiny", "--out", out, "--colour", "red", NULL}, "unknown option '--colour'"},
        {{"--preset", "tiny", "--out", out, "--seed", NULL}, "--seed needs a value"},
        {{"--preset", "tiny", "--out", file, NULL}, "is not a folder"},
        {{"--preset", "tiny", "--out", dir_a, NULL}, "pass --force"},
        {{"--preset", "tiny", "--out", out, "--tokenizer", tok_missing, NULL}, tok_missing},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_mkmodel(cases[i].args);
        if (rc != 2 || !strstr(dsk_err_msg(), cases[i].message))
            fail_msg("case %zu: exit %d, message '%s', expected 2 and '%s'", i, rc, dsk_err_msg(), cases[i].message);
    }
    /* nothing partial: no output folder, no temporary folder */
    assert_false(dsk_file_exists(out));
    DIR *d = opendir(root);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, "mkmodel-tmp") || strstr(e->d_name, "mkmodel-old"))
            fail_msg("left behind: %s", e->d_name);
    closedir(d);
}

static int mkmodel_fifo_config(void *arg)
{
    const char *const *args = arg;
    int rc = run_mkmodel(args);
    if (rc != 2 || !strstr(dsk_err_msg(), "not a regular file")) {
        fprintf(stderr, "exit %d: %s\n", rc, dsk_err_msg());
        return 1;
    }
    return 0;
}

/* The tokenizer's sibling <stem>_config.json is read too: a FIFO there is refused, not waited on. */
static void test_fifo_tokenizer_config(void **state)
{
    (void)state;
    char dir[700], tok[800], cfg[800], out[700], real[1200];
    snprintf(dir, sizeof dir, "%s/fifo-tok", root);
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(out, sizeof out, "%s/fifo-out", root);
    snprintf(real, sizeof real, "%s/data/tokenizer/deepseek-v3-tokenizer.json", test_source_dir());
    assert_ok(dsk_mkdirs(dir));
    char *text;
    size_t len;
    assert_ok(dsk_read_file(real, &text, &len));
    assert_ok(dsk_write_file_atomic(tok, text, len));
    free(text);
    assert_int_equal(mkfifo(cfg, 0644), 0);
    const char *args[] = {"--preset", "tiny", "--out", out, "--tokenizer", tok, NULL};
    test_status st = test_run_fn(mkmodel_fifo_config, (void *)args, TEST_HANG_S, 0);
    if (!st.exited || st.exit_code)
        fail_msg("mkmodel with a FIFO tokenizer_config.json: exit %d, signal %d (14: it hung)", st.exit_code,
                 st.signal);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_readback), cmocka_unit_test(test_values), cmocka_unit_test(test_exl3_gain),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_tensor_streams),  cmocka_unit_test(test_tokenizer), cmocka_unit_test(test_force_replaces),
        cmocka_unit_test(test_fifo_tokenizer_config),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
