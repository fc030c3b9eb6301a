/* `dskit bench decode --tp 2`'s table: TP2 against TP1 (runtime/bench/bench_decode_tp.c). */
#ifndef DSK_BENCH_DECODE_TP_H
#define DSK_BENCH_DECODE_TP_H

#include <stdint.h>

/* Both widths' decode rounds at each context, printed; 0, or -1 with a message. */
int bench_decode_tp(const char *kit_path, const char *model, const int64_t *contexts, int nctx, int reps);

#endif
