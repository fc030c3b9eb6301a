/* TP2 against TP1 on the CPU backend, layer by layer with teacher forcing (docs/model.md "Exactness"):
 * two ranks (threads here; the same exchanges as processes) run a prompt and then decode steps, each of
 * their blocks fed the one-rank forward's input to it, and after attention its output too; what they
 * produce is compared with the one-rank forward's:
 *   - attention and MoE sublayer outputs within a relative L2 error of 1e-3 (the ranks' fp32 partials of
 *     wo_b and of the experts are summed in rank order, a sum TP1 never makes; the results are bf16);
 *   - the window rings, compressed rows and index keys bit for bit (replicated work on identical inputs);
 *   - the logits bit for bit given the same last hidden state (the head's vocabulary split changes no sum);
 *   - both ranks bit for bit identical everywhere. */
#include "tests/model/model_test_util.h"
#include "runtime/ranks/threads_xchg.h"

#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/ref/sampling.h"

#include <math.h>
#include <time.h>
#include <string.h>

enum { N0 = 24, STEPS = 8, CALLS = 1 + STEPS, MAXL = 16 };

static cpu_model *M;                   /* tp 1 */
static cpu_model *R[2];                /* the two ranks */
static threads_shared SH;
static threads_xchg X[2];

/* What the one-rank forward saw, per call and layer: block inputs, attention outputs, block outputs. */
typedef struct {
    uint16_t *in, *attn, *out;
    float *pi_in, *pi_out;
} layer_rec;
static layer_rec rec[CALLS][MAXL];
static float *ref_logits[CALLS];
static int call_rows[CALLS];
static int cur_call;

typedef struct {
    int rank;
    double worst_attn, worst_ffn;
    uint16_t *attn_seen[CALLS][MAXL], *out_seen[CALLS][MAXL];
} rank_ctx;

static size_t stream_elems(int n)
{
    return (size_t)n * M->cfg.hc_mult * M->cfg.dim;
}

static uint16_t *dup16(const uint16_t *x, size_t n)
{
    uint16_t *p = malloc(sizeof *p * n);
    memcpy(p, x, sizeof *p * n);
    return p;
}

static float *dupf(const float *x, size_t n)
{
    float *p = malloc(sizeof *p * n);
    memcpy(p, x, sizeof *p * n);
    return p;
}

static void record_hook(void *ctx, int l, int stage, uint16_t *Xs, float *pi, int n)
{
    (void)ctx;
    if (stage == CPU_HOOK_ROUTE)
        return;
    size_t e = stream_elems(n), hc = (size_t)n * M->cfg.hc_mult;
    layer_rec *r = &rec[cur_call][l];
    if (stage == CPU_HOOK_BLOCK_IN) {
        r->in = dup16(Xs, e);
        r->pi_in = dupf(pi, hc);
    } else if (stage == CPU_HOOK_ATTN_OUT)
        r->attn = dup16(Xs, e);
    else {
        r->out = dup16(Xs, e);
        r->pi_out = dupf(pi, hc);
    }
}

static double rel_err(const uint16_t *a, const uint16_t *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)bf16_to_f32(a[i]) - bf16_to_f32(b[i]);
        num += d * d;
        den += (double)bf16_to_f32(b[i]) * bf16_to_f32(b[i]);
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Teacher forcing: each block starts from TP1's input, the FFN from TP1's attention output. */
static void forcing_hook(void *ctx, int l, int stage, uint16_t *Xs, float *pi, int n)
{
    rank_ctx *rc = ctx;
    if (stage == CPU_HOOK_ROUTE)
        return;
    size_t e = stream_elems(n), hc = (size_t)n * M->cfg.hc_mult;
    layer_rec *r = &rec[cur_call][l];
    if (stage == CPU_HOOK_BLOCK_IN) {
        memcpy(Xs, r->in, sizeof *Xs * e);
        memcpy(pi, r->pi_in, sizeof *pi * hc);
    } else if (stage == CPU_HOOK_ATTN_OUT) {
        rc->attn_seen[cur_call][l] = dup16(Xs, e);
        double err = rel_err(Xs, r->attn, e);
        rc->worst_attn = err > rc->worst_attn ? err : rc->worst_attn;
        memcpy(Xs, r->attn, sizeof *Xs * e);
    } else {
        rc->out_seen[cur_call][l] = dup16(Xs, e);
        double err = rel_err(Xs, r->out, e);
        rc->worst_ffn = err > rc->worst_ffn ? err : rc->worst_ffn;
        memcpy(Xs, r->out, sizeof *Xs * e);
        memcpy(pi, r->pi_out, sizeof *pi * hc);
    }
}

static int32_t tokens[N0 + STEPS + 1];

typedef struct {
    rank_ctx ctx;
    cpu_seq *s;
    float *logits[CALLS];
    int rc;
} rank_run;

static rank_run runs[2];

/* Both ranks here (an all-gather of nothing is a barrier). */
static int sync_ranks(int rank)
{
    int32_t me = rank, all[2];
    return X[rank].x.allgather(&X[rank].x, &me, sizeof me, all);
}

static void *run_rank(void *arg)
{
    rank_run *rr = arg;
    cpu_model *m = R[rr->ctx.rank];
    m->layer_hook = forcing_hook;
    m->layer_ctx = &rr->ctx;
    int V = M->cfg.vocab_size;
    for (int call = 0; call < CALLS; call++) {
        int n = call_rows[call], p0 = call == 0 ? 0 : N0 + call - 1;
        rr->logits[call] = malloc(sizeof(float) * (size_t)V);
        /* both ranks are on the same call: the barrier inside every exchange keeps them together */
        if (rr->ctx.rank == 0)
            cur_call = call;
        if (sync_ranks(rr->ctx.rank) ||
            cpu_forward(m, rr->s, tokens + p0, n, n - 1, rr->logits[call], NULL)) {
            rr->rc = -1;
            return NULL;
        }
        rr->s->len += n;
        if (sync_ranks(rr->ctx.rank)) {
            rr->rc = -1;
            return NULL;
        }
    }
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    M = model_test_make("tiny", 9);
    if (!M || M->cfg.n_layers > MAXL)
        return -1;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/ckpt", model_test_root);
    if (threads_shared_init(&SH, 2, 60.0))
        return -1;
    for (int r = 0; r < 2; r++) {
        if (cpu_model_load(dir, (size_t)1 << 30, &R[r]))
            return -1;
        threads_xchg_init(&X[r], &SH, r);
        R[r]->xchg = &X[r].x;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int r = 0; r < 2; r++)
        cpu_model_free(R[r]);
    threads_shared_destroy(&SH);
    model_test_cleanup(M);
    return 0;
}

static void test_tp2_against_tp1(void **state)
{
    (void)state;
    const model_config *c = &M->cfg;
    int V = c->vocab_size;
    /* TP1: a prompt, then greedy decode steps, recording every block */
    dsk_rng rng;
    dsk_rng_seed(&rng, (uint64_t)time(NULL));
    for (int i = 0; i < N0; i++)
        tokens[i] = (int32_t)dsk_rng_below(&rng, (uint64_t)V);
    cpu_seq *s;
    assert_ok(cpu_seq_new(M, 1024, &s));
    M->layer_hook = record_hook;
    for (int call = 0; call < CALLS; call++) {
        int n = call == 0 ? N0 : 1, p0 = call == 0 ? 0 : N0 + call - 1;
        call_rows[call] = n;
        cur_call = call;
        ref_logits[call] = malloc(sizeof(float) * (size_t)V);
        assert_ok(cpu_forward(M, s, tokens + p0, n, n - 1, ref_logits[call], NULL));
        s->len += n;
        tokens[N0 + call] = sample_row(ref_logits[call], V, &SAMPLE_GREEDY, s->len, NULL);
    }
    M->layer_hook = NULL;
    /* TP2, teacher-forced */
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        memset(&runs[r], 0, sizeof runs[r]);
        runs[r].ctx.rank = r;
        assert_ok(cpu_seq_new(R[r], 1024, &runs[r].s));
        assert_int_equal(pthread_create(&th[r], NULL, run_rank, &runs[r]), 0);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++)
        assert_int_equal(runs[r].rc, 0);
    printf("TP2 vs TP1, teacher-forced, worst relative L2 over %d layers and %d calls: attention %.2e, MoE %.2e\n",
           c->n_layers, CALLS, runs[0].ctx.worst_attn, runs[0].ctx.worst_ffn);
    assert_true(runs[0].ctx.worst_attn <= 1e-3);
    assert_true(runs[0].ctx.worst_ffn <= 1e-3);
    for (int call = 0; call < CALLS; call++) {
        /* the head: the same bits given the same hidden state; both ranks the same */
        assert_memory_equal(runs[0].logits[call], ref_logits[call], sizeof(float) * (size_t)V);
        assert_memory_equal(runs[1].logits[call], ref_logits[call], sizeof(float) * (size_t)V);
        for (int l = 0; l < c->n_layers; l++) {
            size_t e = stream_elems(call_rows[call]);
            assert_memory_equal(runs[0].ctx.attn_seen[call][l], runs[1].ctx.attn_seen[call][l], e * 2);
            assert_memory_equal(runs[0].ctx.out_seen[call][l], runs[1].ctx.out_seen[call][l], e * 2);
            free(runs[0].ctx.attn_seen[call][l]);
            free(runs[1].ctx.attn_seen[call][l]);
            free(runs[0].ctx.out_seen[call][l]);
            free(runs[1].ctx.out_seen[call][l]);
        }
    }
    /* the caches: replicated work on identical inputs, bit for bit */
    for (int r = 0; r < 2; r++) {
        const cpu_seq *t = runs[r].s;
        for (int l = 0; l < c->n_layers; l++) {
            assert_memory_equal(t->win[l], s->win[l], sizeof(uint16_t) * (size_t)s->ring * c->head_dim);
            if (c->roles[l].is_kv_source) {
                int64_t rows = s->len / c->roles[l].ratio;
                assert_memory_equal(t->ckv[l], s->ckv[l], sizeof(uint16_t) * (size_t)rows * c->head_dim);
                assert_memory_equal(t->ikv[l], s->ikv[l], sizeof(uint16_t) * (size_t)rows * c->index_head_dim);
            }
        }
        cpu_seq_free(runs[r].s);
        for (int call = 0; call < CALLS; call++)
            free(runs[r].logits[call]);
    }
    cpu_seq_free(s);
    for (int call = 0; call < CALLS; call++) {
        free(ref_logits[call]);
        for (int l = 0; l < c->n_layers; l++) {
            free(rec[call][l].in);
            free(rec[call][l].attn);
            free(rec[call][l].out);
            free(rec[call][l].pi_in);
            free(rec[call][l].pi_out);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_tp2_against_tp1)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
