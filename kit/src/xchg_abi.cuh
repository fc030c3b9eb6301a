// The exchange kernel's descriptor (kit/src/xchg.cu), shared with the runtime (runtime/gpu/gpu_xchg.c):
// written once when the ranks connect, in device memory, read by every exchange launch.
#pragma once

#define XCHG_MAX_RANKS 8
#define XCHG_MAX_BLOCKS 128

typedef struct {
    float *slot[XCHG_MAX_RANKS];      // rank r's exchange region: two slots of cap floats (peer memory for r != rank)
    unsigned *flag[XCHG_MAX_RANKS];   // rank r's flags, one per block (peer memory for r != rank)
    unsigned *epoch;                  // this rank's exchange counter and its launch's arrivals (zero at the start)
    unsigned *status;                 // 0; a wait past its bound sets it to 1 + the rank it waited for
    long long cap;                    // floats per slot
    long long timeout_cycles;         // the bound of a wait, in SM clock cycles
    int tp, rank, pad[2];
} xchg_desc;
