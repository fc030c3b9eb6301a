/* `dskit bench WHAT`: every benchmark prints a table. Each lives beside its subsystem. */
#include "runtime/cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} bench_entry;

/* exchange: the host transport between two processes, or with --kit the GPU's (bench_xchg.c) */
static int bench_exchange_any(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--kit"))
            return bench_xchg_gpu(argc, argv);
    return bench_exchange(argc, argv);
}

static const bench_entry benches[] = {
    {"build", bench_build, "build [--arch sm_90]: full kit build time, cold and warm cache, and kit size"},
    {"kit", bench_kit, "kit KIT: open + verify + load + resolve time (eager and lazy), stream-read GB/s, "
                       "and the first kernel families on the GPU"},
    {"exl3-cpu", bench_exl3_cpu, "exl3-cpu [--k K] [--n N] [--reps R]: EXL3 CPU reference decode and "
                                 "matmul (1 and 8 rows) weights/s for every K x codebook"},
    {"exl3", bench_exl3, "exl3 KIT [--quick]: EXL3 GPU kernels on the model's shapes: decode matmul (K x codebook x "
                         "rows 1-16) vs the streaming-read roofline, MoE (6 of 384 + shared), prompt form"},
    {"tokenize", bench_tokenize, "tokenize [--tokenizer FILE] [--input TEXT_FILE]: tokenizer encode/decode MB/s"},
    {"exchange", bench_exchange_any, "exchange [--reps N] [--kit KIT [--device N]]: one exchange between two ranks on "
                                     "this host, per payload (host shared memory; with --kit the GPU's xchg kernel)"},
    {"engram", bench_engram, "engram [--model DIR | --rows N] [--dir PACKDIR] [--rounds N] [--cache-mb MB]: Engram "
                             "row reads per round (1/16/64 positions x 24 rows x 2 layers), cold and cached; "
                             "PACKDIR: a pack to read, or where to generate one"},
    {"grammar", bench_grammar, "grammar [--tokenizer FILE] [--walks N] [--seed S] [--cpu]: constrained decoding: compile time "
                               "and per-token mask time (p50, p99) along random walks, schemas of growing size"},
    {"vision", bench_vision, "vision [--model DIR] [--kit KIT] [--reps N]: image decode + preprocessing time on the "
                             "CPU for 448x448, 1024x768 and 1920x1080 PNG and JPEG images; with --kit, the tower "
                             "and aligner on the GPU for them, per image and per launch"},
    {"decode", bench_decode, "decode --kit KIT --model DIR [--contexts 4096,65536] [--rounds N] [--tp 2]: the GPU "
                             "engine's decode rounds (1-16 rows, a 6-row verify window): time per layer, its EXL3 "
                             "matmuls alone, bytes read against the roofline, launches per layer; prompt tok/s; "
                             "--tp 2: TP2 against TP1, the ranks threads on GPU 0"},
    {"cpu", bench_cpu, "cpu [--model DIR] [--prompt-len N] [--decode N] [--threads N] [--reps N]: the CPU model's "
                       "prefill and decode tok/s (default: the tiny synthetic checkpoint), serial and drafted"},
    {"serve", bench_serve, "serve [--model DIR] [--draft on|off] [--prompt-len N] [--tokens N] [--threads N]: the HTTP "
                           "server's TTFT and tok/s for 1, 4, 16 streams, and its overhead per token"},
};

int cmd_bench(int argc, char **argv)
{
    if (argc >= 2) {
        for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
            if (!strcmp(argv[1], benches[i].name))
                return benches[i].fn(argc - 1, argv + 1);
    }
    FILE *f = argc >= 2 && strcmp(argv[1], "--help") ? stderr : stdout;
    if (f == stderr && argc >= 2)
        fprintf(stderr, "dskit bench: unknown benchmark '%s'\n", argv[1]);
    fprintf(f, "usage: dskit bench WHAT [options]\n");
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        fprintf(f, "  %s\n", benches[i].help);
    return f == stdout ? 0 : 2;
}
