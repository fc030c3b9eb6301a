/* The GPU ranks' choice of exchange transport (gpu_xchg.c, docs/ranks.md), pure host code: every rank
 * gathers every rank's record and picks with gpu_xchg_pick, so all pick the same. */
#ifndef DSK_GPU_XCHG_H
#define DSK_GPU_XCHG_H

#include <stddef.h>
#include <stdint.h>

enum { GPU_XCHG_HOST, GPU_XCHG_PEER, GPU_XCHG_NCCL };

/* Where a rank runs. */
typedef struct {
    int32_t pid;    /* its process */
    int32_t pci[3]; /* its GPU's PCI domain, bus and device */
    char host[48];  /* its host's /proc/sys/kernel/random/boot_id, or the host name */
} gpu_xchg_where;

/* The transport for tp ranks' records w (the same array on every rank) and DSKIT_XCHG's value want (NULL,
 * "host", "peer" or "nccl"): GPU_XCHG_*; for the host, why says why not another. -1 with a message for
 * another want. (Peer memory or NCCL may still fail to set up on some rank; then the ranks agree on the
 * host: gpu_xchg.c.) */
int gpu_xchg_pick(const gpu_xchg_where *w, int tp, const char *want, char *why, size_t why_n);

#endif
