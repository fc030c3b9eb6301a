/* `dskit bench decode --kit KIT --model DIR`: the GPU engine's decode rounds on a model (the layer-*
 * presets are one to three full-width layers), in one table per context: per round of 1, 2, 4, 8, 16 rows
 * (one row per sequence) and a 6-row verify window (t0 + 5 drafts of one sequence), the round's time, its
 * head's matmul alone, the round without its layers (the plan's upload, the embedding, the head, the draw:
 * `outside`, once per round whatever the depth) and the rest per layer; the same layer's EXL3 matmuls
 * alone (their launches replayed in a CUDA graph: the floor the rest of the layer adds to); the bytes a layer must read (its weights, the distinct experts the
 * round's rows route to, the KV and index keys its rows read) and the layer's time as a multiple of those
 * bytes over the streaming-read roofline measured in the same run; kernel launches per layer. Each round
 * is timed replayed from its CUDA graph (how the engine runs it) and launched eagerly. Before the rounds,
 * every sequence's prompt runs in chunks of 1024 rows: the prompt's tok/s. The tokens drawn are not
 * committed, so every round of a row count runs at the same position. Last, structured output: rounds whose
 * rows draw under real grammar masks (json_object over the model's tokenizer, each row a random walk of
 * its own), the masks made before the round or by the round's fill while its forward runs, against the
 * same rounds without masks. */
#include "runtime/bench/bench_decode_tp.h"
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/grammar/grammar.h"
#include "runtime/launch/gpu_time.h"
#include "runtime/launch/stream_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQS 16
#define CHUNK 1024

typedef struct {
    gpu_backend *b;
    const engine_backend_ops *ops;
    double roof;      /* GB/s */
    unsigned profile; /* bit R: after the rows-R line, its eager round's kernels (--profile) */
} bench;

typedef struct {
    bench *B;
    CUdeviceptr big, out;
    uint64_t bytes;
    int blocks;
} sr_ctx;

static int launch_sr(void *p)
{
    sr_ctx *c = p;
    return op_stream_read(c->B->b->k, c->B->b->s, c->big, c->bytes, c->out, c->blocks);
}

static int roofline(bench *B)
{
    sr_ctx c = {.B = B, .bytes = 2ull << 30};
    CU_TRY(cu.cuMemAlloc(&c.big, c.bytes));
    if (cu.cuMemAlloc(&c.out, 1 << 20) != CUDA_SUCCESS) {
        cu.cuMemFree(c.big);
        return dsk_err("bench decode: cannot allocate the roofline's buffers");
    }
    int rc = cu.cuMemsetD8(c.big, 0x3c, c.bytes) == CUDA_SUCCESS ? 0 : dsk_err("bench decode: cuMemsetD8 failed");
    B->roof = 0;
    for (int m = 2; m <= 8 && !rc; m *= 2) {
        c.blocks = B->b->g.sms * m;
        double us = gpu_time_us(B->b->s, 3, 5, launch_sr, &c);
        if (us < 0)
            rc = -1;
        else if (c.bytes / (us * 1e-6) / 1e9 > B->roof)
            B->roof = c.bytes / (us * 1e-6) / 1e9;
    }
    cu.cuMemFree(c.big);
    cu.cuMemFree(c.out);
    return rc;
}

static double linear_bytes(const exl3_dev_linear *L)
{
    return L->trellis ? (double)L->k * L->n * L->K / 8.0 + 2.0 * (L->k + L->n) : 0;
}

static double expert_bytes(const exl3_moe_experts *E)
{
    return (double)E->k * E->n * (2.0 * E->K_up + E->K_down) / 8.0;
}

/* The EXL3 launches of layer l for R rows, as the round makes them (inputs are the round's scratch). */
typedef struct {
    gpu_backend *b;
    int l, R;
} mm_ctx;

static int launch_layer_matmuls(void *p)
{
    mm_ctx *m = p;
    gpu_backend *b = m->b;
    const model_config *c = b->cfg;
    const gpu_block *g = &b->w.blocks[m->l];
    const layer_role *r = &c->roles[m->l];
    int R = m->R, hd = c->head_dim, H = c->n_heads, G = c->o_groups, ol = c->o_lora_rank;
    const exl3_dev_linear *ls[3] = {&g->wq_a, &g->wkv, &g->c_wkv};
    int rc = op_exl3_grouped(b->k, b->s, ls, r->is_kv_source && r->ratio == 1 ? 3 : 2, b->xn, c->dim, R, b->qkv,
                             b->qkv_ld, EXL3_OUT_BF16, &b->ws, EXL3_AUTO);
    rc = rc || op_exl3_matmul(b->k, b->s, &g->wq_b, b->qkv, b->qkv_ld, R, b->q, H * hd, EXL3_OUT_BF16, &b->ws);
    if (r->is_kv_source && r->ratio == 2) {
        const exl3_dev_linear *cg[2] = {&g->c_wkv, &g->c_wgate};
        rc = rc || op_exl3_grouped(b->k, b->s, cg, 2, b->xn, c->dim, R, b->a32, 2 * hd, EXL3_OUT_F32, &b->ws, EXL3_AUTO);
    }
    /* a kv source's compressed rows' index keys: a row each at ratio 1, and in a graph at ratio 2 too (a
     * graph pools every row, storing every other one) */
    if (r->is_kv_source)
        rc = rc || op_exl3_matmul(b->k, b->s, &g->ix_wk, b->lat, hd, R, b->ik, c->index_head_dim, EXL3_OUT_BF16,
                                  &b->ws);
    if (r->is_index_source)
        rc = rc || op_exl3_matmul(b->k, b->s, &g->ix_wq_b, b->qkv, b->qkv_ld, R, b->qi,
                                  c->index_n_heads * c->index_head_dim, EXL3_OUT_BF16, &b->ws);
    rc = rc || gpu_wo_a(b, g, R);
    rc = rc || op_exl3_matmul(b->k, b->s, &g->wo_b, b->z, G * ol, R, b->y16, c->dim, EXL3_OUT_BF16, &b->ws);
    if (r->engram >= 0)
        rc = rc || op_exl3_matmul(b->k, b->s, &g->eg_wkv, b->eg_rows, model_engram_cols(c) * c->engram_head_dim, R,
                                  b->eg_kv, (c->hc_mult + 1) * c->dim, EXL3_OUT_BF16, &b->ws);
    rc = rc || op_exl3_moe(b->k, b->s, &g->experts, b->xn, c->dim, R, b->moe_ids, b->moe_w, g->n_active, 0, b->y32,
                           c->dim, 0, &b->ws, EXL3_AUTO);
    rc = rc || op_exl3_moe(b->k, b->s, &g->shared, b->xn, c->dim, R, 0, 0, 1, 0, b->y32, c->dim, 1, &b->ws, EXL3_AUTO);
    return rc;
}

/* The head's matmul for R rows (a round's cost outside its layers, with the draw). */
static int launch_head(void *p)
{
    mm_ctx *m = p;
    gpu_backend *b = m->b;
    return op_exl3_matmul(b->k, b->s, &b->w.head, b->xn, b->cfg->dim, m->R, b->logits, b->cfg->vocab_size,
                          EXL3_OUT_F32, &b->ws);
}

/* Random routes for R rows (distinct ascending experts per row) into the round's buffers; returns the
 * number of distinct experts they touch. */
static int random_routes(gpu_backend *b, int l, int R, dsk_rng *rng, int *distinct)
{
    const gpu_block *g = &b->w.blocks[l];
    int E = g->n_experts, K = g->n_active;
    int32_t *ids = dsk_malloc(sizeof(int32_t) * (size_t)R * K);
    float *w = dsk_malloc(sizeof(float) * (size_t)R * K);
    char *used = dsk_calloc((size_t)E, 1);
    if (!ids || !w || !used) {
        free(ids), free(w), free(used);
        return -1;
    }
    *distinct = 0;
    for (int r = 0; r < R; r++) {
        char pick[4096] = {0};
        for (int j = 0; j < K;) {
            int e = (int)dsk_rng_below(rng, (uint64_t)E);
            if (!pick[e])
                pick[e] = 1, j++;
        }
        for (int e = 0, j = 0; e < E; e++)
            if (pick[e]) {
                ids[r * K + j] = e, w[r * K + j] = 0.1f, j++;
                *distinct += !used[e];
                used[e] = 1;
            }
    }
    CUresult cr = cu.cuMemcpyHtoD(b->moe_ids, ids, sizeof(int32_t) * (size_t)R * K);
    if (cr == CUDA_SUCCESS)
        cr = cu.cuMemcpyHtoD(b->moe_w, w, sizeof(float) * (size_t)R * K);
    if (cr == CUDA_SUCCESS)
        cr = cu.cuCtxSynchronize();
    free(ids), free(w), free(used);
    return cr == CUDA_SUCCESS ? 0 : dsk_cu_fail(cr, "bench decode: uploading the routes");
}

/* Bytes layer l must read for R rows at context C (rows of distinct sequences, or one verify window). */
static double layer_bytes(const gpu_backend *b, int l, int R, int64_t C, int distinct, int one_seq)
{
    const model_config *c = b->cfg;
    const gpu_block *g = &b->w.blocks[l];
    const layer_role *r = &c->roles[l];
    double w = linear_bytes(&g->wq_a) + linear_bytes(&g->wkv) + linear_bytes(&g->wq_b) + linear_bytes(&g->wo_b);
    for (int gi = 0; gi < c->o_groups; gi++)
        w += linear_bytes(&g->wo_a[gi]);
    if (r->is_kv_source)
        w += linear_bytes(&g->c_wkv) + linear_bytes(&g->c_wgate) + linear_bytes(&g->ix_wk);
    if (r->is_index_source)
        w += linear_bytes(&g->ix_wq_b) + 2.0 * c->index_n_heads * c->dim;
    if (r->engram >= 0)
        w += linear_bytes(&g->eg_wkv);
    w += distinct * expert_bytes(&g->experts) + expert_bytes(&g->shared) + 2.0 * g->n_experts * c->dim;
    w += 2.0 * 4.0 * c->hc_mult * (2 + c->hc_mult) * c->hc_mult * c->dim; /* both sublayers' hc_fn (fp32) */
    /* caches: the window and the selected rows per row; the index keys once per sequence */
    int seqs = one_seq ? 1 : R;
    double kv = (double)R * (c->window_size + (r->ratio > 0 ? c->index_topk : 0)) * c->head_dim * 2.0;
    if (r->is_index_source)
        kv += (double)seqs * (double)(C / r->ratio) * c->index_head_dim * 2.0;
    return w + kv;
}

static int prefill(bench *B, int seq, int64_t from, int64_t to, dsk_rng *rng)
{
    gpu_backend *b = B->b;
    engine_row *rows = dsk_malloc(sizeof *rows * CHUNK);
    int32_t *tok = dsk_malloc(sizeof(int32_t) * CHUNK);
    if (!rows || !tok) {
        free(rows), free(tok);
        return -1;
    }
    int rc = 0;
    for (int64_t p = from; p < to && !rc; p += CHUNK) {
        int n = (int)(to - p < CHUNK ? to - p : CHUNK);
        for (int i = 0; i < n; i++)
            rows[i] = (engine_row){.seq = seq, .token = (int32_t)dsk_rng_below(rng, (uint64_t)b->cfg->vocab_size / 2),
                                   .pos = p + i, .sample = i == n - 1, .sp = SAMPLE_GREEDY, .top_logprobs = -1};
        engine_out out = {.tokens = tok};
        rc = B->ops->step(b, rows, n, &out, NULL) || B->ops->commit(b, seq, p, p + n);
    }
    free(rows), free(tok);
    return rc;
}

static int round_time(bench *B, const engine_row *rows, int n, int reps, double *ms, double *launches)
{
    int32_t tok[MAX_SEQS + 8];
    engine_out out = {.tokens = tok};
    if (B->ops->step(B->b, rows, n, &out, NULL)) /* warm-up */
        return -1;
    double best = 1e30;
    unsigned long long l0 = kit_launches();
    for (int i = 0; i < reps; i++) {
        double t0 = dsk_now();
        if (B->ops->step(B->b, rows, n, &out, NULL))
            return -1;
        double t = (dsk_now() - t0) * 1e3;
        best = t < best ? t : best;
    }
    *ms = best;
    *launches = (double)(kit_launches() - l0) / reps;
    return 0;
}

static int table(bench *B, int64_t C, int reps, dsk_rng *rng)
{
    gpu_backend *b = B->b;
    const model_config *c = b->cfg;
    int L = c->n_layers;
    printf("\ncontext %lld: %s, %d layer%s\n", (long long)C, b->device, L, L == 1 ? "" : "s");
    printf("%-10s %9s %9s %8s %9s %9s %12s %7s %9s %8s %9s\n", "round", "graph ms", "eager ms", "head us", "outside",
           "us/layer", "mm alone us", "ratio", "MB/layer", "x roof", "launch/l");
    struct {
        int rows, window;
    } shapes[] = {{1, 0}, {2, 0}, {4, 0}, {8, 0}, {16, 0}, {6, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int R = shapes[si].rows, win = shapes[si].window;
        engine_row rows[MAX_SEQS];
        for (int i = 0; i < R; i++)
            rows[i] = (engine_row){.seq = win ? 0 : i, .token = 1000 + i, .pos = win ? C + i : C, .sample = 1,
                                   .sp = SAMPLE_GREEDY, .top_logprobs = -1};
        double ms, eager_ms, launches;
        b->use_graphs = 0;
        if (round_time(B, rows, R, reps, &eager_ms, &launches))
            return -1;
        b->use_graphs = 1;
        double dummy, outside_ms;
        if (round_time(B, rows, R, reps, &ms, &dummy))
            return -1;
        /* the same round without its layers (graphs): the plan's upload, the embedding, the head, the draw
         * and the copy back, what a round costs whatever its layer count */
        b->bench_no_layers = 1;
        int orc = round_time(B, rows, R, reps, &outside_ms, &dummy);
        b->bench_no_layers = 0;
        if (orc)
            return -1;
        double mm_us = 0, bytes = 0;
        for (int l = 0; l < L; l++) {
            int distinct;
            if (random_routes(b, l, R, rng, &distinct))
                return -1;
            mm_ctx m = {b, l, R};
            double us = gpu_time_graph_us(b->s, 5, 5, launch_layer_matmuls, &m);
            if (us < 0)
                return -1;
            mm_us += us;
            bytes += layer_bytes(b, l, R, C, distinct, win);
        }
        mm_ctx hm = {b, 0, R};
        double head_us = gpu_time_graph_us(b->s, 5, 5, launch_head, &hm);
        if (head_us < 0)
            return -1;
        /* a layer's share: the round less what it costs without its layers */
        double per_layer = (ms - outside_ms) * 1e3 / L, mm_layer = mm_us / L, bl = bytes / L;
        char name[32];
        snprintf(name, sizeof name, win ? "verify %d" : "rows %d", R);
        printf("%-10s %9.3f %9.3f %8.1f %9.1f %9.1f %12.1f %6.2fx %9.1f %7.2fx %9.1f\n", name, ms, eager_ms, head_us,
               outside_ms * 1e3, per_layer, mm_layer, per_layer / mm_layer, bl / 1e6, per_layer * 1e-6 / (bl / (B->roof * 1e9)),
               (launches - b->outside_launches) / L);
        if (!win && R < 32 && (B->profile >> R & 1)) {
            b->use_graphs = 0;
            if (kit_profile_begin() || round_time(B, rows, R, reps, &eager_ms, &launches) ||
                kit_profile_end(stdout, reps + 1))
                return -1;
            b->use_graphs = 1;
        }
    }
    /* the DSpark draft step: 5 drafts for 1, 4 and 16 sequences */
    for (int nd = 1; c->n_mtp_layers > 0 && nd <= MAX_SEQS && nd <= b->max_draft; nd *= 4) {
        engine_draft_req req[MAX_SEQS];
        int32_t drafts[MAX_SEQS * 8];
        for (int i = 0; i < nd; i++)
            req[i] = (engine_draft_req){.seq = i, .t0 = 1000 + i, .sp = SAMPLE_GREEDY};
        /* from its graph (the first call captures it), then eagerly: the same run's baseline */
        double best[2] = {1e30, 1e30};
        int graphs = b->use_graphs;
        for (int g = 0; g < 2; g++) {
            b->use_graphs = g == 0 && graphs;
            if (B->ops->draft(b, req, nd, drafts, NULL))
                return -1;
            for (int i = 0; i < reps; i++) {
                double t0 = dsk_now();
                if (B->ops->draft(b, req, nd, drafts, NULL))
                    return -1;
                double t = (dsk_now() - t0) * 1e3;
                best[g] = t < best[g] ? t : best[g];
            }
        }
        b->use_graphs = graphs;
        printf("draft step, %2d sequence%s x %d drafts: %.3f ms (eager %.3f ms)\n", nd, nd == 1 ? " " : "s",
               c->dspark_block_size, best[0], best[1]);
    }
    return 0;
}

/* ---- structured output ---- */

/* One grammar per way of making the masks (each its own token-set cache), its rows' matchers walking the
 * same random tokens, so both see the same cold and warm states. */
typedef struct {
    grammar *g;
    grammar_matcher *m[MAX_SEQS];
    uint32_t *masks;
    size_t words;
    int R;
    dsk_rng walk;
    double mask_s;
} gwalk;

static int gwalk_masks(void *ctx)
{
    gwalk *w = ctx;
    double t0 = dsk_now();
    for (int i = 0; i < w->R; i++)
        if (grammar_allowed(w->m[i], w->masks + w->words * (size_t)i))
            return -1;
    w->mask_s += dsk_now() - t0;
    return 0;
}

/* Each row's walk one token on (a random allowed id other than EOS), or afresh where it ended. */
static int gwalk_advance(gwalk *w, int V, int32_t eos)
{
    for (int i = 0; i < w->R; i++) {
        const uint32_t *mk = w->masks + w->words * (size_t)i;
        int32_t start = (int32_t)dsk_rng_below(&w->walk, (uint64_t)V), id = -1;
        for (int k = 0; k < V && id < 0; k++) {
            int32_t t = (start + k) % V;
            if (t != eos && (mk[t >> 5] >> (t & 31) & 1u))
                id = t;
        }
        if (id < 0 || grammar_accept_token(w->m[i], id)) {
            grammar_matcher_free(w->m[i]);
            w->m[i] = NULL;
            if (grammar_matcher_new(w->g, &w->m[i]))
                return -1;
        }
    }
    return 0;
}

static void gwalk_free(gwalk *w)
{
    for (int i = 0; i < MAX_SEQS; i++)
        grammar_matcher_free(w->m[i]);
    grammar_free(w->g);
    free(w->masks);
}

static int gwalk_new(const grammar_vocab *v, int R, size_t words, gwalk *w)
{
    *w = (gwalk){.words = words, .R = R};
    dsk_rng_seed(&w->walk, 0x5eed + (uint64_t)R);
    if (grammar_from_json_object(v, NULL, &w->g) || !(w->masks = dsk_calloc(words * MAX_SEQS, sizeof(uint32_t))))
        return -1;
    for (int i = 0; i < R; i++)
        if (grammar_matcher_new(w->g, &w->m[i]))
            return -1;
    return 0;
}

/* Rounds of R decode rows at position C: no masks; masks made, then the round; the round making its masks
 * in its fill. Means over reps rounds each, interleaved. */
static int grammar_table(bench *B, const char *model, int64_t C, int reps)
{
    gpu_backend *b = B->b;
    int V = b->cfg->vocab_size;
    size_t words = (size_t)(V + 31) / 32;
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.json", model);
    dsk_tokenizer *tok;
    grammar_vocab *v;
    if (tok_load(path, &tok))
        return -1;
    int32_t eos = tok_eos(tok);
    int rc = grammar_vocab_new(tok, V, eos, &v);
    tok_free(tok);
    if (rc)
        return -1;
    printf("\nstructured output at context %lld (json_object masks, a random walk per row; means of %d rounds):\n",
           (long long)C, reps);
    printf("%-8s %10s %10s %12s %14s %12s\n", "rows", "plain ms", "masks ms", "masks+round", "fill (overlap)",
           "visible us");
    int sizes[] = {1, 4, 16};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && !rc; si++) {
        int R = sizes[si];
        gwalk ws, wf;
        engine_row plain[MAX_SEQS], rs[MAX_SEQS], rf[MAX_SEQS];
        int32_t tok_out[MAX_SEQS];
        engine_out out = {.tokens = tok_out};
        rc = gwalk_new(v, R, words, &ws) || gwalk_new(v, R, words, &wf);
        for (int i = 0; i < R; i++) {
            plain[i] = (engine_row){.seq = i, .token = 1000 + i, .pos = C, .sample = 1, .sp = SAMPLE_GREEDY,
                                    .top_logprobs = -1};
            rs[i] = rf[i] = plain[i];
            rs[i].allow = ws.masks + words * (size_t)i;
            rf[i].allow = wf.masks + words * (size_t)i;
        }
        engine_fill fill = {gwalk_masks, &wf};
        /* warm-up: each shape's graphs */
        rc = rc || B->ops->step(b, plain, R, &out, NULL) || gwalk_masks(&ws) || B->ops->step(b, rs, R, &out, NULL);
        ws.mask_s = 0;
        double t_plain = 0, t_serial = 0, t_fill = 0;
        for (int k = 0; k < reps && !rc; k++) {
            double t0 = dsk_now();
            rc = B->ops->step(b, plain, R, &out, NULL);
            double t1 = dsk_now();
            rc = rc || gwalk_masks(&ws) || B->ops->step(b, rs, R, &out, NULL);
            double t2 = dsk_now();
            rc = rc || B->ops->step(b, rf, R, &out, &fill);
            double t3 = dsk_now();
            t_plain += t1 - t0, t_serial += t2 - t1, t_fill += t3 - t2;
            rc = rc || gwalk_advance(&ws, V, eos) || gwalk_advance(&wf, V, eos);
        }
        if (!rc)
            printf("%-8d %10.3f %10.3f %12.3f %14.3f %12.1f\n", R, 1e3 * t_plain / reps, 1e3 * wf.mask_s / reps,
                   1e3 * t_serial / reps, 1e3 * t_fill / reps, 1e6 * (t_fill - t_plain) / reps);
        gwalk_free(&ws);
        gwalk_free(&wf);
    }
    grammar_vocab_free(v);
    return rc;
}

static int bench_placement(const char *kit_path, const char *model, const char *place, const int64_t *contexts,
                           int nctx, long reps, int with_grammar, unsigned profile);

int bench_decode(int argc, char **argv)
{
    const char *kit_path = NULL, *model = NULL, *engram = "host";
    int64_t contexts[4] = {4096};
    int nctx = 1;
    long reps = 20, tp = 1;
    unsigned profile = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "dskit bench decode: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--kit"))
            kit_path = v;
        else if (!strcmp(a, "--engram"))
            engram = v;
        else if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--tp")) {
            if (cli_parse_int(a, v, 1, 2, &tp)) {
                fprintf(stderr, "dskit bench decode: %s\n", dsk_err_msg());
                return 2;
            }
        } else if (!strcmp(a, "--rounds")) {
            if (cli_parse_int(a, v, 1, 10000, &reps)) {
                fprintf(stderr, "dskit bench decode: %s\n", dsk_err_msg());
                return 2;
            }
        } else if (!strcmp(a, "--profile")) {
            for (const char *q = v; *q;) {
                char *end;
                long x = strtol(q, &end, 10);
                if (end == q || (x != 1 && x != 2 && x != 4 && x != 8 && x != 16)) {
                    fprintf(stderr, "dskit bench decode: --profile '%s': row counts of 1, 2, 4, 8, 16, comma separated\n", v);
                    return 2;
                }
                profile |= 1u << x;
                q = *end == ',' ? end + 1 : end;
            }
        } else if (!strcmp(a, "--contexts")) {
            nctx = 0;
            for (const char *q = v; *q && nctx < 4;) {
                char *end;
                long long x = strtoll(q, &end, 10);
                if (end == q || x < 64 || x > (1 << 20)) {
                    fprintf(stderr, "dskit bench decode: --contexts '%s': positions 64 .. 1048576, comma separated\n", v);
                    return 2;
                }
                contexts[nctx++] = x;
                q = *end == ',' ? end + 1 : end;
            }
        } else {
            fprintf(stderr, "dskit bench decode: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!kit_path || !model) {
        fprintf(stderr, "usage: dskit bench decode --kit KIT --model DIR [--contexts 4096,65536] [--rounds N]\n"
                        "                          [--engram host|device|nvme:DIR[,...]] [--tp 2]\n"
                        "                          [--profile 1,8]\n");
        return 2;
    }
    if (tp == 2) { /* the TP2 against TP1 table only (runtime/bench/bench_decode_tp.c) */
        if (bench_decode_tp(kit_path, model, contexts, nctx, (int)reps)) {
            fprintf(stderr, "dskit bench decode --tp 2: %s\n", dsk_err_msg());
            return dsk_err_msg()[0] && strstr(dsk_err_msg(), "no CUDA device") ? 2 : 1;
        }
        return 0;
    }
    /* each placement in turn: the backend opened afresh, the same tables */
    char list[1024];
    if (snprintf(list, sizeof list, "%s", engram) >= (int)sizeof list) {
        fprintf(stderr, "dskit bench decode: --engram: the list is too long\n");
        return 2;
    }
    int rc = 0, first = 1;
    char *save = NULL;
    for (char *place = strtok_r(list, ",", &save); place && !rc; place = strtok_r(NULL, ",", &save), first = 0)
        rc = bench_placement(kit_path, model, place, contexts, nctx, reps, first, profile); /* the grammar table once */
    return rc;
}

static int bench_placement(const char *kit_path, const char *model, const char *place, const int64_t *contexts,
                           int nctx, long reps, int with_grammar, unsigned profile)
{
    int64_t cmax = 0;
    for (int i = 0; i < nctx; i++)
        cmax = contexts[i] > cmax ? contexts[i] : cmax;
    cmax += 64;
    engine_opts o = {.backend = "gpu", .model_dir = model, .kit = kit_path, .max_seqs = MAX_SEQS, .max_rows = CHUNK,
                     .context = cmax, .engram = place};
    model_config cfg;
    if (model_config_load(model, &cfg)) {
        fprintf(stderr, "dskit bench decode: %s\n", dsk_err_msg());
        return 2;
    }
    size_t words = (size_t)(cfg.vocab_size + 31) / 32;
    uint32_t *valid = dsk_malloc(sizeof(uint32_t) * words);
    if (!valid)
        return 1;
    memset(valid, 0xff, sizeof(uint32_t) * words);
    engine_info info = {0};
    engine_backend_args a = {&o, valid, &info, rank_xchg_single()};
    void *impl;
    bench B = {.profile = profile};
    if (gpu_backend_open(&a, &impl, &B.ops)) {
        fprintf(stderr, "dskit bench decode: %s\n", dsk_err_msg());
        free(valid);
        return dsk_err_msg()[0] && strstr(dsk_err_msg(), "no CUDA device") ? 2 : 1;
    }
    B.b = impl;
    int rc = roofline(&B);
    if (!rc)
        printf("streaming-read roofline %.1f GB/s (same run); Engram rows: %s\n", B.roof,
               B.b->cfg->n_engram_layers ? place : "none (no Engram layer)");
    dsk_rng rng;
    dsk_rng_seed(&rng, 7);
    for (int s = 0; s < MAX_SEQS && !rc; s++)
        rc = B.ops->seq_open(impl, s, cmax, B.b->cfg->n_mtp_layers > 0 ? ENGINE_SEQ_DRAFT : 0);
    int64_t done = 0;
    for (int ci = 0; ci < nctx && !rc; ci++) {
        int64_t C = contexts[ci];
        if (C > done) {
            double t0 = dsk_now();
            for (int s = 0; s < MAX_SEQS && !rc; s++)
                rc = prefill(&B, s, done, C, &rng);
            double t = dsk_now() - t0;
            if (!rc)
                printf("\nprompts: %d sequences from %lld to %lld positions in chunks of %d: %.0f tok/s (%.0f tok/s "
                       "per layer)\n",
                       MAX_SEQS, (long long)done, (long long)C, CHUNK, MAX_SEQS * (C - done) / t,
                       MAX_SEQS * (C - done) / t * B.b->cfg->n_layers);
            done = C;
        }
        rc = rc || table(&B, C, (int)reps, &rng);
    }
    rc = rc || (with_grammar && grammar_table(&B, model, contexts[nctx - 1], (int)reps));
    if (!rc)
        printf("\n%lld rounds replayed from %lld captured graphs\n", B.b->graph_replays, B.b->graph_captures);
    if (rc)
        fprintf(stderr, "dskit bench decode: %s\n", dsk_err_msg());
    B.ops->close(impl);
    free(valid);
    return rc ? 1 : 0;
}
