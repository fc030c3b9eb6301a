/* `dskit bench exl3-cpu`: speed of the EXL3 CPU reference on one random k × n layer: tile decode
 * (W_hat reconstruction) for every K × codebook, and exl3_matmul at 1 and 8 rows. One thread. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/ref/exl3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *cb_names[3] = {"3INST", "MCG", "MUL1"};

/* Best time of reps runs of one call, in seconds. */
#define BEST_OF(reps, best, call)                                                                  \
    do {                                                                                           \
        best = 1e30;                                                                               \
        for (int r_ = 0; r_ < (reps); r_++) {                                                      \
            double t0_ = dsk_now();                                                                \
            call;                                                                                  \
            double dt_ = dsk_now() - t0_;                                                          \
            best = dt_ < best ? dt_ : best;                                                        \
        }                                                                                          \
    } while (0)

int bench_exl3_cpu(int argc, char **argv)
{
    long k = 4096, n = 4096, reps = 3;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r;
        if (!strcmp(a, "--k") && v)
            r = cli_parse_int(a, v, 128, 1 << 20, &k);
        else if (!strcmp(a, "--n") && v)
            r = cli_parse_int(a, v, 128, 1 << 20, &n);
        else if (!strcmp(a, "--reps") && v)
            r = cli_parse_int(a, v, 1, 1000, &reps);
        else {
            fprintf(stderr, "usage: dskit bench exl3-cpu [--k K] [--n N] [--reps R] (k, n multiples of 128)\n");
            return 2;
        }
        if (r != 0 || k % 128 || n % 128) {
            fprintf(stderr, "dskit bench exl3-cpu: %s\n", r ? dsk_err_msg() : "k and n must be multiples of 128");
            return 2;
        }
    }
    size_t kn = (size_t)k * (size_t)n;
    uint16_t *trellis = dsk_malloc(kn), *suh = dsk_malloc((size_t)k * 2), *svh = dsk_malloc((size_t)n * 2);
    float *w_hat = dsk_malloc(kn * sizeof *w_hat), *x = dsk_malloc((size_t)8 * (size_t)k * sizeof *x);
    float *y = dsk_malloc((size_t)8 * (size_t)n * sizeof *y);
    int rc = 1;
    if (!trellis || !suh || !svh || !w_hat || !x || !y) {
        fprintf(stderr, "dskit bench exl3-cpu: %s\n", dsk_err_msg());
        goto out;
    }
    dsk_rng rng;
    dsk_rng_seed(&rng, 1);
    for (size_t i = 0; i < kn / 2; i++) /* K = 8 needs k·n bytes */
        trellis[i] = (uint16_t)dsk_rng_u64(&rng);
    for (long i = 0; i < k; i++)
        suh[i] = 0x2c00; /* 1/16 */
    for (long i = 0; i < n; i++)
        svh[i] = 0x3c00;
    for (long i = 0; i < 8 * k; i++)
        x[i] = dsk_rng_normal(&rng);
    exl3_codebook_lut_f32(0); /* build the tables outside the timings */

    printf("EXL3 CPU reference, k = %ld, n = %ld, one thread, best of %ld; Mw/s = million weights per second\n",
           k, n, reps);
    printf("%-3s %-6s %12s %14s %14s\n", "K", "cb", "decode Mw/s", "matmul m=1", "matmul m=8");
    for (int K = 1; K <= 8; K++)
        for (int cb = 0; cb < 3; cb++) {
            exl3_linear L = {.name = "bench", .k = k, .n = n, .K = K, .codebook = cb,
                             .trellis = trellis, .suh = suh, .svh = svh};
            double t_dec, t1, t8;
            BEST_OF(reps, t_dec, exl3_reconstruct_hat_f32(&L, w_hat));
            BEST_OF(reps, t1, rc = exl3_matmul(&L, x, 1, y));
            BEST_OF(reps, t8, rc |= exl3_matmul(&L, x, 8, y));
            if (rc != 0) {
                fprintf(stderr, "dskit bench exl3-cpu: %s\n", dsk_err_msg());
                goto out;
            }
            printf("%-3d %-6s %12.0f %14.0f %14.0f\n", K, cb_names[cb], (double)kn / t_dec * 1e-6,
                   (double)kn / t1 * 1e-6, (double)kn / t8 * 1e-6);
        }
    rc = 0;
out:
    free(trellis);
    free(suh);
    free(svh);
    free(w_hat);
    free(x);
    free(y);
    return rc;
}
