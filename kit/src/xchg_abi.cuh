// The exchange kernel's descriptor (kit/src/xchg.cu), shared with the runtime (runtime/launch/xchg.c lays
// the memory out): written once when the ranks connect, in device memory, read by every exchange launch.
#pragma once

#define XCHG_MAX_RANKS 8

typedef struct {
    // rank r's receive region as this process addresses it (peer memory for r != rank): for each parity
    // p of the exchange counter and each sending rank q, cap words {value bits, exchange number}:
    // word (p·tp + q)·cap + i holds rank q's element i
    unsigned long long *recv[XCHG_MAX_RANKS];
    unsigned *epoch;                  // per block of a launch, this rank's count of exchanges (zero at the start)
    unsigned *status;                 // 0; a wait past its bound sets it to 1 + the rank it waited for
    long long cap;                    // words per (parity, sender); even
    long long timeout_cycles;         // the bound of a wait, in SM clock cycles
    int tp, rank, pad[2];
} xchg_desc;
