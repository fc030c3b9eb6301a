/* `dskit bench kit`: the rows of the engine's indexer, routing, sampling and drafter families (index_score,
 * cand_blocks, moe_route, sample, dspark_conf), printed in bench_kit.c's table. */
#ifndef DSK_BENCH_KIT_ENGINE_H
#define DSK_BENCH_KIT_ENGINE_H

#include "runtime/driver/kit.h"

/* roof: the run's streaming-read bandwidth (GB/s), the denominator of every row's roof column. */
int bench_kit_engine(const kit *k, CUstream s, double roof);

#endif
