/* dskit: the runtime. Verifies and loads a kit, runs the model, serves it. Links no compiler. */
#include "runtime/cli.h"
#include "runtime/common/error.h"

#include <stdio.h>
#include <string.h>

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("dskit %s\n", DSKIT_VERSION);
    return 0;
}

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"verify", cmd_verify, "verify KIT [--json] [--kit-root HEX] [--needs MODEL_DIR] [--device]: check a kit"},
    {"info", cmd_info, "info KIT: the kit's arch, toolchain, source and kernel families"},
    {"bench", cmd_bench, "bench WHAT [...]: run a benchmark and print a table (dskit bench --help)"},
    {"version", cmd_version, "version: print dskit's version"},
    {"mkmodel", cmd_mkmodel, "mkmodel --preset P --out DIR: write a synthetic checkpoint (dskit mkmodel --help)"},
    {"tokenize", cmd_tokenize, "text <-> token ids, chat requests -> prompt ids (stdin)"},
    {"engram", cmd_engram, "engram pack|verify ...: pack the Engram tables for direct reads, check a pack"},
    {"run", cmd_run, "run --backend cpu --model DIR --prompt TEXT: generate with the CPU model"},
    {"serve", cmd_serve, "serve --model DIR [--port P] ...: the OpenAI-compatible HTTP server (dskit serve --help)"},
    {"rank-follower", cmd_rank_follower, NULL}, /* started by rank 0 (--tp N), not listed */
};

static void usage(FILE *f)
{
    fprintf(f, "dskit %s: the DeepSeek-V4.1-Flash runtime\nusage: dskit COMMAND [options]\n\n",
            DSKIT_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].help)
            fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("dskit %s\n", DSKIT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dskit: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
