/* GPU checks of sample against runtime/ref/sampling.h over the real vocabulary (129,280 ids, the last
 * ones not the tokenizer's): greedy, untruncated, top_k, top_p, both, allow masks (sparse, one id, none
 * drawable, more than 1024 ids), top log-probabilities. Greedy draws must equal the CPU's always; a
 * sampled draw may differ only at a near-tie (the Gumbel keys of the two tokens within 1e-5, CUDA's expf
 * and logf being an ulp from glibc's, or one of them at the top_p cut with the mass there within 1e-5 of
 * the threshold); such flips are counted and reported. Log-probabilities within 1e-4 of the exact value
 * (double) and 2e-3 of the CPU's (whose sequential fp32 sum over the vocabulary drifts), the top ids exact.
 * Every row equals the row launched alone; a launch without candidates draws the same for the rows that
 * do not truncate and -2 for those that do. Bad arguments are refused. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/sample.h"
#include "runtime/ref/sampling.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NV 129280 /* the vocabulary */
#define VOCAB_END 128000 /* ids at and above are not the tokenizer's */
#define WORDS ((NV + 31) / 32)
#define NMASKS 4

typedef struct {
    int flips_tie, flips_cut, flips_bad, greedy_bad, sampled;
} sample_tally;

static void set_bit(uint32_t *m, int id) { m[id >> 5] |= 1u << (id & 31); }

/* Row kinds, cycled: temperature, top_p, top_k, top_logprobs, allow mask. */
static const struct {
    float t, p;
    int k, lp, mask;
} kinds[] = {
    {0.0f, 1.0f, 0, 5, -1},   {1.0f, 1.0f, 0, -1, -1}, {0.7f, 1.0f, 40, 0, -1},   {1.0f, 0.9f, 0, 3, -1},
    {1.3f, 0.8f, 200, 20, -1}, {1.0f, 0.5f, 0, -1, 0},  {0.0f, 1.0f, 0, 0, 1},     {0.01f, 1.0f, 3000, 2, -1},
    {1.0f, 1.0f, 1, -1, -1},  {1.0f, 1.0f, 0, 20, 3},  {0.0f, 1.0f, 0, 1, 2},     {1.0f, 0.999f, 0, 3, -1},
    {0.8f, 0.95f, 1024, 7, 3}, {0.0f, 1.0f, 0, 20, -1}, {2.0f, 0.6f, 700, -1, -1}, {1.0f, 0.3f, 50, 0, 0},
};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

/* The CPU's truncation of one row, to explain a flip: the kept candidates in z order, the mass cut. */
typedef struct {
    int n, keep;
    int32_t id[SAMPLE_TOP_P_CANDIDATES];
    double cum_keep, cum_prev, thr;
} cpu_cut;

static int before(float va, int ia, float vb, int ib)
{
    return va > vb || (va == vb && ia < ib);
}

static void cut_of(const float *lg, const uint32_t *mask, const sample_params *sp, cpu_cut *c)
{
    float t = sp->temperature > 1e-5f ? sp->temperature : 1e-5f, mx = -INFINITY;
    int kcap = sp->top_k > 0 ? sp->top_k : sp->top_p < 1.0f ? SAMPLE_TOP_P_CANDIDATES : 0;
    kcap = kcap > SAMPLE_TOP_P_CANDIDATES ? SAMPLE_TOP_P_CANDIDATES : kcap;
    c->n = c->keep = 0;
    c->cum_keep = c->cum_prev = c->thr = 0;
    if (!kcap)
        return;
    for (int v = 0; v < NV; v++)
        if (sample_allowed(mask, v)) {
            float z = lg[v] / t;
            mx = z > mx ? z : mx;
            if (c->n == kcap && !before(z, v, lg[c->id[kcap - 1]] / t, c->id[kcap - 1]))
                continue;
            int j = c->n < kcap ? c->n++ : kcap - 1;
            while (j > 0 && before(z, v, lg[c->id[j - 1]] / t, c->id[j - 1])) {
                c->id[j] = c->id[j - 1];
                j--;
            }
            c->id[j] = v;
        }
    c->keep = c->n;
    if (sp->top_p >= 1.0f)
        return;
    double mass = 0;
    if (sp->top_k > 0)
        for (int i = 0; i < c->n; i++)
            mass += exp((double)(lg[c->id[i]] / t - mx));
    else
        for (int v = 0; v < NV; v++)
            if (sample_allowed(mask, v))
                mass += exp((double)(lg[v] / t - mx));
    c->thr = sp->top_p * mass;
    double cum = 0;
    int keep = 0;
    while (keep < c->n && (keep == 0 || cum < c->thr)) {
        c->cum_prev = cum;
        cum += exp((double)(lg[c->id[keep++]] / t - mx));
    }
    c->keep = keep;
    c->cum_keep = cum;
}

static int rank_in(const cpu_cut *c, int32_t id)
{
    for (int i = 0; i < c->n; i++)
        if (c->id[i] == id)
            return i;
    return -1;
}

/* Whether a sampled row's two draws are a near-tie (1) or at the top_p cut (2); 0 when unexplained. */
static int explain(const float *lg, const uint32_t *mask, const sample_params *sp, int64_t pos, int cpu, int gpu)
{
    if (cpu < 0 || gpu < 0)
        return 0;
    float t = sp->temperature > 1e-5f ? sp->temperature : 1e-5f, mx = -INFINITY;
    for (int v = 0; v < NV; v++)
        if (sample_allowed(mask, v))
            mx = lg[v] / t > mx ? lg[v] / t : mx;
    double qc = exp((double)(lg[cpu] / t - mx)) / -log((double)sample_uniform(sp->seed, pos, cpu));
    double qg = exp((double)(lg[gpu] / t - mx)) / -log((double)sample_uniform(sp->seed, pos, gpu));
    if (fabs(qc - qg) <= 1e-5 * fmax(qc, qg))
        return 1;
    cpu_cut *c = xmalloc(sizeof *c);
    cut_of(lg, mask, sp, c);
    int rg = rank_in(c, gpu), rc = rank_in(c, cpu), why = 0;
    /* the GPU kept one more (its token is the CPU's first cut) or one fewer (the CPU's last kept) */
    double near = 1e-5 * c->thr;
    if (c->thr > 0 && ((rg == c->keep && fabs(c->cum_keep - c->thr) <= near) ||
                       (rc == c->keep - 1 && fabs(c->cum_prev - c->thr) <= near)))
        why = 2;
    free(c);
    return why;
}

static void run_case(gpu_ctx *c, dsk_rng *r, int rows, const uint32_t *vocab, const uint32_t *allow,
                     CUdeviceptr dvocab, CUdeviceptr dallow, sample_tally *tally)
{
    const int64_t ldl = NV;
    float *lg = xmalloc(sizeof(float) * (size_t)rows * ldl);
    sample_row_params *pp = xmalloc(sizeof(sample_row_params) * (size_t)rows);
    for (int i = 0; i < rows; i++) {
        int kd = (int)((i + dsk_rng_below(r, 3)) % NKINDS);
        memset(&pp[i], 0, sizeof pp[i]);
        pp[i].temperature = kinds[kd].t;
        pp[i].top_p = kinds[kd].p;
        pp[i].top_k = kinds[kd].k;
        pp[i].top_logprobs = kinds[kd].lp;
        pp[i].allow_row = kinds[kd].mask;
        pp[i].seed = dsk_rng_u64(r);
        pp[i].pos = (int64_t)dsk_rng_below(r, 1 << 20);
        float sigma = 1.0f + 3.0f * dsk_rng_f32(r);
        int ties = dsk_rng_below(r, 4) == 0;
        for (int v = 0; v < NV; v++) {
            float x = sigma * dsk_rng_normal(r);
            lg[(size_t)i * ldl + v] = ties ? (float)(int)(x * 2.0f) : x;
        }
        for (int p = 0; p < 3; p++) /* a few peaks, as trained models have */
            lg[(size_t)i * ldl + dsk_rng_below(r, NV)] += 8.0f * dsk_rng_f32(r);
    }
    size_t wsb = op_sample_ws_bytes(rows, NV, 1), wsb0 = op_sample_ws_bytes(rows, NV, 0), wsb1 = op_sample_ws_bytes(1, NV, 1);
    CUdeviceptr dl = dev_upload(lg, sizeof(float) * (size_t)rows * ldl),
                dp = dev_upload(pp, sizeof(sample_row_params) * (size_t)rows),
                dt = dev_alloc(4 * (size_t)rows), dlp = dev_alloc(4 * (size_t)rows),
                dti = dev_alloc(4 * (size_t)rows * SAMPLE_TOP_LOGPROBS),
                dtl = dev_alloc(4 * (size_t)rows * SAMPLE_TOP_LOGPROBS), ws = dev_alloc(wsb), ws1 = dev_alloc(wsb1),
                o1 = dev_alloc(4 * 64);
    dev_memset(dt, 0xee, 4 * (size_t)rows);
    sample_args a = {.logits = dl, .ldl = ldl, .V = NV, .rows = rows, .vocab = dvocab, .allow = dallow, .ldw = WORDS,
                     .params = dp, .candidates = 1, .tokens = dt, .logprob = dlp, .top_ids = dti, .top_lp = dtl,
                     .ws = ws, .ws_bytes = wsb};
    must(op_sample(c->k, c->s, &a), "sample");
    dev_sync(c);
    int32_t *tok = xmalloc(4 * (size_t)rows), *ti = xmalloc(4 * (size_t)rows * SAMPLE_TOP_LOGPROBS);
    float *lp = xmalloc(4 * (size_t)rows), *tl = xmalloc(4 * (size_t)rows * SAMPLE_TOP_LOGPROBS);
    dev_download(tok, dt, 4 * (size_t)rows);
    dev_download(lp, dlp, 4 * (size_t)rows);
    dev_download(ti, dti, 4 * (size_t)rows * SAMPLE_TOP_LOGPROBS);
    dev_download(tl, dtl, 4 * (size_t)rows * SAMPLE_TOP_LOGPROBS);
    uint32_t *mask = xmalloc(4 * WORDS);
    int flips = 0, bad_greedy = 0, unexplained = 0, lp_bad = 0, top_bad = 0, alone_bad = 0, none_bad = 0;
    double worst_lp = 0, worst_cpu = 0;
    for (int i = 0; i < rows; i++) {
        const float *l = lg + (size_t)i * ldl;
        const uint32_t *m = vocab;
        if (pp[i].allow_row >= 0) {
            for (int w = 0; w < WORDS; w++)
                mask[w] = vocab[w] & allow[(size_t)pp[i].allow_row * WORDS + w];
            m = mask;
        }
        sample_params sp = {pp[i].temperature, pp[i].top_p, pp[i].top_k, pp[i].seed};
        int32_t want = sample_row(l, NV, &sp, pp[i].pos, m);
        if (tok[i] != want) {
            if (sp.temperature <= 0.0f || want < 0 || tok[i] < 0)
                bad_greedy++;
            else {
                int why = explain(l, m, &sp, pp[i].pos, want, tok[i]);
                flips++;
                tally->flips_tie += why == 1;
                tally->flips_cut += why == 2;
                unexplained += why == 0;
                if (!why)
                    printf("     row %d: CPU draws %d, GPU %d (T %g, top_p %g, top_k %d)\n", i, want, tok[i],
                           sp.temperature, sp.top_p, sp.top_k);
            }
        }
        tally->sampled += sp.temperature > 0.0f;
        if (pp[i].top_logprobs >= 0 && (tok[i] >= 0 || want < 0)) {
            int n = pp[i].top_logprobs < SAMPLE_MAX_TOP_LOGPROBS ? pp[i].top_logprobs : SAMPLE_MAX_TOP_LOGPROBS;
            float rlp, rtl[SAMPLE_MAX_TOP_LOGPROBS];
            int32_t rti[SAMPLE_MAX_TOP_LOGPROBS];
            sample_logprobs(l, NV, vocab, tok[i], n, &rlp, rti, rtl);
            /* the exact log-sum-exp (double): the GPU's tree sums within 1e-4 of it; the CPU's sequential
             * fp32 sum over 128K terms drifts further, up to ~1e-3 */
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < NV; v++)
                if (sample_allowed(vocab, v))
                    mx = l[v] > mx ? l[v] : mx;
            for (int v = 0; v < NV; v++)
                if (sample_allowed(vocab, v))
                    sum += exp((double)l[v] - mx);
            double lse = mx + log(sum);
            double want_lp = tok[i] >= 0 && sample_allowed(vocab, tok[i]) ? l[tok[i]] - lse : -INFINITY;
            double d = want_lp == lp[i] ? 0.0 : fabs((double)lp[i] - want_lp); /* −∞ == −∞: nothing drawn */
            double dc = rlp == lp[i] ? 0.0 : fabs((double)lp[i] - rlp);
            worst_lp = d > worst_lp ? d : worst_lp;
            worst_cpu = dc > worst_cpu ? dc : worst_cpu;
            lp_bad += !(d <= 1e-4) || !(dc <= 2e-3);
            for (int t = 0; t < n; t++) {
                int32_t id = ti[(size_t)i * SAMPLE_TOP_LOGPROBS + t];
                top_bad += id != rti[t];
                float g = tl[(size_t)i * SAMPLE_TOP_LOGPROBS + t];
                top_bad += id >= 0 && !(fabs((double)g - (l[id] - lse)) <= 1e-4 && fabs((double)g - rtl[t]) <= 2e-3);
            }
            for (int t = n; t < SAMPLE_TOP_LOGPROBS; t++)
                top_bad += ti[(size_t)i * SAMPLE_TOP_LOGPROBS + t] != -1;
        }
    }
    /* each row alone equals its row of the launch */
    for (int i = 0; i < rows; i++) {
        if (rows > 16 && i % 13 != 5)
            continue;
        sample_args b = a;
        b.logits = dl + (CUdeviceptr)i * ldl * 4;
        b.params = dp + (CUdeviceptr)i * sizeof(sample_row_params);
        b.rows = 1;
        b.tokens = o1, b.logprob = o1 + 16, b.top_ids = o1 + 32, b.top_lp = o1 + 128;
        b.ws = ws1, b.ws_bytes = wsb1;
        must(op_sample(c->k, c->s, &b), "sample alone");
        dev_sync(c);
        int32_t t1, i1[SAMPLE_TOP_LOGPROBS];
        float l1, f1[SAMPLE_TOP_LOGPROBS];
        dev_download(&t1, o1, 4);
        dev_download(&l1, o1 + 16, 4);
        dev_download(i1, o1 + 32, sizeof i1);
        dev_download(f1, o1 + 128, sizeof f1);
        alone_bad += t1 != tok[i] || memcmp(&l1, &lp[i], 4) || memcmp(i1, ti + (size_t)i * SAMPLE_TOP_LOGPROBS, sizeof i1) ||
                     memcmp(f1, tl + (size_t)i * SAMPLE_TOP_LOGPROBS, sizeof f1);
    }
    /* without candidates: the rows that truncate draw -2, the others what they drew */
    CUdeviceptr ws0 = dev_alloc(wsb0);
    sample_args z = a;
    z.candidates = 0, z.ws = ws0, z.ws_bytes = wsb0;
    must(op_sample(c->k, c->s, &z), "sample without candidates");
    dev_sync(c);
    int32_t *tok0 = xmalloc(4 * (size_t)rows);
    dev_download(tok0, dt, 4 * (size_t)rows);
    for (int i = 0; i < rows; i++) {
        int truncates = pp[i].temperature > 0.0f && (pp[i].top_k > 0 || pp[i].top_p < 1.0f);
        none_bad += truncates ? tok0[i] != -2 : tok0[i] != tok[i];
    }
    tally->flips_bad += unexplained;
    tally->greedy_bad += bad_greedy;
    char shape[48];
    snprintf(shape, sizeof shape, "rows %d of %d ids", rows, NV);
    check(c, !bad_greedy && !unexplained && !lp_bad && !top_bad && !alone_bad && !none_bad, "sample", shape,
          "flips %d (unexplained %d, greedy %d), logprob err %.1e exact / %.1e CPU (%d bad), top %d bad, alone %d, "
          "no-cand %d",
          flips, unexplained, bad_greedy, worst_lp, worst_cpu, lp_bad, top_bad, alone_bad, none_bad);
    dev_free(dl);
    dev_free(dp);
    dev_free(dt);
    dev_free(dlp);
    dev_free(dti);
    dev_free(dtl);
    dev_free(ws);
    dev_free(ws1);
    dev_free(ws0);
    dev_free(o1);
    free(lg);
    free(pp);
    free(tok);
    free(tok0);
    free(ti);
    free(lp);
    free(tl);
    free(mask);
}

static void bad_arguments(gpu_ctx *c, CUdeviceptr dvocab)
{
    CUdeviceptr d = dev_alloc(1 << 20);
    sample_args ok = {.logits = d, .ldl = NV, .V = NV, .rows = 1, .vocab = dvocab, .params = d, .tokens = d,
                      .logprob = d, .top_ids = d, .top_lp = d, .ws = d, .ws_bytes = 1 << 20};
    struct {
        const char *what;
        sample_args a;
    } bad[] = {{"ldl < NV", ok}, {"small workspace", ok}, {"misaligned params", ok}, {"no tokens", ok},
               {"short allow rows", ok}, {"70000 rows", ok}, {"a vocabulary of 300000", ok}};
    bad[0].a.ldl = NV - 1;
    bad[1].a.ws_bytes = 1024;
    bad[2].a.params = d + 8;
    bad[3].a.tokens = 0;
    bad[4].a.allow = d, bad[4].a.ldw = 100;
    bad[5].a.rows = 70000;
    bad[6].a.V = 300000, bad[6].a.ldl = 300000;
    int refused = 0, n = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < n; i++) {
        int rc = op_sample(c->k, c->s, &bad[i].a);
        refused += rc != 0;
        if (rc == 0)
            printf("     sample accepted %s\n", bad[i].what);
    }
    dev_sync(c);
    dev_free(d);
    check(c, refused == n, "sample", "bad arguments", "%d of %d refused", refused, n);
}

void test_sample(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x5a3b);
    uint32_t *vocab = xmalloc(4 * WORDS), *allow = xmalloc(4 * (size_t)NMASKS * WORDS);
    memset(vocab, 0, 4 * WORDS);
    memset(allow, 0, 4 * (size_t)NMASKS * WORDS);
    for (int v = 0; v < VOCAB_END; v++)
        if (dsk_rng_below(&r, 1000))
            set_bit(vocab, v);
    for (int v = 0; v < NV; v++) {
        if (dsk_rng_below(&r, 5) == 0)
            set_bit(allow, v); /* mask 0: about a fifth */
        if (v >= VOCAB_END)
            set_bit(allow + 2 * WORDS, v); /* mask 2: none of the tokenizer's ids */
    }
    int one;
    do
        one = (int)dsk_rng_below(&r, VOCAB_END);
    while (!sample_allowed(vocab, one));
    set_bit(allow + WORDS, one); /* mask 1: one id */
    for (int i = 0; i < 1500; i++)
        set_bit(allow + 3 * WORDS, (int)dsk_rng_below(&r, NV)); /* mask 3: about 1500 ids */
    CUdeviceptr dvocab = dev_upload(vocab, 4 * WORDS), dallow = dev_upload(allow, 4 * (size_t)NMASKS * WORDS);
    sample_tally tally = {0};
    const int nrows[] = {1, 2, 7, 16, 64, 64, 200};
    for (size_t i = 0; i < sizeof nrows / sizeof nrows[0]; i++)
        run_case(c, &r, nrows[i], vocab, allow, dvocab, dallow, &tally);
    printf("     sample: %d sampled rows, %d near-tie flips, %d at the top_p cut, %d unexplained\n", tally.sampled,
           tally.flips_tie, tally.flips_cut, tally.flips_bad);
    bad_arguments(c, dvocab);
    dev_free(dvocab);
    dev_free(dallow);
    free(vocab);
    free(allow);
}
