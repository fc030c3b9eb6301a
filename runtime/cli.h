/* The dskit program's subcommands. Each returns the process exit status: 0 success, 1 the thing
 * checked is bad (or the run failed), 2 usage or I/O error. Each lives beside the code it drives. */
#ifndef DSK_CLI_H
#define DSK_CLI_H

#include "runtime/common/cli.h"

int cmd_verify(int argc, char **argv);   /* verify/verify_cli.c */
int cmd_info(int argc, char **argv);     /* verify/verify_cli.c */
int cmd_bench(int argc, char **argv);    /* runtime/bench/bench.c */
int cmd_mkmodel(int argc, char **argv);  /* runtime/mkmodel/mkmodel.c */
int cmd_tokenize(int argc, char **argv); /* runtime/tokenizer/cmd_tokenize.c */
int cmd_serve(int argc, char **argv);    /* runtime/server/cmd_serve.c */
int cmd_run(int argc, char **argv);      /* runtime/engine/cmd_run.c */
int cmd_engram(int argc, char **argv);   /* runtime/engram/cmd_engram.c */
int cmd_rank_follower(int argc, char **argv); /* runtime/ranks/cmd_rank_follower.c: started by rank 0 */

/* Benchmarks (dskit bench WHAT), dispatched by runtime/bench/bench.c. */
int bench_build(int argc, char **argv);  /* runtime/bench/bench_kit.c */
int bench_kit(int argc, char **argv);    /* runtime/bench/bench_kit.c */
int bench_exl3_cpu(int argc, char **argv); /* runtime/bench/bench_exl3_cpu.c */
int bench_exl3(int argc, char **argv);     /* runtime/bench/bench_exl3.c: the EXL3 GPU kernels */
int bench_decode(int argc, char **argv);   /* runtime/bench/bench_decode.c: dskit bench decode (GPU) */
int bench_cpu(int argc, char **argv);      /* runtime/bench/bench_cpu.c: dskit bench cpu */
int bench_tokenize(int argc, char **argv); /* runtime/tokenizer/bench_tokenize.c */
int bench_serve(int argc, char **argv);    /* runtime/server/bench_serve.c: dskit bench serve */
int bench_exchange(int argc, char **argv); /* runtime/ranks/bench_exchange.c */
int bench_xchg_gpu(int argc, char **argv); /* runtime/bench/bench_xchg.c */
int bench_engram(int argc, char **argv);   /* runtime/engram/bench_engram.c */
int bench_grammar(int argc, char **argv);  /* runtime/bench/bench_grammar.c */
int bench_vision(int argc, char **argv);   /* runtime/vision/bench_vision.c */

#endif
