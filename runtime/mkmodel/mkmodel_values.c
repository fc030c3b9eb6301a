/* Values of a synthetic checkpoint: one rule per kind of tensor, chosen so activations stay finite and
 * varied through every layer (docs/mkmodel.md "Values"). Every stored tensor draws from its own stream,
 * seeded by (seed, xxh3-64 of its stored name), so adding a tensor leaves the others' bytes alone. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/model/engram_layout.h"
#include "runtime/mkmodel/mkmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Codebook std over all 65536 states (exl3.md §2.5): the decoded W_hat entries have this spread. */
static const double codebook_std[3] = {1.24371, 1.24411, 1.00031};
static const int32_t codebook_flag_value[3] = {0, (int32_t)0xCBAC1FEDu, (int32_t)0x83DCD12Du};
static const char *const codebook_flag_name[3] = {NULL, "mcg", "mul1"};

enum { CHUNK_BYTES = 8 << 20 };

typedef enum {
    V_EXL3,        /* EXL3 linear: random trellis, suh/svh for std(W) = param / sqrt(in) */
    V_ONE,         /* 1 + param · N(0,1): norm weights, Engram q/k weights */
    V_NORMAL,      /* param · N(0,1) */
    V_FANIN,       /* param / sqrt(shape[last]) · N(0,1): bf16/f32 matrices applied to a unit-RMS input */
    V_HC_BASE,     /* mHC base: pre, post N(0, param²); comb N(0, param²) + 1 on the diagonal */
    V_HC_SCALE,    /* mHC scales: uniform in [0.3, 0.7] */
    V_TOKEN_MAP,   /* id mod engram_compressed_vocab_size */
    V_MULTIPLIERS, /* the stored table of engram_layout */
    V_ENGRAM_ROWS, /* FP8 rows with E8M0 scales, dequantized RMS ~ 1 */
} value_rule_kind;

typedef struct {
    const char *suffix; /* the name equals it or ends with it after a '.' or '_' (any end when it starts with '_') */
    tensor_kind kind;
    value_rule_kind rule;
    double param;
} value_rule;

/* First match wins; a schema tensor no rule matches is an error, so a new tensor gets a deliberate rule.
 * Gains: every linear keeps its input's RMS (gain 1), except the head, whose logits get std 3 so that
 * sampling is neither uniform nor greedy; the router's logits get std 1, spreading routing over many
 * experts. */
static const value_rule rules[] = {
    {"head", TENSOR_EXL3, V_EXL3, 3.0},
    {"", TENSOR_EXL3, V_EXL3, 1.0},
    {"norm.weight", TENSOR_BF16, V_ONE, 0.05},
    {"q_weight", TENSOR_BF16, V_ONE, 0.1},
    {"k_weight", TENSOR_BF16, V_ONE, 0.1},
    {"markov_head.embed.weight", TENSOR_BF16, V_NORMAL, 1.0},
    {"embed.weight", TENSOR_BF16, V_NORMAL, 1.0},
    {"gate.weight", TENSOR_BF16, V_FANIN, 1.0},
    {"weights_proj.weight", TENSOR_BF16, V_FANIN, 1.0},
    {"markov_head.head.weight", TENSOR_BF16, V_FANIN, 1.0},
    {"confidence_head.proj.weight", TENSOR_BF16, V_FANIN, 1.0},
    {"attn_sink", TENSOR_F32, V_NORMAL, 0.5},
    {"_fn", TENSOR_F32, V_FANIN, 1.0},
    {"_base", TENSOR_F32, V_HC_BASE, 0.5},
    {"_scale", TENSOR_F32, V_HC_SCALE, 0},
    {"gate.bias", TENSOR_F32, V_NORMAL, 0.1},
    {"gate.bias_vl", TENSOR_F32, V_NORMAL, 0.1},
    {"engram.token_map", TENSOR_I32, V_TOKEN_MAP, 0},
    {"engram.multipliers", TENSOR_I64, V_MULTIPLIERS, 0},
    {"engram.embed", TENSOR_F8_ROWS, V_ENGRAM_ROWS, 0},
};

/* Whether a rule's suffix selects this name (see value_rule.suffix). */
static int suffix_matches(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    if (!s || (n == s && !strcmp(name, suffix)))
        return 1;
    if (n <= s || strcmp(name + n - s, suffix))
        return 0;
    return suffix[0] == '_' || name[n - s - 1] == '.' || name[n - s - 1] == '_';
}

/* The first rule of the tensor's kind whose suffix matches its name. */
static const value_rule *find_rule(const schema_tensor *t)
{
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].kind == t->kind && suffix_matches(t->name, rules[i].suffix))
            return &rules[i];
    return NULL;
}

/* The stream of one stored tensor. */
static void tensor_rng(dsk_rng *r, uint64_t seed, const char *stored_name)
{
    dsk_rng_seed(r, dsk_xxh64(stored_name, strlen(stored_name)) ^ (seed * 0x9e3779b97f4a7c15ull));
}

/* Approximately standard normal from one 64-bit draw: the Irwin-Hall sum of four 16-bit uniforms,
 * rescaled to unit variance (range ±3.46). Fast enough for gigabytes, and exact to reproduce. */
static inline float fast_normal(dsk_rng *r)
{
    uint64_t x = dsk_rng_u64(r);
    uint32_t s = (uint32_t)(x & 0xffff) + (uint32_t)((x >> 16) & 0xffff) + (uint32_t)((x >> 32) & 0xffff) +
                 (uint32_t)(x >> 48);
    return ((float)s - 131070.0f) * (1.7320508f / 65536.0f);
}

/* Streams a tensor of n_elems elements to the writer through fill(), one chunk at a time. */
typedef struct {
    dsk_rng rng;
    const mkmodel_gen *g;
    const schema_tensor *t;
    double a, b; /* rule parameters */
    int ordinal; /* V_VISION: the tensor's t of vision.md §6 */
} fill_ctx;

typedef void (*fill_fn)(fill_ctx *f, void *buf, uint64_t first, size_t count);

static int write_streamed(st_writer *w, mkmodel_stats *st, const char *name, st_dtype dt, int ndim,
                          const int64_t *shape, fill_fn fill, fill_ctx *f)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (uint64_t)shape[i];
    size_t esz = st_dtype_size(dt);
    size_t per = CHUNK_BYTES / esz;
    size_t cap = n < per ? (size_t)n : per;
    void *buf = dsk_malloc(cap ? cap * esz : 1);
    if (!buf)
        return dsk_err_ctx("tensor %s", name);
    int rc = st_writer_begin(w, name, dt, ndim, shape);
    for (uint64_t done = 0; !rc && done < n;) {
        size_t k = n - done < cap ? (size_t)(n - done) : cap;
        fill(f, buf, done, k);
        rc = st_writer_write(w, buf, k * esz);
        done += k;
    }
    if (!rc)
        rc = st_writer_end(w);
    free(buf);
    if (rc)
        return dsk_err_ctx("writing tensor %s", name);
    st->stored++;
    st->bytes += n * esz;
    return 0;
}

/* Trellis words: raw random bits. */
static void fill_random_bytes(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    (void)first;
    uint8_t *p = buf;
    size_t nbytes = count * 2; /* I16 trellis words */
    for (size_t i = 0; i + 8 <= nbytes; i += 8) {
        uint64_t x = dsk_rng_u64(&f->rng);
        memcpy(p + i, &x, 8);
    }
    for (size_t i = nbytes & ~(size_t)7; i < nbytes; i++)
        p[i] = (uint8_t)dsk_rng_u64(&f->rng);
}

/* suh (a = input scale) or svh (a = 1): random sign × a × exp(0.1 N), the mild per-channel variation. */
static void fill_exl3_scale(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    (void)first;
    uint16_t *p = buf;
    for (size_t i = 0; i < count; i++) {
        float sign = dsk_rng_u64(&f->rng) >> 63 ? -1.0f : 1.0f;
        p[i] = f32_to_f16(sign * (float)f->a * expf(0.1f * fast_normal(&f->rng)));
    }
}

/* a + b·N(0,1), rounded to bf16. */
static void fill_bf16(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    (void)first;
    uint16_t *p = buf;
    for (size_t i = 0; i < count; i++)
        p[i] = f32_to_bf16((float)(f->a + f->b * fast_normal(&f->rng)));
}

/* a + b·N(0,1) in f32. */
static void fill_f32(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    (void)first;
    float *p = buf;
    for (size_t i = 0; i < count; i++)
        p[i] = (float)(f->a + f->b * fast_normal(&f->rng));
}

/* vision.md §6: off + scale · (((i·40503 + 12345 + 7919·t) mod 65536) − 32768) / 32768, exact in double,
 * rounded once to the stored dtype (a = off, b = scale). */
static double vision_value(const fill_ctx *f, uint64_t i)
{
    int64_t h = (int64_t)((i * 40503u + 12345u + 7919u * (uint64_t)f->ordinal) % 65536u) - 32768;
    return f->a + f->b * (double)h / 32768.0;
}

static void fill_vision_bf16(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    uint16_t *p = buf;
    for (size_t i = 0; i < count; i++)
        p[i] = f64_to_bf16(vision_value(f, first + i));
}

static void fill_vision_f32(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    float *p = buf;
    for (size_t i = 0; i < count; i++)
        p[i] = (float)vision_value(f, first + i);
}

/* The vision tower's tensors (schema order = §6's table) get §6's golden formula, so that tiny-vision's
 * tower is the one REF's golden vectors were computed with. Its ordinal t, scale and offset by name;
 * 0 when the name is not a vision tensor. */
static int vision_rule(const schema_tensor *t, int n_blocks, fill_ctx *f)
{
    static const struct {
        const char *name;
        int t;
        double scale, off;
    } top[] = {{"vision.patch_embed.proj.weight", 0, 0.125, 0},  {"vision.patch_embed.proj.bias", 1, 0.0625, 0},
               {"vision.norm.weight", 2, 0.25, 1},               {"aligner.w1.weight", 3, 1.0 / 32, 0},
               {"aligner.w1.bias", 4, 0.0625, 0},                {"aligner.w2.weight", 5, 0.0625, 0},
               {"aligner.w2.bias", 6, 0.0625, 0},                {"image_start", 7, 0.25, 0},
               {"image_end", 8, 0.25, 0},                        {"image_newline", 9, 0.25, 0}};
    static const struct {
        const char *suffix;
        double scale, off;
    } blk[8] = {{"norm1.weight", 0.25, 1},    {"attn.wqkv.weight", 0.125, 0}, {"attn.wqkv.bias", 0.0625, 0},
                {"attn.wo.weight", 0.125, 0}, {"attn.wo.bias", 0.0625, 0},    {"norm2.weight", 0.25, 1},
                {"mlp.w1.weight", 0.125, 0},  {"mlp.w2.weight", 0.125, 0}};
    for (size_t k = 0; k < sizeof top / sizeof top[0]; k++)
        if (!strcmp(t->name, top[k].name)) {
            /* after the patch embedding (0, 1) and the blocks (8 each) come the final norm, the aligner and
             * the delimiters */
            f->ordinal = top[k].t < 2 ? top[k].t : top[k].t + 8 * n_blocks;
            f->b = top[k].scale;
            f->a = top[k].off;
            return 1;
        }
    int b, used = 0;
    if (sscanf(t->name, "vision.blocks.%d.%n", &b, &used) != 1 || !used)
        return 0;
    for (int k = 0; k < 8; k++)
        if (!strcmp(t->name + used, blk[k].suffix)) {
            f->ordinal = 2 + 8 * b + k;
            f->b = blk[k].scale;
            f->a = blk[k].off;
            return 1;
        }
    return 0;
}

/* mHC base [pre hc][post hc][comb hc×hc]: a·N(0,1), plus 1 on the comb diagonal. */
static void fill_hc_base(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    float *p = buf;
    int hc = f->g->cfg->hc_mult;
    for (size_t i = 0; i < count; i++) {
        int64_t j = (int64_t)(first + i) - 2 * hc; /* index into the hc × hc comb block, or < 0 */
        p[i] = (float)(f->a * fast_normal(&f->rng)) + (j >= 0 && j / hc == j % hc ? 1.0f : 0.0f);
    }
}

/* mHC scales a0, a1, a2: uniform in [0.3, 0.7]. */
static void fill_hc_scale(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    (void)first;
    float *p = buf;
    for (size_t i = 0; i < count; i++)
        p[i] = 0.3f + 0.4f * dsk_rng_f32(&f->rng);
}

/* The synthetic token map: id mod engram_compressed_vocab_size. */
static void fill_token_map(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    int32_t *p = buf;
    for (size_t i = 0; i < count; i++)
        p[i] = (int32_t)((first + i) % (uint64_t)f->g->cfg->engram_compressed_vocab_size);
}

/* FP8 e4m3 codes ~ N(0, 64²) (well inside ±448), from the Irwin-Hall sum of four bytes: 1021 levels
 * mapped once through a table, two values per 64-bit draw. */
static uint8_t e4m3_table[1021];

/* Fill e4m3_table once (its entry 0, the most negative code, is never 0). */
static void build_e4m3_table(void)
{
    if (e4m3_table[0])
        return;
    for (int s = 0; s <= 1020; s++)
        e4m3_table[s] = f32_to_e4m3(((float)s - 510.0f) * (64.0f / 147.8f));
}

/* Engram rows: e4m3 codes through the table, two per draw. */
static void fill_e4m3(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    (void)first;
    uint8_t *p = buf;
    size_t i = 0;
    for (; i + 2 <= count; i += 2) {
        uint64_t x = dsk_rng_u64(&f->rng);
        uint32_t s0 = (uint32_t)(x & 255) + ((x >> 8) & 255) + ((x >> 16) & 255) + ((x >> 24) & 255);
        uint32_t s1 = (uint32_t)((x >> 32) & 255) + ((x >> 40) & 255) + ((x >> 48) & 255) + (x >> 56);
        p[i] = e4m3_table[s0];
        p[i + 1] = e4m3_table[s1];
    }
    if (i < count) {
        uint64_t x = dsk_rng_u64(&f->rng);
        p[i] = e4m3_table[(x & 255) + ((x >> 8) & 255) + ((x >> 16) & 255) + ((x >> 24) & 255)];
    }
}

/* E8M0 scales 2^-7, 2^-6, 2^-5 (bytes 120..122) at random: dequantized blocks of RMS 0.5, 1 and 2. */
static void fill_e8m0(fill_ctx *f, void *buf, uint64_t first, size_t count)
{
    (void)first;
    uint8_t *p = buf;
    for (size_t i = 0; i < count; i++)
        p[i] = (uint8_t)(120 + dsk_rng_below(&f->rng, 3));
}

/* A part's name: base + suffix. */
static int part_name(char *out, size_t cap, const char *base, const char *suffix)
{
    if ((size_t)snprintf(out, cap, "%s%s", base, suffix) >= cap)
        return dsk_err("tensor name %s%s is too long", base, suffix);
    return 0;
}

/* The parts of one EXL3 linear: trellis, suh, svh and the codebook flag (none for 3INST). */
static int write_exl3(st_writer *w, const mkmodel_gen *g, const schema_tensor *t, double gain, mkmodel_stats *st)
{
    int64_t in = t->shape[0], out = t->shape[1];
    char name[160];
    fill_ctx f = {.g = g, .t = t};
    int64_t tshape[3] = {in / 16, out / 16, 16 * t->bits};
    if (part_name(name, sizeof name, t->name, ".trellis"))
        return -1;
    tensor_rng(&f.rng, g->seed, name);
    if (write_streamed(w, st, name, ST_I16, 3, tshape, fill_random_bytes, &f))
        return -1;
    /* W = diag(suh)·H·W_hat·H·diag(svh): H is orthogonal, so entries of W have std
     * |suh|·|svh|·codebook_std; putting gain/(codebook_std·sqrt(in)) into suh gives std gain/sqrt(in). */
    f.a = gain / (codebook_std[g->codebook] * sqrt((double)in));
    if (part_name(name, sizeof name, t->name, ".suh"))
        return -1;
    tensor_rng(&f.rng, g->seed, name);
    if (write_streamed(w, st, name, ST_F16, 1, &in, fill_exl3_scale, &f))
        return -1;
    f.a = 1.0;
    if (part_name(name, sizeof name, t->name, ".svh"))
        return -1;
    tensor_rng(&f.rng, g->seed, name);
    if (write_streamed(w, st, name, ST_F16, 1, &out, fill_exl3_scale, &f))
        return -1;
    if (codebook_flag_name[g->codebook]) {
        char sfx[8];
        snprintf(sfx, sizeof sfx, ".%s", codebook_flag_name[g->codebook]);
        if (part_name(name, sizeof name, t->name, sfx) ||
            st_writer_add(w, name, ST_I32, 0, NULL, &codebook_flag_value[g->codebook], 4))
            return dsk_err_ctx("writing tensor %s", name);
        st->stored++;
        st->bytes += 4;
    }
    return 0;
}

/* Backbone layer id of a "layers.N." name, or -1. */
static int layer_of(const char *name)
{
    int l;
    return sscanf(name, "layers.%d.", &l) == 1 ? l : -1;
}

/* layers.N.engram.multipliers from the stored table. */
static int write_multipliers(st_writer *w, const mkmodel_gen *g, const schema_tensor *t, mkmodel_stats *st)
{
    int64_t m[ENGRAM_MAX_NGRAM];
    int l = layer_of(t->name);
    if (t->shape[0] > ENGRAM_MAX_NGRAM ||
        engram_stored_multipliers(l, g->cfg->engram_compressed_vocab_size, (int)t->shape[0], m))
        return dsk_err_ctx("tensor %s", t->name);
    if (st_writer_add(w, t->name, ST_I64, 1, t->shape, m, (size_t)t->shape[0] * sizeof m[0]))
        return dsk_err_ctx("writing tensor %s", t->name);
    st->stored++;
    st->bytes += (uint64_t)t->shape[0] * sizeof m[0];
    return 0;
}

/* An Engram table: FP8 rows (.weight) and their E8M0 scales (.scale). */
static int write_engram_rows(st_writer *w, const mkmodel_gen *g, const schema_tensor *t, mkmodel_stats *st)
{
    char name[160];
    fill_ctx f = {.g = g, .t = t};
    build_e4m3_table();
    if (part_name(name, sizeof name, t->name, ".weight"))
        return -1;
    tensor_rng(&f.rng, g->seed, name);
    if (write_streamed(w, st, name, ST_F8_E4M3, 2, t->shape, fill_e4m3, &f))
        return -1;
    int64_t sshape[2] = {t->shape[0], t->shape[1] / 32};
    if (part_name(name, sizeof name, t->name, ".scale"))
        return -1;
    tensor_rng(&f.rng, g->seed, name);
    return write_streamed(w, st, name, ST_F8_E8M0, 2, sshape, fill_e8m0, &f);
}

int mkmodel_write_tensor(st_writer *w, const mkmodel_gen *g, const schema_tensor *t, mkmodel_stats *st)
{
    fill_ctx fv = {.g = g, .t = t};
    if (vision_rule(t, g->cfg->vision_n_layers, &fv)) {
        st->tensors++;
        if (g->cfg->vision_dim > 64) {
            /* a release-width tower (layer-vision): §6's formula repeats every 65536 values (a 1024-wide matrix
             * would have 64 distinct rows), so seeded normals of the same mean, the matrices' scale taken to a
             * fan-in of 64 (the tiny tower's) */
            tensor_rng(&fv.rng, g->seed, t->name);
            if (t->ndim == 2)
                fv.b *= sqrt(64.0 / (double)t->shape[1]);
            return write_streamed(w, st, t->name, t->kind == TENSOR_BF16 ? ST_BF16 : ST_F32, t->ndim, t->shape,
                                  t->kind == TENSOR_BF16 ? fill_bf16 : fill_f32, &fv);
        }
        return write_streamed(w, st, t->name, t->kind == TENSOR_BF16 ? ST_BF16 : ST_F32, t->ndim, t->shape,
                              t->kind == TENSOR_BF16 ? fill_vision_bf16 : fill_vision_f32, &fv);
    }
    const value_rule *r = find_rule(t);
    if (!r)
        return dsk_err("mkmodel: no value rule for tensor %s (kind %d); add one to runtime/model/mkmodel_values.c",
                       t->name, (int)t->kind);
    fill_ctx f = {.g = g, .t = t};
    tensor_rng(&f.rng, g->seed, t->name);
    int64_t fanin = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    st_dtype dt = t->kind == TENSOR_BF16 ? ST_BF16 : ST_F32;
    fill_fn fill = t->kind == TENSOR_BF16 ? fill_bf16 : fill_f32;
    st->tensors++;
    switch (r->rule) {
    case V_EXL3:
        return write_exl3(w, g, t, r->param, st);
    case V_ONE:
        f.a = 1.0, f.b = r->param;
        break;
    case V_NORMAL:
        f.a = 0.0, f.b = r->param;
        break;
    case V_FANIN:
        f.a = 0.0, f.b = r->param / sqrt((double)fanin);
        break;
    case V_HC_BASE:
        f.a = r->param;
        fill = fill_hc_base;
        break;
    case V_HC_SCALE:
        fill = fill_hc_scale;
        break;
    case V_TOKEN_MAP:
        return write_streamed(w, st, t->name, ST_I32, t->ndim, t->shape, fill_token_map, &f);
    case V_MULTIPLIERS:
        return write_multipliers(w, g, t, st);
    case V_ENGRAM_ROWS:
        return write_engram_rows(w, g, t, st);
    }
    return write_streamed(w, st, t->name, dt, t->ndim, t->shape, fill, &f);
}

int mkmodel_codebook_parse(const char *s)
{
    static const char *const names[3] = {"3inst", "mcg", "mul1"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i]))
            return i;
    return dsk_err("--codebook: '%s' is not one of mul1, mcg, 3inst", s);
}
